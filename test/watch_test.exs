defmodule Mtrace.WatchTest do
  # Mtrace.Watch in the preloaded test node: the growth of a leaking loop is logged, a steady
  # one is not. async: false, so that no other test's blocks move the sites it watches.
  use ExUnit.Case, async: false
  import ExUnit.CaptureLog
  import Mtrace.Test.Helpers
  alias Mtrace.Test.Leaky

  @moduletag timeout: 120_000

  # Runs a watch of the test NIF's calloc site for two reports while work/0 runs; its log.
  defp watched(work) do
    capture_log(fn ->
      {:ok, pid} = Mtrace.Watch.start_link(interval: 400, count: 2, function: "leak_calloc", n: 3)

      ref = Process.monitor(pid)
      work.()
      assert_receive {:DOWN, ^ref, :process, ^pid, :normal}, 5_000
    end)
  end

  test "a leaking loop's growth is logged, with its site" do
    log = watched(fn -> for _ <- 1..12, do: Leaky.alloc(:calloc, 777) && Process.sleep(50) end)
    assert log =~ "mtrace: growth by call site since the previous report"

    assert [_ | _] =
             Regex.scan(
               ~r/\+(\d+) bytes in \+(\d+) blocks?: calloc \(hooks.c:\d+\) < leak_calloc \(leaky.c:\d+\)/,
               log
             )

    [[_, bytes, blocks] | _] = Regex.scan(~r/\+(\d+) bytes in \+(\d+) blocks?: calloc/, log)
    assert String.to_integer(bytes) == 777 * String.to_integer(blocks)
  end

  test "a steady loop logs nothing" do
    log =
      watched(fn ->
        for _ <- 1..12, do: Leaky.release(:calloc, Leaky.alloc(:calloc, 777)) && Process.sleep(50)
      end)

    refute log =~ "mtrace: growth"
  end

  test "with leaks: true, each lost site is logged once, with the scans that found it" do
    # Five lost blocks of one site (a stale word may hide some of them from a scan), old enough
    # for leaks/1's min_age; three reports, a scan each: the site is logged by one of them only.
    _masked = Mtrace.Test.Lost.lose_masked(5, 48)
    Process.sleep(1100)

    log =
      capture_log(fn ->
        {:ok, pid} =
          Mtrace.Watch.start_link(interval: 300, count: 3, leaks: true, library: "lost.so")

        ref = Process.monitor(pid)
        assert_receive {:DOWN, ^ref, :process, ^pid, :normal}, 10_000
      end)

    assert [_] = Regex.scan(~r/mtrace: new lost sites/, log)

    assert [[_, bytes, blocks, scans]] =
             Regex.scan(
               ~r/  (\d+) bytes in (\d+) blocks?, found by (\d+) scans?: malloc \(hooks.c:\d+\) < masked_block \(lost.c:\d+\)/,
               log
             )

    assert String.to_integer(bytes) == 48 * String.to_integer(blocks)
    assert String.to_integer(blocks) in 1..5 and String.to_integer(scans) >= 1
  end

  test "watch/1 and unwatch/0 from iex" do
    assert {:ok, pid} = Mtrace.watch(interval: 60_000)
    assert {:error, {:already_started, ^pid}} = Mtrace.watch()
    assert :ok = Mtrace.unwatch()
    assert {:error, :not_watching} = Mtrace.unwatch()
    assert_raise ArgumentError, ~r/interval must be/, fn -> Mtrace.watch(interval: 0) end
  end

  test "a node without the preload gets one clear line, not a crash loop" do
    {out, 0} =
      run_node("""
      require Logger
      children = [{Mtrace.Watch, interval: 100}]
      {:ok, sup} = Supervisor.start_link(children, strategy: :one_for_one)
      Process.sleep(300)
      [{Mtrace.Watch, pid, _, _}] = Supervisor.which_children(sup)
      IO.puts("watch=\#{inspect(pid)}")
      """)

    assert [_] = Regex.scan(~r/Mtrace.Watch: mtrace is not this node's allocator/, out)
    assert out =~ "watch=:undefined"
  end
end
