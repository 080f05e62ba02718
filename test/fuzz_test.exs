defmodule Mtrace.FuzzTest do
  # Every public function and NIF stub called with generated terms: an ArgumentError (or the
  # documented error), never another exception (a FunctionClauseError from inside is a bug) nor
  # a crash of the node. The generator is the test's own (no hex).
  use ExUnit.Case, async: false
  import Bitwise

  @moduletag timeout: 300_000
  @rounds 300

  # A term of every kind, at most depth deep: huge and negative numbers, floats, atoms,
  # binaries with NUL bytes, lists (proper and not), tuples, maps, pids, refs, funs.
  defp term(0), do: leaf()

  defp term(depth) do
    case :rand.uniform(9) do
      1 -> Enum.map(1..:rand.uniform(4), fn _ -> term(depth - 1) end)
      2 -> List.to_tuple(Enum.map(1..:rand.uniform(4), fn _ -> term(depth - 1) end))
      3 -> Map.new(1..:rand.uniform(3), fn _ -> {leaf(), term(depth - 1)} end)
      4 -> [{Enum.random([:min_age, :library, :group, :n, :nodes, :since]), term(depth - 1)}]
      5 -> [term(depth - 1) | leaf()]
      _ -> leaf()
    end
  end

  defp leaf do
    Enum.random([
      fn -> :rand.uniform(1 <<< 70) - (1 <<< 69) end,
      fn -> Enum.random([0, -1, 1 <<< 64, (1 <<< 64) - 1, 1 <<< 63, -(1 <<< 63), 1 <<< 200]) end,
      fn -> :rand.uniform() * 1.0e30 - 5.0e29 end,
      fn -> Enum.random([nil, true, false, :stack, :function, :all, :"", :erlang.node()]) end,
      fn -> :crypto.strong_rand_bytes(:rand.uniform(40)) end,
      fn -> "lib\0nul" end,
      fn -> String.duplicate("x", 5000) end,
      fn -> self() end,
      fn -> make_ref() end,
      fn -> fn -> :ok end end,
      fn -> [] end
    ]).()
  end

  # Calls f; a raise of one of the allowed exceptions is an answer too.
  defp survives(f) do
    f.()
    :ok
  rescue
    e in [ArgumentError, Mtrace.IncompleteError] -> {:raised, e.__struct__}
  end

  test "public functions answer generated terms with a result or an ArgumentError" do
    calls = [
      fn -> Mtrace.olds(term(2)) end,
      fn -> Mtrace.olds(term(1), term(3)) end,
      fn -> Mtrace.top(term(1), term(3)) end,
      fn -> Mtrace.leaks(term(3)) end,
      fn -> Mtrace.leaks_info(term(3)) end,
      fn -> Mtrace.render(term(2), term(1), term(3)) end,
      fn -> Mtrace.render(Mtrace.top(3), term(1), term(3)) end,
      fn -> Mtrace.write(term(1), term(1), term(3)) end,
      fn ->
        Mtrace.write("/nonexistent/dir/x", Enum.random([:folded, :html, :pprof]), term(3))
      end,
      fn -> Mtrace.diff(term(2), term(3)) end,
      fn -> Mtrace.stats(term(3)) end,
      fn -> Mtrace.mark(term(3)) end,
      fn -> Mtrace.watch(term(3)) && Mtrace.unwatch() end
    ]

    for _ <- 1..@rounds, call <- calls, do: assert(survives(call) in [:ok | raised()])
    assert Mtrace.stats().preloaded
  end

  test "NIF stubs called directly with generated terms raise ArgumentError, never crash" do
    nif = Mtrace.Nif

    calls = [
      fn -> nif.olds_nif(term(1), term(1), term(2)) end,
      fn -> nif.olds_nif(1, false, {term(0), term(0), term(0), term(0), term(0), term(0)}) end,
      fn -> nif.sites_nif(term(2), term(1)) end,
      fn -> nif.sites_nif({0, term(0), 0, term(0), term(0), term(0)}, 0) end,
      fn -> nif.frames_nif(term(2), term(1)) end,
      fn -> nif.frames_nif(Enum.map(1..5, fn _ -> :rand.uniform(1 <<< 40) end), false) end,
      fn -> nif.leaks_nif(term(1)) end
    ]

    for _ <- 1..@rounds, call <- calls do
      try do
        call.()
      rescue
        ArgumentError -> :ok
      end
    end

    assert Mtrace.stats().preloaded
  end

  test "olds(2^64) and olds(2^64 - 1) answer alike" do
    # Blocks of this test's own, which the VM's work in between cannot change.
    addresses = for size <- [4_242_001, 4_242_002], do: Mtrace.Test.Leaky.alloc(:malloc, size)
    on_exit(fn -> Enum.each(addresses, &Mtrace.Test.Leaky.release(:malloc, &1)) end)

    mine = fn n ->
      for {_, size, _, _, _} <- Mtrace.olds(n, library: "leaky.so"),
          size in 4_242_001..4_242_002,
          do: size
    end

    assert Enum.sort(mine.(1 <<< 64)) == [4_242_001, 4_242_002]
    assert mine.(1 <<< 64) == mine.((1 <<< 64) - 1)
    assert_raise ArgumentError, fn -> Mtrace.olds(-(1 <<< 64)) end
  end

  defp raised,
    do: [
      {:raised, ArgumentError},
      {:raised, Mtrace.IncompleteError}
    ]
end
