defmodule Mtrace.ConcurrencyTest do
  # Many processes allocate and free through the test NIF (8 writers, 6.4M allocations; 2 dirty
  # churners, 20M malloc+free pairs) while 3 others call every reader in turn (olds, top, mark and
  # diff, leaks, stats, a format) and reset the table (test/support/beam_storm.ex), in a fresh
  # node: leaks/1 answers before and after each reset.
  use ExUnit.Case, async: false
  import Mtrace.Test.Helpers

  @moduletag timeout: 180_000

  test "records stay consistent under concurrent allocation, reads and resets" do
    readers = node_result("Mtrace.Test.BeamStorm.run()", [{"LD_PRELOAD", mtrace_so()}])

    assert Enum.map(readers, & &1.bad) == [0, 0, 0], inspect(readers)
    # Each answer of leaks/1 is followed by a reset and another answer.
    assert Enum.sum(Enum.map(readers, & &1.leaks)) >= 1, inspect(readers)

    assert Enum.sum(Enum.map(readers, & &1.after_reset)) ==
             Enum.sum(Enum.map(readers, & &1.leaks)),
           inspect(readers)

    # The calloc'd blocks the writers hold as integers are lost while they are held.
    assert Enum.sum(Enum.map(readers, & &1.lost_calloc)) > 0, inspect(readers)
  end
end
