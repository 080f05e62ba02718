defmodule Mtrace.Format.Text do
  @moduledoc false
  # Sites as the library's own report prints them (report.c, docs/report-format.md): the text
  # bin/mtrace --node prints, which Mtrace.Report reads back as it reads an exit report.

  @behaviour Mtrace.Format

  alias Mtrace.{Format, Frame, Report, Site}

  @doc """
  The sites in a report of their own. Options: `:title` (what follows "mtrace report 1: ", e.g.
  "node@host, pid 42, on request"), `:what` (`:leaks`, the default, or `:live`: the list's head and
  summary).
  """
  @impl true
  def render(sites, opts) do
    what = Keyword.get(opts, :what, :leaks)
    n = length(sites)

    [
      "# mtrace report v#{Report.version()}\n",
      "mtrace report 1: #{Keyword.get(opts, :title, "on request")}\n",
      summary(sites, what),
      "\n",
      head(sites, what),
      sites |> Enum.with_index(1) |> Enum.map(fn {site, k} -> site(site, k, n) end),
      "\nmtrace: end of report 1\n"
    ]
  end

  defp summary(sites, :leaks) do
    {direct, indirect} =
      Enum.reduce(
        sites,
        {0, 0},
        &{elem(&2, 0) + &1.direct_blocks, elem(&2, 1) + &1.indirect_blocks}
      )

    possible = sites |> Enum.map(&(&1.possible_blocks || 0)) |> Enum.sum()

    [
      "  lost now: #{amount(sites)} (#{direct} direct, #{indirect} indirect)\n",
      if(possible > 0,
        do:
          "    of which possibly lost: #{possible} blocks that a word a rule discounted " <>
            "points into (docs/rules.md)\n",
        else: []
      )
    ]
  end

  defp summary(sites, :live), do: "  live heap: #{amount(sites)}\n"

  defp head([], :leaks), do: "leaks: none\n"
  defp head([], :live), do: "live blocks: none\n"

  defp head(sites, what) do
    n = length(sites)

    "#{what}: #{amount(sites)} by call site, largest first (#{n} site#{if n == 1, do: "", else: "s"}):\n"
  end

  defp amount(sites) do
    bytes = sites |> Enum.map(& &1.bytes) |> Enum.sum()
    blocks = sites |> Enum.map(& &1.blocks) |> Enum.sum()
    "#{bytes} bytes in #{blocks} block#{if abs(blocks) == 1, do: "", else: "s"}"
  end

  defp site(%Site{} = s, k, n) do
    lost =
      if s.direct_blocks > 0 or s.indirect_blocks > 0,
        do: [
          " lost (#{s.direct_blocks} direct, #{s.indirect_blocks} indirect)",
          if(s.certainty == :possible,
            do: " (#{s.possible_blocks} possibly: #{hd(s.rules)})",
            else: []
          )
        ],
        else: []

    [
      "\n#{amount([s])}",
      lost,
      ", site #{k} of #{n}\n",
      frames(s)
    ]
  end

  defp frames(%Site{stack: [], contents: contents}) when is_binary(contents),
    do: "    (no stack: #{contents})\n"

  defp frames(%Site{stack: []}), do: "    (no stack)\n"

  defp frames(%Site{stack: [first | rest]}) do
    [line("at", first) | Enum.map(rest, &line("by", &1))]
  end

  defp line(word, %Frame{address: address} = frame),
    do: "    #{word} 0x#{Format.hex(address)}: #{frame(frame)}\n"

  defp frame(%Frame{kind: :erlang} = f), do: "#{erlang_name(f)}#{source(f)} (erlang)"
  defp frame(%Frame{unloaded: :maybe}), do: "?? (unloaded or replaced)"
  defp frame(%Frame{library: nil, function: nil}), do: "?? (no module)"
  defp frame(%Frame{unloaded: true} = f), do: native(f) <> " [unloaded]"
  defp frame(f), do: native(f)

  defp native(%Frame{function: nil} = f), do: "#{f.library}+0x#{Format.hex(f.offset || 0)}"

  defp native(%Frame{file: file, line: line} = f) when is_binary(file) and is_integer(line),
    do: "#{f.function}#{source(f)} #{f.library}+0x#{Format.hex(f.offset || 0)}"

  defp native(f), do: "#{f.function} (#{f.library || "??"})"

  defp erlang_name(%Frame{module: nil, function: name}), do: name

  defp erlang_name(%Frame{module: m, function: f, arity: a}),
    do: :io_lib.format(~c"~tw:~tw/~b", [m, f, a]) |> IO.chardata_to_string()

  defp source(%Frame{file: file, line: line}) when is_binary(file) and is_integer(line),
    do: " (#{Path.basename(file)}:#{line})"

  defp source(_frame), do: ""
end
