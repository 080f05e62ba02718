defmodule Mtrace.Heap do
  @moduledoc """
  glibc's heap as a walk of it sees it: the census `Mtrace.heap/0` returns.

    * `:glibc` - glibc's version, whose malloc layout the walk checked (2.35 to 2.41).
    * `:arenas`, `:heaps` - malloc's arenas (the main one and one per group of threads) and
      the memory ranges they hold chunks in.
    * `:blocks`, `:block_bytes` - blocks in use, and their usable bytes (what
      `malloc_usable_size/1` says: the size asked for, rounded up).
    * `:recorded_blocks`, `:recorded_bytes` - of those, the blocks mtrace has a record of
      (with a stack); the others were allocated before the preload, not sampled, dropped, or
      forgotten by `Mtrace.reset/0`, or the node runs without the preload.
    * `:free_chunks`, `:free_bytes` - free memory malloc keeps: in its bins, its fastbins, the
      threads' tcaches and the top chunks; of which `:top_bytes` in top chunks,
      `:fastbin_chunks` and `:tcache_chunks` (in `:tcaches` threads' caches).
    * `:mmapped_blocks`, `:mmapped_bytes` - blocks malloc mapped on their own (large ones).
    * `:largest_free` - the sizes of the largest free chunks, largest first (at most 10): how
      fragmented the free memory is.
    * `:by_size` - blocks in use by size class: `{at_most_bytes, blocks, bytes}` for classes of
      powers of two from 16 bytes up, smallest first.
    * `:missed_frees` - records taken out because their block is free (see `Mtrace.stats/0`).
    * `:bad_chunks` - chunks or free lists that failed validation and were not followed.
    * `:mmapped_missing` - mmapped chunks glibc counts that the walk did not find (0 in every
      node tried since the walk also looks beside glibc 2.41's thread heaps): what they hold is
      not known, and `Mtrace.leaks/1` keeps the records it cannot place rather than call them
      freed.
    * `:threads_stopped`, `:pause_ns` - the other threads were stopped for the walk, this long.
  """

  defstruct glibc: nil,
            arenas: 0,
            heaps: 0,
            blocks: 0,
            block_bytes: 0,
            recorded_blocks: 0,
            recorded_bytes: 0,
            free_chunks: 0,
            free_bytes: 0,
            top_bytes: 0,
            fastbin_chunks: 0,
            tcache_chunks: 0,
            tcaches: 0,
            mmapped_blocks: 0,
            mmapped_bytes: 0,
            largest_free: [],
            by_size: [],
            missed_frees: 0,
            bad_chunks: 0,
            mmapped_missing: 0,
            threads_stopped: 0,
            pause_ns: 0

  @type t :: %__MODULE__{
          glibc: String.t(),
          arenas: non_neg_integer(),
          heaps: non_neg_integer(),
          blocks: non_neg_integer(),
          block_bytes: non_neg_integer(),
          recorded_blocks: non_neg_integer(),
          recorded_bytes: non_neg_integer(),
          free_chunks: non_neg_integer(),
          free_bytes: non_neg_integer(),
          top_bytes: non_neg_integer(),
          fastbin_chunks: non_neg_integer(),
          tcache_chunks: non_neg_integer(),
          tcaches: non_neg_integer(),
          mmapped_blocks: non_neg_integer(),
          mmapped_bytes: non_neg_integer(),
          largest_free: [pos_integer()],
          by_size: [{pos_integer(), non_neg_integer(), non_neg_integer()}],
          missed_frees: non_neg_integer(),
          bad_chunks: non_neg_integer(),
          mmapped_missing: non_neg_integer(),
          threads_stopped: non_neg_integer(),
          pause_ns: non_neg_integer()
        }
end
