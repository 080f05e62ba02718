defmodule Mtrace do
  @moduledoc """
  Finds native memory leaks in a running node: the oldest live `malloc` blocks and who made them.

  Leaks in NIFs, and in the C libraries NIFs call, are invisible to `:erlang.memory/0`,
  `:instrument` and `recon_alloc`, which only see the BEAM's own allocators. mtrace sees them:
  `priv/mtrace.so` is preloaded into the node (`LD_PRELOAD`), intercepts the malloc family, and
  keeps a table of live allocations with their backtraces; this module reads that table.

      $ LD_PRELOAD=$(pwd)/priv/mtrace.so iex -S mix

      Mtrace.olds(3, true)
      #=> [{12.5, 4096, 94318112, 5123,
      #     [{"/app/priv/mtrace.so", "malloc"},
      #      {"/app/priv/my_nif.so", "buffer_new"},
      #      {"/app/priv/my_nif.so", "nif_open"}, ...]}, ...]

  A record that lives on for minutes, with a stack in your NIF, is the leak.

  In a release, copy the `case` block of mtrace's `rel/env.sh.eex` into your own
  `rel/env.sh.eex`; see the README for the environment variables (`MTRACE_SLOTS`, `MTRACE_DEPTH`,
  ...).
  """

  alias Mtrace.Nif

  @typedoc "A frame: the library's path and the function's name (`nil` when it has none)."
  @type frame :: {library :: String.t(), symbol :: String.t() | nil} | nil

  @typedoc """
  A live allocation: how long ago it was made, its requested size, its address, the time spent
  symbolizing its stack, and the stack, innermost frame first. Frame 0 is the intercepted
  function itself (`malloc`, `calloc`, ...); a `nil` frame lies in no loaded library.
  """
  @type record ::
          {age_seconds :: float(), size :: non_neg_integer(), address :: non_neg_integer(),
           ns_spent_symbolizing :: non_neg_integer(), stack :: [frame()]}

  @typedoc """
  Counters and state; see `stats/0` for each key.
  """
  @type stats :: %{atom() => non_neg_integer() | boolean() | atom()}

  @doc """
  Returns the `n` oldest live allocations, oldest first.

  The second argument is `demangle` (default `false`), or a keyword list of options:

    * `:demangle` - when `true`, C++ and Rust names are demangled (in C, by libiberty).

  Raises `ArgumentError` on a bad argument and `Mtrace.NotPreloadedError` when the node was not
  started with `priv/mtrace.so` preloaded.

  ## Examples

      Mtrace.olds(3, true)
      #=> [{61.2, 1024, 140243891453968, 8200,
      #     [{".../priv/mtrace.so", "malloc"}, {".../leaky.so", "leak_buffer"}, ...]}, ...]

      iex> Mtrace.olds(-1)
      ** (ArgumentError) Mtrace.olds/2: n must be a non-negative integer, got: -1

      iex> Mtrace.olds(1, colour: true)
      ** (ArgumentError) Mtrace.olds/2: expected true, false or [demangle: boolean], got: [colour: true]
  """
  @spec olds(non_neg_integer(), boolean() | [{:demangle, boolean()}]) :: [record()]
  def olds(n \\ 10, demangle \\ false)

  def olds(n, _demangle) when not (is_integer(n) and n >= 0) do
    raise ArgumentError, "Mtrace.olds/2: n must be a non-negative integer, got: #{inspect(n)}"
  end

  def olds(n, demangle) do
    case Nif.olds_nif(n, demangle_option(demangle)) do
      :not_preloaded -> raise Mtrace.NotPreloadedError, path: Nif.library_path()
      records -> records
    end
  end

  defp demangle_option(flag) when is_boolean(flag), do: flag

  defp demangle_option(opts) when is_list(opts) do
    case opts do
      [] -> false
      [demangle: flag] when is_boolean(flag) -> flag
      _ -> bad_demangle(opts)
    end
  end

  defp demangle_option(other), do: bad_demangle(other)

  defp bad_demangle(other) do
    raise ArgumentError,
          "Mtrace.olds/2: expected true, false or [demangle: boolean], got: #{inspect(other)}"
  end

  @doc """
  Returns the interceptor's counters, glibc's heap figures and the table's state.

    * `:malloc_cnt`, `:calloc_cnt`, `:realloc_cnt`, `:reallocarray_cnt`, `:free_cnt`,
      `:posix_memalign_cnt`, `:aligned_alloc_cnt`, `:memalign_cnt`, `:valloc_cnt`,
      `:pvalloc_cnt`, `:strdup_cnt`, `:strndup_cnt` - calls traced, per function;
      `:track_cnt`, `:untrack_cnt` - calls of the C API's `mtrace_track`/`mtrace_untrack`.
    * `:allocated_bytes`, `:used_bytes`, `:free_bytes`, `:mmap_chunks`, `:mmap_bytes` -
      glibc's `mallinfo2`: bytes malloc holds from the system (arenas and mmapped chunks), bytes
      in use, free bytes inside the arenas, mmapped chunks and their bytes.
    * `:preloaded` - whether this node's allocator is this library (when `false`, every counter
      is 0 and `olds/2` raises).
    * `:slots`, `:slots_max`, `:grown` - the table's slots now, the most it may grow to
      (`MTRACE_SLOTS_MAX`), and how many times it has grown (doubled) since it started at
      `MTRACE_SLOTS`.
    * `:lanes`, `:records`, `:depth`, `:unwind` - lanes the table is cut into (`MTRACE_LANES`),
      records held now, frames kept per stack, unwinder (`:libunwind` or `:fp`).
    * `:live_bytes`, `:live_blocks`, `:estimated` - the live heap the records stand for. Without
      sampling (`estimated: false`) the sums of the records; with it, estimates: each record of
      `s` bytes counts as `s/p` bytes and `1/p` blocks, `p` being its chance to be sampled.
    * `:sample_bytes`, `:sampled` - `MTRACE_SAMPLE`, the mean number of bytes allocated between
      two recorded allocations (0: every allocation is recorded), and how many were chosen.
      `olds/2` then lists sampled blocks only; a block of `s` bytes is sampled with probability
      `1 - exp(-s / sample_bytes)`, so blocks much larger than the interval are all seen.
    * `:dropped` - allocations not recorded because their part of the table was full, which happens
      only once it has grown to `:slots_max`.
    * `:stacks`, `:stack_bytes`, `:stacks_dropped` - distinct stacks interned, their memory, and
      allocations recorded without a stack because the stack table was full.
    * `:untraced` - calls forwarded without recording because the thread was already inside
      mtrace (the unwinder or loader allocating, a signal handler, mtrace's own NIF).
    * `:untracked_frees` - frees of blocks that had no record (dropped or untraced ones).
    * `:stale_replaced` - records replaced because their address was handed out again before
      mtrace saw it freed.

  ## Examples

      Mtrace.stats()
      #=> %{malloc_cnt: 305488, free_cnt: 308812, slots: 32768, grown: 3, records: 888,
      #     dropped: 0, ...}
  """
  @spec stats() :: stats()
  def stats, do: Nif.stats_nif()

  @doc """
  Empties the table of live allocations and returns how many records it held.

  Counters are not reset. Raises `Mtrace.NotPreloadedError` when the node was not started with
  the preload.

  ## Examples

      Mtrace.reset()
      #=> 4096
  """
  @spec reset() :: non_neg_integer()
  def reset do
    case Nif.reset_nif() do
      :not_preloaded -> raise Mtrace.NotPreloadedError, path: Nif.library_path()
      cleared -> cleared
    end
  end
end
