defmodule Mtrace.Test.Chain do
  @moduledoc false
  # A known chain of Erlang functions down to the test NIF, for the erlang unwinding mode: a/1
  # calls b/1 calls c/1 calls Leaky.alloc/2; none is a tail call (each wraps the result), so
  # every one keeps its frame.

  alias Mtrace.Test.Leaky

  def a(n), do: [b(n)]
  def b(n), do: [c(n)]
  def c(n), do: [Leaky.alloc(:malloc, n)]

  @doc "The address a/1 returned."
  def address([[[address]]]), do: address

  @doc "The same chain's last call on a dirty scheduler."
  def dirty(n), do: [Leaky.dirty_alloc(:malloc, n)]
end
