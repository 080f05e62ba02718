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
