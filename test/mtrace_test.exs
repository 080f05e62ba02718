defmodule MtraceTest do
  # The table is one per node: these tests must not run beside each other.
  use ExUnit.Case, async: false
  import Bitwise
  import ExUnit.CaptureLog
  import Mtrace.Test.Helpers
  alias Mtrace.Test.Leaky

  doctest Mtrace

  # BEAM threads allocate all the time: counters of functions the BEAM never calls move by
  # exactly what a test did; the others move by at least that.
  @exact [:reallocarray, :aligned_alloc, :memalign, :valloc, :pvalloc, :strndup]

  defp size_for(:strndup, i, extra), do: 10 + i + extra
  defp size_for(_kind, i, extra), do: 1000 + 64 * i + extra

  defp hook_of(:cxx_new), do: "malloc"
  defp hook_of(kind), do: Atom.to_string(kind)

  setup do
    Mtrace.reset()
    :ok
  end

  test "the node runs with the preload" do
    stats = Mtrace.stats()
    assert stats.preloaded == true
    assert stats.slots >= 4096
    assert stats.lanes == min(:erlang.system_info(:logical_processors_available), 2)
    assert stats.depth == 20
    assert stats.unwind == :libunwind
  end

  test "stats/0 returns exactly the keys its doc describes" do
    {:docs_v1, _, _, _, _, _, docs} = Code.fetch_docs(Mtrace)
    [doc] = for {{:function, :stats, 1}, _, _, %{"en" => doc}, _} <- docs, do: doc

    # The one list: the keys that the doc's items describe, each run of them ending in " - " (the
    # values in backquotes further on, such as `:fp`, are not keys).
    described =
      for [run] <- Regex.scan(~r/(?:`:\w+`,\s+)*`:\w+` -\s/, doc),
          [_, key] <- Regex.scan(~r/`:(\w+)`/, run),
          do: String.to_atom(key)

    keys = Map.keys(Mtrace.stats())
    assert length(described) == length(Enum.uniq(described)), "a key described twice"
    assert keys -- described == [], "returned, not described"
    assert described -- keys == [], "described, not returned"
    # Each hooked function of c_src/record/hooklist.h has its counter.
    hooks = Regex.scan(~r/^    X\((\w+), MT_/m, File.read!("c_src/record/hooklist.h"))
    assert length(hooks) > 10
    assert Enum.reject(hooks, fn [_, name] -> :"#{name}_cnt" in keys end) == []
  end

  test "olds finds exactly the leaked blocks, with sizes, hooks and allocating functions" do
    before = Mtrace.stats()

    blocks =
      for {kind, i} <- Enum.with_index(Leaky.kinds()), extra <- [0, 7] do
        size = size_for(kind, i, extra)
        address = Leaky.alloc(kind, size)
        assert address != 0
        {kind, size, address, extra == 7}
      end

    {freed, leaked} = Enum.split_with(blocks, fn {_, _, _, free?} -> free? end)
    Enum.each(freed, fn {kind, _, address, _} -> Leaky.release(kind, address) end)

    after_ = Mtrace.stats()
    records = blocks |> Enum.map(&elem(&1, 2)) |> records_at() |> from_leaky()

    assert records |> Map.keys() |> Enum.sort() ==
             leaked |> Enum.map(&elem(&1, 2)) |> Enum.sort()

    leaky_so = Path.expand("support/c_src/leaky.so", __DIR__)

    for {kind, size, address, _} <- leaked do
      {age, ^size, ^address, ns, stack} = records[address]
      assert is_float(age) and age >= 0.0 and age < 60.0
      assert is_integer(ns) and ns > 0
      [{so, hook} | callers] = stack
      assert Path.basename(so) == "mtrace.so"
      assert hook == hook_of(kind), "#{kind}: frame 0 is #{inspect(hook)}"

      # libstdc++'s operator new[] tail-calls operator new, so only the latter is on the stack.
      case kind do
        :cxx_new ->
          assert [{libstdcxx, "operator new(unsigned long)"}, {^leaky_so, name} | _] = callers
          assert libstdcxx =~ "libstdc++"
          assert name == "leaky::cxx_new(unsigned long)"

        _ ->
          assert [{^leaky_so, name} | _] = callers
          assert name == "leak_#{kind}"
      end

      refute Enum.any?(tl(stack), fn frame -> match?({^so, _}, frame) end),
             "no other tracer frame: #{inspect(stack)}"
    end

    moved = fn kind -> after_[:"#{kind}_cnt"] - before[:"#{kind}_cnt"] end
    per_kind = fn kind -> Enum.count(blocks, &(elem(&1, 0) == kind)) end

    for kind <- @exact do
      assert moved.(kind) == per_kind.(kind), "#{kind}_cnt moved by #{moved.(kind)}"
    end

    # realloc and reallocarray start from a malloc(8); C++ new is a malloc.
    assert moved.(:malloc) >=
             per_kind.(:malloc) + per_kind.(:realloc) + per_kind.(:reallocarray) +
               per_kind.(:cxx_new)

    assert moved.(:calloc) >= per_kind.(:calloc)
    assert moved.(:realloc) >= per_kind.(:realloc)
    assert moved.(:strdup) >= per_kind.(:strdup)
    assert moved.(:posix_memalign) >= per_kind.(:posix_memalign)
    assert moved.(:free) >= length(freed)

    Enum.each(leaked, fn {kind, _, address, _} -> Leaky.release(kind, address) end)
    assert leaked |> Enum.map(&elem(&1, 2)) |> records_at() |> from_leaky() == %{}
  end

  # A freed block's address may be reused at once by a VM thread: a record there is only one
  # of ours if leaky.so made it.
  defp from_leaky(records) do
    leaky_so = Path.expand("support/c_src/leaky.so", __DIR__)

    Map.filter(records, fn {_, {_, _, _, _, stack}} ->
      Enum.any?(stack, &match?({^leaky_so, _}, &1))
    end)
  end

  test "names are demangled in C only when asked" do
    address = Leaky.alloc(:cxx_new, 333)
    raw = records_at([address], false)[address] |> elem(4) |> names()
    demangled = records_at([address], demangle: true)[address] |> elem(4) |> names()
    assert "_ZN5leaky7cxx_newEm" in raw
    assert "_Znwm" in raw
    assert "leaky::cxx_new(unsigned long)" in demangled
    assert records_at([address], demangle: false) |> Map.keys() == [address]
    Leaky.release(:cxx_new, address)
  end

  test "olds lists the oldest first and returns at most n" do
    addresses =
      for size <- [101, 102, 103] do
        Process.sleep(20)
        Leaky.alloc(:malloc, size)
      end

    all = Mtrace.olds(1_000_000)
    ours = Enum.filter(all, fn {_, _, address, _, _} -> address in addresses end)
    assert Enum.map(ours, &elem(&1, 2)) == addresses
    ages = Enum.map(all, &elem(&1, 0))
    assert ages == Enum.sort(ages, :desc)
    assert length(Mtrace.olds(2)) == 2
    assert Mtrace.olds(0) == []
    Enum.each(addresses, &Leaky.release(:malloc, &1))
  end

  test "olds takes library: and min_age:, and filters before it counts n" do
    address = Leaky.alloc(:malloc, 4321)
    ours = fn opts -> Enum.filter(Mtrace.olds(1_000_000, opts), &(elem(&1, 2) == address)) end
    in_leaky? = fn {_, _, _, _, stack} -> Enum.any?(stack, &(&1 && elem(&1, 0) =~ "leaky.so")) end

    listed = Mtrace.olds(1_000_000, library: "leaky.so")
    assert [{_, 4321, ^address, _, _}] = Enum.filter(listed, &(elem(&1, 2) == address))
    assert Enum.all?(listed, in_leaky?)

    # The VM's own blocks are older, but with the filter n counts only the NIF's.
    assert [oldest] = Mtrace.olds(1, library: "leaky.so")
    assert in_leaky?.(oldest)
    assert Mtrace.olds(1_000, library: "no-such-library") == []
    assert ours.(library: "leaky.so", min_age: 3600) == []
    Process.sleep(1100)
    assert [{age, 4321, ^address, _, _}] = ours.(library: "leaky.so", min_age: 1)
    assert age >= 1.0
    Leaky.release(:malloc, address)
  end

  # A site as {bytes, blocks, function of frame 1}, for the NIF's own sites.
  defp brief(sites), do: Enum.map(sites, &{&1.bytes, &1.blocks, Enum.at(&1.stack, 1).function})

  test "top groups the live blocks by stack, by depth and by function, largest first" do
    a = for size <- [5000, 5000, 5001], do: Leaky.alloc(:malloc, size)
    b = for _ <- 1..2, do: Leaky.alloc(:cxx_new, 7000)
    c = Leaky.alloc(:calloc, 300)

    assert brief(Mtrace.top(10, library: "leaky.so")) == [
             {15001, 3, "leak_malloc"},
             {14000, 2, "operator new(unsigned long)"},
             {300, 1, "leak_calloc"}
           ]

    assert brief(Mtrace.top(2, library: "leaky.so")) |> length() == 2

    assert brief(Mtrace.top(10, library: "leaky.so", min_size: 5001)) == [
             {14000, 2, "operator new(unsigned long)"},
             {5001, 1, "leak_malloc"}
           ]

    assert brief(Mtrace.top(10, function: ~r/^leaky::/)) == [
             {14000, 2, "operator new(unsigned long)"}
           ]

    # A Regex another PCRE compiled (a node of another OTP release) is compiled again from its
    # source, with its options.
    foreign = %{~r/^LEAKY::/i | re_version: {"0.0 foreign", :little}, re_pattern: :not_ours}
    assert brief(Mtrace.top(10, function: foreign)) == [{14000, 2, "operator new(unsigned long)"}]

    # Once the clock's tick has passed (mark/0 waits for it), every block is older than 0 s.
    Mtrace.mark()
    assert Mtrace.top(10, library: "leaky.so", max_age: 0.0) == []

    assert brief(Mtrace.top(10, library: "leaky.so", max_age: 3600)) == [
             {15001, 3, "leak_malloc"},
             {14000, 2, "operator new(unsigned long)"},
             {300, 1, "leak_calloc"}
           ]

    # olds takes the same filters: a Regex, matched against the names it returns, and a string.
    assert Mtrace.olds(10, demangle: true, function: ~r/^leaky::cxx_/)
           |> Enum.map(&elem(&1, 2))
           |> Enum.sort() == Enum.sort(b)

    assert [_] = Mtrace.olds(1, demangle: true, function: ~r/^leaky::cxx_/)
    assert Mtrace.olds(10, demangle: false, function: ~r/^leaky::/) == []
    assert Mtrace.olds(10, function: "leak_calloc") |> Enum.map(&elem(&1, 2)) == [c]

    [cxx] = Mtrace.top(1, function: "cxx_new", group: {:depth, 3})
    assert {cxx.bytes, length(cxx.stack)} == {14000, 3}

    by_fun = Mtrace.top(10, library: "leaky.so", group: :function)
    malloc = Enum.find(by_fun, &(Enum.at(&1.stack, 1).function == "leak_malloc"))
    assert {malloc.bytes, malloc.blocks, length(malloc.stack)} == {15001, 3, 2}
    assert [%Mtrace.Site{bytes: 15001}] = malloc.paths

    # With library:, C++ new's site is named after the library's function, not operator new.
    assert Enum.map(by_fun, &{&1.bytes, List.last(&1.stack).function, length(&1.stack)}) == [
             {15001, "leak_malloc", 2},
             {14000, "leaky::cxx_new(unsigned long)", 3},
             {300, "leak_calloc", 2}
           ]

    assert [%Mtrace.Site{stack: [_, %Mtrace.Frame{function: "operator new(unsigned long)"}]}] =
             Mtrace.top(1, function: "cxx_new", group: :function)

    Enum.each(a, &Leaky.release(:malloc, &1))
    Enum.each(b, &Leaky.release(:cxx_new, &1))
    Leaky.release(:calloc, c)
    assert Mtrace.top(10, library: "leaky.so") == []
  end

  test "diff shows what a workload left behind since a mark, and since: filters by it" do
    before = Leaky.alloc(:calloc, 1111)
    mark = Mtrace.mark()
    kept = for _ <- 1..3, do: Leaky.alloc(:malloc, 2222)
    Leaky.release(:malloc, Leaky.alloc(:strdup, 50))
    Leaky.release(:calloc, before)

    diff = Mtrace.diff(mark, library: "leaky.so")
    # 3 blocks of 2222 grew; the calloc'd 1111 live at the mark was freed; strdup's came and went.
    assert Enum.map(diff, &{&1.bytes, &1.blocks, &1.allocated_bytes, &1.freed_bytes}) == [
             {6666, 3, 6666, 0},
             {-1111, -1, 0, 1111}
           ]

    assert [{_, 2222, _, _, _}, {_, 2222, _, _, _}, {_, 2222, _, _, _}] =
             Mtrace.olds(100, since: mark, library: "leaky.so")

    assert Mtrace.top(10, since: mark, library: "leaky.so") |> brief() == [
             {6666, 3, "leak_malloc"}
           ]

    Enum.each(kept, &Leaky.release(:malloc, &1))
    assert Mtrace.diff(mark, library: "leaky.so") |> Enum.map(& &1.bytes) == [-1111]
  end

  test "reset empties the table and returns how many records it cleared" do
    addresses = for _ <- 1..50, do: Leaky.alloc(:malloc, 4242)
    assert map_size(records_at(addresses)) == 50
    cleared = Mtrace.reset()
    assert cleared >= 50
    assert records_at(addresses) == %{}
    Enum.each(addresses, &Leaky.release(:malloc, &1))
  end

  test "a diff across a reset warns that the blocks live at the reset read as freed" do
    a = Leaky.alloc(:malloc, 3333)
    mark = Mtrace.mark()
    diff = fn -> Enum.map(Mtrace.diff(mark, library: "leaky.so"), &{&1.bytes, &1.freed_bytes}) end

    assert capture_log(fn -> assert diff.() == [] end) == ""

    Mtrace.reset()
    log = capture_log(fn -> assert diff.() == [{-3333, 3333}] end)
    assert log =~ "[warning] Mtrace.diff/2: Mtrace.reset/0 ran since the mark"
    Leaky.release(:malloc, a)
  end

  test "bad options of top, diff and olds raise ArgumentError naming them" do
    for bad <- [[group: :line], [group: {:depth, 0}], [min_size: -1], [max_age: :old], [since: 1]] do
      assert_raise ArgumentError, ~r/^Mtrace.top\/2: /, fn -> Mtrace.top(1, bad) end
    end

    assert_raise ArgumentError, ~r/^Mtrace.top\/2: n must be/, fn -> Mtrace.top(-1) end

    # A mark keeps each stack's totals: a filter on blocks would count those it leaves out as
    # freed.
    mark = Mtrace.mark()

    for bad <- [[since: mark], [min_size: 1], [min_age: 0], [max_age: 10]] do
      assert_raise ArgumentError, ~r/filters blocks, and a mark keeps each stack's totals/, fn ->
        Mtrace.diff(mark, bad)
      end
    end

    assert_raise ArgumentError, ~r/function must be a string, a Regex/, fn ->
      Mtrace.olds(1, function: 42)
    end

    assert_raise ArgumentError, ~r/mark of other@host/, fn ->
      Mtrace.top(1, since: %Mtrace.Mark{node: :other@host})
    end
  end

  test "bad arguments raise ArgumentError and never reach C unchecked" do
    for bad <- [-1, 1.5, :ten, "10", nil] do
      assert_raise ArgumentError, fn -> Mtrace.olds(bad) end
    end

    for bad <- [:yes, 1, nil, [demangle: :yes], [demangle: true, extra: 1], [foo: true]] do
      assert_raise ArgumentError, fn -> Mtrace.olds(1, bad) end
    end

    assert_raise ArgumentError, fn -> Mtrace.Nif.olds_nif(-1, true, {0, 0, 0, 0, nil, nil}) end
    assert_raise ArgumentError, fn -> Mtrace.Nif.olds_nif(1, :maybe, {0, 0, 0, 0, nil, nil}) end

    assert_raise ArgumentError, fn ->
      Mtrace.Nif.olds_nif(1 <<< 70, false, {0, 0, 0, 0, nil, nil})
    end
  end
end
