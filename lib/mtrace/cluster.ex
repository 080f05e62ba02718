defmodule Mtrace.Cluster do
  @moduledoc false
  # The readers' nodes: option (leaks/1, top/2, mark/1, diff/2, stats/1): the same reader run on
  # each node over distribution, every answer in one map.

  # A reader on each node of opts[:nodes] over distribution, within opts[:timeout] in all:
  # %{node => result}, or {:error, reason} for a node that is down (:noconnection), not
  # preloaded (:not_preloaded), lacks mtrace (:no_mtrace), or did not answer (:timeout).
  @spec across(atom(), String.t(), keyword(), (node(), keyword() -> [term()])) ::
          %{node() => term()}
  def across(fun, name, opts, args) do
    local = Keyword.drop(opts, [:nodes, :timeout])
    deadline = System.monotonic_time(:millisecond) + opts[:timeout]

    requests =
      for node <- Enum.uniq(opts[:nodes]) do
        case args.(node, local) do
          [nil, _] -> {node, {:error, {:no_mark, name}}}
          call_args -> {node, :erpc.send_request(node, Mtrace, fun, call_args)}
        end
      end

    Map.new(requests, fn
      {node, {:error, _} = error} -> {node, error}
      {node, request} -> {node, response(request, deadline)}
    end)
  end

  defp response(request, deadline) do
    :erpc.receive_response(request, max(deadline - System.monotonic_time(:millisecond), 0))
  catch
    :error, {:exception, %Mtrace.NotPreloadedError{}, _} -> {:error, :not_preloaded}
    :error, {:exception, :undef, [{Mtrace, _, _, _} | _]} -> {:error, :no_mtrace}
    :error, {:exception, reason, _} -> {:error, {:exception, reason}}
    :error, {:erpc, reason} -> {:error, reason}
  end
end
