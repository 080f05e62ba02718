defmodule Mtrace.StormTest do
  # A storm in a C program (test/report/storm.c): 16 threads on this machine's cores make
  # 2,400,000 allocations over all eleven allocating functions, C++'s new[] and aligned new[]
  # (storm_new.cc: through malloc and aligned_alloc), and free and delete[], checking every block's
  # bytes; each thread then leaks 8 known blocks and exits holding them; then 10,000 threads are
  # made, allocate and exit, one after another. (The BEAM's storm is concurrency_test.exs.)
  use ExUnit.Case, async: true
  import Mtrace.Test.Report

  @moduletag timeout: 120_000

  # 16 threads x 8 blocks of 1000 + thread bytes, thread 0..15.
  @leaked {8 * Enum.sum(for id <- 0..15, do: 1000 + id), 16 * 8}

  setup_all do
    build!()
  end

  @tag :tmp_dir
  test "a storm over every hook: output as untraced, nothing dropped, the leaks counted exactly",
       %{tmp_dir: dir} do
    {plain, 0} = run(bin("storm"), [], [{"LD_PRELOAD", nil}])
    assert plain =~ "storm: 2400000 operations, 10000 short-lived threads, corrupt blocks: 0"

    report = Path.join(dir, "r.txt")

    assert run(bin("storm"), [], [
             {"MTRACE_REPORT", report},
             {"MTRACE_REPORT_REACHABLE", "1"}
           ]) == {plain, 0}

    r = report!(File.read!(report))
    assert {r.dropped, r.stacks_dropped, r.unmatched_frees} == {0, 0, 0}

    # Every call made was counted: 2,400,000 picks, a strdup and a malloc in each short thread.
    assert Enum.sum(for {name, n} <- r.calls, name not in ~w(free track untrack), do: n) >=
             2_400_000 + 20_000

    # Every leaked block is live at exit, lost or, where a stale copy of its address survives
    # in an exited thread's stack that glibc keeps for reuse, still reachable; nothing else of
    # leak_in_thread is.
    ours = fn sites ->
      for s <- sites, Enum.any?(s.frames, &match?({"leak_in_thread", _}, &1)), reduce: {0, 0} do
        {b, n} -> {b + s.bytes, n + s.blocks}
      end
    end

    {lost_bytes, lost_blocks} = ours.(r.sites)
    {kept_bytes, kept_blocks} = ours.(r.reachable_sites)
    assert {lost_bytes + kept_bytes, lost_blocks + kept_blocks} == @leaked
    assert lost_blocks >= div(elem(@leaked, 1), 2), "most are lost: #{lost_blocks}"
  end
end
