defmodule Mtrace.ConcurrencyTest do
  # Many processes allocate and free through the test NIF while others read and reset the table.
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

        reader(parent, checked + 1, bad + wrong)
    end
  end

  test "records stay consistent under concurrent allocation, reads and resets" do
    parent = self()
    readers = for _ <- 1..3, do: spawn_link(fn -> reader(parent, 0, 0) end)

    writers =
      for i <- 1..10 do
        Task.async(fn -> if rem(i, 4) == 0, do: Leaky.churn(200_000, 64), else: writer(5_000) end)
      end

    Task.await_many(writers, 150_000)
    Enum.each(readers, &send(&1, :stop))

    results = for _ <- readers, do: assert_receive({:reader, _checked, _bad}, 30_000)
    assert Enum.all?(results, fn {:reader, checked, _} -> checked > 0 end)
    assert Enum.map(results, fn {:reader, _, bad} -> bad end) == [0, 0, 0]
    assert Mtrace.stats().preloaded
  end
end
