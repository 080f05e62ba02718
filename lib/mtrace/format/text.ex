defmodule Mtrace.Format.Text do
  @moduledoc false
  # Sites as the library's own report prints them (report.c, docs/report-format.md): the text
  # bin/mtrace --node prints, which Mtrace.Report reads back as it reads an exit report. The
  # writer is src/mtrace_text.erl's, which mtrace:print/1 shares.

  @behaviour Mtrace.Format

  @doc """
  The sites in a report of their own. Options: `:title` (what follows "mtrace report 1: ", e.g.
  "node@host, pid 42, on request"), `:what` (`:leaks`, the default, or `:live`: the list's head and
  summary).
  """
  @impl true
  def render(sites, opts), do: :mtrace_text.render(sites, Map.new(opts))
end
