defmodule Mtrace.Path do
  @moduledoc """
  Why a live block is kept: the shortest chain of pointers from a root to it, as
  `Mtrace.why/2` finds it (Eclipse MAT's "path to GC roots", for native memory).

    * `:root` - where the first pointer lies, a map with `:kind` and, by kind:
      * `:static` - a loaded library's data (its data, bss or RELRO): `:library` (its path),
        `:name` (the variable, from the symbol tables; `nil` when none covers the word),
        `:offset` (of the word in the variable, or in the library's file without one) and
        `:address` (the word's).
      * `:stack` - a thread's stack, at or above its stack pointer: `:thread` (its Linux thread
        id), `:offset` (of the word from the stack pointer; the 128-byte red zone below it
        counts too, as a negative offset), `:address`, and `:frame`: the function whose frame
        holds the word (a `Mtrace.Frame` whose `:address` is the frame's code address: where the
        thread was stopped for the innermost frame, else the return address into it, and whose
        `:line` is that of the call), found by unwinding the stopped thread with its libraries'
        call frame information; `nil` where that unwinding stops short of the word (code in no
        library, such as the BEAM's JIT code, or a signal frame).
      * `:tls` - a thread's static thread-local storage: `:thread`, `:library` (the object whose
        TLS block holds the word, and `:offset` in that block), or `library: nil` for the
        thread's control block (glibc's `struct pthread`, which points to its dynamic TLS and
        holds `pthread_setspecific`'s first values; `:offset` from the thread pointer), and
        `:address`. An object loaded later keeps its TLS in a block of its own, reached from
        there.
      Roots in a thread (`:stack`, `:tls`, `:register`, `:altstack`) also have `:thread_name`:
      the name the kernel keeps for it (`"1_scheduler"`, `"erts_dios_3"`), `nil` when it has none
      or has exited since.
      * `:register` - a register of a stopped thread (or of the thread that asked):
        `:thread` and `:register` (`"rax"`, ..., `"r15"`, `"rip"`).
      * `:altstack` - a thread's alternate signal stack, which only the kernel points to:
        `:thread`.
      * `:vm` - an anonymous mapping: in a node, the VM's own memory (its allocators'
        carriers), or memory a library mapped itself: `:allocator` (the VM's allocator whose
        carrier holds the word, as the VM names it: `"eheap_alloc"` for process heaps,
        `"ets_alloc"` for ETS tables, `"binary_alloc"`, ...; `nil` where no carrier of the VM's
        proves itself, OTP 25 to 27), `:offset` (from the mapping's start), `:mapping`
        (`{start, end}`) and `:address`.
      * `:other` - any other mapping (a file mapped writable, shared memory): `:name` (its path
        as `/proc/self/maps` gives it), `:offset`, `:mapping` and `:address`.
      * `:discounted` - a possibly lost block's (`Mtrace.Site`'s `:certainty`): the word at
        `:address` that a rule discounted as no pointer (`:rule`, as `docs/rules.md` names it),
        which points into the block, or into a lost block that reaches it; `:links` is the
        block alone. The word may be a reference after all: look at what holds it.
      * `:lost` - nothing: the chain of a lost block (`Mtrace.leaks/1` with `why: true`) starts
        at the lost block that no other block points to (a direct one), and follows the lost
        blocks that lead to it.
    * `:links` - the blocks on the way, from the one the root points to, to the block asked
      about (the last), each a map of `:address`, `:size` (the requested size; the usable size
      for a block without a record), `:offset` (where in this block the pointer to the next
      one lies; `nil` for the last) and `:stack` (its allocation's frames, innermost first, as
      `Mtrace.Site`'s; `[]` for a block without a record).

  Shortest means fewest blocks: every root is read before any block, and blocks in the order
  they were reached (a breadth-first mark). Another chain of as many blocks may hold it as well.
  """

  defstruct root: %{}, links: []

  @type kind ::
          :static | :stack | :tls | :register | :altstack | :vm | :other | :discounted | :lost

  @type root :: %{
          required(:kind) => kind(),
          optional(:address) => non_neg_integer(),
          optional(:library) => String.t(),
          optional(:name) => String.t() | nil,
          optional(:offset) => integer(),
          optional(:thread) => non_neg_integer(),
          optional(:thread_name) => String.t() | nil,
          optional(:frame) => Mtrace.Frame.t() | nil,
          optional(:register) => String.t(),
          optional(:rule) => atom(),
          optional(:allocator) => String.t() | nil,
          optional(:mapping) => {non_neg_integer(), non_neg_integer()} | nil
        }

  @type link :: %{
          address: non_neg_integer(),
          size: non_neg_integer(),
          offset: non_neg_integer() | nil,
          stack: [Mtrace.Frame.t()]
        }

  @type t :: %__MODULE__{root: root(), links: [link()]}
end

defimpl Inspect, for: Mtrace.Path do
  import Inspect.Algebra

  # One line a step: the root, then each block with its first frame in the program (past the
  # intercepted function) and where the pointer to the next lies.
  def inspect(%{root: root, links: links}, opts) do
    steps = [root(root) | Enum.map(links, &link/1)]
    container_doc("#Mtrace.Path<", steps, ">", opts, fn s, _ -> s end, separator: " ->")
  end

  defp root(%{kind: :static, library: lib, name: name, offset: off}),
    do: "static #{Path.basename(lib)}:#{name || "+"}#{if name, do: "+"}#{off}"

  defp root(%{kind: :stack, offset: off} = r) do
    in_frame = if r[:frame], do: " in " <> Mtrace.Format.label(r.frame), else: ""
    "stack of thread #{thread(r)} (sp+#{off})#{in_frame}"
  end

  defp root(%{kind: :tls, library: nil, offset: off} = r),
    do: "control block of thread #{thread(r)}+#{off}"

  defp root(%{kind: :tls, library: lib, offset: off} = r),
    do: "TLS of #{Path.basename(lib)} in thread #{thread(r)}+#{off}"

  defp root(%{kind: :register, register: reg} = r), do: "#{reg} of thread #{thread(r)}"
  defp root(%{kind: :altstack} = r), do: "sigaltstack of thread #{thread(r)}"
  defp root(%{kind: :lost}), do: "lost"

  defp root(%{kind: :discounted, rule: rule, address: at}),
    do: "word at 0x#{Integer.to_string(at, 16)} discounted by #{rule}"

  defp root(%{kind: :vm, offset: off, allocator: by}) when is_binary(by),
    do: "vm mapping+#{off} (#{by})"

  defp root(%{kind: kind, offset: off} = r), do: "#{kind} #{r[:name] || "mapping"}+#{off}"
  defp root(%{kind: kind}), do: "#{kind}"

  defp thread(%{thread: tid} = r),
    do: if(r[:thread_name], do: "#{tid} (#{r.thread_name})", else: "#{tid}")

  defp link(%{address: a, size: size, offset: off, stack: stack}) do
    site =
      case Enum.drop(stack, 1) do
        [frame | _] -> " " <> Mtrace.Format.label(frame)
        [] -> ""
      end

    "0x#{Integer.to_string(a, 16)} (#{size} B#{site})" <> if(off, do: " +#{off}", else: "")
  end
end
