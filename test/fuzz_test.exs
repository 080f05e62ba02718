defmodule Mtrace.FuzzTest do
  # Every public reader and NIF stub called with generated arguments, each either valid or not by
  # construction: a valid call answers with a result of its documented shape, any invalid
  # argument raises an ArgumentError that names the function (never another exception, a bare
  # NIF badarg, or a crash of the node), and the node's table and counters are consistent
  # afterwards. The generator is the test's own (no hex).
  use ExUnit.Case, async: false
  import Bitwise

  @moduletag timeout: 300_000
  @rounds 300
  # The readers that stop the node's threads or write files: fewer rounds.
  @slow_rounds 25

  # Per option, values the readers take and values they refuse: the test's own statement of the
  # rules the docs give. :mark and :foreign_mark stand for a mark of this node and of another.
  @values %{
    demangle: {[true, false], [nil, 1, "true", :yes]},
    blocks: {[true, false], [nil, 0, "false"]},
    min_age: {[0, 1, 0.5, 1.0e9], [-1, -0.5, nil, "1", :a]},
    max_age: {[nil, 0, 2.5, 1.0e9], [-1, "1", :a]},
    min_size: {[0, 1, 4096, (1 <<< 64) - 1], [-1, 1 <<< 64, 1.5, nil, "x"]},
    library:
      {[nil, "", "leaky", "no such library", String.duplicate("x", 1023)],
       [1, :a, ~c"leaky", "lib\0nul", String.duplicate("x", 1024)]},
    function:
      {[nil, "", "malloc", ~r/^leak_/], [1, :a, ~c"malloc", "a\0b", String.duplicate("x", 1024)]},
    erlang:
      {[nil, "lists", "lists:map", "lists:map/2", "Mtrace.FuzzTest:term/1"],
       ["", ":lists", 1, :lists, "a\0b", String.duplicate("x", 300)]},
    since: {[nil, :mark], [1, :a, %{}, :foreign_mark]},
    group:
      {[:stack, :function, :erlang, {:depth, 1}, {:depth, 3}],
       [:line, {:depth, 0}, {:depth, -1}, {:depth, 1.0}, "stack", nil]},
    timeout: {[1_000, 15_000], [0, -1, 1.5, nil, :a]},
    interval: {[60_000], [0, -1, 1.5, nil]},
    n: {[1, 5], [0, -1, 1.5, nil]},
    count: {[nil, 1, 3], [0, -1, 1.5, :a]},
    threshold: {[nil, 0, 0.5, 100], [-1, 101, "1", :a]},
    title: {[nil, "", "t"], [1, :a, ~c"t"]}
  }

  @filters [:min_age, :max_age, :min_size, :library, :function, :erlang, :since]
  # Each reader's options but nodes: (whose answers depend on other nodes).
  @keys %{
    olds: [:demangle | @filters],
    leaks: [:demangle, :blocks, :timeout | @filters],
    top: [:demangle, :group, :timeout | @filters],
    diff: [:demangle, :group, :library, :function, :erlang, :timeout],
    mark: [:timeout],
    stats: [:timeout],
    watch: [:interval, :n, :count, :group, :library, :function, :erlang],
    render: [:threshold, :title]
  }
  @formats Mtrace.Format.names()

  # A value of key, and whether it is valid (invalid with probability bad).
  defp value(key, bad, ctx) do
    {good, wrong} = Map.fetch!(@values, key)

    if :rand.uniform() < bad,
      do: {real(Enum.random(wrong), ctx), false},
      else: {real(Enum.random(good), ctx), true}
  end

  defp real(:mark, ctx), do: ctx.mark
  defp real(:foreign_mark, ctx), do: %{ctx.mark | node: :other@nowhere}
  defp real(value, _ctx), do: value

  # Options of reader: some of its keys with valid values; or, a third of the time, one thing
  # wrong: a refused value, a key it does not take, or not a keyword list at all.
  defp opts(reader, ctx, wrongs \\ 4) do
    keys = Map.fetch!(@keys, reader)
    chosen = Enum.filter(keys, fn _ -> :rand.uniform(3) == 1 end)
    good = Enum.map(chosen, &{&1, elem(value(&1, 0.0, ctx), 0)})

    case if(:rand.uniform(3) == 1, do: :rand.uniform(wrongs), else: 0) do
      0 ->
        {good, true}

      1 ->
        key = Enum.random(keys)
        {bad, _} = value(key, 1.0, ctx)
        {Keyword.put(good, key, bad), false}

      2 ->
        {Keyword.put(good, Enum.random([:colour | Map.keys(@values) -- keys]), true), false}

      3 ->
        {Enum.random([%{}, {:demangle, true}, [1], [{:demangle, true} | :tail], :all]), false}

      4 ->
        {Enum.random([[{"demangle", true}], [{1, 2}]]), false}
    end
  end

  defp count(bad) do
    if :rand.uniform() < bad,
      do: {Enum.random([-1, -(1 <<< 64), 1.0, :all, nil, "3"]), false},
      else: {Enum.random([0, 1, 10, 1 <<< 64, 1 <<< 200]), true}
  end

  # The calls: {name, fn ctx -> {fun, [{arg, valid?}]} end, shape check of a valid answer}.
  defp calls do
    [
      {"Mtrace.olds/2", @rounds,
       fn ctx ->
         second =
           if :rand.uniform(5) == 1,
             do: {Enum.random([true, false]), true},
             else: opts(:olds, ctx)

         {&Mtrace.olds/2, [count(0.2), second]}
       end, &records?/1},
      {"Mtrace.top/2", @rounds, fn ctx -> {&Mtrace.top/2, [count(0.2), opts(:top, ctx)]} end,
       &sites?/1},
      {"Mtrace.diff/2", @rounds,
       fn ctx ->
         mark =
           if :rand.uniform(5) == 1,
             do: {Enum.random([nil, :mark, %{}, %{ctx.mark | node: :other@nowhere}]), false},
             else: {ctx.mark, true}

         {&Mtrace.diff/2, [mark, opts(:diff, ctx)]}
       end, &sites?/1},
      {"Mtrace.stats/1", @rounds, fn ctx -> {&Mtrace.stats/1, [opts(:stats, ctx)]} end,
       &is_map_key(&1, :malloc_cnt)},
      {"Mtrace.mark/1", @rounds, fn ctx -> {&Mtrace.mark/1, [opts(:mark, ctx)]} end,
       &is_struct(&1, Mtrace.Mark)},
      {"Mtrace.watch/1", @rounds,
       fn ctx ->
         {fn opts -> with {:ok, pid} <- Mtrace.watch(opts), :ok <- Mtrace.unwatch(), do: pid end,
          [opts(:watch, ctx)]}
       end, &is_pid/1},
      {"Mtrace.render/3", @rounds,
       fn ctx ->
         sites =
           if :rand.uniform(5) == 1,
             do: {Enum.random([%{}, [1], :a, [%{}], [hd(ctx.sites) | :tail]]), false},
             else: {Enum.random([[], ctx.sites]), true}

         format =
           if :rand.uniform(5) == 1,
             do: {Enum.random([:svg, "html", nil, Mtrace.Format.Html]), false},
             else: {Enum.random(@formats), true}

         {&Mtrace.render/3, [sites, format, opts(:render, ctx)]}
       end, &is_binary(IO.iodata_to_binary(&1))},
      {"Mtrace.leaks/1", @slow_rounds, fn ctx -> {&Mtrace.leaks/1, [opts(:leaks, ctx)]} end,
       &sites?/1},
      {"Mtrace.leaks_info/1", @slow_rounds,
       fn ctx -> {&Mtrace.leaks_info/1, [opts(:leaks, ctx)]} end,
       &match?({sites, %{pause_ns: _}} when is_list(sites), &1)},
      {"Mtrace.write/3", @slow_rounds,
       fn ctx ->
         path =
           if :rand.uniform(5) == 1,
             do: {Enum.random([1, :a, nil, {ctx.dir}]), false},
             else: {Path.join(ctx.dir, "out"), true}

         {format, ok_format} =
           if :rand.uniform(5) == 1,
             do: {Enum.random([:svg, nil]), false},
             else: {Enum.random(@formats), true}

         # Only this test's own library, so that a round renders a few sites, not the node's;
         # what is wrong is a value (a key of render/3's could be a filter of the reader's).
         {opts, ok_opts} = opts(:render, ctx, 1)

         opts =
           if is_list(opts) and ok_opts,
             do: [library: "leaky.so", what: Enum.random([:live, :leaks])] ++ opts,
             else: opts

         {&Mtrace.write/3, [path, {format, ok_format}, {opts, ok_opts}]}
       end, &(&1 == :ok)}
    ]
  end

  defp records?(list),
    do:
      is_list(list) and
        Enum.all?(
          list,
          &match?(
            {age, size, address, ns, stack}
            when is_float(age) and is_integer(size) and is_integer(address) and is_integer(ns) and
                   is_list(stack),
            &1
          )
        )

  defp sites?(list), do: is_list(list) and Enum.all?(list, &is_struct(&1, Mtrace.Site))

  # Calls f with the generated arguments; a valid call must answer in shape (or, for leaks,
  # with the documented IncompleteError), an invalid one must raise an ArgumentError of name's.
  defp check(name, f, args, shape) do
    valid = Enum.all?(args, &elem(&1, 1))
    terms = Enum.map(args, &elem(&1, 0))

    outcome =
      try do
        {:ok, apply(f, terms)}
      rescue
        e in ArgumentError -> {:argument_error, e.message}
        e in Mtrace.IncompleteError -> {:incomplete, e}
      end

    case {valid, outcome} do
      {true, {:ok, answer}} ->
        assert shape.(answer), "#{name}(#{inspect(terms)}) answered #{inspect(answer)}"

      {true, {:incomplete, _}} when name in ["Mtrace.leaks/1", "Mtrace.leaks_info/1"] ->
        :ok

      # write/3 checks its render options through render/3, which names itself; a NIF stub's
      # badarg names nothing.
      {false, {:argument_error, message}} ->
        names =
          case name do
            "Mtrace.write/3" -> [name, "Mtrace.render/3"]
            "Mtrace.Nif." <> _ -> [""]
            _ -> [name]
          end

        assert String.starts_with?(message, names),
               "#{name}(#{inspect(terms)}) raised an ArgumentError that does not name it: #{message}"

      {valid, outcome} ->
        flunk(
          "#{name}(#{inspect(terms)}), #{if valid, do: "valid", else: "invalid"}: #{inspect(outcome)}"
        )
    end
  end

  @tag :tmp_dir
  test "public readers answer valid arguments in shape and refuse each invalid one by name",
       %{tmp_dir: dir} do
    kept = Mtrace.Test.Leaky.alloc(:malloc, 4_242_003)
    on_exit(fn -> Mtrace.Test.Leaky.release(:malloc, kept) end)
    before = Mtrace.stats()
    ctx = %{mark: Mtrace.mark(), sites: Mtrace.top(3), dir: dir}

    for {name, rounds, gen, shape} <- calls(), _ <- 1..rounds do
      {f, args} = gen.(ctx)
      check(name, f, args, shape)
    end

    consistent!(before, kept)
  end

  test "NIF stubs answer valid arguments in shape and raise ArgumentError on any invalid one" do
    kept = Mtrace.Test.Leaky.alloc(:malloc, 4_242_004)
    on_exit(fn -> Mtrace.Test.Leaky.release(:malloc, kept) end)
    before = Mtrace.stats()
    nif = Mtrace.Nif

    calls = [
      {"olds_nif", @rounds, fn -> {&nif.olds_nif/3, [u64(), bool(), filter()]} end, &is_list/1},
      {"sites_nif", @rounds, fn -> {&nif.sites_nif/2, [filter(), u64()]} end,
       &match?({now, rows} when is_integer(now) and is_list(rows), &1)},
      {"frames_nif", @rounds, fn -> {&nif.frames_nif/2, [ids(), bool()]} end, &is_list/1},
      {"leaks_nif", @slow_rounds, fn -> {&nif.leaks_nif/2, [filter(), bool()]} end,
       &(match?({blocks, %{}} when is_list(blocks), &1) or
           match?({blocks, %{}, whys} when is_list(blocks) and is_list(whys), &1) or
           match?({:error, _, _}, &1))}
    ]

    for {name, rounds, gen, shape} <- calls, _ <- 1..rounds do
      {f, args} = gen.()
      check("Mtrace.Nif." <> name, f, args, shape)
    end

    # frames_nif answers one stack per id.
    ids = Enum.to_list(0..min(Mtrace.stats().stacks, 5))
    assert length(nif.frames_nif(ids, false)) == length(ids)
    consistent!(before, kept)
  end

  defp u64, do: pick([0, 1, 10, (1 <<< 64) - 1], [-1, 1 <<< 64, 1.0, :a, nil])
  defp bool, do: pick([true, false], [nil, 1, "true"])

  # The filter tuple of mtrace_options:filter/1, one element at a time.
  defp filter do
    elements = [
      u64(),
      u64(),
      u64(),
      u64(),
      text(),
      text(),
      pick([nil, "lists:", "'Elixir.Mtrace':"], ["", 1, :a, "a\0b"])
    ]

    if :rand.uniform(10) == 1,
      do: {Enum.random([{}, {0, 0}, List.to_tuple(List.duplicate(0, 8)), [], :a]), false},
      else:
        {elements |> Enum.map(&elem(&1, 0)) |> List.to_tuple(), Enum.all?(elements, &elem(&1, 1))}
  end

  defp text,
    do:
      pick([nil, "", "leaky", String.duplicate("x", 1023)], [
        :a,
        1,
        ~c"x",
        "a\0b",
        String.duplicate("x", 1024)
      ])

  # Stack ids: up to the number interned (0 is the empty stack); past it, or not a proper list of
  # integers, badarg.
  defp ids do
    stacks = Mtrace.stats().stacks
    good = Enum.map(1..:rand.uniform(4), fn _ -> :rand.uniform(stacks + 1) - 1 end)

    case :rand.uniform(6) do
      1 -> {good ++ [Enum.random([stacks + 1_000_000, -1, 1 <<< 64, :a])], false}
      2 -> {Enum.random([:a, [1 | 2], {1}]), false}
      _ -> {good, true}
    end
  end

  defp pick(good, bad),
    do: if(:rand.uniform(5) == 1, do: {Enum.random(bad), false}, else: {Enum.random(good), true})

  # After the fuzz: the node still records and its counters moved only forwards: the block kept
  # before is there with its size and stack; nothing was reset, dropped or detached.
  defp consistent!(before, kept) do
    now = Mtrace.stats()
    assert now.preloaded and now.attach == :preloaded
    assert now.resets == before.resets and now.dropped == before.dropped

    for {key, value} <- before,
        is_integer(value),
        String.ends_with?(Atom.to_string(key), "_cnt"),
        do: assert(now[key] >= value, "#{key} went back")

    assert now.estimated == false and now.slots >= before.slots and now.stacks >= before.stacks

    assert [{_, size, ^kept, _, [{_, "malloc"}, {_, "leak_malloc"} | _]}] =
             Enum.filter(Mtrace.olds(1 <<< 64, library: "leaky.so"), &(elem(&1, 2) == kept))

    assert size in 4_242_003..4_242_004
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
end
