defmodule Mtrace.HeapTest do
  # Mtrace.heap/0: glibc's heap walked in nodes of their own, with and without the preload.
  use ExUnit.Case, async: true
  import Mtrace.Test.Helpers

  @moduletag timeout: 120_000

  # 1000 blocks of 5000 bytes (the 8 KiB class) allocated between two censuses, and kept.
  @census """
  alias Mtrace.Test.Leaky
  before = Mtrace.heap()
  kept = for _ <- 1..1000, do: Leaky.alloc(:malloc, 5000)
  after_ = Mtrace.heap()
  class = fn h -> Enum.find_value(h.by_size, {0, 0}, fn {8192, n, b} -> {n, b}; _ -> nil end) end
  {before, after_, class.(before), class.(after_), length(kept), Mtrace.stats()}
  """

  test "in a node without the preload, the census sees every block, none recorded" do
    {before, later, {n0, b0}, {n1, b1}, 1000, stats} = node_result(@census, [])
    refute stats.preloaded
    assert before.glibc =~ ~r/^2\.\d+$/ and before.bad_chunks == 0 and later.bad_chunks == 0
    assert later.mmapped_missing == 0
    assert later.recorded_blocks == 0 and later.recorded_bytes == 0
    assert n1 - n0 >= 1000 and b1 - b0 >= 1000 * 5000
    assert later.blocks - before.blocks >= 1000
    assert later.arenas >= 1 and later.threads_stopped > 0
    assert length(later.largest_free) in 1..10
    assert later.largest_free == Enum.sort(later.largest_free, :desc)
    assert Enum.sum(Enum.map(later.by_size, &elem(&1, 1))) == later.blocks
    assert Enum.sum(Enum.map(later.by_size, &elem(&1, 2))) == later.block_bytes
  end

  test "with full capture, the blocks the census sees are the records, but for the untraced" do
    {_before, later, {n0, _}, {n1, _}, 1000, stats} =
      node_result(@census, [{"LD_PRELOAD", mtrace_so()}])

    assert n1 - n0 >= 1000
    assert later.missed_frees == 0 and later.bad_chunks == 0 and later.mmapped_missing == 0
    assert later.recorded_blocks <= later.blocks
    # a block without a record was allocated while its thread was inside mtrace, or is a
    # thread's tcache that holds no chunk yet (glibc's own, in use)
    assert later.blocks - later.recorded_blocks <= stats.untraced + later.tcaches
  end
end
