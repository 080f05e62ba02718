defmodule Mtrace.Format.Tree do
  @moduledoc false
  @behaviour Mtrace.Format
  # A text tree of the live bytes by call path, from the allocating function out to its callers
  # (bottom-up, as heaptrack and memtrail show it): each line has its share of the total, its
  # bytes and blocks. Branches under `threshold` percent of the total fold into one line.

  alias Mtrace.Format

  @impl true
  def render(sites, opts) do
    threshold = Keyword.get(opts, :threshold, 1.0)
    inverted = for s <- sites, do: %{s | stack: Enum.reverse(s.stack)}
    root = Format.tree(inverted)
    total = root.bytes

    [
      line(root, total, ""),
      lines(root.children, total, threshold, "")
    ]
  end

  defp lines(children, total, threshold, prefix) do
    {shown, folded} = Enum.split_with(children, &(&1.bytes * 100 >= threshold * total))

    rows =
      for {child, i} <- Enum.with_index(shown) do
        last = i == length(shown) - 1 and folded == []
        branch = if last, do: "└─ ", else: "├─ "
        next = prefix <> if(last, do: "   ", else: "│  ")
        [line(child, total, prefix <> branch), lines(child.children, total, threshold, next)]
      end

    case folded do
      [] ->
        rows

      _ ->
        bytes = folded |> Enum.map(& &1.bytes) |> Enum.sum()
        blocks = folded |> Enum.map(& &1.blocks) |> Enum.sum()
        n = length(folded)

        rows ++
          [
            "#{prefix}└─ #{Format.percent(bytes, total)} #{bytes} bytes in #{blocks} blocks: " <>
              "#{n} more #{if n == 1, do: "path", else: "paths"} below #{threshold}%\n"
          ]
    end
  end

  defp line(node, total, prefix) do
    where = if node.frame, do: " (#{node.library})", else: ""

    "#{prefix}#{Format.percent(node.bytes, total)} #{node.bytes} bytes in #{node.blocks} " <>
      "blocks: #{node.label}#{where}\n"
  end
end
