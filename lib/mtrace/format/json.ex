defmodule Mtrace.Format.Json do
  @moduledoc false
  @behaviour Mtrace.Format
  # gprof2dot's JSON input (memtrail writes the same): the functions once each, then an event
  # a site whose callchain lists function indices innermost first, and whose cost is its bytes.
  # Written by hand: no JSON library is at hand without hex.pm.

  alias Mtrace.Format

  @impl true
  def render(sites, _opts) do
    sites = Enum.filter(sites, &(&1.bytes > 0))
    keys = for s <- sites, f <- s.stack, uniq: true, do: key(f)
    index = keys |> Enum.with_index() |> Map.new()

    functions =
      Enum.map_join(keys, ",\n    ", fn {name, module} ->
        ~s|{"name": #{string(name)}, "module": #{string(module)}}|
      end)

    events =
      Enum.map_join(sites, ",\n    ", fn s ->
        chain = Enum.map_join(s.stack, ", ", &Integer.to_string(index[key(&1)]))
        ~s|{"callchain": [#{chain}], "cost": [#{s.bytes}]}|
      end)

    """
    {
      "version": 0,
      "costs": [{"description": "live bytes", "unit": "bytes"}],
      "functions": [
        #{functions}
      ],
      "events": [
        #{events}
      ]
    }
    """
  end

  defp key(frame), do: {Format.function(frame), Format.library(frame)}

  @doc false
  def string(text) do
    # Byte by byte: names from symbol tables are ASCII, and anything else is escaped.
    escaped =
      for <<c <- text>>, into: "" do
        case c do
          ?" -> "\\\""
          ?\\ -> "\\\\"
          c when c < 0x20 or c > 0x7E -> "\\u" <> String.pad_leading(Format.hex(c), 4, "0")
          c -> <<c>>
        end
      end

    ~s|"#{escaped}"|
  end
end
