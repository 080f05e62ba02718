defmodule Mtrace.Reader do
  @moduledoc false
  # The readers' bodies, behind Mtrace's facade (which validates their options and sends them to
  # other nodes): each asks the recording node (Mtrace.Target: this one, or the one
  # bin/mtrace --node works on) through the NIF and its own steps, and builds the results here.

  require Logger
  alias Mtrace.{Mark, Nif, Options, Site, Sites, Target}

  @coarse_tick_ms 5

  @spec olds(non_neg_integer(), keyword()) :: [Mtrace.record()]
  def olds(n, opts) do
    # Any n past the table's size means all of it: 2^64 answers as 2^64 - 1 does.
    case opts[:function] do
      %Regex{} = pattern ->
        Nif.olds_nif(Options.no_limit(), opts[:demangle], Options.filter(opts))
        |> preloaded!()
        |> Stream.filter(fn {_, _, _, _, stack} -> Enum.any?(stack, &named?(&1, pattern)) end)
        |> Enum.take(min(n, Options.no_limit()))

      _ ->
        Nif.olds_nif(min(n, Options.no_limit()), opts[:demangle], Options.filter(opts))
        |> preloaded!()
    end
  end

  defp named?({:erlang, _name}, _pattern), do: false
  defp named?({_library, function}, pattern) when is_binary(function), do: function =~ pattern
  defp named?(_frame, _pattern), do: false

  @spec leaks(keyword()) :: {[Site.t()], map()}
  def leaks(opts) do
    prepare_mark(opts)

    {blocks, info, whys} =
      case Nif.leaks_nif(Options.filter(opts), opts[:why]) |> complete!() do
        {blocks, info} -> {blocks, info, %{}}
        {blocks, info, pairs} -> {blocks, info, Mtrace.Path.by_id(pairs, opts[:demangle])}
      end

    sites =
      blocks
      |> Mtrace.Lost.sites(whys, opts)
      |> Sites.matching_regex(opts)
      |> Sites.by_size()
      |> Sites.by_certainty(opts[:certainty])

    {sites, info}
  end

  @spec why(non_neg_integer(), keyword()) :: Mtrace.Path.t() | nil | {:error, :not_a_block}
  def why(address, opts) do
    prepare_mark(opts)

    case Nif.why_nif(address) |> complete!() do
      :not_a_block -> {:error, :not_a_block}
      path -> [path] |> Mtrace.Path.from_chains(opts[:demangle]) |> hd()
    end
  end

  # The node's own steps before a mark (src/mtrace_node.erl), in the node the mark reads.
  defp prepare_mark(opts), do: Target.call(:mtrace_node, :prepare, [opts[:gc] == true])

  @spec heap() :: Mtrace.Heap.t()
  def heap do
    case Nif.heap_nif() do
      {:ok, census} -> struct!(Mtrace.Heap, census)
      {:error, reason} -> raise Mtrace.HeapError, reason: reason
    end
  end

  @spec top(non_neg_integer(), keyword()) :: [Site.t()]
  def top(n, opts) do
    {_now, rows} = Nif.sites_nif(Options.filter(opts), Options.no_limit()) |> preloaded!()
    ids = Enum.map(rows, &elem(&1, 0))
    stacks = Sites.stacks(ids, opts[:demangle])
    whys = if opts[:why], do: whys(ids, opts), else: %{}
    estimated = estimated()

    rows
    |> Enum.map(fn {id, bytes, blocks, _, _, oldest} ->
      %Site{
        bytes: bytes,
        blocks: blocks,
        oldest_age: oldest / 1.0e9,
        stack: stacks[id],
        estimated: estimated,
        why: whys[id]
      }
    end)
    |> Sites.matching_regex(opts)
    |> Sites.group(opts[:group], opts[:library])
    |> Sites.by_size()
    |> Enum.take(n)
  end

  # By stack id, the chain that keeps the stack's oldest reachable block, from one mark.
  defp whys(ids, opts) do
    prepare_mark(opts)
    ids |> Nif.whys_nif() |> Mtrace.Path.by_id(opts[:demangle])
  end

  @spec mark() :: Mark.t()
  def mark do
    filter = Options.filter(Options.validate!(:top, "Mtrace.mark/1", []))
    {now, rows} = Nif.sites_nif(filter, Options.no_limit()) |> preloaded!()

    mark = %Mark{
      node: Target.node(),
      time_ns: now,
      resets: Nif.stats_nif().resets,
      sites: Map.new(rows, fn {id, bytes, blocks, _, _, _} -> {id, {bytes, blocks}} end)
    }

    # Records are stamped by a coarse clock, which moves every few milliseconds: what the caller
    # allocates next must fall after the mark's tick.
    Process.sleep(@coarse_tick_ms)
    mark
  end

  @spec diff(Mark.t(), keyword()) :: [Site.t()]
  def diff(%Mark{} = mark, opts) do
    if mark.node != Target.node(),
      do:
        raise(
          ArgumentError,
          "Mtrace.diff/2: the mark is of #{mark.node}, not of #{Target.node()}"
        )

    {_now, rows} = Nif.sites_nif(Options.filter(opts), mark.time_ns) |> preloaded!()
    resets = Nif.stats_nif().resets

    if resets != mark.resets,
      do:
        Logger.warning(
          "Mtrace.diff/2: Mtrace.reset/0 ran since the mark; its blocks read as freed"
        )

    now = Map.new(rows, fn {id, b0, n0, b1, n1, oldest} -> {id, {b0, n0, b1, n1, oldest}} end)
    # now's rows passed the filter in C; the mark's stacks that hold nothing now pass it here.
    ids =
      Nif.stacks_matching_nif(
        Options.filter(opts),
        Enum.uniq(Map.keys(now) ++ Map.keys(mark.sites))
      )

    stacks = Sites.stacks(ids, opts[:demangle])
    estimated = estimated()

    ids
    |> Enum.map(fn id ->
      {b0, n0, b1, n1, oldest} = Map.get(now, id, {0, 0, 0, 0, 0})
      {bm, nm} = Map.get(mark.sites, id, {0, 0})
      # The net is exact; a block allocated in the mark's own tick counts as live at the mark
      # (the records' clock cannot tell), so the parts are made to add up to it.
      {net_bytes, net_blocks} = {b0 + b1 - bm, n0 + n1 - nm}
      {fb, fnum} = {max(bm - b0, 0), max(nm - n0, 0)}

      %Site{
        bytes: net_bytes,
        blocks: net_blocks,
        allocated_bytes: net_bytes + fb,
        allocated_blocks: net_blocks + fnum,
        freed_bytes: fb,
        freed_blocks: fnum,
        oldest_age: oldest / 1.0e9,
        stack: stacks[id],
        estimated: estimated
      }
    end)
    |> Enum.reject(&(&1.allocated_blocks == 0 and &1.freed_blocks == 0))
    |> Sites.matching_regex(opts)
    |> Sites.group(opts[:group], opts[:library])
    |> Sites.by_size()
  end

  # true when the node samples: the sites' figures are then estimates (nil: exact).
  defp estimated, do: if(Nif.stats_nif().estimated, do: true)

  defp preloaded!(:not_preloaded), do: raise(Mtrace.NotPreloadedError)

  defp preloaded!({:not_preloaded, heap_refused}),
    do: raise(Mtrace.NotPreloadedError, heap_refused: heap_refused)

  defp preloaded!(result), do: result

  # The answer of a reader that calls blocks lost (leaks/1, why/2), or the lost rule's refusal
  # (c_src/nif/nif.c's refusal()) raised.
  defp complete!({:error, reason, heap_refused}),
    do: raise(Mtrace.IncompleteError, reason: reason, heap_refused: heap_refused)

  defp complete!(result), do: preloaded!(result)

  @spec stats() :: map()
  def stats, do: Target.call(:mtrace_node, :stats, [])

  @spec reset() :: non_neg_integer()
  def reset, do: Nif.reset_nif() |> preloaded!()

  @spec attach([String.t()]) :: :ok | {:error, String.t()}
  def attach(variables), do: Nif.attach_nif(variables)

  @spec detach() :: :ok | {:error, String.t()}
  def detach, do: Nif.detach_nif()
end
