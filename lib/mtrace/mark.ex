defmodule Mtrace.Mark do
  @moduledoc """
  A baseline of a node's live heap, from `Mtrace.mark/0`, for `Mtrace.diff/2` and the `since:`
  option of the readers. It is a plain term: keep it, pass it around, compare later.

    * `:node` - the node it was taken on.
    * `:time_ns` - when, on the clock of the node's records (to the millisecond).
    * `:resets` - how many `Mtrace.reset/0` calls the node had seen then.
    * `:sites` - the live bytes and blocks then, by stack id.
  """

  defstruct node: nil, time_ns: 0, resets: 0, sites: %{}

  @type t :: %__MODULE__{
          node: node(),
          time_ns: non_neg_integer(),
          resets: non_neg_integer(),
          sites: %{non_neg_integer() => {non_neg_integer(), non_neg_integer()}}
        }
end
