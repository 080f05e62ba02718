defmodule Mtrace.Nif do
  @moduledoc false
  # The NIF stubs. priv/mtrace.so is loaded by path, so that a node preloaded with the same file
  # gets the same library (and the same live table) back from dlopen.

  # The filter every reader passes (Mtrace.Options.filter/1, c_src/filter.h): ages and the time
  # in nanoseconds, a size, then the library, function and Erlang name, each nil when not asked.
  @type filter ::
          {non_neg_integer(), non_neg_integer(), non_neg_integer(), non_neg_integer(),
           String.t() | nil, String.t() | nil, String.t() | nil}

  # A frame of olds/2's stacks: {library path, function or nil}, {:erlang, "'Mod':fun/arity"},
  # or nil (a library unloaded since).
  @type name_frame :: {String.t(), String.t() | nil} | {:erlang, String.t()} | nil

  # A function of frames_nif/2: {address, path, name, offset, file, line, inlined, unloaded,
  # erlang}, inlined ones first.
  @type frame_info ::
          {non_neg_integer(), String.t() | nil, String.t() | nil, non_neg_integer() | nil,
           String.t() | nil, pos_integer() | nil, boolean(), boolean() | :maybe, boolean()}

  # What a reader gets when the table cannot answer (leaks_nif/2, why_nif/1): the rule's reason,
  # with the walk's refusal; or the node is not preloaded, with why.
  @type refusal :: {:error, atom(), String.t() | nil} | {:not_preloaded, String.t()}

  @on_load :load
  @spec load() :: :ok | {:error, term()}
  def load do
    :erlang.load_nif(String.to_charlist(Path.rootname(library_path())), 0)
  end

  @spec library_path() :: Path.t()
  def library_path, do: Path.join(:code.priv_dir(:mtrace), "mtrace.so")

  # {age in seconds, size, address, microseconds spent naming it, stack}, oldest first.
  @spec olds_nif(non_neg_integer(), boolean(), filter()) ::
          [{float(), non_neg_integer(), non_neg_integer(), non_neg_integer(), [name_frame()]}]
          | :not_preloaded
  def olds_nif(_n, _demangle, _filter), do: :erlang.nif_error(:not_loaded)

  # {now_ns, [{stack_id, bytes_before, blocks_before, bytes_after, blocks_after, oldest_age_ns}]}
  @spec sites_nif(filter(), non_neg_integer()) ::
          {non_neg_integer(),
           [
             {non_neg_integer(), non_neg_integer(), non_neg_integer(), non_neg_integer(),
              non_neg_integer(), non_neg_integer()}
           ]}
          | :not_preloaded
  def sites_nif(_filter, _split_ns), do: :erlang.nif_error(:not_loaded)

  # With why: true, a third element: [{stack_id, chain}] (the chain of the stack's oldest lost
  # block from its direct lost block, as why_nif/1 gives chains).
  @spec leaks_nif(filter(), boolean()) ::
          {[
             {non_neg_integer(), non_neg_integer(), non_neg_integer() | term(),
              non_neg_integer() | nil, boolean(), pos_integer() | nil}
           ], map()}
          | {[tuple()], map(), [{non_neg_integer(), term()}]}
          | refusal()
  def leaks_nif(_filter, _why), do: :erlang.nif_error(:not_loaded)

  # The ids whose stacks pass the filter's library, function and erlang, in their order.
  @spec stacks_matching_nif(filter(), [non_neg_integer()]) :: [non_neg_integer()]
  def stacks_matching_nif(_filter, _stack_ids), do: :erlang.nif_error(:not_loaded)

  @spec frames_nif([non_neg_integer()], boolean()) :: [[frame_info()]]
  def frames_nif(_stack_ids, _demangle), do: :erlang.nif_error(:not_loaded)

  # The calling scheduler's stack below this call zeroed (reach.h's mt_reach_scrub), and its float
  # registers found by the float its caller computed just before (beam_regs.h); the binary is the
  # one its caller built just before, on the same scheduler, and is not read.
  @spec scrub_nif(binary(), float()) :: :ok
  def scrub_nif(_built, _f0), do: :erlang.nif_error(:not_loaded)

  # The same on a dirty scheduler, once `n` calls of `round` are in at once (or after 100 ms):
  # n calls, one per dirty scheduler of the kind, reach each of them (nif.c).
  @spec scrub_dirty_cpu_nif(pos_integer(), pos_integer()) :: :ok
  def scrub_dirty_cpu_nif(_round, _n), do: :erlang.nif_error(:not_loaded)
  @spec scrub_dirty_io_nif(pos_integer(), pos_integer()) :: :ok
  def scrub_dirty_io_nif(_round, _n), do: :erlang.nif_error(:not_loaded)

  @spec stats_nif() :: map()
  def stats_nif, do: :erlang.nif_error(:not_loaded)

  @spec heap_nif() :: {:ok, map()} | {:error, String.t()}
  def heap_nif, do: :erlang.nif_error(:not_loaded)

  @spec reset_nif() :: non_neg_integer() | :not_preloaded
  def reset_nif, do: :erlang.nif_error(:not_loaded)

  @spec attach_nif([String.t()]) :: :ok | {:error, String.t()}
  def attach_nif(_variables), do: :erlang.nif_error(:not_loaded)

  @spec detach_nif() :: :ok | {:error, String.t()}
  def detach_nif, do: :erlang.nif_error(:not_loaded)

  @spec why_nif(non_neg_integer()) ::
          {tuple(),
           [
             {non_neg_integer(), non_neg_integer(), non_neg_integer() | nil,
              non_neg_integer() | nil}
           ]}
          | nil
          | :not_a_block
          | refusal()
  def why_nif(_address), do: :erlang.nif_error(:not_loaded)

  # For each stack id, why_nif/1's chain for its oldest reachable block, or nil, from one mark.
  @spec whys_nif([non_neg_integer()]) :: [{non_neg_integer(), tuple() | nil}]
  def whys_nif(_stack_ids), do: :erlang.nif_error(:not_loaded)

  # Teaches the mark the VM's Process layout (c_src/beam_heaps.h), from the caller and two waiting
  # processes: {pid, heap_block, heap_used, recent, stack, old_block, old_used, :normal | :high}.
  @spec heaps_learn_nif(pos_integer(), pos_integer(), [tuple()]) :: :ok | {:error, String.t()}
  def heaps_learn_nif(_limit, _port_limit, _known), do: :erlang.nif_error(:not_loaded)
end
