defmodule Mtrace.HeapError do
  @moduledoc """
  Raised by `Mtrace.heap/0` when glibc's heap cannot be walked: `:reason` says why (a glibc
  whose malloc layout mtrace has not checked, or a structure that does not validate: one
  corrupted, or a layout changed).
  """
  defexception [:reason]

  @impl true
  def message(%{reason: reason}), do: "glibc's heap could not be walked: #{reason}"
end
