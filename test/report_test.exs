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

  # leaky is built with -g: its frames give its source lines.
  @leaky_sources ["leaky.c", "leaky_new.cc"]
  defp leaky?(where), do: line_in?(where, @leaky_sources)
  defp own?(site), do: Enum.any?(site.frames, fn {_, where} -> leaky?(where) end)

  defp line_of(source, text) do
    Path.join(root(), source)
    |> File.read!()
    |> String.split("\n")
    |> Enum.find_index(&String.contains?(&1, text))
    |> Kernel.+(1)
  end

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

    # Only leaky's own blocks are lost. The C++ runtime's (libstdc++'s exception pool, made
    # before main) are still reachable from its static data, and are not called leaks.
    assert Enum.all?(r.sites, &own?/1)
    {base_bytes, base_blocks} = r.reachable
    assert base_bytes > 0 and base_blocks > 0

    assert r.live == {@leaked_bytes, @leaked_blocks}
    # The list's head is lost directly; its two other nodes only through it.
    assert r.lost == {@leaked_blocks - 2, 2}
    assert r.peak == base_bytes + @transient
    assert length(r.sites) == length(@leaks)

    for {fun, bytes, blocks, hook} <- @leaks do
      site = site!(r, fun)
      assert {site.bytes, site.blocks} == {bytes, blocks}, fun

      assert site.lost ==
               if(blocks == 3 and hook == "malloc" and fun =~ "make_list",
                 do: {1, 2},
                 else: {blocks, 0}
               )

      [{^hook, lib} | callers] = site.frames
      assert tracer?(lib)

      assert Enum.all?(callers, fn {_, where} -> not tracer?(where) end),
             "no tracer frame: #{fun}"

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
          assert [{^fun, here}, {"main", there} | _] = callers
          assert leaky?(here) and leaky?(there)
      end
    end

    assert Enum.map(r.sites, & &1.bytes) == Enum.sort(Enum.map(r.sites, & &1.bytes), :desc)

    assert Map.take(r.calls, ~w(calloc realloc posix_memalign strdup free)) ==
             %{"calloc" => 1, "realloc" => 8, "posix_memalign" => 1, "strdup" => 1, "free" => 6}

    assert r.calls["malloc"] == 13 + base_blocks
    assert {r.dropped, r.stacks_dropped, r.unmatched_frees} == {0, 0, 0}
  end

  @tag :tmp_dir
  test "the exit report and the CSV give source lines, an inlined function on a line of its own",
       %{tmp_dir: dir} do
    report_file = Path.join(dir, "r.txt")
    csv = Path.join(dir, "r.csv")

    {out, 0} =
      run(bin("inlineprog"), [], [
        {"MTRACE_REPORT", report_file},
        {"MTRACE_CSV", csv},
        {"MTRACE_CSV_AGE", "0"}
      ])

    assert out == "inlineprog: done\n"
    text = File.read!(report_file)
    r = report!(text)
    source = Path.join(root(), "test/report/inlineprog.c")
    at = fn name -> "inlineprog.c:#{Mtrace.Test.Helpers.line_of(source, name)}" end

    assert [{"malloc", hook}, {"inline_leak", inlined}, {"outer_static", outer}, {"main", main}] =
             site!(r, "inline_leak").frames

    assert tracer?(hook)
    assert {inlined, outer, main} == {at.("inline"), at.("outer"), at.("main_outer")}

    assert [{"malloc", _}, {"plain_static", plain}, {"main", main}] =
             site!(r, "plain_static").frames

    assert {plain, main} == {at.("plain"), at.("main_plain")}

    # The inlined function and the one it is in share their address.
    [_, a1, a2] =
      Regex.run(~r/by (0x[0-9a-f]+): inline_leak .*\n    by (0x[0-9a-f]+): outer_static /, text)

    assert a1 == a2

    # The CSV's stack field has the report's frames, one a line.
    [_, stack] = Regex.run(~r/,4242,[^"]*"([^"]*)"/, File.read!(csv))
    site = text |> String.split("\n\n") |> Enum.find(&(&1 =~ ": inline_leak ("))

    shown =
      Regex.scan(~r/^    (?:at|by) 0x[0-9a-f]+: (.*)$/m, site)
      |> Enum.map_join("\n", fn [_, f] -> f end)

    assert String.starts_with?(stack, shown <> "\n")
  end

  # The executable's canonical malloc (its PLT entry) is what dlsym finds first, and what
  # &malloc gives inside mtrace: mtrace must still see that the loader binds malloc to it.
  @tag :tmp_dir
  test "a non-PIE program that calls malloc through a pointer is traced", %{tmp_dir: dir} do
    {out, 0} = run(bin("nopie"), [], [{"MTRACE_REPORT", Path.join(dir, "r.txt")}])
    assert out == "nopie: done\n"
    r = report!(File.read!(Path.join(dir, "r.txt")))
    site = site!(r, "leak_nopie")
    assert {site.bytes, site.blocks} == {777, 1}

    # Frame 0 is mtrace's malloc, not the executable's PLT entry that malloc's address names there.
    assert [{"malloc", lib}, {"leak_nopie", prog} | _] = site.frames
    assert tracer?(lib) and line_in?(prog, ["nopie.c"])
  end

  @tag :tmp_dir
  test "blocks the table has no room for still count in the total and the peak", %{tmp_dir: dir} do
    # 16 slots, which may not grow, hold leaky's own blocks; 40 more leaked 16-byte blocks do not
    # fit.
    small = leaky_report(dir, ["0", "40"], [{"MTRACE_SLOTS", "16"}, {"MTRACE_SLOTS_MAX", "16"}])
    full = leaky_report(Path.join(dir, "full") |> tap(&File.mkdir_p!/1), ["0", "40"])
    dropped = small.dropped
    assert full.dropped == 0 and dropped > 0 and full.untabled == nil

    # Each figure against what leaky did: @leaks and 40 blocks of leak_many, lost, the list's
    # two nodes behind its head indirectly; the C++ runtime's pool still reachable.
    assert full.live == {@leaked_bytes + 16 * 40, @leaked_blocks + 40}
    assert full.lost == {@leaked_blocks + 40 - 2, 2}

    assert full.reachable ==
             leaky_report(Path.join(dir, "plain") |> tap(&File.mkdir_p!/1)).reachable

    assert full.unrecorded == nil

    # With records missing, the exit report walks glibc's heap: the dropped blocks are lost as in
    # the full table, each counted by its usable size (24 bytes for 16 asked for), in no site.
    assert small.live == {@leaked_bytes + 16 * (40 - dropped) + 24 * dropped, @leaked_blocks + 40}
    assert small.lost == full.lost
    assert small.untabled == {16 * dropped, dropped}

    # Every other block the walk found without a record (mtrace's own, made while it ran) is
    # reachable, and nothing the program can reach is called lost.
    {_, full_kept} = full.reachable
    {_, small_kept} = small.reachable
    assert small.unrecorded >= dropped
    assert small_kept == full_kept + small.unrecorded - dropped

    # The sites hold the recorded blocks only: leak_many's 40 less the dropped ones.
    for r <- [small, full] do
      kept = 40 - r.dropped
      assert {site!(r, "leak_many").bytes, site!(r, "leak_many").blocks} == {16 * kept, kept}

      for {fun, bytes, blocks, _} <- @leaks,
          do: assert({site!(r, fun).bytes, site!(r, fun).blocks} == {bytes, blocks}, fun)
    end

    assert small.peak == full.peak
  end

  # reachprog's exit report, written to dir with the variables env, args its arguments; it must
  # end as it would without mtrace.
  defp reachprog_report!(dir, args, env) do
    path = Path.join(dir, "r.txt")
    {out, 0} = run(bin("reachprog"), args, [{"MTRACE_REPORT", path} | env])
    assert out == "reachprog: done\n"
    File.read!(path)
  end

  @tag :tmp_dir
  test "stdio's buffer, static data, thread-locals and a waiting thread's stack keep their blocks; the rest is lost as LSan says",
       %{tmp_dir: dir} do
    {lsan, _} = run(bin("reachprog_lsan"), [], [{"LD_PRELOAD", nil}])
    [_, bytes, blocks] = Regex.run(~r/LeakSanitizer: (\d+) byte\(s\) leaked in (\d+) alloc/, lsan)

    text = reachprog_report!(dir, [], [{"MTRACE_REPORT_REACHABLE", "1"}])
    refute text =~ "kept by"
    r = report!(text)
    assert r.live == {String.to_integer(bytes), String.to_integer(blocks)}
    assert r.live == {2192, 6} and r.lost == {3, 3}
    by_fun = fn sites -> Map.new(sites, &{Enum.at(names(&1), 1), {&1.bytes, &1.blocks}}) end
    assert Enum.sort(Map.values(by_fun.(r.sites))) == [{192, 4}, {1000, 1}]

    kept = r.reachable_sites |> Enum.map(&{&1.bytes, Enum.at(names(&1), 1)})
    # stdout's buffer (glibc's _IO_file_doallocate), the static and thread-local pointers of
    # main, and the block on the stack of the thread that waits while the process exits.
    assert {4096, "_IO_file_doallocate"} in kept
    assert {111, "keep"} in kept and {222, "keep"} in kept and {333, "keep"} in kept
  end

  @tag :tmp_dir
  test "MTRACE_REPORT_WHY: each reachable site says what keeps its oldest block", %{tmp_dir: dir} do
    text =
      reachprog_report!(dir, [], [{"MTRACE_REPORT_REACHABLE", "1"}, {"MTRACE_REPORT_WHY", "1"}])

    reachable = text |> String.split("\nstill reachable:") |> List.last()
    # the static pointer, stdout's buffer (in libc's FILE), the waiting thread's stack
    assert reachable =~
             ~r/\n    kept by static reachprog:kept_static\+0 -> 0x[0-9a-f]+ \(111 B\)\n/

    assert reachable =~
             ~r/\n    kept by static libc.so.6:_IO_2_1_stdout_\+\d+ -> 0x[0-9a-f]+ \(4096 B\)\n/

    assert reachable =~
             ~r/\n    kept by stack of thread \d+ \(holder\) \(sp\+\d+\) in holder -> 0x[0-9a-f]+ \(333 B\)\n/

    # the program's own thread-local variable, in its static TLS block
    assert reachable =~
             ~r/\n    kept by TLS of reachprog in thread \d+ \(reachprog\)\+0 -> 0x[0-9a-f]+ \(222 B\)\n/

    # one line a site, and the lost ones have none
    assert length(Regex.scan(~r/kept by/, reachable)) == length(report!(text).reachable_sites)
    refute text |> String.split("\nstill reachable:") |> hd() =~ "kept by"
  end

  # The GDB JIT interface (layouts.h): the BEAM's JIT registers every module's code so, and its
  # symfiles' unwritten bytes held the stale words behind most of bin/demo's missed blocks.
  @tag :tmp_dir
  test "a JIT's entry and symfile on the GDB JIT interface's list are kept and keep nothing",
       %{tmp_dir: dir} do
    text =
      reachprog_report!(dir, ["jit"], [
        {"MTRACE_REPORT_REACHABLE", "1"},
        {"MTRACE_REPORT_WHY", "1"}
      ])

    r = report!(text)
    assert {444, 1} in Enum.map(r.sites, &{&1.bytes, &1.blocks})
    assert r.live == {2192 + 444, 7}
    kept = Enum.map(r.reachable_sites, &{&1.bytes, Enum.at(names(&1), 2)})
    assert {64, "jit_register"} in kept and {32, "jit_register"} in kept

    assert text =~
             ~r/\n    kept by static reachprog:__jit_debug_descriptor\+16 -> 0x[0-9a-f]+ \(32 B\)\n/
  end

  @tag :tmp_dir
  test "a thread that blocks every signal is read whole, not waited for, and mtrace's own report thread is not counted",
       %{tmp_dir: dir} do
    # The holder thread blocks every signal (a sigwait thread does); MTRACE_REPORT_SIGNAL starts
    # mtrace's report thread, which blocks every signal too.
    text =
      reachprog_report!(dir, ["blocked"], [
        {"MTRACE_REPORT_REACHABLE", "1"},
        {"MTRACE_REPORT_SIGNAL", "USR2"}
      ])

    r = report!(text)
    assert r.live == {2192, 6} and r.lost == {3, 3}
    assert {333, "keep"} in Enum.map(r.reachable_sites, &{&1.bytes, Enum.at(names(&1), 1)})
    # One other thread, the holder, which did not stop; the stop did not wait out its 500 ms
    # bound (MT_WORLD_WAIT_MS) for a thread that cannot answer.
    [_, us] = Regex.run(~r/reachability: 0 of 1 other threads stopped for (\d+) us/, text)
    assert String.to_integer(us) < 500_000, text
  end

  # glibc's free lowers its count of mmapped chunks before the munmap, without a lock: a thread
  # stopped between the two leaves a chunk glibc no longer counts. reachprog leaves one mapped
  # for 100 ms after exit begins; the sampled run needs the heap walk, which must wait it out
  # (resuming the threads, as for a held arena lock), not refuse.
  @tag :tmp_dir
  test "a walk that finds an mmapped chunk glibc no longer counts lets the threads go on and walks again",
       %{tmp_dir: dir} do
    text = reachprog_report!(dir, ["unmapping"], [{"MTRACE_SAMPLE", "4096"}])
    assert text =~ ~r/^  glibc's heap walked: \d+ live blocks without a record/m, text
    r = report!(text)
    assert elem(r.live, 1) == 6 and r.lost == {3, 3}, text
  end

  @tag :tmp_dir
  test "the lost bytes at exit are LeakSanitizer's, and the runtime's blocks are reachable",
       %{tmp_dir: dir} do
    {lsan, _} = run(bin("leaky_lsan"), [], [{"LD_PRELOAD", nil}])

    [_, bytes, blocks] =
      Regex.run(~r/SUMMARY: LeakSanitizer: (\d+) byte\(s\) leaked in (\d+) allocation/, lsan)

    r = leaky_report(dir, [], [{"MTRACE_REPORT_REACHABLE", "1"}])
    assert r.live == {String.to_integer(bytes), String.to_integer(blocks)}

    # With MTRACE_REPORT_REACHABLE the reachable sites follow the lost ones: the C++ runtime's
    # exception pool, allocated by libstdc++ before main.
    assert [pool] = r.reachable_sites
    assert {pool.bytes, pool.blocks} == r.reachable
    assert Enum.any?(pool.frames, fn {_, path} -> path =~ "libstdc++" end)
    refute Enum.any?(pool.frames, fn {_, where} -> leaky?(where) end)
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

  @tag :tmp_dir
  test "the lost blocks are summed by calling function before the stacks", %{tmp_dir: dir} do
    path = Path.join(dir, "callers.txt")
    {"callers: done\n", 0} = run(bin("callers"), [], [{"MTRACE_REPORT", path}])
    text = File.read!(path)
    line = fn name -> "callers.c:#{line_of("test/report/callers.c", name)}" end

    assert text =~
             """
             leaks by calling function, largest first (2 functions):
               15000 bytes in 3 blocks from index_build (#{line.("return malloc(n);")}) over 3 call paths
               100 bytes in 1 block from note_once (#{line.("return malloc(100);")})

             leaks: 15100 bytes in 4 blocks by call site, largest first (4 sites):
             """

    # The summary is not taken for sites by the readers of the report.
    assert length(report!(text).sites) == 4
  end

  test "MTRACE_REPORT=stderr writes the report after the program's own output" do
    {out, 7} = run(bin("leaky"), ["7"], [{"MTRACE_REPORT", "stderr"}])

    assert String.starts_with?(
             out,
             "leaky: done\n# mtrace report v1\nmtrace report 1: leaky, pid "
           )

    assert report!(out).complete
  end

  @tag :tmp_dir
  test "a symbolic link planted at the report path is refused, its target untouched",
       %{tmp_dir: dir} do
    link = Path.join(dir, "report.txt")
    victim = plant_link!(link)
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

  # They hold heap and library addresses: the owner's alone, whatever the umask.
  @tag :tmp_dir
  test "report and CSV files are created mode 0600", %{tmp_dir: dir} do
    env = [
      {"MTRACE_REPORT", Path.join(dir, "r.txt")},
      {"MTRACE_CSV", Path.join(dir, "c.csv")},
      {"MTRACE_CSV_AGE", "0"}
    ]

    {"leaky: done\n", 0} = run("/bin/sh", ["-c", ~s(umask 0; exec "$0"), bin("leaky")], env)

    for f <- ["r.txt", "c.csv"],
        do: assert(Bitwise.band(File.stat!(Path.join(dir, f)).mode, 0o777) == 0o600, f)
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

  @signals "expected HUP, INT, QUIT, USR1, USR2, ALRM, TERM, WINCH, URG, PROF, VTALRM or a " <>
             "real-time signal (RTMIN+n, RTMAX-n: 34 to 64), by name or number; no signal reports"

  # A file size limit of one 512-byte block, with SIGXFSZ ignored: the report's writes fail
  # with EFBIG part of the way through.
  @tag :tmp_dir
  test "a report that cannot be written completely is removed, with one line", %{tmp_dir: dir} do
    file = Path.join(dir, "r.txt")
    script = ~s(trap "" XFSZ; ulimit -f 1; exec "$0")
    {out, 0} = run("/bin/sh", ["-c", script, bin("leaky")], [{"MTRACE_REPORT", file}])
    assert String.starts_with?(out, "leaky: done\n")

    assert said(out) == [
             "mtrace: cannot write the whole report, removed it: #{file}: File too large"
           ]

    assert File.ls!(dir) == []
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
             "mtrace: MTRACE_REPORT_SIGNAL=SIGNOPE: #{@signals}",
             "mtrace: MTRACE_REPORT_TOP=lots: expected a whole number from 0 to 1073741824; using 0"
           ]

    r = report!(File.read!(Path.join(dir, "r.txt")))
    assert r.more == nil
    assert Enum.all?(r.sites, &(length(&1.frames) >= 3))
  end

  test "a message is one line: unprintable bytes escaped, long values cut" do
    env = [
      {"MTRACE_REPORT_TOP", "a\nb\x01\\c\x7fé"},
      {"MTRACE_SLOTS", String.duplicate("9", 5000)},
      {"MTRACE_REPORT", "/nonexistent/a\tb\n%p"}
    ]

    {out, 0} = run(bin("leaky"), [], env)
    assert [_, _, _] = said(out)
    assert String.split(out, "\n", trim: true) -- said(out) == ["leaky: done"]

    assert ("mtrace: MTRACE_REPORT_TOP=a\\x0ab\\x01\\\\c\\x7f\\xc3\\xa9: expected a whole number " <>
              "from 0 to 1073741824; using 0") in said(out)

    assert ("mtrace: MTRACE_SLOTS=#{String.duplicate("9", 200)}...: expected a whole number " <>
              "from 16 to 1073741824; using 4096") in said(out)

    assert Enum.any?(
             said(out),
             &(&1 =~
                 ~r"^mtrace: cannot create the report file: /nonexistent/a\\x09b\\x0a\d+: No such")
           )
  end

  # bin/linked has mtrace.so as a dependency (a setuid program ignores LD_PRELOAD paths). Owned
  # by nobody, set-user-ID and run by root, it runs in secure-execution mode (AT_SECURE: its
  # effective uid is not its real one), in a directory it could write to.
  if elem(System.cmd("id", ["-u"]), 0) != "0\n", do: @tag(skip: "needs root, for chown")
  @tag :tmp_dir
  test "a setuid program writes no file and says that the variables are ignored",
       %{tmp_dir: dir} do
    prog = Path.join(dir, "linked")
    File.cp!(bin("linked"), prog)
    {_, 0} = System.cmd("chown", ["nobody", prog])
    File.chmod!(prog, 0o4755)
    out = Path.join(dir, "out")
    File.mkdir!(out)
    File.chmod!(out, 0o777)

    env = [
      {"LD_PRELOAD", nil},
      {"MTRACE_REPORT", Path.join(out, "r.txt")},
      {"MTRACE_CSV", Path.join(out, "c.csv")},
      {"MTRACE_REPORT_SIGNAL", "USR2"},
      {"MTRACE_DEBUG_DIRS", Path.join(dir, "debug")}
    ]

    {text, 0} = run(prog, [], env, cd: out)
    ignored = ": ignored in secure-execution mode (a setuid or setgid program)"

    assert Enum.sort(said(text)) == [
             "mtrace: MTRACE_CSV=#{out}/c.csv" <> ignored,
             "mtrace: MTRACE_DEBUG_DIRS=#{dir}/debug" <> ignored,
             "mtrace: MTRACE_REPORT=#{out}/r.txt" <> ignored,
             "mtrace: MTRACE_REPORT_SIGNAL=USR2" <> ignored
           ]

    assert File.ls!(out) == []
    # Not setuid, the same program writes both files: the library is there and working.
    File.chmod!(prog, 0o755)
    {"linked: done\n", 0} = run(prog, [], env, cd: out)
    assert Enum.sort(File.ls!(out)) == ["c.csv", "r.txt"]
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

  # glibc has no abbreviation for a real-time signal (sigabbrev_np gives NULL).
  @tag :tmp_dir
  test "a real-time signal writes reports and names itself from SIGRTMIN", %{tmp_dir: dir} do
    {out, 0} = run(bin("sigprog"), [], [{"MTRACE_REPORT_SIGNAL", "40"}], cd: dir)
    assert out == "sigprog: done\n"
    reports = memlogs(dir, "sigprog-*-*.memlog")

    assert Enum.map(reports, & &1.title) == [
             "on SIGRTMIN+6, changes since start",
             "on SIGRTMIN+6, changes since report 1",
             "on SIGRTMIN+6, changes since report 2"
           ]

    assert changes(hd(reports)) == %{"signal_a" => {3000, 3, {3000, 3}, {0, 0}}}
  end

  # The signals whose handlers a process has (SigCgt in /proc/PID/status), but glibc's own (32
  # and 33, set up when a thread starts).
  defp caught(status) do
    [_, mask] = Regex.run(~r/^SigCgt:\s+([0-9a-f]+)$/m, status)
    mask = String.to_integer(mask, 16)

    for sig <- Enum.to_list(1..31) ++ Enum.to_list(34..64),
        Bitwise.band(mask, Bitwise.bsl(1, sig - 1)) != 0,
        do: sig
  end

  # A handler on a fault signal that returns re-runs the fault (a report each time, forever);
  # one on SIGPIPE or SIGCHLD changes what the program does. glibc's SIGRTMIN is 34 here.
  test "report signals are the safe ones only, by name or number" do
    accepted = [{"40", 40}, {"SIGRTMIN+6", 40}, {"RTMIN", 34}, {"RTMAX", 64}, {"RTMAX-2", 62}]

    for {value, sig} <- accepted ++ [{"12", 12}, {"SIGHUP", 1}, {"VTALRM", 26}] do
      {out, 0} = run("cat", ["/proc/self/status"], [{"MTRACE_REPORT_SIGNAL", value}])
      assert {said(out), caught(out)} == {[], [sig]}, value
    end

    for value <-
          ~w(11 13 4 7 8 5 6 31 17 9 19 SEGV PIPE SIGKILL 0 65 33 USR3 RTMIN+31 RTMAX-x 12x) do
      {out, 0} = run("cat", ["/proc/self/status"], [{"MTRACE_REPORT_SIGNAL", value}])
      assert [line] = said(out)
      assert line =~ "mtrace: MTRACE_REPORT_SIGNAL=#{value}: expected HUP, INT, "
      assert caught(out) == [], value
    end

    # SIGPIPE keeps its default action: yes dies quietly once head has its line (the test node
    # ignores SIGPIPE, and so would its children).
    {out, 0} =
      run("env", ["--default-signal=PIPE", "sh", "-c", "yes | head -1"], [
        {"MTRACE_REPORT_SIGNAL", "13"}
      ])

    assert String.split(out, "\n", trim: true) -- said(out) == ["y"]
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
