defmodule Mtrace.RunTest do
  # bin/mtrace run: the preload and report options set for one command, the report on stderr or
  # in a file, the exit status passed through, and the usage errors.
  use ExUnit.Case, async: true
  import Mtrace.Test.Report

  @moduletag timeout: 120_000

  setup_all do
    build!()
    %{pool: valgrind_reachable(bin("leaky"))}
  end

  # What valgrind finds still reachable when the program ends: leaky's only such block is the
  # C++ runtime's exception pool, whose size changes with libstdc++'s version. The freeres hooks
  # would free it first.
  defp valgrind_reachable(program) do
    {out, 0} =
      System.cmd(
        "valgrind",
        ~w(--leak-check=full --run-libc-freeres=no --run-cxx-freeres=no) ++ [program],
        env: [{"LD_PRELOAD", nil}],
        stderr_to_stdout: true
      )

    [_, bytes, blocks] = Regex.run(~r/still reachable: ([\d,]+) bytes in (\d+) blocks/, out)
    {bytes |> String.replace(",", "") |> String.to_integer(), String.to_integer(blocks)}
  end

  defp mtrace(args, opts \\ []) do
    System.cmd(mtrace(), args,
      env: [
        {"LD_PRELOAD", nil},
        {"MTRACE_REPORT", nil},
        {"MTRACE_SLOTS", nil},
        {"MTRACE_SLOTS_MAX", nil}
      ],
      cd: Keyword.get(opts, :cd, root()),
      stderr_to_stdout: true
    )
  end

  test "mtrace run -- leaky prints the leak report on stderr" do
    {out, 0} = mtrace(["run", "--", bin("leaky")])
    assert String.starts_with?(out, "leaky: done\n")
    r = report!(out)
    assert r.title == "at exit" and r.complete

    for {fun, bytes} <- [{"leak_malloc", 3000}, {"grow_realloc", 4096}, {"leak_strdup", 30}],
        do: assert(site!(r, fun).bytes == bytes)

    assert r.reachable_sites == nil
  end

  test "--reachable lists the sites of the blocks still reachable after the lost ones",
       %{pool: {bytes, 1}} do
    {out, 0} = mtrace(["run", "--reachable", "--", bin("leaky")])
    r = report!(out)
    assert r.live == {8026, 10}
    assert [%{bytes: ^bytes, blocks: 1}] = r.reachable_sites
  end

  test "a command that closes its stderr before it exits still gets its report (ls)" do
    {out, 0} = mtrace(["run", "--", "ls", root()])
    assert out =~ "mix.exs"
    assert [r] = reports(out)
    assert r.prog == "ls" and r.complete
  end

  @tag :tmp_dir
  test "only the command's own process reports, through a wrapper's exec; --children reports all",
       %{tmp_dir: dir} do
    wrapper = Path.join(dir, "wrapper")
    File.write!(wrapper, "#!/bin/sh\n/bin/true\nls / >/dev/null\nexec #{bin("leaky")}\n")
    File.chmod!(wrapper, 0o755)

    {out, 0} = mtrace(["run", "--", wrapper])
    assert [%{prog: "leaky", live: {8026, 10}}] = reports(out)

    {out, 0} = mtrace(["run", "--children", "--", wrapper])
    assert out |> reports() |> Enum.map(& &1.prog) |> Enum.sort() == ["leaky", "ls", "true"]
  end

  test "a process that ends with _exit (dash's sh -c) writes its report" do
    {out, 0} = mtrace(["run", "--", "sh", "-c", "#{bin("leaky")} >/dev/null; exit 0"])
    assert [%{prog: "sh", complete: true}] = reports(out)
  end

  @tag :tmp_dir
  test "--format writes the exit report as a picture or a file of another tool; convert turns a text report",
       %{tmp_dir: dir, pool: {pool, 1}} do
    html = Path.join(dir, "leaks.html")
    {out, 7} = mtrace(["run", "--format", "html", "-o", html, "--", bin("leaky"), "7"])
    assert out == "leaky: done\n"
    page = File.read!(html)
    assert page =~ "<svg" and page =~ "grow_realloc" and page =~ "4096 bytes in 1 blocks (51.03%)"

    {tree, 0} = mtrace(["run", "--format", "tree", "--", bin("leaky")])
    assert tree =~ ~r/^100.00% 8026 bytes in 10 blocks: all$/m

    text = Path.join(dir, "report.txt")
    {_, 0} = mtrace(["run", "-o", text, "--", bin("leaky")])
    {folded, 0} = mtrace(["convert", "--format", "folded", text])
    lines = String.split(folded, "\n", trim: true)
    assert "definitely lost;main;grow_realloc;realloc 4096" in lines

    assert lines
           |> Enum.map(&(&1 |> String.split(" ") |> List.last() |> String.to_integer()))
           |> Enum.sum() == 8026

    {_, 0} = mtrace(["run", "--reachable", "-o", text <> "2", "--", bin("leaky")])
    {kept, 0} = mtrace(["convert", "--format", "folded", "--reachable", text <> "2"])
    assert [line] = String.split(kept, "\n", trim: true)
    assert String.ends_with?(line, " #{pool}")

    assert {"mtrace: --format takes one of" <> _, 2} =
             mtrace(["convert", "--format", "svg", text])
  end

  @tag :tmp_dir
  test "convert reads the versioned report: every site and frame, and refuses a version it does not know",
       %{tmp_dir: dir} do
    text = Path.join(dir, "report.txt")
    {_, 0} = mtrace(["run", "--reachable", "-o", text, "--", bin("leaky"), "0", "5"])
    report = File.read!(text)
    assert hd(String.split(report, "\n")) == "# mtrace report v#{Mtrace.Report.version()}"

    # Through convert to folded stacks and back: the sites, frames and bytes that the tests' own
    # reader (its regexes) finds in the report, lost and reachable alike.
    r = report!(report)

    for {sites, args} <- [{r.sites, []}, {r.reachable_sites, ["--reachable"]}] do
      {folded, 0} = mtrace(["convert", "--format", "folded" | args] ++ [text])

      expected =
        for site <- sites,
            do:
              "#{site.frames |> Enum.reverse() |> Enum.map_join(";", &elem(&1, 0))} #{site.bytes}"

      # The tests' reader names a frame without a function "??"; folded, library+0xoffset. A lost
      # site's outermost frame is its certainty (Mtrace.Format.certain/1), a reachable one has none.
      lines = String.split(folded, "\n", trim: true)
      certain = ~r/^(definitely lost|possibly lost \(\w+\));/
      assert Enum.all?(lines, &(&1 =~ certain)) == (args == []), folded

      read =
        for line <- lines,
            do:
              Regex.replace(~r/[^;]+\+0x[0-9a-f]+(?=;| )/, Regex.replace(certain, line, ""), "??")

      assert length(sites) > 0
      assert Enum.sort(read) == Enum.sort(expected)
    end

    # A report of a later format is refused, not misread; so is a text without the header.
    later = String.replace(report, "# mtrace report v1", "# mtrace report v2")
    File.write!(text <> ".v2", later)
    {out, 2} = mtrace(["convert", "--format", "folded", text <> ".v2"])

    assert out ==
             "mtrace: #{text}.v2: the report is in format v2, newer than this mtrace reads (v1): " <>
               "read it with the mtrace that wrote it\n"

    assert {:error, "the report is in format v2" <> _} = Mtrace.Report.read(later)
    File.write!(text <> ".old", String.replace(report, "# mtrace report v1\n", ""))
    {out, 2} = mtrace(["convert", "--format", "folded", text <> ".old"])
    assert out =~ ~r/^mtrace: .*\.old: not an mtrace report: no "# mtrace report v1" line/
  end

  # The text report names the library of a frame with a source line after the line; without it
  # the pictures would colour leaky's frames as unknown, and pprof would map none of them.
  @tag :tmp_dir
  test "--format pprof and html keep the library of each frame with a source line",
       %{tmp_dir: dir} do
    pb = Path.join(dir, "leaks.pb.gz")
    {_, 0} = mtrace(["run", "--format", "pprof", "-o", pb, "--", bin("leaky")])
    p = Mtrace.Test.Pprof.decode!(File.read!(pb))

    for {name, file, library} <- [
          {"leak_malloc", "leaky.c", bin("leaky")},
          {"malloc", "hooks.c", so()}
        ] do
      assert [function] = for(f <- p.functions, f.name == name, do: f)
      assert function.filename == file
      at = for l <- p.locations, Enum.any?(l.line, &(&1.function_id == function.id)), do: l
      assert at != [], name

      for l <- at do
        assert [m] = for(m <- p.mappings, m.id == l[:mapping_id], do: m), name
        assert m.filename == library
        assert m.memory_start <= l.address and l.address < m.memory_limit
      end
    end

    html = Path.join(dir, "leaks.html")
    {_, 0} = mtrace(["run", "--format", "html", "-o", html, "--", bin("leaky")])
    page = File.read!(html)

    fill = fn label, library ->
      [_, hue] =
        Regex.run(
          ~r|<title>#{label} \(\w+\.c:\d+\)\n#{library}\n[^<]*</title><rect [^>]*fill="([^"]+)"|,
          page
        )

      hue
    end

    assert fill.("leak_malloc", "leaky") != fill.("malloc", "mtrace.so")
  end

  test "the command's exit status is passed through" do
    assert {_, 7} = mtrace(["run", "--", bin("leaky"), "7"])
    assert {_, 5} = mtrace(["run", "--", "/bin/sh", "-c", "exit 5"])
    # A killed command: the shell's 128 + signal.
    assert {_, 143} = mtrace(["run", "/bin/sh", "-c", "kill -TERM $$"])
  end

  @tag :tmp_dir
  test "-o, --top and --depth: a report file, cut; the file is replaced on a rerun",
       %{tmp_dir: dir} do
    file = Path.join(dir, "leaks.txt")
    args = ["run", "-o", file, "--top", "1", "--depth", "2", "--", bin("leaky")]
    {"leaky: done\n", 0} = mtrace(args)
    first = report!(File.read!(file))

    # libstdc++'s pool (over 70,000 bytes) is larger, but reachable: the largest lost site is first.
    assert [%{bytes: 4096, frames: [{"realloc", _}, {"grow_realloc", _}]}] = first.sites
    {"leaky: done\n", 0} = mtrace(args)
    second = report!(File.read!(file))
    assert second.pid != first.pid
  end

  @tag :tmp_dir
  test "a relative -o is the caller's directory's, and a link there is refused", %{tmp_dir: dir} do
    victim = plant_link!(Path.join(dir, "leaks.txt"))
    {out, 0} = mtrace(["run", "-o", "leaks.txt", bin("leaky")], cd: dir)
    assert [line] = said(out)
    assert line == "mtrace: cannot create the report file: #{dir}/leaks.txt: File exists"
    assert File.read!(victim) == "precious"
  end

  @tag :tmp_dir
  test "--signal and --csv reach the program", %{tmp_dir: dir} do
    {"sigprog: done\n" <> _, 0} =
      mtrace(["run", "--signal", "USR2", "--", bin("sigprog")], cd: dir)

    logs = Path.wildcard(Path.join(dir, "sigprog-*.memlog"))
    assert length(logs) == 3

    {_, 0} =
      mtrace(
        [
          "run",
          "--csv",
          Path.join(dir, "out.csv"),
          "--csv-age",
          "0",
          "--csv-period",
          "1",
          bin("csvprog")
        ],
        cd: dir
      )

    assert File.read!(Path.join(dir, "out.csv")) =~ ~r/^event,time,address,size,/
  end

  # Debian's python3 is not a PIE and takes malloc's address (see nopie.c).
  if !File.exists?("/usr/bin/python3"), do: @tag(skip: "/usr/bin/python3 is not installed")
  @tag :tmp_dir
  test "a report of /usr/bin/python3", %{tmp_dir: dir} do
    file = Path.join(dir, "python.txt")
    {"", 0} = mtrace(["run", "-o", file, "--", "/usr/bin/python3", "-c", "pass"])
    r = report!(File.read!(file))
    assert r.prog == "python3" and r.complete
    assert r.calls["malloc"] > 0
  end

  test "usage errors exit 2 with one line" do
    assert {"mtrace: no command to run (see mtrace --help)\n", 2} = mtrace(["run"])
    assert {"mtrace: --top needs a value (see mtrace --help)\n", 2} = mtrace(["run", "--top"])

    assert {"mtrace: unknown option --bogus (see mtrace --help)\n", 2} =
             mtrace(["run", "--bogus", "x"])

    assert {"usage: mtrace run" <> _, 2} = mtrace(["walk"])
    assert {"usage: mtrace run" <> _, 0} = mtrace(["--help"])
  end
end
