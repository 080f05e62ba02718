defmodule Mtrace.NotPreloadedError do
  @moduledoc """
  Raised by `Mtrace.olds/2` and `Mtrace.reset/0` when this node's allocator is not mtrace's.

  The node was started without `LD_PRELOAD` set to `priv/mtrace.so`, or with another copy of the
  file preloaded (a copy is a separate library with its own, empty table).
  """
  defexception [:path]

  @impl true
  def message(%{path: path}) do
    "mtrace is not this node's allocator: start the node with LD_PRELOAD=#{path} " <>
      "(in a release, the case block of mtrace's rel/env.sh.eex), the same file the NIF loads"
  end
end
