defmodule Mtrace.Site do
  @moduledoc """
  Live blocks that share a call site (the same stack), summed.

    * `:bytes`, `:blocks` - what the site's blocks hold, and how many there are.
    * `:direct_blocks`, `:indirect_blocks` - of lost blocks (`Mtrace.leaks/1`): those that no
      other lost block points to, and those reached only through other lost blocks (the nodes
      of a lost list behind its head).
    * `:oldest_age` - the age of the site's oldest block, in seconds.
    * `:stack` - the allocation's stack, innermost first: a list of `Mtrace.Frame` structs;
      frame 0 is the intercepted function (`malloc`, `calloc`, ...).
    * `:address` - with `blocks: true`, each site is one block, and this is its address;
      otherwise `nil`.
  """

  defstruct bytes: 0,
            blocks: 0,
            direct_blocks: 0,
            indirect_blocks: 0,
            oldest_age: 0.0,
            stack: [],
            address: nil

  @type t :: %__MODULE__{
          bytes: non_neg_integer(),
          blocks: non_neg_integer(),
          direct_blocks: non_neg_integer(),
          indirect_blocks: non_neg_integer(),
          oldest_age: float(),
          stack: [Mtrace.Frame.t()],
          address: non_neg_integer() | nil
        }
end
