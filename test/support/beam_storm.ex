defmodule Mtrace.Test.BeamStorm do
  @moduledoc false
  # The storm of concurrency_test.exs, run in a fresh preloaded node (the test node's other tests
  # reset its table, which the storm's checks of leaks/1 across a reset must not meet).
  #
  # malloc'd sizes are even and calloc'd sizes odd: a record whose size and stack came from two
  # different blocks shows up as a parity mismatch, whatever the timing.
  alias Mtrace.Test.Leaky

  # Sizes of leaky.so's blocks in the storm: the writers' malloc and calloc, the churners'
  # ring (64 + 2 * (i mod 64)).
  @malloc_sizes 64..1198
  @calloc_sizes 201..1199

  @doc """
  Runs the storm and returns each reader's tally: turns taken (`checked`), wrong answers
  (`bad`), leaks turns that answered (`leaks`) and that answered again after a reset
  (`after_reset`), and lost calloc'd blocks the answers named (`lost_calloc`); and the node's
  stats/0 at the end.
  """
  def run do
    writers =
      for i <- 1..10 do
        Task.async(fn ->
          if rem(i, 4) == 0, do: churn(), else: for(_ <- 1..8, do: writer(50_000))
        end)
      end

    parent = self()
    state = %{checked: 0, bad: 0, why: [], leaks: 0, after_reset: 0, lost_calloc: 0, stats: nil}
    readers = for _ <- 1..3, do: spawn_link(fn -> reader(parent, state) end)

    Task.await_many(writers, 100_000)
    Enum.each(readers, &send(&1, :stop))

    tallies =
      for reader <- readers do
        receive do
          {:reader, ^reader, state} -> Map.delete(state, :stats)
        end
      end

    {tallies, Mtrace.stats()}
  end

  # The calloc'd blocks held for later are known to the writer only as Erlang integers, which
  # the mark does not take for pointers: while held they are lost.
  defp writer(rounds) do
    for i <- 1..rounds do
      m = Leaky.alloc(:malloc, 2 * (100 + rem(i, 500)))
      c = Leaky.alloc(:calloc, 2 * (100 + rem(i, 500)) + 1)
      Leaky.release(:malloc, m)
      if rem(i, 3) == 0, do: Leaky.release(:calloc, c), else: send(self(), {:later, c})
    end

    for_each_later(fn c -> Leaky.release(:calloc, c) end)
  end

  # On a dirty scheduler, in steps, so that the readers get turns between them.
  defp churn, do: for(_ <- 1..20, do: Leaky.churn(500_000, 64))

  defp for_each_later(fun) do
    receive do
      {:later, c} ->
        fun.(c)
        for_each_later(fun)
    after
      0 -> :ok
    end
  end

  # A reader resets the table every 7 turns, but only once leaks/1 has answered it: the first
  # reset of the node comes after at least one leaks turn was checked. It stops after the
  # writers, once it has had each kind of turn: a leaks turn with many lost blocks is slow.
  defp reader(parent, %{checked: checked} = state) do
    receive do
      :stop when checked >= 5 -> send(parent, {:reader, self(), state})
    after
      0 ->
        records = Mtrace.olds(2000, false)
        if rem(state.checked, 7) == 0 and state.leaks > 0, do: Mtrace.reset()

        wrong =
          Enum.count(records, fn {_age, size, _addr, _ns, stack} ->
            case stack do
              [_, {_, "leak_malloc"} | _] -> rem(size, 2) != 0
              [_, {_, "leak_calloc"} | _] -> rem(size, 2) != 1
              _ -> false
            end
          end)

        state = other_reader(rem(state.checked, 5), bad(state, wrong, {:olds_parity, wrong}))
        reader(parent, %{state | checked: state.checked + 1})
    end
  end

  # Wrong answers are counted, and the first few kept with the turn that gave them (`why`), so
  # that a failure says what went wrong.
  defp bad(state, 0, _what), do: state

  defp bad(state, wrong, what),
    do: %{state | bad: state.bad + wrong, why: Enum.take([what | state.why], 5)}

  defp wrong_parity?(stack, bytes, blocks) do
    case function_at(stack, 1) do
      "leak_malloc" -> rem(bytes, 2) != 0
      "leak_calloc" -> rem(bytes, 2) != rem(blocks, 2)
      _ -> false
    end
  end

  defp function_at(stack, i) do
    case Enum.at(stack, i) do
      %{function: function} -> function
      nil -> nil
    end
  end

  # The other readers in turn, each checked the same way where it can be: a site of calloc'd
  # blocks sums odd sizes (its bytes and blocks have one parity), a malloc'd one even sizes.
  defp other_reader(0, state) do
    Mtrace.top(50, library: "leaky.so")
    |> Enum.count(&wrong_parity?(&1.stack, &1.bytes, &1.blocks))
    |> then(&bad(state, &1, :top_parity))
  end

  # Each part of a diff sums whole blocks of its site, so has the site's parity, and the net is
  # what was allocated less what was freed.
  defp other_reader(1, state) do
    mark = Mtrace.mark()

    Mtrace.diff(mark, library: "leaky.so")
    |> Enum.count(fn site ->
      parts = [
        {site.bytes, site.blocks},
        {site.allocated_bytes, site.allocated_blocks},
        {site.freed_bytes, site.freed_blocks}
      ]

      site.bytes != site.allocated_bytes - site.freed_bytes or
        site.blocks != site.allocated_blocks - site.freed_blocks or
        Enum.any?(parts, fn {bytes, blocks} -> wrong_parity?(site.stack, bytes, blocks) end)
    end)
    |> then(&bad(state, &1, :diff))
  end

  # leaks/1 answers, before a reset and after one: the blocks a reset forgot are known from glibc's
  # heap, and having no stack they are left out by the library filter. Whatever an answer names
  # must be lost in the storm. The first answer in a node never reset resets it and asks again.
  defp other_reader(2, state) do
    before = Mtrace.stats().resets

    case leaks() do
      {:ok, sites} ->
        calloc = for site <- sites, function_at(site.stack, 1) == "leak_calloc", do: site.blocks

        state =
          if(before == 0,
            do: %{state | leaks: state.leaks + 1},
            else: %{state | after_reset: state.after_reset + 1}
          )
          |> Map.update!(:lost_calloc, &(&1 + Enum.sum(calloc)))
          |> bad(
            Enum.count(sites, &(not lost_in_storm?(&1))),
            {:leaks_not_in_storm, Enum.reject(sites, &lost_in_storm?/1) |> Enum.take(2)}
          )

        if before == 0 do
          Mtrace.reset()
          other_reader(2, state)
        else
          state
        end

      other ->
        bad(state, 1, {:leaks, other})
    end
  end

  # Counters only grow, the table never shrinks, and holds at most a record a slot.
  defp other_reader(3, state) do
    stats = Mtrace.stats()
    keys = [:malloc_cnt, :calloc_cnt, :free_cnt, :resets, :slots, :grown, :stacks]

    shrunk = if state.stats, do: Enum.count(keys, &(stats[&1] < state.stats[&1])), else: 0

    %{
      bad(state, shrunk + if(stats.records > stats.slots, do: 1, else: 0), :stats_shrunk)
      | stats: stats
    }
  end

  defp other_reader(4, state) do
    folded = Mtrace.top(20) |> Mtrace.render(:folded) |> IO.iodata_to_binary()
    bad(state, if(folded == "" or folded =~ ~r/ \d+\n/, do: 0, else: 1), :folded)
  end

  defp leaks do
    {:ok, Mtrace.leaks(min_age: 0, library: "leaky.so")}
  rescue
    e in [Mtrace.IncompleteError, Mtrace.NotPreloadedError] -> {:refused, Exception.message(e)}
  end

  # A site of lost blocks sums blocks of the sizes its function allocates in the storm.
  defp lost_in_storm?(%{bytes: bytes, blocks: n, stack: stack}) do
    case function_at(stack, 1) do
      "leak_malloc" -> rem(bytes, 2) == 0 and within?(bytes, n, @malloc_sizes)
      "leak_calloc" -> rem(bytes, 2) == rem(n, 2) and within?(bytes, n, @calloc_sizes)
      _ -> false
    end
  end

  defp within?(bytes, n, first..last//_), do: n > 0 and bytes in (n * first)..(n * last)
end
