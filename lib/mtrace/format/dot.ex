defmodule Mtrace.Format.Dot do
  @moduledoc false
  @behaviour Mtrace.Format
  # Graphviz DOT of the caller graph: a node a function, weighted by the live bytes allocated
  # through it, an edge from caller to callee weighted by the bytes passed down it. Nodes and
  # edges under `threshold` percent of the total are folded away (their bytes stay counted in
  # the nodes above them).

  alias Mtrace.Format

  @impl true
  def render(sites, opts) do
    threshold = Keyword.get(opts, :threshold, 0.5)
    sites = Enum.filter(sites, &(&1.bytes > 0))
    total = sites |> Enum.map(& &1.bytes) |> Enum.sum()
    keep? = fn bytes -> bytes * 100 >= threshold * total end

    {nodes, edges} =
      Enum.reduce(sites, {%{}, %{}}, fn site, {nodes, edges} ->
        keys = Enum.map(site.stack, &key/1)

        nodes =
          keys
          |> Enum.uniq()
          |> Enum.reduce(nodes, &Map.update(&2, &1, site.bytes, fn b -> b + site.bytes end))

        pairs =
          keys
          |> Enum.zip(Enum.drop(keys, 1))
          |> Enum.map(fn {callee, caller} -> {caller, callee} end)

        edges =
          pairs
          |> Enum.uniq()
          |> Enum.reduce(edges, &Map.update(&2, &1, site.bytes, fn b -> b + site.bytes end))

        {nodes, edges}
      end)

    nodes = for {k, b} <- nodes, keep?.(b), into: %{}, do: {k, b}
    ids = nodes |> Map.keys() |> Enum.sort() |> Enum.with_index() |> Map.new()

    [
      "digraph mtrace {\n",
      "  graph [rankdir=TB, label=\"mtrace: #{total} live bytes\"];\n",
      "  node [shape=box, style=filled, fontname=\"Helvetica\"];\n",
      for {{function, library} = k, bytes} <- Enum.sort_by(nodes, &elem(&1, 0)) do
        share = if total > 0, do: bytes / total, else: 0.0

        ~s|  n#{ids[k]} [label="#{esc(function)}\\n#{esc(library)}\\n#{bytes} bytes (#{Format.percent(bytes, total)})", | <>
          ~s|fillcolor="#{colour(share)}"];\n|
      end,
      for {{caller, callee}, bytes} <- Enum.sort_by(edges, &elem(&1, 0)),
          Map.has_key?(ids, caller) and Map.has_key?(ids, callee) and keep?.(bytes) do
        width = 1 + 4 * if total > 0, do: bytes / total, else: 0

        ~s|  n#{ids[caller]} -> n#{ids[callee]} [label="#{bytes}", | <>
          ~s|penwidth=#{:erlang.float_to_binary(width, decimals: 2)}];\n|
      end,
      "}\n"
    ]
  end

  defp key(frame) do
    {Format.function(frame), Format.library(frame)}
  end

  # From pale to strong red as the share of the bytes grows.
  defp colour(share) do
    level = round(255 - 155 * share)
    "#ff#{two(level)}#{two(level)}"
  end

  defp two(n), do: n |> Format.hex() |> String.pad_leading(2, "0")

  defp esc(text), do: String.replace(text, ["\\", "\""], &("\\" <> &1))
end
