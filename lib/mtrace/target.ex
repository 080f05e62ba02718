defmodule Mtrace.Target do
  @moduledoc false
  # The node the readers read: this one, or the node bin/mtrace --node works on (Mtrace.Remote).
  # Every call into the recording node (the NIF's stubs, mtrace_nif, and its own steps,
  # mtrace_node) goes through call/3, so that the readers' code is the same for both: the
  # structs are built here, from what the node answers.

  @key :"$mtrace_target"

  @doc "fun's result, its calls into the recording node made in `node` instead of this one."
  @spec within(node(), (() -> result)) :: result when result: term()
  def within(node, fun) do
    previous = Process.put(@key, node)

    try do
      fun.()
    after
      if previous, do: Process.put(@key, previous), else: Process.delete(@key)
    end
  end

  @doc "The node the calls go to."
  @spec node() :: node()
  def node, do: Process.get(@key, Kernel.node())

  @doc "`module.fun(args)` in the recording node; a remote one's exception is raised here as is."
  @spec call(module(), atom(), [term()]) :: term()
  def call(module, fun, args) do
    case Process.get(@key) do
      nil -> apply(module, fun, args)
      node -> remote(node, module, fun, args)
    end
  end

  defp remote(node, module, fun, args) do
    :erpc.call(node, module, fun, args, :infinity)
  catch
    :error, {:exception, reason, stack} -> :erlang.raise(:error, reason, stack)
  end
end
