defmodule Mtrace do
  @moduledoc """
  Finds native memory leaks in a running node: the `malloc` blocks nothing points to any more,
  and who made them.

  Leaks in NIFs, and in the C libraries NIFs call, are invisible to `:erlang.memory/0`,
  `:instrument` and `recon_alloc`, which only see the BEAM's own allocators. mtrace sees them:
  `priv/mtrace.so` is preloaded into the node (`LD_PRELOAD`), intercepts the malloc family, and
  keeps a table of live allocations with their backtraces; this module reads that table.

      $ eval "$(mix mtrace.preload) iex -S mix"

      Mtrace.leaks()
      #=> [%Mtrace.Site{bytes: 4096, blocks: 1, direct_blocks: 1, oldest_age: 12.5,
      #      stack: [%Mtrace.Frame{function: "malloc", ...},
      #              %Mtrace.Frame{function: "buffer_new", library: "/app/priv/my_nif.so"}, ...]}]

  `leaks/1` marks what the program can still reach, as LeakSanitizer and valgrind do, and lists
  the rest by call site. `olds/2` lists the oldest live blocks, reachable or not.

  In a release, copy the `case` block of mtrace's `rel/env.sh.eex` into your own
  `rel/env.sh.eex`; see docs/configuration.md for the environment variables (`MTRACE_SLOTS`, `MTRACE_DEPTH`,
  ...).
  """

  alias Mtrace.{Call, Mark, Nif, Output, Reader, Site}

  @typedoc """
  A frame: the library's path and the name of the function its code is in (`nil` when it has
  none); functions inlined there are not listed (`Mtrace.Frame` has them). An Erlang function
  (`MTRACE_UNWIND=erlang`, or the first JIT frame of a NIF's stack) is
  `{:erlang, "Mod:fun/arity"}`, as the BEAM names its code (`"'Elixir.MyApp':put/3"`).
  """
  @type frame ::
          {library :: String.t(), symbol :: String.t() | nil}
          | {:erlang, name :: String.t()}
          | nil

  @typedoc """
  A live allocation: how long ago it was made, its requested size, its address, the time spent
  symbolizing its stack, and the stack, innermost frame first. Frame 0 is the intercepted
  function itself (`malloc`, `calloc`, ...); a `nil` frame lies in no loaded library (JIT code,
  or a library unloaded since the stack was recorded).
  """
  @type record ::
          {age_seconds :: float(), size :: non_neg_integer(), address :: non_neg_integer(),
           ns_spent_symbolizing :: non_neg_integer(), stack :: [frame()]}

  @typedoc """
  Counters and state; see `stats/0` for each key.
  """
  @type stats :: %{atom() => non_neg_integer() | boolean() | atom()}

  @typedoc """
  What a stack must go through: a library whose path contains `:library`, a function whose
  (demangled) name contains `:function` or matches it, an Erlang function (`"Mod"`,
  `"Mod:fun"`, `"Mod:fun/arity"`). The filters diff/2 and watch/1 take, since a mark keeps each
  stack's totals, not its blocks.
  """
  @type stack_filter ::
          {:library, String.t() | nil}
          | {:function, String.t() | Regex.t() | nil}
          | {:erlang, String.t() | nil}

  @typedoc """
  Which blocks a reader reads: an age in seconds (`:min_age`, `:max_age`), a size in bytes
  (`:min_size`), allocated after a mark (`:since`), and the stack filters.
  """
  @type block_filter ::
          {:min_age, number()}
          | {:max_age, number() | nil}
          | {:min_size, non_neg_integer()}
          | {:since, Mark.t() | nil}
          | stack_filter()

  @typedoc "Where a reader runs: other nodes (`:nodes`), each given `:timeout` milliseconds."
  @type cluster_option :: {:nodes, [node()] | nil} | {:timeout, pos_integer()}

  @typedoc "How sites are grouped: by whole stack, calling function, Erlang function or depth."
  @type group :: :stack | :function | :erlang | {:depth, pos_integer()}

  @type olds_option :: {:demangle, boolean()} | block_filter()
  @type leaks_option ::
          {:demangle, boolean()}
          | {:blocks, boolean()}
          | {:why, boolean()}
          | {:gc, boolean()}
          | {:certainty, :definite | :possible | nil}
          | block_filter()
          | cluster_option()
  @type top_option ::
          {:demangle, boolean()}
          | {:group, group()}
          | {:why, boolean()}
          | {:gc, boolean()}
          | block_filter()
          | cluster_option()
  @type diff_option ::
          {:demangle, boolean()} | {:group, group()} | stack_filter() | cluster_option()
  @type watch_option ::
          {:interval, pos_integer()}
          | {:n, pos_integer()}
          | {:count, pos_integer() | nil}
          | {:group, group()}
          | {:leaks, boolean()}
          | stack_filter()
  @type render_option :: {:threshold, number() | nil} | {:title, String.t() | nil}
  @type write_option ::
          {:what, :live | :leaks | {:diff, Mark.t()}}
          | render_option()
          | {:demangle, boolean()}
          | {:group, group()}
          | {:blocks, boolean()}
          | block_filter()
  @type attach_option ::
          {:slots | :slots_max | :lanes | :depth | :stacks | :sample | :clear,
           non_neg_integer() | nil}
          | {:unwind, :libunwind | :fp | :erlang | nil}

  @doc """
  Returns the `n` oldest live allocations, oldest first.

  The second argument is `demangle` (default `false`), or a keyword list of options:

    * `:demangle` - when `true`, C++ and Rust names are demangled (in C, by libiberty).
      Default `false`.
    * `:min_age`, `:max_age` - only blocks at least, at most, this many seconds old. Defaults
      `0` and `nil` (no limit).
    * `:min_size` - only blocks of at least this many bytes. Default `0`.
    * `:library` - only blocks whose stack passes through a library whose path contains this
      string (`"my_nif"`): one NIF's allocations without the VM's own. Default `nil` (all).
    * `:function` - only blocks with a frame whose (demangled) function name contains this
      string, or whose name as returned matches this `Regex`. A string is matched in C as the
      table is read; a `Regex` in Elixir, after every block that passes the other filters has
      been listed: slower on a large table.
    * `:erlang` - only blocks whose stack passes through this Erlang function: `"Mod"`,
      `"Mod:fun"` or `"Mod:fun/arity"`, the module as Elixir writes it (`"MyApp.Cache:put"`,
      `"lists:map/2"`). Erlang frames are there with `MTRACE_UNWIND=erlang` in a node started
      with `+JPperf map`. Default `nil`.
    * `:since` - only blocks allocated after this `Mtrace.mark/0`.

  The filters are applied before `n` is counted.

  Raises `ArgumentError` on a bad argument and `Mtrace.NotPreloadedError` when the node was not
  started with `priv/mtrace.so` preloaded.

  ## Examples

      Mtrace.olds(3, true)
      #=> [{61.2, 1024, 140243891453968, 8200,
      #     [{".../priv/mtrace.so", "malloc"}, {".../leaky.so", "leak_buffer"}, ...]}, ...]

      Mtrace.olds(10, library: "leaky", min_age: 5)

      iex> Mtrace.olds(-1)
      ** (ArgumentError) Mtrace.olds/2: n must be a non-negative integer, got: -1

      iex> Mtrace.olds(1, colour: true)
      ** (ArgumentError) Mtrace.olds/2: unknown option :colour; the options are :demangle, :min_age, :max_age, :min_size, :library, :function, :erlang, :since
  """
  @spec olds(non_neg_integer(), boolean() | [olds_option()]) :: [record()]
  def olds(n \\ 10, opts \\ false), do: Call.olds(n, opts)

  @doc """
  Returns the live blocks that the program can no longer reach, by call site, largest first.

  A block is lost when no pointer to it, or into it, is left anywhere the program can look:
  the data of its libraries, thread stacks and registers, the VM's own memory (process heaps,
  ETS), or another block that is itself reachable. To find out, mtrace stops the node's other
  threads for a moment (`leaks_info/1` says how long: `pause_ns`), copies its table of
  live blocks, and marks everything reachable from those roots, reading memory as
  LeakSanitizer and the Boehm collector do (a conservative mark: any word that looks like a
  pointer counts). What is left unmarked is lost: `direct_blocks` are lost blocks nothing
  else points to, `indirect_blocks` those only other lost blocks point to (the nodes of a lost
  list behind its head).

  Blocks, resources and binaries made through the NIF API (`enif_alloc`,
  `enif_alloc_resource`, `enif_alloc_binary`) are seen in every node, preloaded or attached,
  with the VM's default flags: the words through which NIF libraries call those functions are
  rewritten, a resource's record goes when the VM destroys it, and a binary's when the NIF
  releases it or makes it a term. In an attached node, a resource type opened before the attach
  is wrapped at its first resource since, in the VM's own struct of the type (OTP 25 to 27); the
  resources of a type that could not be are counted, not recorded. `stats/0` says what is seen and how (`nif_alloc_visible`,
  `resources_visible`, `resources_unseen`).

  ## Options

    * `:min_age` - seconds a block must have lived; younger ones may be in flight (just
      allocated, not stored yet). Default `1`.
    * `:max_age` - at most this many seconds old. Default `nil` (no limit).
    * `:min_size` - only blocks of at least this many bytes. Default `0`.
    * `:since` - only blocks allocated after this `Mtrace.mark/0`: what was lost since.
    * `:library` - only sites whose stack passes through a library whose path contains this
      string. Default `nil` (all).
    * `:function` - only sites with a frame whose function name contains this string, or
      matches this `Regex`. Default `nil`.
    * `:erlang` - only sites whose stack passes through this Erlang function, as in `olds/2`.
    * `:blocks` - when `true`, one `Mtrace.Site` per block, with its `address`. Default `false`.
    * `:why` - when `true`, each site's `why` is the chain that leads to its oldest indirectly
      lost block, or its oldest block when all are direct (a `Mtrace.Path` whose root is
      `%{kind: :lost}`): from the lost block nothing points to (a direct one), through the lost
      blocks that hold the next, to it. A lost list's nodes say
      which head lost them. `nil` for blocks without a record; with `blocks: true`, only the
      site of the block a chain ends at has it. Default `false`.
    * `:certainty` - `:definite` for the sites no word of reachable memory points into at all,
      `:possible` for those a word that a rule of the mark discounted points into (see
      `Mtrace.Site`'s `:certainty` and `docs/rules.md`); `nil` for both, definite ones first.
      Default `nil`.
    * `:demangle` - C++ and Rust names demangled. Default `true`.
    * `:gc` - when `true`, every process is garbage-collected first (as `recon:bin_leak/1`
      does), each on its own scheduler: the dead terms a process heap keeps until its next
      collection (references to binaries, resources and the VM's own trap states, freed or
      not) then keep nothing. `false` on a node where collecting every process at once costs
      too much; a dead term may then keep a lost block until its process collects. Default
      `true`.
    * `:nodes`, `:timeout` - as in `top/2`: each node's answer, in a map.

  Works in every node: the mark walks glibc's heap (`heap/0`), so blocks mtrace has no record of
  (not sampled under `MTRACE_SAMPLE`, dropped, forgotten by `reset/0`, allocated before the
  preload, or every block of a node started without it) are blocks of the mark too. Such a lost
  block comes back in a site with `stack: []`, `oldest_age: nil` and `contents` saying what it
  holds (its C++ class, its text, or its size), grouped by usable size; a block's size is then
  its usable size. The filters that need a stack, an age or a mark (`:library`, `:function`,
  `:erlang`, `:max_age`, `:since`) leave such blocks out.

  Raises `Mtrace.IncompleteError` only where the walk is refused and some live blocks have no
  record; `Mtrace.NotPreloadedError` where the walk is refused in a node without the preload;
  `ArgumentError` on a bad option.

  ## Examples

      Mtrace.leaks(library: "my_nif")
      #=> [%Mtrace.Site{bytes: 3000, blocks: 3, direct_blocks: 1, indirect_blocks: 2,
      #      oldest_age: 8.2, stack: [%Mtrace.Frame{function: "malloc"}, ...]}]

      iex> Mtrace.leaks(min_age: -1)
      ** (ArgumentError) Mtrace.leaks/1: min_age must be a number of seconds, 0 or more, got: -1
  """
  @spec leaks([leaks_option()]) :: [Site.t()] | %{node() => [Site.t()] | {:error, term()}}
  def leaks(opts \\ []), do: Call.leaks(opts)

  @doc """
  `leaks/1`, with what the mark did: a map of `:threads` (other threads), `:threads_stopped`,
  `:pause_ns` (how long they were stopped), `:root_bytes` and `:block_bytes` (memory read),
  `:unreadable_bytes`, `:vm_free_bytes` (the bytes of free blocks in the VM's own carriers, and
  of the single-block carriers it let go of and keeps mapped for reuse, not read: stale words of
  what the VM freed), `:process_free_bytes` (the bytes of Erlang process
  heaps between their heap top and their stack, and of old heaps above their top, not read: stale
  words of earlier heaps), `:id_list_bytes` (the bytes of the process and port tables' lists of
  free ids, not read: 32-bit numbers, two of which can read as an address), `:fix_list_bytes`
  and `:delayed_free_bytes` (the bytes of blocks the VM's allocators hold freed, not read:
  `fix_alloc`'s free lists of fixed-size structs, and the blocks queued to the allocator
  instance that made them by a thread that freed them), `:float_register_bytes` (the JIT's float
  registers on each scheduler's stack, not read: doubles, and where unused, what the thread's
  start left there), `:processes` and
  `:processes_read_whole` (the processes whose heaps
  were read whole, as they were running; both 0 where the VM's process layout could not be
  learnt), `:live_blocks`, `:reachable_blocks` and
  `:reachable_bytes`;
  `:heap_walked` (whether glibc's heap was walked) and `:heap_refused` (why not, or `nil`),
  `:unrecorded_blocks` (live blocks known from the walk alone), `:missed_frees` (records whose
  block the walk found free, taken out of the table), `:mmapped_missing` (mmapped chunks glibc
  counts that the walk did not find: pointers held only in them are not seen) and `:bad_chunks`
  (chunks or free lists the walk could not validate, as `heap/0` counts them: a thread's tcache
  among them leaves its free chunks to look like lost blocks); `:rules` (a map of each rule of
  the mark, as `docs/rules.md` names it, to the words it discounted) and `:otp` (the OTP release
  whose layouts the rules took, `0` where none: a process that is no BEAM, or a release the
  rules do not know).

  ## Examples

      {sites, %{pause_ns: pause}} = Mtrace.leaks_info(min_age: 0)
  """
  @spec leaks_info([leaks_option()]) :: {[Site.t()], map()}
  def leaks_info(opts \\ []), do: Call.leaks_info(opts)

  @doc """
  Why the live block at `address` (or the one holding it) is kept: the shortest chain of
  pointers from a root to it, as a `Mtrace.Path`, or `nil` when the block is lost definitely. A
  possibly lost block (`Mtrace.Site`'s `:certainty`) answers the word a rule discounted that
  points to it (a path whose root is `kind: :discounted`, with the rule).

  The mark of `leaks/1` is made again, as a breadth-first search that notes, for each block it
  reaches, what pointed to it first: a library's static data (named by its variable), a thread's
  stack (with the function whose frame holds the word), thread-local storage or registers (each
  thread by its id and name), the VM's memory, or another block (with the offset of the pointer
  in it).
  The threads are stopped as for `leaks/1`, for the same time (`leaks_info/1`'s `:pause_ns`).
  This answers "this site keeps growing, but is not lost: who holds it?", and "why is this block
  that I expected lost not reported?" (a stale word, whose place the root says).

  A block a scan has found lost stays lost (see `Mtrace.Site`'s `:scans`): `nil`, whatever
  points to it now. Blocks without a record (see `leaks/1`) have `stack: []`. The caller holds
  `address` itself (an integer on its process's heap, copies in the calling thread's frames), and
  such a word would be the shortest chain to any block: a word equal to `address` is not counted
  in the VM's anonymous memory nor in the calling thread's stack and registers (it is in a
  library's data, another thread's stack and in blocks). A block that only such a word keeps is
  answered `nil`.

  Returns `{:error, :not_a_block}` when no live block holds `address`. Raises `ArgumentError`
  when `address` is not a non-negative integer or an option is bad; `Mtrace.IncompleteError`
  and `Mtrace.NotPreloadedError` as `leaks/1` does.

  ## Options

    * `:demangle` - C++ and Rust names demangled. Default `true`.
    * `:gc` - every process garbage-collected first, as for `leaks/1`. Default `true`.

  ## Examples

      [{_age, _size, address, _ns, _stack}] = Mtrace.olds(1)
      Mtrace.why(address)
      #=> #Mtrace.Path<static my_nif.so:cache+8 -> 0x55D0C3A1F2A0 (4096 B cache_put (cache.c:31))>

      iex> Mtrace.why(:nowhere)
      ** (ArgumentError) Mtrace.why/2: address must be a non-negative integer, got: :nowhere
  """
  @spec why(non_neg_integer(), [{:demangle, boolean()} | {:gc, boolean()}]) ::
          Mtrace.Path.t() | nil | {:error, :not_a_block}
  def why(address, opts \\ []), do: Call.why(address, opts)

  @doc """
  A census of glibc's heap: every block malloc holds, with or without a record, and its free
  memory, as a walk of malloc's own structures sees it (`Mtrace.Heap`).

  Works in every node that runs on glibc 2.35 to 2.41, preloaded or not: the other threads are
  stopped for the walk (`:pause_ns`), as for `leaks/1`. Raises `Mtrace.HeapError` when the walk
  is refused (a glibc whose layout mtrace has not checked, or structures that do not validate),
  with the reason.

  ## Examples

      %Mtrace.Heap{blocks: blocks, recorded_blocks: recorded} = Mtrace.heap()
      # blocks - recorded: blocks mtrace has no stack for
  """
  @spec heap() :: Mtrace.Heap.t()
  def heap, do: Reader.heap()

  @doc """
  Returns the `n` call sites that hold the most live memory now, largest first.

  Every live block counts, reachable or not (`leaks/1` tells them apart).

  ## Options

    * `:group` - `:stack` (identical stacks, the default), `{:depth, k}` (stacks whose first
      `k` frames are the same), `:function` (the allocating function, with its distinct call
      paths in the site's `paths`: heaptrack's view), or `:erlang` (the nearest Erlang function
      on the stack, with its paths: the site's stack is the intercepted function and that
      Erlang frame; a frame with `module: nil` when the stack has none, as on a dirty
      scheduler). The allocating function is the one that called the intercepted one; with
      `:library`, the first function in that library, so that a NIF's own function is named
      rather than `operator new` or the VM's `erts_sys_alloc` (`enif_alloc`). Erlang frames need
      `MTRACE_UNWIND=erlang` and a node started with `+JPperf map` (`stats/0`'s
      `:erlang_frames`).
    * `:min_age`, `:max_age`, `:min_size`, `:library`, `:function`, `:erlang`, `:since` - as in
      `olds/2` (`:function` also takes a `Regex`).
    * `:demangle` - default `true`.
    * `:why` - when `true`, each site's `why` says what keeps its oldest reachable block (a
      `Mtrace.Path`, as `why/2` answers): the answer to "this site keeps growing but is not
      lost: who holds it?". One mark for all the sites, which stops the threads as `leaks/1`
      does. Default `false`.
    * `:gc` - with `why: true`, every process garbage-collected first, as for `leaks/1`, so
      that no chain runs through a term a process has dropped. Default `true`.
    * `:nodes` - ask these nodes over distribution (this one too, when listed): the answer is
      a map of each node to its result or to `{:error, reason}`, `reason` being
      `:not_preloaded`, `:no_mtrace` (mtrace is not loaded there), `:timeout`, `:noconnection`
      or `{:exception, e}`. Default `nil` (this node only).
    * `:timeout` - milliseconds for all the nodes' answers. Default `15_000`.

  ## Examples

      Mtrace.top(5, library: "my_nif", group: :function)
      #=> [%Mtrace.Site{bytes: 40960, blocks: 10, stack: [..., %Mtrace.Frame{function: "cache_put"}],
      #      paths: [%Mtrace.Site{...}, ...]}, ...]

      [%Mtrace.Site{why: path} | _] = Mtrace.top(1, why: true)
      path
      #=> #Mtrace.Path<static my_nif.so:cache+8 -> 0x55D0C3A1F2A0 (4096 B cache_put (cache.c:31))>

      Mtrace.top(5, group: :erlang)
      #=> [%Mtrace.Site{bytes: 40960, blocks: 10,
      #      stack: [#Mtrace.Frame<malloc ...>, #Mtrace.Frame<MyApp.Cache.put/3 (Erlang)>], ...}]

      iex> Mtrace.top(3, group: :line)
      ** (ArgumentError) Mtrace.top/2: group must be :stack, :function, :erlang or {:depth, k} with k > 0, got: :line
  """
  @spec top(non_neg_integer(), [top_option()]) ::
          [Site.t()] | %{node() => [Site.t()] | {:error, term()}}
  def top(n \\ 10, opts \\ []), do: Call.top(n, opts)

  @doc """
  Takes a baseline of the live heap: a `Mtrace.Mark` to give to `diff/2`, or as `since:` to the
  readers. Marks are plain terms; they survive `reset/0` (a diff across one says so).

  Blocks are stamped by the coarse monotonic clock (a tick of about 4 ms): `mark/0` returns
  after the tick of the mark has passed, so that what the caller allocates next counts as after
  it. What other threads allocate in that tick counts as before it.

  ## Examples

      mark = Mtrace.mark()
      run_the_workload()
      Mtrace.diff(mark, library: "my_nif")
  """
  @spec mark([cluster_option()]) :: Mark.t() | %{node() => Mark.t() | {:error, term()}}
  def mark(opts \\ []), do: Call.mark(opts)

  @doc """
  Returns, per call site, how the live heap changed since `mark`: what was allocated since and
  is still live (`allocated_*`), what was live at the mark and has been freed since (`freed_*`),
  and the net (`bytes`, `blocks`), largest growth first. Sites that did not change are left out.
  Two marks around a workload show only its growth.

  Takes the options of `top/2` that say which stacks to show: `:group`, `:library`, `:function`,
  `:erlang`, `:demangle`, `:nodes` and `:timeout`. A mark keeps each stack's totals, not its
  blocks, so a filter on a block's size or age (`:min_size`, `:min_age`, `:max_age`) would
  count the blocks it leaves out as freed: `diff/2` refuses them, and `:since`, with
  `ArgumentError`. A diff across a `reset/0` logs a warning: the blocks live at the reset lost
  their records, and read as freed.

  ## Examples

      Mtrace.diff(mark, library: "my_nif")
      #=> [%Mtrace.Site{bytes: 3000, blocks: 3, allocated_bytes: 3000, freed_bytes: 0, ...}]
  """
  @spec diff(Mark.t() | %{node() => Mark.t()}, [diff_option()]) ::
          [Site.t()] | %{node() => [Site.t()] | {:error, term()}}
  def diff(mark, opts \\ []), do: Call.diff(mark, opts)

  @doc """
  Writes sites to `path` in a format that people's own tools open, and returns `:ok` or
  `{:error, reason}` (the file could not be written).

  Formats:

    * `:html` - a flame graph in one self-contained HTML file: open it in a browser; click to
      zoom, search to highlight, hover for bytes, blocks, share and file:line; colours by library.
    * `:folded` - folded stacks (`frame;frame;frame bytes`, outermost first), for
      `flamegraph.pl`, `inferno-flamegraph` or speedscope.
    * `:pprof` - a gzipped `profile.proto` (`inuse_space`, `inuse_objects`), for `pprof -http`
      and Grafana Pyroscope.
    * `:dot` - the caller graph for Graphviz (`dot -Tsvg`), nodes weighted by live bytes.
    * `:json` - gprof2dot's JSON input (memtrail's format): `gprof2dot -f json`.
    * `:tree` - a text tree of live bytes by call path, with shares, for a terminal.

  Lost sites (`what: :leaks`) take their certainty as their outermost frame, `definitely lost`
  or `possibly lost (rule)`, so that each format parts the two kinds.

  ## Options

    * `:what` - `:live` (every live block, by `top/2`; the default), `:leaks` (`leaks/1`), or
      `{:diff, mark}` (`diff/2`, the growth since the mark).
    * `:threshold` - `:tree` and `:dot`: branches under this percentage of the total fold
      (defaults 1.0 and 0.5).
    * `:title` - `:html`: the page's title.
    * the filters of the reader `:what` names (`:library`, `:function`, `:min_age`, ...), but
      `:nodes`: one file holds one node's sites, so render each node's answer of
      `top(n, nodes: ...)` instead.

  ## Examples

      Mtrace.write("leak.html", :html, what: :leaks, library: "my_nif")
      #=> :ok

      iex> Mtrace.write("leak.html", :html, nodes: [node()])
      ** (ArgumentError) Mtrace.write/3: nodes: is not taken: one file holds one node's sites; render/3 each node's list of the map top(n, nodes: ...) returns
  """
  @spec write(Path.t(), atom(), [write_option()]) :: :ok | {:error, File.posix()}
  def write(path, format, opts \\ []), do: Output.write(path, format, opts)

  @doc """
  Sites (from `top/2`, `leaks/1` or `diff/2`) in one of the formats of `write/3`, as iodata.

  ## Examples

      Mtrace.top(20) |> Mtrace.render(:folded) |> IO.puts()

      iex> Mtrace.render(%{node() => []}, :folded)
      ** (ArgumentError) Mtrace.render/3: expected a list of sites, got a map: with nodes:, a reader answers each node's sites in a map; render each node's list
  """
  @spec render([Site.t()], atom(), [render_option()]) :: iodata()
  def render(sites, format, opts \\ []), do: Output.render(sites, format, opts)

  @doc """
  The file this node's NIF loads, `priv/mtrace.so` of the mtrace application: the file to
  preload (`LD_PRELOAD`), since only the very same file shares its table with the NIF.
  `mix mtrace.preload` prints it.

  ## Examples

      Mtrace.library_path()
      #=> "/app/_build/dev/lib/mtrace/priv/mtrace.so"
  """
  @spec library_path() :: Path.t()
  def library_path, do: Nif.library_path()

  @doc """
  Starts a `Mtrace.Watch` (not linked to the caller), which logs the sites that grew most every
  `interval`, until `unwatch/0` or `count:` reports. Takes the options of `Mtrace.Watch`.

  ## Examples

      Mtrace.watch(library: "my_nif", interval: 5_000, count: 12)
      #=> {:ok, #PID<0.321.0>}
  """
  @spec watch([watch_option()]) :: GenServer.on_start()
  def watch(opts \\ []), do: Call.watch(opts)

  @doc "Stops the watch `watch/1` started; `:ok`, or `{:error, :not_watching}`."
  @spec unwatch() :: :ok | {:error, :not_watching}
  def unwatch, do: Call.unwatch()

  @doc """
  Returns the interceptor's counters, glibc's heap figures and the table's state.

    * `:malloc_cnt`, `:calloc_cnt`, `:realloc_cnt`, `:reallocarray_cnt`, `:free_cnt`,
      `:posix_memalign_cnt`, `:aligned_alloc_cnt`, `:memalign_cnt`, `:valloc_cnt`,
      `:pvalloc_cnt`, `:strdup_cnt`, `:strndup_cnt`, `:enif_alloc_cnt`, `:enif_realloc_cnt`,
      `:enif_free_cnt` - calls traced, per function (the last three through the NIF API's
      hooks);
      `:track_cnt`, `:untrack_cnt` - calls of the C API's `mtrace_track`/`mtrace_untrack`.
    * `:extended_alloc_cnt`, `:extended_free_cnt`, `:extended_realloc_cnt` - calls of the
      allocator's own API where it is not glibc's (jemalloc's `mallocx`, `dallocx`, `rallocx`...,
      tcmalloc's `tc_*`, mimalloc's `mi_*`, and the operators `new` and `delete` it defines),
      recorded as the malloc family's; `xallocx` and `mi_expand`, which resize a block in
      place, count as reallocations and leave its record's size as it was.
    * `:allocated_bytes`, `:used_bytes`, `:free_bytes`, `:mmap_chunks`, `:mmap_bytes` -
      glibc's `mallinfo2`: bytes malloc holds from the system (arenas and mmapped chunks), bytes
      in use, free bytes inside the arenas, mmapped chunks and their bytes.
    * `:allocator` - the allocator the hooks forward to: `"glibc"`, or the path of the library
      that defines `malloc` after the preload (jemalloc, tcmalloc, mimalloc). With another than
      glibc's, `MTRACE_CLEAR` clears nothing and glibc's heap is not walked: leaks are found from
      the records alone.
    * `:preloaded` - whether this library is this node's `malloc` (`LD_PRELOAD`).
    * `:malloc_ahead` - the object that defines `malloc` ahead of this library in the loader's
      order (an allocator linked into the program, or a library preloaded before mtrace), to
      which every library is bound: mtrace then records nothing (`:recording` is `false`);
      `nil` when there is none.
    * `:recording` - whether this library records in this node: preloaded, or attached once
      (when `false`, every counter is 0 and `olds/2` raises).
    * `:slots`, `:slots_max`, `:grown` - the table's slots now, the most it may grow to
      (`MTRACE_SLOTS_MAX`), and how many times it has grown (doubled) since it started at
      `MTRACE_SLOTS`.
    * `:lanes`, `:records`, `:depth`, `:unwind` - lanes the table is cut into (`MTRACE_LANES`),
      records held now, frames kept per stack, unwinder (`:libunwind`, `:fp` or `:erlang`).
    * `:live_bytes`, `:live_blocks`, `:estimated` - the live heap the records stand for. Without
      sampling (`estimated: false`) the sums of the records; with it, estimates: each record of
      `s` bytes counts as `s/p` bytes and `1/p` blocks, `p` being its chance to be sampled.
    * `:sample_bytes`, `:sampled` - `MTRACE_SAMPLE`, the mean number of bytes allocated between
      two recorded allocations (0: every allocation is recorded), and how many were chosen.
      `olds/2` then lists sampled blocks only; a block of `s` bytes is sampled with probability
      `1 - exp(-s / sample_bytes)`, so blocks much larger than the interval are all seen.
    * `:clear_bytes` - `MTRACE_CLEAR`: the most bytes of each new block zeroed before the program
      has it, so that what its chunk held before reads to `leaks/1` as no pointer (0: none).
    * `:dropped` - allocations not recorded because their part of the table was full, which happens
      only once it has grown to `:slots_max`.
    * `:stacks`, `:stack_bytes`, `:stacks_dropped` - distinct stacks interned, their memory, and
      allocations recorded without a stack because the stack table was full.
    * `:untraced` - calls forwarded without recording because the thread was already inside
      mtrace (the unwinder or loader allocating, a signal handler, mtrace's own NIF).
    * `:untracked_frees` - frees of blocks that had no record (dropped or untraced ones).
    * `:nif_alloc_visible` - how `enif_alloc`, `enif_realloc` and `enif_free` are seen:
      `:hooks` (the words through which NIF libraries call them are rewritten, in a preloaded
      or attached node: the blocks are recorded wherever the VM keeps them), `:vm_flags` (the
      node runs with `+MRe false`, and its `driver_alloc` hands them to `malloc`) or `false`.
    * `:resources_visible` - how resources are seen: `:hooks` (the resource types opened
      through the rewritten words have their destructors wrapped, so each resource's record goes
      when the VM destroys it), `:vm_flags` (`+MBe false`: the VM's `binary_alloc` hands them,
      and binaries, to `malloc`) or `false` (they come from the VM's own carriers, and a NIF
      that leaks them shows nothing).
    * `:resource_types_wrapped`, `:resource_types_unwrapped`, `:resources_unseen`,
      `:resource_header_bytes` - the resource types whose destructor the hooks wrap (at most
      64: opened through the hooks, or opened before them and wrapped at their first resource
      since), those opened once every slot was taken, the resources not recorded (of a type
      that could not be wrapped: a release whose layout mtrace does not know, a type in an
      upgrade), and the bytes of the VM's own before a resource's data, learnt from the first one.
    * `:nif_api_hooked`, `:nif_api_words` - whether the NIF API's hooks are in (the words of
      every NIF library loaded, and of each one loaded later, rewritten), and how many words
      name them now.
    * `:enif_alloc_resource_cnt`, `:enif_open_resource_type_cnt`,
      `:enif_open_resource_type_x_cnt`, `:enif_init_resource_type_cnt`, `:resource_dtor_cnt` -
      the NIF API's resource calls made through the hooks, and the resources the VM destroyed
      (their types' destructors, as the hooks wrap them).
    * `:enif_alloc_binary_cnt`, `:enif_realloc_binary_cnt`, `:enif_release_binary_cnt`,
      `:enif_make_binary_cnt`, `:enif_ioq_enq_binary_cnt` - the NIF API's binary calls made
      through the hooks: a binary a NIF allocates is recorded until it is released, made a term
      or given to an I/O queue (the VM's from then on).
    * `:stale_replaced` - records replaced because their address was handed out again before
      mtrace saw it freed (a free it did not see: one made before it started, or by a path
      that bypasses the malloc family's symbols).
    * `:missed_frees` - records removed because `leaks/1`'s walk of glibc's heap found their
      block free: frees mtrace did not see (a path that calls glibc's own `__libc_free`, or a
      free made while a thread was inside mtrace's own code).
    * `:own_maps_unremembered` - mappings of mtrace's own memory made after its list of them
      was full (256): `leaks/1` reads them as roots, so the block addresses they hold (table
      and snapshot copies) may keep lost blocks reachable.
    * `:resets` - how many times `reset/0` has run: a mark taken before one cannot be trusted
      by `diff/2`, and `leaks/1` refuses after one.
    * `:attach` - how mtrace records in this node: `:preloaded` (`LD_PRELOAD`), `:attached`
      (`attach/1`, not detached since), `:detached` (attached once, detached since: the records
      stay, frees are no longer seen) or `:none`.
    * `:attached_at`, `:attaches` - when the last `attach/1` ran (Unix seconds, `nil` if never)
      and how many times it has succeeded.
    * `:attach_words`, `:attach_objects`, `:attach_skipped` - while attached, the words
      rewritten to mtrace's functions (GOT and PLT slots, and data words relocated to the malloc
      family) and the loaded objects that have them; and the words that named a hooked function
      but were left alone at the last attach (another function than glibc's in them, or not in
      a writable or RELRO page): calls through them are not seen.
    * `:attach_copies` - words of the loaded objects' writable data that still held one of
      glibc's malloc-family functions after the last attach's rewrite: copies no relocation
      names (an allocator table the program filled at start-up) and the loader's own (left
      alone: it calls them with its lock held). Allocations through them are not recorded; their
      blocks are known to `leaks/1` from glibc's heap, without a stack.
    * `:attach_pause_us` - how long the last attach spent rewriting words, in microseconds.
    * `:erlang_frames` - whether stacks go on through the Erlang functions that called a NIF:
      `:on` (`MTRACE_UNWIND=erlang` in a node started with `+JPperf map`); `:no_perf_map` (the
      mode is on, but the node was started without `+JPperf map`: the JIT keeps no frame
      pointers, so a NIF's stack ends at its first JIT frame (`global::call_nif_shared`), and
      `group: :erlang` and `erlang:` find nothing); `:no_jit` (an emulator without the JIT);
      `:off` (another unwinding mode).

  With `nodes:` and `timeout:`, as in `top/2`, each node's map; a node without the preload
  answers `{:error, :not_preloaded}`, as it does to the other readers.

  ## Examples

      Mtrace.stats()
      #=> %{malloc_cnt: 305488, free_cnt: 308812, slots: 32768, grown: 3, records: 888,
      #     dropped: 0, ...}
  """
  @spec stats([cluster_option()]) :: stats() | %{node() => stats() | {:error, term()}}
  def stats(opts \\ []), do: Call.stats(opts)

  @doc """
  Empties the table of live allocations and returns how many records it held.

  Counters are not reset. The blocks live then have no record any more, so `leaks/1` refuses
  to run afterwards (`Mtrace.IncompleteError`). Raises `Mtrace.NotPreloadedError` when the node was not started with
  the preload.

  ## Examples

      Mtrace.reset()
      #=> 4096
  """
  @spec reset() :: non_neg_integer()
  def reset, do: Reader.reset()

  @doc """
  Starts recording in this running node, which was started without the preload: no restart.

  mtrace redirects the malloc family of every object loaded in the process (the VM, its NIFs and
  drivers, libc's own calls) to its hooks, by rewriting the words that hold those functions'
  addresses (see `docs/guarantees.md`), and does the same for objects loaded later with
  `dlopen` (a NIF loaded after the attach is covered). From then on the readers (`top/2`,
  `olds/2`, `stats/0`, `mark/1`, `diff/2`) work as in a preloaded node. The blocks allocated
  before the attach have no record: `leaks/1` refuses (`Mtrace.IncompleteError`, reason
  `:attached`), and their frees count as `:untracked_frees`. An address of `malloc` that the
  program copied into its own memory before the attach is not seen through.

  Where the node's `malloc` is another allocator's (jemalloc preloaded, say), the hooks forward
  to it, and its own API is recorded too.

  Returns `:ok`, or `{:error, reason}` with a sentence saying why and what to do: mtrace is
  preloaded (it records already), already attached, `malloc` is the executable's own or another
  copy of mtrace's, or options were given to a second attach.

  ## Options

  The recording's `MTRACE_*` variables (see `bin/mtrace --help`), which are otherwise read
  from the node's environment at the first attach; they cannot change after it:

    * `:slots`, `:slots_max`, `:lanes` - `MTRACE_SLOTS`, `MTRACE_SLOTS_MAX`, `MTRACE_LANES`.
    * `:depth`, `:stacks` - `MTRACE_DEPTH`, `MTRACE_STACKS`.
    * `:unwind` - `:libunwind`, `:fp` or `:erlang` (`MTRACE_UNWIND`).
    * `:sample` - `MTRACE_SAMPLE`, bytes between two recorded allocations.
    * `:clear` - `MTRACE_CLEAR`, the most bytes of each new block zeroed (blocks made before the
      attach keep what their chunks held).

  Reports (`MTRACE_REPORT`, `MTRACE_CSV`, ...) are for preloaded programs only.

  ## Examples

      Mtrace.attach(depth: 30)
      #=> :ok
      Mtrace.attach()
      #=> {:error, "mtrace is already attached; Mtrace.detach() first"}
  """
  @spec attach([attach_option()]) :: :ok | {:error, String.t()}
  def attach(opts \\ []), do: Call.attach(opts)

  @doc """
  Stops recording in a node that `attach/1` attached to: every rewritten word gets its old value
  back. The records stay readable until `reset/0`; frees are no longer seen, so they may stand
  for blocks freed since.

  Returns `:ok`, or `{:error, reason}` (not attached, or preloaded: a preloaded node cannot
  stop recording).

  ## Examples

      Mtrace.detach()
      #=> :ok
  """
  @spec detach() :: :ok | {:error, String.t()}
  def detach, do: Reader.detach()
end
