defmodule Mtrace.BeamHeaps do
  @moduledoc false
  # Teaches the NIF where a process's heap pointers lie in the VM's Process struct
  # (c_src/beam_heaps.h), once a node, so that the mark leaves out the unused part of each heap:
  # the stale words there keep lost blocks, and the free id lists of the process and port tables,
  # found by the two limits. It learns from processes whose numbers the VM gives:
  # two that wait in receive, of normal and of high priority, each with an old heap, and the
  # learner itself, running the NIF.

  alias Mtrace.Nif

  @tries 3

  @doc """
  Learns the layout once; later calls return the first answer, but for a node where the waiting
  processes ran in every try (a busy one): a later call tries again.
  """
  @spec learn() :: :ok | {:error, String.t()}
  def learn do
    case :persistent_term.get(__MODULE__, nil) do
      nil ->
        case attempt(@tries) do
          {:ran, why} ->
            {:error, why}

          result ->
            :persistent_term.put(__MODULE__, result)
            result
        end

      result ->
        result
    end
  end

  defp attempt(tries) do
    {pid, monitor} = spawn_monitor(fn -> exit({:learnt, learn_here()}) end)

    result =
      receive do
        {:DOWN, ^monitor, :process, ^pid, {:learnt, result}} -> result
        {:DOWN, ^monitor, :process, ^pid, reason} -> {:error, inspect(reason)}
      end

    case result do
      {:retry, _} when tries > 1 -> attempt(tries - 1)
      {:retry, why} -> {:ran, why}
      other -> other
    end
  end

  defp learn_here do
    waiting = [waiting(:normal), waiting(:high)]

    try do
      before = Enum.map(waiting, &known/1)

      result =
        if Enum.all?(before),
          do: Nif.heaps_learn_nif(limit(:process_limit), limit(:port_limit), before),
          else: nil

      # a process that ran meanwhile (a signal handled) may have moved its pointers
      cond do
        result == nil or Enum.map(waiting, &known/1) != before -> {:retry, "the processes ran"}
        result == :ok -> :ok
        true -> result
      end
    after
      Enum.each(waiting, fn {pid, _} -> Process.exit(pid, :kill) end)
    end
  end

  defp limit(which), do: :erlang.system_info(which)

  # A process that made live data, moved it to an old heap by two minor collections, and waits.
  defp waiting(priority) do
    parent = self()

    pid =
      spawn(fn ->
        Process.flag(:priority, priority)
        data = Enum.to_list(1..1000)
        :erlang.garbage_collect(self(), type: :minor)
        :erlang.garbage_collect(self(), type: :minor)
        send(parent, {self(), :waiting})

        receive do
          :never -> data
        end
      end)

    receive do
      {^pid, :waiting} -> {pid, priority}
    end
  end

  # What process_info/2 says of a waiting process, in words, as the NIF takes it; nil while it
  # does not wait.
  defp known({pid, priority}) do
    with [status: :waiting, garbage_collection_info: gc, stack_size: stack] <-
           Process.info(pid, [:status, :garbage_collection_info, :stack_size]),
         true <- gc[:mbuf_size] == 0 do
      {pid, gc[:heap_block_size], gc[:heap_size], gc[:recent_size], stack,
       gc[:old_heap_block_size], gc[:old_heap_size], priority}
    else
      _ -> nil
    end
  end
end
