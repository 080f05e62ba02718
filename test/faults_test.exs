defmodule Mtrace.FaultsTest do
  # mtrace in programs meeting faults (test/report/faults.c): the kernel refusing memory at every
  # allocating function, exec chains, dlopen/dlclose cycles, report signals in bursts, and report
  # and CSV paths that are FIFOs, on a read-only or a full filesystem. The program must go on as
  # it would untraced, and mtrace say at most one line about what it could not do.
  use ExUnit.Case, async: true
  import Mtrace.Test.Report

  @moduletag timeout: 120_000
  @other Path.join(root(), "test/support/c_src/other.so")

  setup_all do
    build!()
    Mtrace.Test.Helpers.make!(Path.join(root(), "test/support/c_src"))
  end

  @tag :tmp_dir
  test "ENOMEM at every allocating function: the same results and errno as untraced",
       %{tmp_dir: dir} do
    {plain, 0} = run(bin("faults"), ["enomem"], [{"LD_PRELOAD", nil}])
    # The kernel said no to each (the test would prove nothing otherwise).
    assert length(Regex.scan(~r/: NULL, ENOMEM$/m, plain)) == 11, plain
    assert plain =~ "small: ok"

    # Traced, with the exit report on: its table, stacks and report live under the same limit.
    report = Path.join(dir, "r.txt")
    assert run(bin("faults"), ["enomem"], [{"MTRACE_REPORT", report}]) == {plain, 0}
    assert File.read!(report) =~ "mtrace: end of report 1"
  end

  @tag :tmp_dir
  test "a chain of 50 execs runs through and reports once, from its last image",
       %{tmp_dir: dir} do
    template = Path.join(dir, "%n-%p.txt")
    assert {"exec: done\n", 0} = run(bin("faults"), ["exec", "50"], [{"MTRACE_REPORT", template}])
    assert [file] = File.ls!(dir)
    r = report!(File.read!(Path.join(dir, file)))
    assert r.title == "at exit" and r.complete
  end

  @tag :tmp_dir
  test "2000 dlopen/dlclose cycles: the leak of the last is named, its library unloaded",
       %{tmp_dir: dir} do
    report = Path.join(dir, "r.txt")

    assert {"dlopen: done\n", 0} =
             run(bin("faults"), ["dlopen", "2000", @other], [{"MTRACE_REPORT", report}])

    text = File.read!(report)
    assert text =~ "leaked at exit: 64 bytes in 1 block"

    assert text =~
             ~r/by 0x[0-9a-f]+: other_alloc \(other.c:\d+\) \S+\/other.so\+0x[0-9a-f]+ \[unloaded\]/
  end

  # Shell lines that wait (5 s at most) until the process $pid handles SIGUSR2 (bit 11 of its
  # status's SigCgt mask): a signal sent before mtrace's constructor ran would kill it.
  @handled """
  i=0; until [ $i -ge 500 ]; do
    m=$(sed -n 's/^SigCgt:[[:space:]]*//p' /proc/$pid/status 2>/dev/null)
    m=${m:-0000000000000000}
    [ $((0x${m#????????} & 0x800)) -ne 0 ] && break
    i=$((i + 1)); sleep 0.01
  done
  """

  @tag :tmp_dir
  test "1000 report signals while the program allocates: it ends as it would, each report whole",
       %{tmp_dir: dir} do
    template = Path.join(dir, "%n-%s.txt")

    script = """
    env LD_PRELOAD="$2" "$1" busy 2000 & pid=$!
    #{@handled}
    i=0
    while [ $i -lt 1000 ]; do kill -USR2 $pid; i=$((i + 1)); done
    wait $pid
    """

    {out, status} =
      run("/bin/sh", ["-c", script, "sh", bin("faults"), so()], [
        {"LD_PRELOAD", nil},
        {"MTRACE_REPORT", template},
        {"MTRACE_REPORT_SIGNAL", "USR2"}
      ])

    assert {out, status} == {"busy: done\n", 0}
    files = File.ls!(dir)
    # Only the program is preloaded. Signals that come while a report is written are one
    # request: at least one signal report, and the exit report last.
    assert length(files) >= 2 and Enum.all?(files, &String.starts_with?(&1, "faults-"))

    for file <- files do
      text = File.read!(Path.join(dir, file))
      assert [_] = reports(text)
      assert text =~ ~r/mtrace: end of report \d+\n\z/
    end
  end

  # Each child frees the odd ones of the 100 blocks of 300 + i bytes the parent kept (fork_keep),
  # and every block the parent's four allocating threads had live at the fork (up to 128; they
  # are not in the child) but the one each may have been making or freeing, and leaks 3 of 77
  # bytes (fork_leak).
  @kept {Enum.sum(for i <- 0..99, rem(i, 2) == 0, do: 300 + i), 50}

  # 48 s in a full run at load 17 (a child's exit report took up to 0.5 s): 240 s to run.
  @tag :tmp_dir
  @tag :slow
  @tag timeout: 300_000
  test "100 forks while four threads allocate: each child's exit report exact and whole",
       %{tmp_dir: dir} do
    {plain, 0} = run(bin("faults"), ["forks", "100"], [{"LD_PRELOAD", nil}])
    assert plain == "forks: 100 of 100 children exited 0, no corrupt block\n"

    env = [{"MTRACE_REPORT", Path.join(dir, "%n-%p.txt")}, {"MTRACE_REPORT_REACHABLE", "1"}]
    assert run(bin("faults"), ["forks", "100"], env, timeout: 240) == {plain, 0}

    files = File.ls!(dir)
    assert length(files) == 101
    reports = for file <- files, do: {file, report!(File.read!(Path.join(dir, file)))}
    assert Enum.all?(reports, fn {file, r} -> r.complete and file == "faults-#{r.pid}.txt" end)

    sum = fn sites, fun ->
      for s <- sites, fun in names(s), reduce: {0, 0}, do: ({b, n} -> {b + s.bytes, n + s.blocks})
    end

    # The parent freed all it made; each child leaked its own.
    {children, [parent]} =
      reports
      |> Enum.map(&elem(&1, 1))
      |> Enum.split_with(&(sum.(&1.sites ++ &1.reachable_sites, "fork_leak") != {0, 0}))

    assert sum.(parent.sites ++ parent.reachable_sites, "fork_keep") == {0, 0}
    assert length(children) == 100

    for r <- children do
      all = r.sites ++ r.reachable_sites
      assert sum.(all, "fork_keep") == @kept, inspect(r)
      assert sum.(all, "fork_leak") == {3 * 77, 3}, inspect(r)
      assert elem(sum.(all, "churn_block"), 1) <= 4, inspect(r)
      # The frees of the blocks the vanished threads made all found their records.
      assert {r.dropped, r.stacks_dropped, r.unmatched_frees} == {0, 0, 0}, inspect(r)

      # The totals are the sums of the sites: nothing counted twice or left out by the repair.
      totals = fn sites ->
        Enum.reduce(sites, {0, 0}, &{elem(&2, 0) + &1.bytes, elem(&2, 1) + &1.blocks})
      end

      assert totals.(r.sites) == r.live and totals.(r.reachable_sites) == r.reachable, inspect(r)
    end
  end

  @tag :tmp_dir
  test "a FIFO or a symbolic link at the report or the CSV path is refused at once, untouched",
       %{tmp_dir: dir} do
    fifo = Path.join(dir, "fifo")
    {_, 0} = System.cmd("mkfifo", [fifo])
    link = Path.join(dir, "link")
    victim = plant_link!(link)

    for var <- ["MTRACE_REPORT", "MTRACE_CSV"], path <- [fifo, link] do
      {out, 0} = run(bin("faults"), ["busy", "10"], [{var, path}])
      assert String.starts_with?(out, "busy: done\n")
      assert [line] = said(out)
      assert line =~ "#{path}: File exists"
    end

    assert {:ok, %{type: :other}} = File.lstat(fifo)
    assert {:ok, %{type: :symlink}} = File.lstat(link)
    assert File.read!(victim) == "precious"
  end

  # Each signal report has a path of its own (%s, its number): the second one's is a symbolic
  # link, the third one's a FIFO. Both are refused with a line each, the others are written.
  @tag :tmp_dir
  test "a symbolic link and a FIFO at the paths of signal reports: refused, the next written",
       %{tmp_dir: dir} do
    victim = plant_link!(Path.join(dir, "faults-2.txt"))
    {_, 0} = System.cmd("mkfifo", [Path.join(dir, "faults-3.txt")])

    # Each signal once the one before has been answered (its report written or its line said),
    # so that no two are taken for one request.
    script = """
    cd "$2"
    env LD_PRELOAD="$3" "$1" busy 4000 2>err & pid=$!
    answered() { until grep -qs "$1" "$2" || ! kill -0 $pid 2>/dev/null; do sleep 0.02; done; }
    #{@handled}
    kill -USR2 $pid; answered "end of report 1" faults-1.txt
    kill -USR2 $pid; answered faults-2.txt err
    kill -USR2 $pid; answered faults-3.txt err
    kill -USR2 $pid; answered "end of report 4" faults-4.txt
    wait $pid; status=$?
    cat err >&2
    exit $status
    """

    {out, status} =
      run("/bin/sh", ["-c", script, "sh", bin("faults"), dir, so()], [
        {"LD_PRELOAD", nil},
        {"MTRACE_REPORT", Path.join(dir, "%n-%s.txt")},
        {"MTRACE_REPORT_SIGNAL", "USR2"}
      ])

    assert status == 0
    assert out =~ ~r/^busy: done$/m

    refused = for n <- 2..3, do: "#{dir}/faults-#{n}.txt: File exists"

    assert Enum.sort(said(out)) ==
             Enum.map(refused, &"mtrace: cannot create the report file: #{&1}")

    assert File.read!(victim) == "precious"
    assert {:ok, %{type: :symlink}} = File.lstat(Path.join(dir, "faults-2.txt"))
    assert {:ok, %{type: :other}} = File.lstat(Path.join(dir, "faults-3.txt"))

    for n <- [1, 4, 5] do
      r = report!(File.read!(Path.join(dir, "faults-#{n}.txt")))
      assert r.seq == n and r.complete
    end
  end

  # Whether tmpfs can be mounted here (root, and a namespace that lets it): nil, or why not.
  @no_tmpfs (fn ->
               dir = Path.join(System.tmp_dir!(), "mtrace_tmpfs_probe_#{System.pid()}")
               File.mkdir_p!(dir)

               why =
                 case System.cmd("mount", ["-t", "tmpfs", "-o", "size=16k", "tmpfs", dir],
                        stderr_to_stdout: true
                      ) do
                   {_, 0} -> System.cmd("umount", [dir]) && nil
                   {out, _} -> String.trim(out)
                 end

               File.rmdir(dir)
               why
             end).()

  if @no_tmpfs, do: @tag(skip: "tmpfs cannot be mounted here (#{@no_tmpfs}); needs root")
  @tag :tmp_dir
  test "read-only and full filesystems: one line, no file left, the program runs on",
       %{tmp_dir: dir} do
    ro = Path.join(dir, "ro")
    full = Path.join(dir, "full")
    File.mkdir_p!(ro)
    File.mkdir_p!(full)

    assert {:ok, :ok} = {mount("ro,size=64k", ro), mount("size=16k", full)}
    on_exit(fn -> System.cmd("umount", [ro]) && System.cmd("umount", [full]) end)
    # The full one: a file takes what is left.
    System.cmd("dd", ["if=/dev/zero", "of=#{full}/fill", "bs=1k", "count=64"],
      stderr_to_stdout: true
    )

    for {var, file, what} <- [
          {"MTRACE_REPORT", "r.txt", "report"},
          {"MTRACE_CSV", "c.csv", "CSV"}
        ] do
      {out, 3} = run(bin("leaky"), ["3"], [{var, Path.join(ro, file)}])
      assert String.starts_with?(out, "leaky: done\n")
      assert [line] = said(out)
      assert line =~ "cannot create the #{what} file: #{ro}/#{file}: Read-only file system"

      {out, 3} = run(bin("leaky"), ["3"], [{var, Path.join(full, file)}])
      assert String.starts_with?(out, "leaky: done\n")
      assert [line] = said(out)
      assert line =~ "#{full}/#{file}: No space left on device"
      assert File.ls!(full) == ["fill"]
    end
  end

  defp mount(opts, dir) do
    case System.cmd("mount", ["-t", "tmpfs", "-o", opts, "tmpfs", dir], stderr_to_stdout: true) do
      {_, 0} -> :ok
      {out, _} -> {:error, String.trim(out)}
    end
  end
end
