defmodule Mtrace.Frame do
  @moduledoc """
  One frame of a stack, innermost first in `Mtrace.Site` stacks. An address whose code
  has functions inlined into it gives one frame per function: the inlined ones first (innermost
  first, `inlined: true`), then the function they were inlined into, all with that address.

    * `:kind` - `:native` (machine code in a loaded library or executable), or `:erlang`: the
      BEAM's JIT code, named from the entries the VM makes for a debugger, else from its perf
      map (the first JIT frame of a NIF's stack; all the Erlang callers with
      `MTRACE_UNWIND=erlang` in a node started with `+JPperf map`; see docs/erlang-frames.md).
    * `:module`, `:arity` - of an Erlang function (`kind: :erlang`): with `:function` (an atom
      then), its MFA, `{Mtrace.Test.Chain, :c, 1}`. JIT code that is no Erlang function (the
      VM's shared fragments, `"global::call_nif_shared"`) has `module: nil`, `arity: nil` and
      that name as `:function`. `nil` for native frames. `Mtrace.top/2` with
      `group: :erlang` gives a site whose Erlang caller is unknown (a NIF on a dirty scheduler,
      a thread of the VM's own) a frame of kind `:erlang` with all three `nil`.
    * `:library` - the path of the file the code belongs to, `nil` for an address in no
      loaded file (the BEAM's JIT code), or in a library whose identity is not known (see
      `:unloaded`).
    * `:function` - the function's name (demangled when asked), `nil` when neither the file's
      symbol tables nor its debug information name one; of an Erlang function, its name (an
      atom).
    * `:address` - the return address (frame 0: the intercepted function's entry).
    * `:offset` - `address` less the library's load address: the address in the file, as
      `addr2line -e library` wants it (less one, for a return address). `nil` with no library.
    * `:file`, `:line` - the source line (of the call, for a return address), from DWARF debug
      information in the file or in a separate debug file; of an Erlang function, the line the
      VM's entries give (as the module was compiled: `"test/support/chain.ex"`); `nil` without
      it.
    * `:inlined` - `true` when the function was inlined into the next frame's.
    * `:unloaded` - `false`; `true` when `library` has been unloaded since the stack was
      recorded (its names and lines are still read from its file when unchanged); `:maybe` when
      another library was loaded at that address since, and which one held it then is not known
      (`library` is then `nil`: a frame is never named after a library loaded later).
  """

  defstruct kind: :native,
            library: nil,
            module: nil,
            function: nil,
            arity: nil,
            address: 0,
            offset: nil,
            file: nil,
            line: nil,
            inlined: false,
            unloaded: false

  @type t :: %__MODULE__{
          kind: :native | :erlang,
          library: String.t() | nil,
          module: module() | nil,
          function: String.t() | atom() | nil,
          arity: non_neg_integer() | nil,
          address: non_neg_integer(),
          offset: non_neg_integer() | nil,
          file: String.t() | nil,
          line: pos_integer() | nil,
          inlined: boolean(),
          unloaded: boolean() | :maybe
        }
end

defimpl Inspect, for: Mtrace.Frame do
  # One line a frame, as valgrind prints one: the function, its source line, then where its code
  # is (Mtrace.Format.label/2, the one text of a frame). The fields are all still there:
  # frame.library, frame.offset, ...
  def inspect(%{kind: :erlang, function: nil} = frame, _opts),
    do: "#Mtrace.Frame<#{Mtrace.Format.label(frame)}>"

  def inspect(%{kind: :erlang} = frame, _opts),
    do: "#Mtrace.Frame<#{Mtrace.Format.label(frame)} (Erlang)>"

  def inspect(frame, _opts) do
    notes = if(frame.inlined, do: " inlined", else: "") <> unloaded(frame.unloaded)
    "#Mtrace.Frame<#{Mtrace.Format.label(frame, where: true)}#{notes}>"
  end

  defp unloaded(true), do: " unloaded"
  defp unloaded(_), do: ""
end
