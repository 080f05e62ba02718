defmodule Mtrace.IncompleteError do
  @moduledoc """
  Raised by `Mtrace.leaks/1` when glibc's heap could not be walked (see `Mtrace.heap/0`) and some
  live blocks have no record, so that a block they point to could be called lost although it is
  not. Where the walk works (glibc 2.35 to 2.41), blocks without a record are known from it and
  `leaks/1` answers.

  `:reason` is `:sampling` (the node runs with `MTRACE_SAMPLE`: most blocks are not recorded),
  `{:dropped, n}` (`n` allocations found no room in the table, which had reached
  `MTRACE_SLOTS_MAX`), `:reset` (`Mtrace.reset/0` forgot the records of the blocks live then), or
  `:attached` (mtrace was attached to the running node by `Mtrace.attach/1`: the blocks live
  before have no record); `:heap_refused` says why the walk was refused (`nil` when it was not
  tried).
  """
  defexception [:reason, :heap_refused]

  @impl true
  def message(%{reason: reason, heap_refused: why}), do: needs(reason) <> walk(why)

  defp needs(:sampling),
    do:
      "Mtrace.leaks/1 needs every live block recorded, and MTRACE_SAMPLE records one in many: " <>
        "start the node without MTRACE_SAMPLE"

  defp needs({:dropped, n}),
    do:
      "Mtrace.leaks/1 needs every live block recorded, and #{n} allocations found no room " <>
        "in the table: start the node with a larger MTRACE_SLOTS_MAX"

  defp needs(:reset),
    do:
      "Mtrace.leaks/1 needs every live block recorded, and Mtrace.reset/0 forgot the records " <>
        "of the blocks live when it ran: restart the node to look for leaks"

  defp needs(:attached),
    do:
      "Mtrace.leaks/1 needs every live block recorded, and mtrace was attached to this node " <>
        "while it ran (Mtrace.attach/1): the blocks allocated before have no record. " <>
        "Mtrace.top/2 and Mtrace.olds/2 show what was allocated since"

  defp walk(nil), do: ""

  defp walk(why),
    do:
      " (glibc's heap, which would tell the blocks without a record, could not be walked: #{why})"
end
