defmodule Mtrace.ReportTest do
  # mtrace in programs other than the BEAM: the exit report (exact totals, peak and sites), its
  # options, its robustness (links, existing files, unwritable places, malformed values), forked
  # children, incremental reports on a signal, and silence when nothing is configured.
  use ExUnit.Case, async: true
  import Mtrace.Test.Report

  @moduletag timeout: 120_000

  setup_all do
    build!()
  end

  # What leaky.c leaks, per named function: bytes, blocks and the intercepted function (frame 0).
  @leaks [
    {"leak_malloc", 3000, 3, "malloc"},
    {"leak_calloc", 500, 1, "calloc"},
    {"grow_realloc", 4096, 1, "realloc"},
    {"leaky::make_list(int)", 144, 3, "malloc"},
    {"leak_strdup", 30, 1, "strdup"},
    {"leak_posix_memalign", 256, 1, "posix_memalign"}
  ]
  @leaked_bytes 8026
  @leaked_blocks 10
  @transient 1_048_576

  defp own?(site), do: Enum.any?(site.frames, fn {_, path} -> path == bin("leaky") end)

  defp leaky_report(dir, args \\ [], env \\ []) do
    template = Path.join(dir, "%n-%p.txt")
    {out, 0} = run(bin("leaky"), args, [{"MTRACE_REPORT", template} | env])
    assert out == "leaky: done\n"
    [file] = Path.wildcard(Path.join(dir, "leaky-*.txt"))
    report!(File.read!(file))
  end

  @tag :tmp_dir
  test "the exit report of leaky is exact: totals, peak, sites, stacks and calls", %{tmp_dir: dir} do
    r = leaky_report(dir)
    assert r.title == "at exit" and r.complete and r.prog == "leaky"

    # The C++ runtime's own blocks (libstdc++'s exception pool) were made before main and stay.
    {runtime, ours} = Enum.split_with(r.sites, &(not own?(&1)))
    base_bytes = runtime |> Enum.map(& &1.bytes) |> Enum.sum()
    base_blocks = runtime |> Enum.map(& &1.blocks) |> Enum.sum()
    assert Enum.all?(runtime, &("main" not in names(&1)))

    assert r.live == {base_bytes + @leaked_bytes, base_blocks + @leaked_blocks}
    assert r.peak == base_bytes + @transient
    assert length(ours) == length(@leaks)

    for {fun, bytes, blocks, hook} <- @leaks do
      site = site!(r, fun)
      assert {site.bytes, site.blocks} == {bytes, blocks}, fun
      [{^hook, lib} | callers] = site.frames
      assert lib == so()
      assert Enum.all?(callers, fn {_, path} -> path != so() end), "no tracer frame: #{fun}"

      case fun do
        "leaky::make_list(int)" ->
          assert [
                   {"operator new(unsigned long)", libstdcxx},
                   {^fun, _},
                   {"leak_cxx_new", _},
                   {"main", _} | _
                 ] = callers

          assert libstdcxx =~ "libstdc++"

        _ ->
          assert [{^fun, path}, {"main", path} | _] = callers
          assert path == bin("leaky")
      end
    end

    assert Enum.map(r.sites, & &1.bytes) == Enum.sort(Enum.map(r.sites, & &1.bytes), :desc)

    assert Map.take(r.calls, ~w(calloc realloc posix_memalign strdup free)) ==
             %{"calloc" => 1, "realloc" => 8, "posix_memalign" => 1, "strdup" => 1, "free" => 6}

    assert r.calls["malloc"] == 13 + base_blocks
    assert {r.dropped, r.stacks_dropped, r.unmatched_frees} == {0, 0, 0}
  end

  @tag :tmp_dir
  test "blocks the table has no room for still count in the total and the peak", %{tmp_dir: dir} do
    # 16 slots, which may not grow, hold leaky's own blocks; 40 more leaked 16-byte blocks do not
    # fit.
    small = leaky_report(dir, ["0", "40"], [{"MTRACE_SLOTS", "16"}, {"MTRACE_SLOTS_MAX", "16"}])
    full = leaky_report(Path.join(dir, "full") |> tap(&File.mkdir_p!/1), ["0", "40"])
    assert full.dropped == 0 and small.dropped > 0
    assert small.live == full.live
    assert small.peak == full.peak
    recorded = small.sites |> Enum.map(& &1.bytes) |> Enum.sum()
    assert recorded == elem(small.live, 0) - 16 * small.dropped
  end

  @tag :tmp_dir
  test "MTRACE_REPORT_TOP and MTRACE_REPORT_DEPTH cut the list and the stacks", %{tmp_dir: dir} do
    full = leaky_report(Path.join(dir, "full") |> tap(&File.mkdir_p!/1))
    r = leaky_report(dir, [], [{"MTRACE_REPORT_TOP", "2"}, {"MTRACE_REPORT_DEPTH", "3"}])
    assert length(r.sites) == 2
    assert Enum.all?(r.sites, &(length(&1.frames) == 3))
    assert Enum.map(r.sites, & &1.bytes) == full.sites |> Enum.take(2) |> Enum.map(& &1.bytes)
    {rest_bytes, rest_blocks} = r.more
    shown = Enum.reduce(r.sites, {0, 0}, fn s, {b, n} -> {b + s.bytes, n + s.blocks} end)
    assert {elem(shown, 0) + rest_bytes, elem(shown, 1) + rest_blocks} == full.live
  end

  @tag :tmp_dir
  test "stacks that look the same once cut are merged", %{tmp_dir: dir} do
    # One frame shown, the intercepted function: every site of one function becomes one.
    full = leaky_report(Path.join(dir, "full") |> tap(&File.mkdir_p!/1))
    r = leaky_report(dir, [], [{"MTRACE_REPORT_DEPTH", "1"}])
    hook = fn site -> site.frames |> hd() |> elem(0) end
    assert Enum.sort(Enum.map(r.sites, hook)) == ~w(calloc malloc posix_memalign realloc strdup)

    for site <- r.sites do
      same = Enum.filter(full.sites, &(hook.(&1) == hook.(site)))

      assert {site.bytes, site.blocks} ==
               {Enum.sum(Enum.map(same, & &1.bytes)), Enum.sum(Enum.map(same, & &1.blocks))}
    end
  end

  test "MTRACE_REPORT=stderr writes the report after the program's own output" do
    {out, 7} = run(bin("leaky"), ["7"], [{"MTRACE_REPORT", "stderr"}])
    assert String.starts_with?(out, "leaky: done\nmtrace report 1: leaky, pid ")
    assert report!(out).complete
  end

  @tag :tmp_dir
  test "a symbolic link planted at the report path is refused, its target untouched",
       %{tmp_dir: dir} do
    victim = Path.join(dir, "victim")
    File.write!(victim, "precious")
    link = Path.join(dir, "report.txt")
    File.ln_s!(victim, link)
    {out, 0} = run(bin("leaky"), [], [{"MTRACE_REPORT", link}])
    assert ["mtrace: cannot create the report file: " <> why] = said(out)
    assert why == "#{link}: File exists"
    assert File.read!(victim) == "precious"
    assert {:ok, %{type: :symlink}} = File.lstat(link)
    # A dangling link is refused all the same (O_EXCL): nothing is created through it.
    File.rm!(victim)
    {out, 0} = run(bin("leaky"), [], [{"MTRACE_REPORT", link}])
    assert [_] = said(out)
    refute File.exists?(victim)
  end

  @tag :tmp_dir
  test "an existing file is never truncated", %{tmp_dir: dir} do
    file = Path.join(dir, "report.txt")
    File.write!(file, "keep me")
    {out, 0} = run(bin("leaky"), [], [{"MTRACE_REPORT", file}])
    assert [line] = said(out)
    assert line =~ "File exists"
    assert File.read!(file) == "keep me"
  end

  test "an unwritable destination gives one line and the program runs on" do
    {out, 3} = run(bin("leaky"), ["3"], [{"MTRACE_REPORT", "/nonexistent/dir/%p.txt"}])
    assert String.starts_with?(out, "leaky: done\n")
    assert [line] = said(out)

    assert line =~
             ~r"^mtrace: cannot create the report file: /nonexistent/dir/\d+\.txt: No such file"
  end

  @tag :tmp_dir
  test "malformed values say one line each and fall back to the defaults", %{tmp_dir: dir} do
    env = [
      {"MTRACE_REPORT", Path.join(dir, "r.txt")},
      {"MTRACE_REPORT_TOP", "lots"},
      {"MTRACE_REPORT_DEPTH", "999"},
      {"MTRACE_REPORT_SIGNAL", "SIGNOPE"},
      {"MTRACE_FORK", "maybe"},
      {"MTRACE_CSV_PERIOD", "0"}
    ]

    {out, 0} = run(bin("leaky"), [], env)

    assert Enum.sort(said(out)) == [
             "mtrace: MTRACE_CSV_PERIOD=0: expected a whole number from 1 to 86400; using 10",
             "mtrace: MTRACE_FORK=maybe: expected report or none; using report",
             "mtrace: MTRACE_REPORT_DEPTH=999: expected a whole number from 0 to 128; using 0",
             "mtrace: MTRACE_REPORT_SIGNAL=SIGNOPE: expected a signal such as USR2, SIGUSR2 or 12; no signal reports",
             "mtrace: MTRACE_REPORT_TOP=lots: expected a whole number from 0 to 1073741824; using 0"
           ]

    r = report!(File.read!(Path.join(dir, "r.txt")))
    assert r.more == nil
    assert Enum.all?(r.sites, &(length(&1.frames) >= 3))
  end

  @tag :tmp_dir
  test "forked children write their own reports, or none with MTRACE_FORK=none", %{tmp_dir: dir} do
    template = Path.join(dir, "%n-%p.txt")
    {out, 0} = run(bin("forkprog"), [], [{"MTRACE_REPORT", template}])
    [_, child] = Regex.run(~r/^child (\d+)$/m, out)

    [parent_file] =
      Path.wildcard(Path.join(dir, "forkprog-*.txt")) -- [Path.join(dir, "forkprog-#{child}.txt")]

    parent = report!(File.read!(parent_file))
    child_r = report!(File.read!(Path.join(dir, "forkprog-#{child}.txt")))
    assert child_r.pid == String.to_integer(child) and parent.pid != child_r.pid
    assert {site!(parent, "fork_parent").bytes, parent.live} == {100, {100, 1}}
    assert site!(child_r, "fork_child").bytes == 200
    # The child's heap holds what it inherited, and says so.
    assert child_r.live == {300, 2}

    none = Path.join(dir, "none")
    File.mkdir_p!(none)

    {out, 0} =
      run(bin("forkprog"), [], [
        {"MTRACE_REPORT", Path.join(none, "%n-%p.txt")},
        {"MTRACE_FORK", "none"}
      ])

    [_, child] = Regex.run(~r/^child (\d+)$/m, out)
    assert [file] = File.ls!(none)
    refute file == "forkprog-#{child}.txt"
  end

  defp memlogs(dir, pattern) do
    Path.wildcard(Path.join(dir, pattern))
    |> Enum.map(&report!(File.read!(&1)))
    |> Enum.sort_by(& &1.seq)
  end

  defp changes(report) do
    for site <- report.sites, fun <- ["signal_a", "signal_b"], fun in names(site), into: %{} do
      {fun, {site.bytes, site.blocks, site.allocated, site.freed}}
    end
  end

  @tag :tmp_dir
  test "a signal writes the changes since the previous report to the next .memlog", %{
    tmp_dir: dir
  } do
    {out, 0} = run(bin("sigprog"), [], [{"MTRACE_REPORT_SIGNAL", "USR2"}], cd: dir)
    assert out == "sigprog: done\n"
    [r1, r2, r3] = memlogs(dir, "sigprog-*-*.memlog")
    pid = r1.pid
    assert Enum.sort(File.ls!(dir)) == Enum.map(1..3, &"sigprog-#{pid}-#{&1}.memlog")

    assert [r1.title, r2.title, r3.title] == [
             "on SIGUSR2, changes since start",
             "on SIGUSR2, changes since report 1",
             "on SIGUSR2, changes since report 2"
           ]

    assert length(r1.sites) == 1
    assert changes(r1) == %{"signal_a" => {3000, 3, {3000, 3}, {0, 0}}}
    assert length(r2.sites) == 2

    assert changes(r2) == %{
             "signal_a" => {-2000, -2, {0, 0}, {2000, 2}},
             "signal_b" => {500, 1, {500, 1}, {0, 0}}
           }

    assert changes(r3) == %{
             "signal_a" => {-1000, -1, {0, 0}, {1000, 1}},
             "signal_b" => {-500, -1, {0, 0}, {500, 1}}
           }

    # The churning site moved nothing: it is in the totals but not in the list.
    assert [r1.totals, r2.totals, r3.totals] == [
             [3000, 3, 0, 0, 3000, 3],
             [628, 3, 2128, 4, -1500, -1],
             [0, 0, 1500, 2, -1500, -2]
           ]

    assert [r1.live, r2.live, r3.live] == [{3000, 3}, {1500, 2}, {0, 0}]
    assert Enum.all?([r1, r2, r3], &(&1.peak == 3000))
  end

  # strace shows which thread does what: the main thread sends itself the signal and runs the
  # handler; the report files must be created by another thread.
  if !System.find_executable("strace"), do: @tag(skip: "strace is not installed")
  @tag :tmp_dir
  test "the handler only wakes the report thread, which writes the file", %{tmp_dir: dir} do
    trace = Path.join(dir, "trace")

    args =
      ~w(-f -qq -e trace=openat,kill -o) ++ [trace, "env", "LD_PRELOAD=#{so()}", bin("sigprog")]

    {"sigprog: done\n", 0} =
      run("strace", args, [{"LD_PRELOAD", nil}, {"MTRACE_REPORT_SIGNAL", "USR2"}], cd: dir)

    text = File.read!(trace)

    # strace pads the pid column (" +"), and splits a call that another thread interrupts (no
    # closing parenthesis then).
    [main | _] = for [_, tid] <- Regex.scan(~r/^(\d+) +kill\(\1, SIGUSR2/m, text), do: tid

    writers =
      for [_, tid] <- Regex.scan(~r/^(\d+) +openat\(.*\.memlog", O_WRONLY\|O_CREAT/m, text),
          do: tid

    assert length(writers) == 3
    assert Enum.all?(writers, &(&1 != main))
  end

  @tag :tmp_dir
  test "signal reports follow MTRACE_REPORT when it has %s; the exit report comes last",
       %{tmp_dir: dir} do
    env = [{"MTRACE_REPORT_SIGNAL", "12"}, {"MTRACE_REPORT", Path.join(dir, "%n.%s.log")}]
    {"sigprog: done\n", 0} = run(bin("sigprog"), [Path.join(dir, "sigprog."), ".log"], env)
    [r1, r2, r3, last] = memlogs(dir, "sigprog.*.log")

    assert Enum.map([r1, r2, r3], &changes/1) == [
             %{"signal_a" => {3000, 3, {3000, 3}, {0, 0}}},
             %{
               "signal_a" => {-2000, -2, {0, 0}, {2000, 2}},
               "signal_b" => {500, 1, {500, 1}, {0, 0}}
             },
             %{
               "signal_a" => {-1000, -1, {0, 0}, {1000, 1}},
               "signal_b" => {-500, -1, {0, 0}, {500, 1}}
             }
           ]

    assert last.seq == 4 and last.title == "at exit"
    assert last.live == {0, 0} and last.sites == [] and last.peak == 3000
  end

  @tag :tmp_dir
  test "with nothing configured there is no output, no file and no thread", %{tmp_dir: dir} do
    {out, 0} = run(bin("leaky"), [], [], cd: dir)
    assert out == "leaky: done\n"
    assert File.ls!(dir) == []
    {out, 0} = run("/bin/true", [], [{"LD_BIND_NOW", "1"}], cd: dir)
    assert out == ""
    {out, 0} = run("/bin/sh", ["-c", "echo ok; ls /proc/$$/task | wc -l"], [], cd: dir)
    assert out == "ok\n1\n"
    assert File.ls!(dir) == []
  end
end
