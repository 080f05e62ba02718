defmodule Mtrace.Site do
  @moduledoc """
  Live blocks that share a call site, summed.

    * `:bytes`, `:blocks` - what the site's blocks hold, and how many there are; in a
      `Mtrace.diff/2`, the net change since the mark (`allocated` less `freed`, may be negative).
    * `:direct_blocks`, `:indirect_blocks` - of lost blocks (`Mtrace.leaks/1`): those that no
      other lost block points to, and those reached only through other lost blocks (the nodes
      of a lost list behind its head).
    * `:oldest_age` - the age of the site's oldest live block, in seconds.
    * `:stack` - the allocation's stack, innermost first: a list of `Mtrace.Frame` structs;
      frame 0 is the intercepted function (`malloc`, `calloc`, ...). With `group: {:depth, k}`,
      the first k frames; with `group: :function`, the intercepted function and the function
      that called it.
    * `:paths` - with `group: :function`, the distinct stacks that lead to the function, each a
      `Mtrace.Site` of its own, largest first; otherwise `[]`.
    * `:allocated_bytes`, `:allocated_blocks`, `:freed_bytes`, `:freed_blocks` - in a
      `Mtrace.diff/2`: allocated since the mark and still live, and live at the mark but freed
      since. `nil` elsewhere.
    * `:address` - with `blocks: true` (`Mtrace.leaks/1`), each site is one block, and this is
      its address; otherwise `nil`.
    * `:estimated` - `true` when the node samples (`MTRACE_SAMPLE`): `bytes` and `blocks` (and a
      diff's parts) are then estimates of the whole heap, each sampled block weighing what it
      stands for; `nil` when they are exact.
    * `:contents` - for lost blocks that have no record (`Mtrace.leaks/1` knows them from
      glibc's heap: allocated before the preload, not sampled, dropped or forgotten by a reset),
      which have no stack (`stack: []`) and no age (`oldest_age: nil`): what they are, grouped by
      usable size and what they hold: a C++ class named by the vtable their first word points
      to (`"24-byte Widget objects (C++, by their vtable) without a record"`), an Erlang
      off-heap binary or resource by its header (the VM gives them to malloc with `+MBe false`:
      `"136-byte Erlang resources (magic binaries, by their header) without a record"`), text (`"40-byte
      strings without a record, such as \"GET /\""`), or neither (`"64-byte blocks without a
      record"`); `nil` for sites with a stack.
    * `:scans` - of lost blocks with a record (`Mtrace.leaks/1`): how many leak scans found lost
      blocks of this site, this one included: `leaks/1` calls, `Mtrace.Watch`'s with
      `leaks: true` and `leaks_info/1` alike, in this node since it started (`1`: this is the
      first). A block found lost once stays lost until it is freed (a stale word that appears
      later does not keep it), so a site that keeps its lost blocks is found by every scan after
      the first. Merged sites (`group:`) take the largest. `nil` elsewhere, and for blocks without
      a record, which no scan remembers.
    * `:certainty` - of lost blocks (`Mtrace.leaks/1`): `:definite` when no word of reachable
      memory points into any of the site's blocks, not even one a rule of the mark discounted
      (`docs/rules.md`); `:possible` when such a discounted word points into one of them (or
      into a lost block that reaches it), so that the program may still reference it, as
      memcheck's "possibly lost". `nil` elsewhere.
    * `:possible_blocks`, `:rules`, `:holder` - of a `:possible` site: how many of its blocks a
      discounted word points into (or reaches), the rules that discounted those words (atoms
      named as in `docs/rules.md`), and the address of one such word (for a register, the
      thread's index << 8 | the register's * 8); `Mtrace.why/2` of such a block names its word.
      `nil` elsewhere.
    * `:why` - with `why: true` (`Mtrace.top/2`): what keeps the site's oldest reachable block,
      as `Mtrace.why/2` would answer for it (a `Mtrace.Path`), from one mark for all the sites;
      `nil` when the mark reached none of the site's blocks (all of them lost, or, where the
      scan cannot see every block, not known), and without the option. Merged sites (`group:`)
      take the largest one's. With `why: true` on `Mtrace.leaks/1`: the chain of lost blocks
      that leads to the site's oldest indirectly lost block (else its oldest), from the direct
      one (root `%{kind: :lost}`).
  """

  defstruct bytes: 0,
            blocks: 0,
            direct_blocks: 0,
            indirect_blocks: 0,
            oldest_age: 0.0,
            stack: [],
            paths: [],
            allocated_bytes: nil,
            allocated_blocks: nil,
            freed_bytes: nil,
            freed_blocks: nil,
            address: nil,
            estimated: nil,
            contents: nil,
            scans: nil,
            certainty: nil,
            possible_blocks: nil,
            rules: nil,
            holder: nil,
            why: nil

  @type t :: %__MODULE__{
          bytes: integer(),
          blocks: integer(),
          direct_blocks: non_neg_integer(),
          indirect_blocks: non_neg_integer(),
          oldest_age: float() | nil,
          stack: [Mtrace.Frame.t()],
          paths: [t()],
          allocated_bytes: non_neg_integer() | nil,
          allocated_blocks: non_neg_integer() | nil,
          freed_bytes: non_neg_integer() | nil,
          freed_blocks: non_neg_integer() | nil,
          address: non_neg_integer() | nil,
          estimated: true | nil,
          contents: String.t() | nil,
          scans: pos_integer() | nil,
          certainty: :definite | :possible | nil,
          possible_blocks: pos_integer() | nil,
          rules: [atom()] | nil,
          holder: non_neg_integer() | nil,
          why: Mtrace.Path.t() | nil
        }
end

defimpl Inspect, for: Mtrace.Site do
  import Inspect.Algebra

  # The fields a site has: a diff's fields only in a diff, paths only when grouped by function,
  # the address only for one block, the certainty only where it is :possible (a lost site is
  # definite unless it says so). The struct is whole all the same (site.freed_bytes, ...).
  def inspect(site, opts) do
    fields =
      site
      |> Map.from_struct()
      |> Enum.reject(fn {key, value} ->
        value == nil or (key == :paths and value == []) or {key, value} == {:certainty, :definite}
      end)
      |> Enum.sort_by(fn {key, _} -> Enum.find_index(order(), &(&1 == key)) end)

    container_doc(
      "%Mtrace.Site{",
      fields,
      "}",
      opts,
      fn {key, value}, opts ->
        concat([Atom.to_string(key), ": ", to_doc(value, opts)])
      end,
      break: :strict
    )
  end

  defp order,
    do: ~w(bytes blocks direct_blocks indirect_blocks allocated_bytes allocated_blocks
           freed_bytes freed_blocks oldest_age scans certainty possible_blocks rules holder
           estimated address contents stack paths)a
end
