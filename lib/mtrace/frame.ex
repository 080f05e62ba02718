defmodule Mtrace.Frame do
  @moduledoc """
  One frame of a native stack, innermost first in `Mtrace.Site` stacks.

    * `:kind` - `:native` (machine code in a loaded library or executable).
    * `:library` - the path of the file the code belongs to, `nil` for an address in no
      loaded file (the BEAM's JIT code, or a library unloaded since).
    * `:function` - the function's name (demangled when asked), `nil` when the file's symbol
      tables name none.
    * `:address` - the return address (frame 0: the intercepted function's entry).
    * `:offset` - `address` less the library's load address: the address in the file, as
      `addr2line -e library` wants it (less one, for a return address). `nil` with no library.
  """

  defstruct kind: :native, library: nil, function: nil, address: 0, offset: nil

  @type t :: %__MODULE__{
          kind: :native,
          library: String.t() | nil,
          function: String.t() | nil,
          address: non_neg_integer(),
          offset: non_neg_integer() | nil
        }
end
