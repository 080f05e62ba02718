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

defimpl Inspect, for: Mtrace.Frame do
  # One line a frame, as valgrind prints one: the function, then where its code is. The fields
  # are all still there: frame.library, frame.offset, ...
  def inspect(%{function: function, library: library, offset: offset, address: address}, _opts) do
    where =
      if library,
        do: "#{Path.basename(library)}+#{hex(offset)}",
        else: hex(address)

    "#Mtrace.Frame<#{function || "??"} #{where}>"
  end

  defp hex(n), do: "0x" <> String.downcase(Integer.to_string(n, 16))
end
