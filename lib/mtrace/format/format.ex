defmodule Mtrace.Format do
  @moduledoc false
  # The formats of Mtrace.write/3, render/3 and bin/mtrace: one writer a format, each a module of
  # this behaviour, named once in @formats (adding a format is one line there); and what every
  # writer shares: a frame's label, the sites' order, and a call tree built from the sites' stacks.

  alias Mtrace.Frame

  @doc "The sites in this format; opts are render/3's (`:threshold`, `:title`), nil ones left out."
  @callback render([Mtrace.Site.t()], keyword()) :: iodata()

  @formats [
    html: Mtrace.Format.Html,
    folded: Mtrace.Format.Folded,
    pprof: Mtrace.Format.Pprof,
    dot: Mtrace.Format.Dot,
    json: Mtrace.Format.Json,
    tree: Mtrace.Format.Tree
  ]

  @doc "The formats' names, in the order the docs give them."
  @spec names() :: [atom()]
  def names, do: Keyword.keys(@formats)

  @doc "A format named on a command line (bin/mtrace --format), or the line that refuses it."
  @spec parse(String.t() | nil) :: {:ok, atom()} | {:error, String.t()}
  def parse(name) do
    case Enum.find(names(), &(Atom.to_string(&1) == name)) do
      nil -> {:error, "--format takes one of #{Enum.join(names(), ", ")}, got: #{inspect(name)}"}
      format -> {:ok, format}
    end
  end

  @doc "The writer of a format's name."
  @spec writer(term()) :: {:ok, module()} | :error
  def writer(name) when is_atom(name), do: Keyword.fetch(@formats, name)
  def writer(_name), do: :error

  @doc """
  A frame as people read it: function (file:line), else library+0xoffset, else address; with
  `lines: false`, without the file:line (frames of one function then merge); with `where: true`
  (Mtrace.Frame's Inspect), also where its code is: `function (file:line) library+0xoffset`,
  `?? library+0xoffset` without a name, `(unloaded or replaced) 0xaddress` when the library is no
  longer known. An Erlang function as Elixir writes it (`Mtrace.Test.Chain.c/1 (chain.ex:11)`,
  `:lists.map/2`), with its line where the VM tells it.
  """
  @spec label(Frame.t() | nil, keyword()) :: String.t()
  def label(frame, opts \\ [])
  def label(nil, _opts), do: "??"

  def label(%Frame{kind: :erlang, module: nil, function: nil}, _opts),
    do: "(Erlang caller unknown)"

  def label(%Frame{kind: :erlang, module: nil, function: name}, _opts), do: "JIT #{name}"

  def label(%Frame{kind: :erlang, module: m, function: f, arity: a} = frame, opts),
    do: Exception.format_mfa(m, f, a) <> source(frame, opts)

  def label(%Frame{} = f, opts) do
    where = Keyword.get(opts, :where, false)

    base =
      cond do
        f.function -> f.function
        where -> "??"
        f.library -> place(f)
        true -> "0x#{hex(f.address)}"
      end

    if where, do: "#{base}#{source(f, opts)} #{place(f)}", else: base <> source(f, opts)
  end

  defp source(%Frame{file: file, line: line}, opts) when is_binary(file) and is_integer(line),
    do: if(Keyword.get(opts, :lines, true), do: " (#{Path.basename(file)}:#{line})", else: "")

  defp source(_frame, _opts), do: ""

  defp place(%Frame{library: lib} = f) when is_binary(lib),
    do: "#{Path.basename(lib)}+0x#{hex(f.offset || 0)}"

  defp place(%Frame{unloaded: :maybe} = f), do: "(unloaded or replaced) 0x#{hex(f.address)}"
  defp place(f), do: "0x#{hex(f.address)}"

  @doc "The frame's function as the graphs name it: its name, else its label."
  @spec function(Frame.t()) :: String.t()
  def function(%Frame{kind: :native, function: name}) when is_binary(name), do: name
  def function(frame), do: label(frame, lines: false)

  @doc "The frame's library, by its file name: what the pictures colour by (Erlang: `erlang`)."
  @spec library(Frame.t() | nil) :: String.t()
  def library(%Frame{library: lib}) when is_binary(lib), do: Path.basename(lib)
  def library(%Frame{kind: :erlang}), do: "erlang"
  def library(_), do: "?"

  @doc "Lowercase hexadecimal, without 0x."
  @spec hex(non_neg_integer()) :: String.t()
  def hex(n), do: String.downcase(Integer.to_string(n, 16))

  @doc """
  A lost site (`leaks/1`) with its certainty as its outermost frame, `"definitely lost"` or
  `"possibly lost (rule, ...)"`, so that every format parts the two as memcheck's kinds do (a
  flame graph's two towers, pprof's and dot's roots); other sites as they are.
  """
  @spec certain(Mtrace.Site.t()) :: Mtrace.Site.t()
  def certain(%Mtrace.Site{certainty: nil} = site), do: site

  def certain(%Mtrace.Site{certainty: :definite} = site),
    do: %{site | stack: site.stack ++ [%Frame{function: "definitely lost"}]}

  def certain(%Mtrace.Site{certainty: :possible, rules: rules} = site),
    do: %{
      site
      | stack: site.stack ++ [%Frame{function: "possibly lost (#{Enum.join(rules || [], ", ")})"}]
    }

  @doc """
  A call tree of the sites' positive bytes, from outermost frames (roots) to the allocating
  ones: %{label, library, frame, bytes, blocks, children: [..]}, children largest first.
  """
  @spec tree([Mtrace.Site.t()]) :: map()
  def tree(sites) do
    root = %{label: "all", library: "", frame: nil, bytes: 0, blocks: 0, children: %{}}

    sites
    |> Enum.filter(&(&1.bytes > 0))
    |> Enum.reduce(root, fn site, acc -> insert(acc, Enum.reverse(site.stack), site) end)
    |> finish()
  end

  defp insert(node, frames, site) do
    node = %{node | bytes: node.bytes + site.bytes, blocks: node.blocks + site.blocks}

    case frames do
      [] ->
        node

      [frame | rest] ->
        key = label(frame)

        child =
          Map.get(node.children, key, %{
            label: key,
            library: library(frame),
            frame: frame,
            bytes: 0,
            blocks: 0,
            children: %{}
          })

        %{node | children: Map.put(node.children, key, insert(child, rest, site))}
    end
  end

  defp finish(node) do
    children = node.children |> Map.values() |> Enum.map(&finish/1)
    %{node | children: Enum.sort_by(children, &{-&1.bytes, &1.label})}
  end

  @doc "p of total as a percentage with two decimals."
  @spec percent(number(), number()) :: String.t()
  def percent(_p, total) when total == 0, do: "0.00%"
  def percent(p, total), do: :erlang.float_to_binary(100 * p / total, decimals: 2) <> "%"
end
