defmodule Mtrace.AttachCliTest do
  # bin/mtrace attach, report and detach on running C programs (test/report/attachprog.c),
  # through mtrace's own injector (no gdb): what a user does to a program that was started
  # without mtrace. The program checks what its allocator gives (errno, contents) and prints its
  # counts; its last line and exit status must be the same as without mtrace.
  use ExUnit.Case, async: true
  import Mtrace.Test.Report

  @moduletag timeout: 120_000
  @done ~r/^attachprog: lost (\d+), errno changed 0, corrupt 0, children failed 0\n$/

  setup_all do
    build!()
    :ok
  end

  # A program started without mtrace (unless env says otherwise); returns its port and pid. Each
  # test's program runs for some seconds longer than its injections take under CI's load.
  defp start(args, program \\ bin("attachprog"), env \\ []) do
    port =
      Port.open({:spawn_executable, program}, [
        :binary,
        :exit_status,
        :stderr_to_stdout,
        args: args,
        env: [{~c"LD_PRELOAD", false} | env]
      ])

    {:os_pid, pid} = Port.info(port, :os_pid)
    {port, pid}
  end

  defp sleeper, do: start(["20"], System.find_executable("sleep"))

  # Waits, at most 10 s, until process pid runs program.
  defp exec_done!(pid, program, tries \\ 200) do
    case File.read_link("/proc/#{pid}/exe") do
      {:ok, ^program} ->
        :ok

      _ when tries > 0 ->
        Process.sleep(50)
        exec_done!(pid, program, tries - 1)

      other ->
        flunk("process #{pid} does not run #{program}: #{inspect(other)}")
    end
  end

  # Its output and exit status.
  defp finish(port, out \\ "") do
    receive do
      {^port, {:data, data}} -> finish(port, out <> data)
      {^port, {:exit_status, status}} -> {out, status}
    after
      30_000 -> flunk("attachprog did not end; it said #{inspect(out)}")
    end
  end

  defp mtrace!(args) do
    {out, status} = System.cmd(mtrace(), args, env: [{"LD_PRELOAD", nil}], stderr_to_stdout: true)
    {out, status}
  end

  defp mapped?(pid), do: File.read!("/proc/#{pid}/maps") =~ "mtrace.so"

  # Whether a tracer (the injector) is attached to pid within ten seconds.
  defp traced?(pid), do: status_within?(pid, ~r/TracerPid:\s+[1-9]/, 100)

  # A detached sleeper is runnable for a moment while its nanosleep restarts; back at rest
  # within two seconds is what "runs on untouched" means.
  defp asleep?(pid), do: status_within?(pid, ~r/State:\s+S/, 20)

  # Whether /proc/pid/status matches pattern within tries tenths of a second.
  defp status_within?(pid, pattern, tries) do
    cond do
      File.read!("/proc/#{pid}/status") =~ pattern ->
        true

      tries == 0 ->
        false

      true ->
        Process.sleep(100)
        status_within?(pid, pattern, tries - 1)
    end
  end

  @tag :tmp_dir
  test "attach to a leaking program: a report names the blocks lost since with their stacks and those lost before without; detach; it ends as it would have",
       %{tmp_dir: dir} do
    {port, pid} = start(["12"])
    Process.sleep(700)
    refute mapped?(pid)

    assert {"mtrace: attached to process " <> _ = said, 0} =
             mtrace!(["attach", "-o", Path.join(dir, "exit-%p.txt"), "#{pid}"])

    # It says how long it stopped the program: every thread, then the one that made the calls,
    # whose time on a CPU is part of it.
    assert [_, _stopped, held, ran] =
             Regex.run(
               ~r/\(its threads were stopped ([\d.]+) ms; the one that loaded mtrace, ([\d.]+) ms, ([\d.]+) ms of it on a CPU\)\n$/,
               said
             ),
           said

    assert String.to_float(ran) <= String.to_float(held), said

    Process.sleep(1000)
    {out, 0} = mtrace!(["report", "#{pid}"])
    r = report!(out)
    assert r.title == "on request" and r.complete

    # Every lost site is the program's own loss (nothing kept is called lost), with its stack
    # since the attach; the losses from before it count in the totals without a site.
    assert [site] = r.sites
    assert ["malloc", "attach_lose", "main"] = names(site) |> Enum.take(3)
    assert site.blocks >= 10 and site.bytes == site.blocks * 100
    # It loses a block every 50 of its 1 ms steps: some 14 in the 700 ms before the attach, and
    # as few as 9 were seen on a loaded machine, whose sleeps overrun; 5 is the budget.
    {_lost_bytes, lost_blocks} = r.live
    assert lost_blocks >= site.blocks + 5
    assert {_, kept} = r.reachable
    assert kept >= 64

    # A report the process cannot write says why; the errno of the failure stays in mtrace.
    {out, 2} = mtrace!(["report", "-o", "/nonexistent/r.txt", "#{pid}"])

    assert out ==
             "mtrace: process #{pid} cannot write its report to /nonexistent/r.txt: " <>
               "No such file or directory\n"

    assert {"mtrace: detached from process #{pid}\n", 0} == mtrace!(["detach", "#{pid}"])
    {out, status} = finish(port)
    assert status == 7
    assert [_, lost] = Regex.run(@done, out)
    assert String.to_integer(lost) == 240
    # A detached program writes no exit report.
    assert File.ls!(dir) == []
  end

  @tag :tmp_dir
  test "a program that ends while attached writes its exit report; forks are unharmed",
       %{tmp_dir: dir} do
    {port, pid} = start(["6", "fork"])
    Process.sleep(500)
    {_, 0} = mtrace!(["attach", "-o", Path.join(dir, "exit-%p.txt"), "#{pid}"])
    {out, 7} = finish(port)
    assert out =~ @done

    # Only the attached process reports (its children exit without a report, as under run).
    assert File.ls!(dir) == ["exit-#{pid}.txt"]
    r = report!(File.read!(Path.join(dir, "exit-#{pid}.txt")))
    assert r.title == "at exit" and r.complete
    assert [site] = r.sites
    assert "attach_lose" in names(site)
    assert site.blocks >= 20
  end

  # The library goes to the process as bytes (a memfd of its own), not as a path it must open: a
  # process of another user is attached to a copy in a directory it cannot enter, reports and is
  # detached. By dlopen of the path, its attach failed (Permission denied).
  test "a process of another user, who cannot read the library's path, is attached, reports and is detached" do
    dir = Path.join(System.tmp_dir!(), "mtrace_bytes_#{System.unique_integer([:positive])}")
    private = Path.join(dir, "private")
    File.mkdir_p!(private)
    on_exit(fn -> File.rm_rf!(dir) end)
    File.chmod!(dir, 0o755)
    File.chmod!(private, 0o700)
    so = Path.join(private, "mtrace.so")
    File.cp!(so(), so)
    program = Path.join(dir, "attachprog")
    File.cp!(bin("attachprog"), program)
    File.chmod!(program, 0o755)
    # where the process, not root, may write its report
    reports = Path.join(dir, "reports")
    File.mkdir_p!(reports)
    File.chmod!(reports, 0o1777)

    setpriv = ~w(--reuid=nobody --regid=nogroup --clear-groups) ++ [program, "10"]
    {port, pid} = start(setpriv, System.find_executable("setpriv"))
    # setpriv runs the program in its own process: attached before that, the injector would
    # wait in setpriv for a call that never comes
    exec_done!(pid, program)
    Process.sleep(200)
    injector = Path.join(Path.dirname(so()), "mtrace-inject")

    inject = fn mode, entry, arg ->
      System.cmd(injector, ["#{pid}", so, mode, entry, arg, "10", ""])
    end

    assert {said, 0} = inject.("2", "mtrace_lib_attach", "")
    assert said =~ "mtrace-rc 0\n"
    assert File.read!("/proc/#{pid}/maps") =~ "/memfd:mtrace.so"
    Process.sleep(600)
    report = Path.join(reports, "now.txt")
    assert {said, 0} = inject.("6", "mtrace_lib_leaks", report)
    assert said =~ "mtrace-rc 0\n"
    r = report!(File.read!(report))
    assert [site] = r.sites
    assert "attach_lose" in names(site)
    assert {said, 0} = inject.("6", "mtrace_lib_detach", "-")
    assert said =~ "mtrace-rc 0\n"
    {out, 7} = finish(port)
    assert out =~ @done
  end

  test "report and detach of a process mtrace is not attached to, and attach to a process that is gone" do
    {port, pid} = start(["8"])
    Process.sleep(300)
    {out, 2} = mtrace!(["report", "#{pid}"])
    assert out == "mtrace: mtrace is not attached to process #{pid} (nor preloaded)\n"
    {out, 2} = mtrace!(["detach", "#{pid}"])
    assert out == "mtrace: mtrace is not attached to process #{pid} (nor preloaded)\n"
    {_, 7} = finish(port)
    {out, 2} = mtrace!(["attach", "#{pid}"])
    assert out == "mtrace: no process #{pid}\n"
  end

  test "report works in a program started under the preload, which cannot be detached" do
    {port, pid} =
      start(["8"], bin("attachprog"), [
        {~c"LD_PRELOAD", String.to_charlist(so())},
        {~c"MTRACE_REPORT", false}
      ])

    Process.sleep(800)
    {out, 0} = mtrace!(["report", "#{pid}"])
    r = report!(out)
    assert [site] = r.sites
    assert "attach_lose" in names(site)
    # Preloaded, every block has its record: every lost block is in the site.
    assert r.live == {site.bytes, site.blocks}
    {out, 2} = mtrace!(["detach", "#{pid}"])
    assert out =~ "mtrace: mtrace is preloaded in this process (LD_PRELOAD)"
    assert {_, 7} = finish(port)
  end

  test "a program that calls no malloc is given up after --wait, and runs on untouched" do
    # sleep(1) calls no malloc while it sleeps. --wait 0 gives up at once; a sleep interrupted
    # and let go on must go on sleeping.
    {_, pid} = sleeper()

    for wait <- [0, 1] do
      {out, 2} = mtrace!(["attach", "--wait", "#{wait}", "#{pid}"])

      assert out =~
               ~r/^mtrace: gave up on process #{pid} \(no call to malloc within #{wait} s\); it runs on untouched/

      refute mapped?(pid)
      assert asleep?(pid)
    end

    System.cmd("kill", ["#{pid}"])
  end

  test "a process stopped before the attach or while it waits is told so, and left stopped; continued, it is attached" do
    # Stopped once it runs the program: stopped before its exec, it would be erl_child_setup,
    # under the test node's preload.
    {port, pid} = start(["3"])
    assert status_within?(pid, ~r/Name:\s+attachprog/, 20)
    System.cmd("kill", ["-STOP", "#{pid}"])
    assert status_within?(pid, ~r/State:\s+T/, 20)
    {out, 2} = mtrace!(["attach", "--wait", "1", "#{pid}"])

    assert out ==
             "mtrace: process #{pid} is stopped (SIGSTOP or Ctrl-Z), so it calls no malloc: " <>
               "continue it (kill -CONT #{pid}), then try again\n"

    assert status_within?(pid, ~r/State:\s+T/, 1)
    refute mapped?(pid)

    # Stopped while the injector waits: a program that would call malloc a second from now
    # stays stopped (a PTRACE_CONT would let it run, and be attached), and is told alike.
    {_, later} =
      start(["-e", "sleep 1; my @a = (1) x 1000; sleep 20"], System.find_executable("perl"))

    assert status_within?(later, ~r/Name:\s+perl/, 20)

    waiting = Task.async(fn -> mtrace!(["attach", "--wait", "3", "#{later}"]) end)
    assert traced?(later)
    System.cmd("kill", ["-STOP", "#{later}"])
    {out, 2} = Task.await(waiting, 10_000)
    assert out =~ ~r/^mtrace: process #{later} is stopped \(SIGSTOP or Ctrl-Z\)/
    assert status_within?(later, ~r/State:\s+T/, 1)
    assert status_within?(later, ~r/TracerPid:\s+0\n/, 1)
    refute mapped?(later)
    System.cmd("kill", ["-KILL", "#{later}"])

    System.cmd("kill", ["-CONT", "#{pid}"])
    assert {"mtrace: attached to process " <> _, 0} = mtrace!(["attach", "#{pid}"])
    assert {"mtrace: detached from process #{pid}\n", 0} == mtrace!(["detach", "#{pid}"])
    {out, 7} = finish(port)
    assert out =~ @done
  end

  test "a Ctrl-C while waiting for malloc gives up, and the process runs on untouched" do
    {_, target} = sleeper()
    # bin/mtrace in a process group of its own with SIGINT at its default, as a terminal runs it.
    wrapper = ~s|use POSIX; setpgid(0, 0); $SIG{INT} = "DEFAULT"; exec @ARGV|

    {port, group} =
      start(
        ["-e", wrapper, mtrace(), "attach", "--wait", "30", "#{target}"],
        System.find_executable("perl")
      )

    # Once the injector traces the sleeper it waits for malloc. A Ctrl-C before then, while
    # bin/mtrace still prepares, ends it as it ends any program (130), and the sleeper is never
    # reached.
    assert traced?(target)
    System.cmd("kill", ["-INT", "--", "-#{group}"])
    {out, 2} = finish(port)
    assert out =~ ~r/^mtrace: gave up on process #{target} \(interrupted\)/
    refute mapped?(target)
    assert asleep?(target)
    System.cmd("kill", ["#{target}"])
  end

  @tag :tmp_dir
  test "a program of 16 threads allocating through every hook, attached and detached 50 times, ends as it would have",
       %{tmp_dir: dir} do
    # allocators.c: 16 threads and the main one churn malloc, calloc, realloc, posix_memalign,
    # aligned_alloc, memalign, strdup, malloc_usable_size and free, checking what each gives,
    # until the stop file exists; each round whose checks all pass adds 20000 to the sum.
    stop = Path.join(dir, "stop")

    {port, pid} =
      start(["16", "1", stop], Path.join(root(), "test/support/c_src/allocators-glibc"))

    for _ <- 1..50 do
      assert {"mtrace: attached to process " <> _, 0} = mtrace!(["attach", "#{pid}"])
      assert {"mtrace: detached from process #{pid}\n", 0} == mtrace!(["detach", "#{pid}"])
    end

    File.write!(stop, "")
    assert {out, 0} = finish(port)

    assert [_, sum, rounds] =
             Regex.run(~r/^allocators: sum (\d+) in (\d+) rounds, refused 1\n$/, out)

    assert String.to_integer(sum) == 20000 * String.to_integer(rounds)
  end

  # attachprog linked with another allocator than glibc's: the hooks forward to it, the
  # injector stops the program at its entry (the program never enters glibc's malloc), and the
  # blocks made since the attach are named by their stacks. Reachability needs glibc's heap walk
  # for the blocks from before the attach, so the report lists live blocks, and says why.
  for allocator <- ~w(jemalloc tcmalloc mimalloc) do
    test "attach to a program linked with #{allocator}: its blocks are recorded; detached, it ends as it would have" do
      program = bin("attachprog-#{unquote(allocator)}")
      # what the program says without mtrace (mimalloc's posix_memalign sets errno once)
      {plain, 7} = System.cmd(program, ["2"], env: [{"LD_PRELOAD", nil}])

      [_, plain_errno] =
        Regex.run(~r/errno changed (\d+), corrupt 0, children failed 0\n$/, plain)

      {port, pid} = start(["8"], program)
      Process.sleep(700)
      assert {"mtrace: attached to process " <> _, 0} = mtrace!(["attach", "#{pid}"])
      Process.sleep(1000)
      {out, 0} = mtrace!(["report", "#{pid}"])
      r = report!(out)
      assert r.complete
      assert out =~ ~r/^  allocator: \S*lib#{unquote(allocator)}\S* \(not glibc's/m, out
      assert out =~ "reachability: not known", out

      # each block lost since the attach is live with its stack: one every 50 steps of 1 ms
      lose = site!(r, "attach_lose")
      assert ["malloc", "attach_lose", "main"] = names(lose) |> Enum.take(3)
      assert lose.blocks >= 5 and lose.bytes == lose.blocks * 100
      # the ring's blocks, renewed through every allocating function
      assert Enum.count(r.sites, &("attach_get" in names(&1))) == 5
      assert r.unmatched_frees > 0

      assert {"mtrace: detached from process #{pid}\n", 0} == mtrace!(["detach", "#{pid}"])
      {out, status} = finish(port)
      assert status == 7

      assert out =~
               ~r/^attachprog: lost \d+, errno changed #{plain_errno}, corrupt 0, children failed 0\n$/
    end
  end

  test "a static program is refused with its reason" do
    {port, pid} = start(["2"], bin("attachprog_static"))
    Process.sleep(200)
    {out, 2} = mtrace!(["attach", "#{pid}"])
    assert out =~ ~r/^mtrace: process #{pid} has no glibc loaded \(a static program/
    finish(port)
  end

  # A seccomp profile that refuses ptrace (Docker's default on kernels before 4.8) refuses the
  # attach: one line says so and what to do, and the process runs on untouched.
  test "a seccomp profile that refuses ptrace is told, in one line" do
    {port, pid} = start(["6"])
    Process.sleep(200)
    no_ptrace = Path.join(root(), "test/support/c_src/no_ptrace")

    {out, 2} =
      System.cmd(no_ptrace, [mtrace(), "attach", "#{pid}"],
        env: [{"LD_PRELOAD", nil}],
        stderr_to_stdout: true
      )

    assert out ==
             "mtrace: cannot attach to #{pid}: ptrace of process #{pid} was refused (a seccomp " <>
               "profile forbids it? Docker's allows it from 4.8 kernels on; add CAP_SYS_PTRACE, " <>
               "or run with --security-opt seccomp=unconfined)\n"

    refute mapped?(pid)
    {out, 7} = finish(port)
    assert out =~ @done
  end

  test "a user without the right to trace the process is told why" do
    # A copy of the scripts and the library that the user nobody can read, outside the checkout.
    copy = Path.join(System.tmp_dir!(), "mtrace-attach-#{System.unique_integer([:positive])}")
    File.mkdir_p!(Path.join(copy, "bin"))
    File.mkdir_p!(Path.join(copy, "priv"))

    for f <- ~w(mtrace mtrace-attach.sh),
        do: File.cp!(Path.join(root(), "bin/#{f}"), Path.join(copy, "bin/#{f}"))

    File.cp!(so(), Path.join(copy, "priv/mtrace.so"))

    File.cp!(
      Path.join(Path.dirname(so()), "mtrace-inject"),
      Path.join(copy, "priv/mtrace-inject")
    )

    System.cmd("chmod", ["-R", "a+rX", copy])

    {port, pid} = start(["6"])
    Process.sleep(200)

    {out, 2} =
      System.cmd("su", ["-s", "/bin/sh", "nobody", "-c", "#{copy}/bin/mtrace attach #{pid}"],
        env: [{"LD_PRELOAD", nil}],
        stderr_to_stdout: true
      )

    assert out ==
             "mtrace: cannot attach to #{pid}: process #{pid} runs as user root and this as " <>
               "user nobody: run mtrace as that user or as root\n"

    refute mapped?(pid)
    {_, 7} = finish(port)
    File.rm_rf!(copy)
  end
end
