defmodule Mtrace.Format.Folded do
  @moduledoc false
  @behaviour Mtrace.Format
  # Folded stacks, a line a site: outermost frame first, frames joined by ';', then the bytes.
  # flamegraph.pl, inferno and speedscope read it. Sites of no positive bytes are left out.
  # Frames are functions, without their lines, so that a function's callers merge into one box,
  # as those tools expect.

  alias Mtrace.Format

  @impl true
  def render(sites, _opts) do
    for site <- sites, site.bytes > 0 do
      frames =
        site.stack |> Enum.reverse() |> Enum.map_join(";", &clean(Format.label(&1, lines: false)))

      [frames, " ", Integer.to_string(site.bytes), "\n"]
    end
  end

  # ';' separates frames and the last space the count: neither may appear inside a frame.
  defp clean(label), do: String.replace(label, [";", "\n"], "_")
end
