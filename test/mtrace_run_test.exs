defmodule Mtrace.RunTest do
  # bin/mtrace run: the preload and report options set for one command, the report on stderr or
  # in a file, the exit status passed through, and the usage errors.
  use ExUnit.Case, async: true
  import Mtrace.Test.Report

  @moduletag timeout: 120_000

  setup_all do
    build!()
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
    assert [%{bytes: 72704, frames: [_, _]}] = first.sites
    {"leaky: done\n", 0} = mtrace(args)
    second = report!(File.read!(file))
    assert second.pid != first.pid
  end

  @tag :tmp_dir
  test "a relative -o is the caller's directory's, and a link there is refused", %{tmp_dir: dir} do
    victim = Path.join(dir, "victim")
    File.write!(victim, "precious")
    File.ln_s!(victim, Path.join(dir, "leaks.txt"))
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

  test "usage errors exit 2 with one line" do
    assert {"mtrace: no command to run (see mtrace --help)\n", 2} = mtrace(["run"])
    assert {"mtrace: --top needs a value (see mtrace --help)\n", 2} = mtrace(["run", "--top"])

    assert {"mtrace: unknown option --bogus (see mtrace --help)\n", 2} =
             mtrace(["run", "--bogus", "x"])

    assert {"usage: mtrace run" <> _, 2} = mtrace(["walk"])
    assert {"usage: mtrace run" <> _, 0} = mtrace(["--help"])
  end
end
