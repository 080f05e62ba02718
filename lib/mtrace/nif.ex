defmodule Mtrace.Nif do
  @moduledoc false
  # The NIF's functions and their types, each a call of src/mtrace_nif.erl's stub in the
  # recording node (Mtrace.Target): this one, or the one bin/mtrace --node works on. The scrubs
  # and the layout lesson are src/mtrace_node.erl's alone: they must run in the node.

  alias Mtrace.Target

  # The filter every reader passes (mtrace_options:filter/1, c_src/nif/filter.h): ages and the time
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

  @spec library_path() :: Path.t()
  def library_path, do: Path.join(:code.priv_dir(:mtrace), "mtrace.so")

  # {age in seconds, size, address, microseconds spent naming it, stack}, oldest first.
  @spec olds_nif(non_neg_integer(), boolean(), filter()) ::
          [{float(), non_neg_integer(), non_neg_integer(), non_neg_integer(), [name_frame()]}]
          | :not_preloaded
  def olds_nif(n, demangle, filter),
    do: Target.call(:mtrace_nif, :olds_nif, [n, demangle, filter])

  # {now_ns, [{stack_id, bytes_before, blocks_before, bytes_after, blocks_after, oldest_age_ns}]}
  @spec sites_nif(filter(), non_neg_integer()) ::
          {non_neg_integer(),
           [
             {non_neg_integer(), non_neg_integer(), non_neg_integer(), non_neg_integer(),
              non_neg_integer(), non_neg_integer()}
           ]}
          | :not_preloaded
  def sites_nif(filter, splitns), do: Target.call(:mtrace_nif, :sites_nif, [filter, splitns])

  # With why: true, a third element: [{stack_id, chain}] (the chain of the stack's oldest lost
  # block from its direct lost block, as why_nif/1 gives chains).
  @spec leaks_nif(filter(), boolean()) ::
          {[
             {non_neg_integer(), non_neg_integer(), non_neg_integer() | term(),
              non_neg_integer() | nil, boolean(), pos_integer() | nil}
           ], map()}
          | {[tuple()], map(), [{non_neg_integer(), term()}]}
          | refusal()
  def leaks_nif(filter, why), do: Target.call(:mtrace_nif, :leaks_nif, [filter, why])

  # The ids whose stacks pass the filter's library, function and erlang, in their order.
  @spec stacks_matching_nif(filter(), [non_neg_integer()]) :: [non_neg_integer()]
  def stacks_matching_nif(filter, stackids),
    do: Target.call(:mtrace_nif, :stacks_matching_nif, [filter, stackids])

  @spec frames_nif([non_neg_integer()], boolean()) :: [[frame_info()]]
  def frames_nif(stackids, demangle),
    do: Target.call(:mtrace_nif, :frames_nif, [stackids, demangle])

  @spec stats_nif() :: map()
  def stats_nif, do: Target.call(:mtrace_nif, :stats_nif, [])

  @spec heap_nif() :: {:ok, map()} | {:error, String.t()}
  def heap_nif, do: Target.call(:mtrace_nif, :heap_nif, [])

  @spec reset_nif() :: non_neg_integer() | :not_preloaded
  def reset_nif, do: Target.call(:mtrace_nif, :reset_nif, [])

  @spec attach_nif([String.t()]) :: :ok | {:error, String.t()}
  def attach_nif(variables), do: Target.call(:mtrace_nif, :attach_nif, [variables])

  @spec detach_nif() :: :ok | {:error, String.t()}
  def detach_nif, do: Target.call(:mtrace_nif, :detach_nif, [])

  @spec why_nif(non_neg_integer()) ::
          {tuple(),
           [
             {non_neg_integer(), non_neg_integer(), non_neg_integer() | nil,
              non_neg_integer() | nil}
           ]}
          | nil
          | :not_a_block
          | refusal()
  def why_nif(address), do: Target.call(:mtrace_nif, :why_nif, [address])

  # For each stack id, why_nif/1's chain for its oldest reachable block, or nil, from one mark.
  @spec whys_nif([non_neg_integer()]) :: [{non_neg_integer(), tuple() | nil}]
  def whys_nif(stackids), do: Target.call(:mtrace_nif, :whys_nif, [stackids])
end
