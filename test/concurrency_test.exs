defmodule Mtrace.ConcurrencyTest do
  # Many processes allocate and free through the test NIF (8 writers, 6.4M allocations; 2 dirty
  # churners, 20M malloc+free pairs) while 3 others call every reader in turn (olds, top, mark and
  # diff, leaks, stats, a format) and reset the table.
  # malloc'd sizes are even and calloc'd sizes odd: a record whose size and stack came from two
  # different blocks shows up as a parity mismatch, whatever the timing.
  use ExUnit.Case, async: false
  alias Mtrace.Test.Leaky

  @moduletag timeout: 180_000

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

  defp reader(parent, checked, bad) do
    receive do
      :stop -> send(parent, {:reader, checked, bad})
    after
      0 ->
        records = Mtrace.olds(2000, false)
        if rem(checked, 7) == 0, do: Mtrace.reset()

        wrong =
          Enum.count(records, fn {_age, size, _addr, _ns, stack} ->
            case stack do
              [_, {_, "leak_malloc"} | _] -> rem(size, 2) != 0
              [_, {_, "leak_calloc"} | _] -> rem(size, 2) != 1
              _ -> false
            end
          end)

        reader(parent, checked + 1, bad + wrong + other_reader(rem(checked, 5)))
    end
  end

  # The other readers in turn, each checked the same way where it can be: a site of calloc'd
  # blocks sums odd sizes (its bytes and blocks have one parity), a malloc'd one even sizes.
  defp other_reader(0) do
    Mtrace.top(50, library: "leaky.so")
    |> Enum.count(fn site ->
      case Enum.at(site.stack, 1) do
        %{function: "leak_malloc"} -> rem(site.bytes, 2) != 0
        %{function: "leak_calloc"} -> rem(site.bytes, 2) != rem(site.blocks, 2)
        _ -> false
      end
    end)
  end

  defp other_reader(1) do
    mark = Mtrace.mark()
    diff = Mtrace.diff(mark, library: "leaky.so")
    Enum.count(diff, &(&1.allocated_blocks < 0 or &1.freed_blocks < 0))
  end

  defp other_reader(2) do
    # After a reset some live blocks have no record: leaks/1 then refuses, as documented.
    try do
      {sites, _info} = Mtrace.leaks_info(min_age: 0, library: "leaky.so")
      Enum.count(sites, &(&1.blocks != &1.direct_blocks + &1.indirect_blocks))
    rescue
      Mtrace.IncompleteError -> 0
    end
  end

  defp other_reader(3) do
    stats = Mtrace.stats()
    if stats.records > stats.slots, do: 1, else: 0
  end

  defp other_reader(4) do
    folded = Mtrace.top(20) |> Mtrace.render(:folded) |> IO.iodata_to_binary()
    if folded == "" or folded =~ ~r/ \d+\n/, do: 0, else: 1
  end

  test "records stay consistent under concurrent allocation, reads and resets" do
    parent = self()
    readers = for _ <- 1..3, do: spawn_link(fn -> reader(parent, 0, 0) end)

    writers =
      for i <- 1..10 do
        Task.async(fn ->
          if rem(i, 4) == 0, do: churn(), else: for(_ <- 1..8, do: writer(50_000))
        end)
      end

    Task.await_many(writers, 150_000)
    Enum.each(readers, &send(&1, :stop))

    results = for _ <- readers, do: assert_receive({:reader, _checked, _bad}, 30_000)
    # Every reader had its turns.
    assert Enum.all?(results, fn {:reader, checked, _} -> checked >= 5 end), inspect(results)
    assert Enum.map(results, fn {:reader, _, bad} -> bad end) == [0, 0, 0]
    assert Mtrace.stats().preloaded
  end
end
