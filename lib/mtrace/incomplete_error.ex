defmodule Mtrace.IncompleteError do
  @moduledoc """
  Raised by `Mtrace.leaks/1` when some live blocks have no record, so that a block they point to
  could be called lost although it is not.

  `:reason` is `:sampling` (the node runs with `MTRACE_SAMPLE`: most blocks are not recorded),
  `{:dropped, n}` (`n` allocations found no room in the table, which had reached
  `MTRACE_SLOTS_MAX`), `:reset` (`Mtrace.reset/0` forgot the records of the blocks live then), or
  `:attached` (mtrace was attached to the running node by `Mtrace.attach/1`: the blocks live
  before have no record).
  """
  defexception [:reason]

  @impl true
  def message(%{reason: :sampling}),
    do:
      "Mtrace.leaks/1 needs every live block recorded, and MTRACE_SAMPLE records one in many: " <>
        "start the node without MTRACE_SAMPLE"

  def message(%{reason: {:dropped, n}}),
    do:
      "Mtrace.leaks/1 needs every live block recorded, and #{n} allocations found no room " <>
        "in the table: start the node with a larger MTRACE_SLOTS_MAX"

  def message(%{reason: :reset}),
    do:
      "Mtrace.leaks/1 needs every live block recorded, and Mtrace.reset/0 forgot the records " <>
        "of the blocks live when it ran: restart the node to look for leaks"

  def message(%{reason: :attached}),
    do:
      "Mtrace.leaks/1 needs every live block recorded, and mtrace was attached to this node " <>
        "while it ran (Mtrace.attach/1): the blocks allocated before have no record. " <>
        "Mtrace.top/2 and Mtrace.olds/2 show what was allocated since; for leaks/1, start the " <>
        "node with the preload"
end
