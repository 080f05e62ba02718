defmodule Mtrace.Call do
  @moduledoc false
  # Mtrace's public functions, from the arguments as the caller gave them: positional arguments
  # checked, options validated once (Mtrace.Options, in the name of the public function), then
  # read in the recording node (Mtrace.Reader) or, with nodes:, on each node (Mtrace.Cluster).
  # Mtrace itself holds only their documentation, specs and a delegation each.

  alias Mtrace.{Cluster, Mark, Options, Reader}

  @spec olds(term(), term()) :: [Mtrace.record()]
  def olds(n, opts) do
    non_negative!("Mtrace.olds/2", "n", n)
    opts = if is_boolean(opts), do: [demangle: opts], else: opts
    Reader.olds(n, Options.validate!(:olds, "Mtrace.olds/2", opts))
  end

  @spec leaks(term()) :: [Mtrace.Site.t()] | %{node() => term()}
  def leaks(opts) do
    opts = Options.validate!(:leaks, "Mtrace.leaks/1", opts)

    here_or_across(:leaks, "Mtrace.leaks/1", opts, &[&1], fn ->
      opts |> Reader.leaks() |> elem(0)
    end)
  end

  @spec leaks_info(term()) :: {[Mtrace.Site.t()], map()}
  def leaks_info(opts) do
    opts = Options.validate!(:leaks, "Mtrace.leaks_info/1", opts)

    if opts[:nodes],
      do:
        raise(
          ArgumentError,
          "Mtrace.leaks_info/1: nodes: is for leaks/1, top/2, diff/2 and stats/1"
        )

    Reader.leaks(opts)
  end

  @spec why(term(), term()) :: Mtrace.Path.t() | nil | {:error, :not_a_block}
  def why(address, opts) do
    non_negative!("Mtrace.why/2", "address", address)
    Reader.why(address, Options.validate!(:why, "Mtrace.why/2", opts))
  end

  @spec top(term(), term()) :: [Mtrace.Site.t()] | %{node() => term()}
  def top(n, opts) do
    non_negative!("Mtrace.top/2", "n", n)
    opts = Options.validate!(:top, "Mtrace.top/2", opts)
    here_or_across(:top, "Mtrace.top/2", opts, &[n, &1], fn -> Reader.top(n, opts) end)
  end

  @spec mark(term()) :: Mark.t() | %{node() => term()}
  def mark(opts) do
    opts = Options.validate!(:mark, "Mtrace.mark/1", opts)
    here_or_across(:mark, "Mtrace.mark/1", opts, &[&1], &Reader.mark/0)
  end

  @spec diff(term(), term()) :: [Mtrace.Site.t()] | %{node() => term()}
  def diff(mark, opts) do
    opts = Options.validate!(:diff, "Mtrace.diff/2", opts)

    case {mark, opts[:nodes]} do
      {%Mark{}, nil} ->
        Reader.diff(mark, opts)

      {%{} = marks, nodes} when not is_struct(marks) and nodes != nil ->
        Cluster.across(:diff, "Mtrace.diff/2", opts, fn node, local ->
          [Map.get(marks, node), local]
        end)

      _ ->
        raise ArgumentError,
              "Mtrace.diff/2: expected a mark, or with nodes: the map that mark(nodes: ...) " <>
                "returned, got: #{inspect(mark)}"
    end
  end

  @spec stats(term()) :: map()
  def stats(opts) do
    opts = Options.validate!(:stats, "Mtrace.stats/1", opts)

    if opts[:nodes],
      do:
        :stats
        |> Cluster.across("Mtrace.stats/1", opts, fn _, local -> [local] end)
        |> Map.new(fn
          {node, %{recording: false}} -> {node, {:error, :not_preloaded}}
          answer -> answer
        end),
      else: Reader.stats()
  end

  @spec attach(term()) :: :ok | {:error, String.t()}
  def attach(opts) do
    variables = Options.validate!(:attach, "Mtrace.attach/1", opts) |> Options.variables()

    if variables != [] and Reader.stats().attach in [:attached, :detached],
      do:
        {:error,
         "the recording's options are fixed when mtrace first records in a node; " <>
           "call Mtrace.attach() without options"},
      else: Reader.attach(variables)
  end

  @spec watch(term()) :: GenServer.on_start()
  def watch(opts),
    do:
      GenServer.start(Mtrace.Watch, Options.validate!(:watch, "Mtrace.watch/1", opts),
        name: Mtrace.Watch
      )

  @spec unwatch() :: :ok | {:error, :not_watching}
  def unwatch do
    case GenServer.whereis(Mtrace.Watch) do
      nil -> {:error, :not_watching}
      pid -> GenServer.stop(pid)
    end
  end

  # The reader here, or with nodes: on each node, called there with args_of of the options
  # each node is given (this call's, less nodes: and timeout:).
  defp here_or_across(fun, name, opts, args_of, here) do
    if opts[:nodes] do
      Cluster.across(fun, name, opts, fn _node, local -> args_of.(local) end)
    else
      here.()
    end
  end

  defp non_negative!(name, arg, value) do
    unless is_integer(value) and value >= 0,
      do:
        raise(
          ArgumentError,
          "#{name}: #{arg} must be a non-negative integer, got: #{inspect(value)}"
        )
  end
end
