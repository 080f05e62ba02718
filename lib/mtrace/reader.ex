defmodule Mtrace.Reader do
  @moduledoc false
  # The readers' bodies are src/mtrace_read.erl's, which the Erlang API shares, run in the
  # recording node (Mtrace.Target: this one, or the one bin/mtrace --node works on). Here their
  # maps become Mtrace's structs, and their refusals Mtrace's exceptions.

  require Logger
  alias Mtrace.{Frame, Heap, Mark, Path, Site, Target}

  @spec olds(non_neg_integer(), keyword()) :: [Mtrace.record()]
  def olds(n, opts), do: read(:olds, [n, Map.new(opts)])

  @spec leaks(keyword()) :: {[Site.t()], map()}
  def leaks(opts) do
    {sites, info} = read(:leaks, [Map.new(opts)])
    {Enum.map(sites, &site/1), info}
  end

  @spec why(non_neg_integer(), keyword()) :: Path.t() | nil | {:error, :not_a_block}
  def why(address, opts) do
    case read(:why, [address, Map.new(opts)]) do
      %{root: _} = path -> path(path)
      answer -> answer
    end
  end

  @spec heap() :: Heap.t()
  def heap, do: struct!(Heap, read(:heap, []))

  @spec top(non_neg_integer(), keyword()) :: [Site.t()]
  def top(n, opts), do: :top |> read([n, Map.new(opts)]) |> Enum.map(&site/1)

  @spec mark() :: Mark.t()
  def mark, do: struct!(Mark, read(:mark, []))

  @spec diff(Mark.t(), keyword()) :: [Site.t()]
  def diff(%Mark{} = mark, opts) do
    {sites, reset_since} = read(:diff, [mark, Map.new(opts)])

    if reset_since,
      do:
        Logger.warning(
          "Mtrace.diff/2: Mtrace.reset/0 ran since the mark; its blocks read as freed"
        )

    Enum.map(sites, &site/1)
  end

  @spec stats() :: map()
  def stats, do: read(:stats, [])

  @spec reset() :: non_neg_integer()
  def reset, do: read(:reset, [])

  @spec attach([String.t()]) :: :ok | {:error, String.t()}
  def attach(variables), do: read(:attach, [variables])

  @spec detach() :: :ok | {:error, String.t()}
  def detach, do: read(:detach, [])

  @doc "A site of src/mtrace_sites.erl as a Mtrace.Site, its frames, paths and chain structs too."
  @spec site(map()) :: Site.t()
  def site(site) do
    struct!(Site, %{
      site
      | stack: frames(site.stack),
        paths: Enum.map(site.paths, &site/1),
        why: path(site.why)
    })
  end

  @doc "A frame of src/mtrace_sites.erl as a Mtrace.Frame."
  @spec frame(map()) :: Frame.t()
  def frame(frame), do: struct!(Frame, frame)

  defp frames(frames), do: Enum.map(frames, &frame/1)

  defp path(nil), do: nil

  defp path(%{root: root, links: links}) do
    root = if root[:frame], do: %{root | frame: frame(root.frame)}, else: root
    %Path{root: root, links: Enum.map(links, &%{&1 | stack: frames(&1.stack)})}
  end

  defp read(fun, args) do
    Target.call(:mtrace_read, fun, args)
  catch
    :error, {:mtrace, why} -> raise exception(why)
  end

  defp exception({:not_preloaded, heap_refused}),
    do: Mtrace.NotPreloadedError.exception(heap_refused: heap_refused)

  defp exception({:incomplete, reason, heap_refused}),
    do: %Mtrace.IncompleteError{reason: reason, heap_refused: heap_refused}

  defp exception({:heap, reason}), do: %Mtrace.HeapError{reason: reason}

  defp exception({:mark_of, node}),
    do: %ArgumentError{message: "Mtrace.diff/2: the mark is of #{node}, not of #{Target.node()}"}
end
