defmodule Mtrace.ConcurrencyTest do
  # Many processes allocate and free through the test NIF (8 writers, 6.4M allocations; 2 dirty
  # churners, 20M malloc+free pairs) while 3 others call every reader in turn (olds, top, mark and
  # diff, leaks, stats, a format) and reset the table (test/support/beam_storm.ex), in a fresh
  # node: leaks/1 answers before the first reset and after.
  use ExUnit.Case, async: false
  import Mtrace.Test.Helpers

  @moduletag timeout: 180_000

  test "records stay consistent under concurrent allocation, reads and resets" do
    {readers, stats} = node_result("Mtrace.Test.BeamStorm.run()", [{"LD_PRELOAD", mtrace_so()}])

    assert Enum.map(readers, & &1.bad) == [0, 0, 0], inspect(readers)
    # leaks/1 answered before the node's first reset and after it.
    assert Enum.sum(Enum.map(readers, & &1.leaks)) >= 1, inspect(readers)
    assert Enum.sum(Enum.map(readers, & &1.after_reset)) >= 1, inspect(readers)

    # Every free goes through the hooks: a record the walk of glibc's heap found in no block
    # would be a live block it took for free (and whose record it then removed).
    assert stats.missed_frees == 0

    # The calloc'd blocks the writers hold as integers are lost while they are held.
    assert Enum.sum(Enum.map(readers, & &1.lost_calloc)) > 0, inspect(readers)
  end
end
