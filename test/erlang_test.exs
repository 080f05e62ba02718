defmodule Mtrace.ErlangTest do
  # MTRACE_UNWIND=erlang in nodes started with +JPperf map: native stacks go on through the
  # Erlang functions that called the NIF (test/support/chain.ex), named from the perf map.
  use ExUnit.Case, async: true
  import Mtrace.Test.Helpers

  @moduletag timeout: 180_000

  @erlang [{"MTRACE_UNWIND", "erlang"}, {"ERL_AFLAGS", "+JPperf map"}]

  # Runs code in a fresh node with the preload and env: its value, as a term. The node removes
  # the perf map the BEAM leaves in /tmp.
  defp in_node(code, env) do
    code = """
    alias Mtrace.Test.{Chain, Leaky}
    result = (#{code})
    File.rm("/tmp/perf-\#{System.pid()}.map")
    result
    """

    node_result(code, [{"LD_PRELOAD", mtrace_so()} | env])
  end

  # The perf map's name of each address of the stack of the live site of `bytes` bytes, read
  # here and not by mtrace: "?" outside the map, nil for frames in a library.
  @jit_names """
  (fn bytes ->
    ranges =
      for line <- String.split(File.read!("/tmp/perf-\#{System.pid()}.map"), "\\n", trim: true) do
        [start, size, name] = String.split(line, " ", parts: 3)
        {String.to_integer(String.trim_leading(start, "0x"), 16), String.to_integer(size, 16), name}
      end

    site = Enum.find(Mtrace.top(1_000_000), &(&1.bytes == bytes))

    for f <- site.stack do
      if f.library, do: nil, else:
        ranges
        |> Enum.filter(fn {a, s, _} -> f.address >= a and f.address < a + s end)
        |> Enum.map(&elem(&1, 2))
        |> List.last() || "?"
    end
  end)
  """

  @chain [
    {Mtrace.Test.Chain, :c, 1},
    {Mtrace.Test.Chain, :b, 1},
    {Mtrace.Test.Chain, :a, 1}
  ]

  # The Erlang frames of the live site of `bytes` bytes, as {module, function, arity}.
  @erlang_frames """
  (fn bytes ->
    site = Enum.find(Mtrace.top(1_000_000), &(&1.bytes == bytes))
    for %{kind: :erlang} = f <- site.stack, do: {f.module, f.function, f.arity}
  end)
  """

  test "a NIF's stack goes on through the Erlang functions that called it, in order" do
    {names, frames, spawned, olds, stats} =
      in_node(
        """
        _ = Chain.a(4321)
        task = Task.async(fn -> Chain.a(4322) end)
        _ = Task.await(task)
        [{_, _, _, _, olds}] = Mtrace.olds(1, erlang: "Mtrace.Test.Chain:b/1", min_size: 4322)
        {#{@jit_names}.(4321), #{@erlang_frames}.(4321), #{@erlang_frames}.(4322), olds,
         Mtrace.stats()}
        """,
        @erlang
      )

    # The perf map read here names the addresses in the same order as mtrace does.
    erlang = Enum.reject(names, &is_nil/1)

    assert ["$global::call_nif_shared" | rest] = erlang
    assert Enum.take(rest, 3) == Enum.map(@chain, fn {m, f, a} -> "$'#{m}':#{f}/#{a}" end)
    refute "?" in erlang

    assert [{nil, "global::call_nif_shared", nil} | rest] = frames
    assert Enum.take(rest, 3) == @chain
    # In a process of its own, from the process's first function.
    assert [{nil, "global::call_nif_shared", nil} | rest] = spawned
    assert Enum.take(rest, 3) == @chain
    assert {Task.Supervised, :invoke_mfa, 2} in rest

    assert [{_, "malloc"}, {_, "leak_malloc"}, {_, "nif_alloc"}, {_, _} | tail] = olds

    assert [{:erlang, "global::call_nif_shared"}, {:erlang, "'Elixir.Mtrace.Test.Chain':c/1"} | _] =
             tail

    assert stats.erlang_frames == :on and stats.unwind == :erlang
  end

  # The Erlang frames of the record of `bytes` bytes, from olds/2: one record, whatever stack
  # other blocks share with it.
  @olds_erlang """
  (fn bytes ->
    [{_, _, _, _, stack}] = Mtrace.olds(1_000_000, min_size: bytes) |> Enum.filter(&(elem(&1, 1) == bytes))
    for {:erlang, name} <- stack, do: name
  end)
  """

  test "a module loaded again is named by its new code, and its old code's stacks still by theirs" do
    # The new version has one more function between c/1 and the NIF: a reader that did not read
    # the perf map again would not name it.
    {before, old, new} =
      in_node(
        """
        _ = Chain.a(5001)
        before = #{@olds_erlang}.(5001)
        source =
          String.replace(
            File.read!("test/support/chain.ex"),
            "def c(n), do: [Leaky.alloc(:malloc, n)]",
            "def c(n), do: [d(n)]\\n  def d(n), do: [Leaky.alloc(:malloc, n)]"
          )
        [{Chain, beam}] = Code.compile_string(source)
        :code.purge(Chain)
        {:module, Chain} = :code.load_binary(Chain, ~c"chain.ex", beam)
        :code.purge(Chain)
        _ = Chain.a(5002)
        {before, #{@olds_erlang}.(5001), #{@olds_erlang}.(5002)}
        """,
        @erlang
      )

    names = Enum.map(@chain, fn {m, f, a} -> "'#{m}':#{f}/#{a}" end)
    assert Enum.slice(before, 1, 3) == names
    assert Enum.slice(old, 1, 3) == names
    assert Enum.slice(new, 1, 4) == ["'Elixir.Mtrace.Test.Chain':d/1" | names]
  end

  test "leaks/1 and diff/2 take the erlang: filter and give Erlang frames in their sites" do
    # Chain.a/1 returns the block's address as a small integer, which is not a pointer: the
    # node loses the blocks it drops. Called from code that erl_eval runs, the blocks share one
    # stack: leaks/1 is asked for one site a block.
    {lost, grown, none} =
      in_node(
        """
        erlang_of = fn sites ->
          for s <- sites, do: {s.bytes, for(%{kind: :erlang, function: f} <- s.stack, do: f)}
        end
        _ = for n <- 4401..4408, do: Chain.a(n)
        mark = Mtrace.mark()
        _ = Chain.a(4500)
        Process.sleep(1100)
        {erlang_of.(Mtrace.leaks(erlang: "Mtrace.Test.Chain:b/1", min_size: 4401, blocks: true)),
         erlang_of.(Mtrace.diff(mark, erlang: "Mtrace.Test.Chain")),
         Mtrace.leaks(erlang: "Mtrace.Test.Nowhere") ++ Mtrace.diff(mark, erlang: "lists:map/2")}
        """,
        @erlang
      )

    # The mark is conservative: a block may read as reachable now and then (so nine are lost),
    # never one of the VM's as lost through the chain.
    assert lost != [] and
             Enum.all?(lost, fn {bytes, _} -> bytes in 4401..4408 or bytes == 4500 end)

    assert Enum.all?(lost, fn {_, fs} -> Enum.slice(fs, 1, 3) == [:c, :b, :a] end), inspect(lost)
    assert [{4500, [_, :c, :b, :a | _]}] = grown
    assert none == []
  end

  test "on a dirty scheduler, the Erlang caller is unknown" do
    sites =
      in_node(
        """
        _ = Chain.dirty(6001)
        _ = Chain.a(6002)
        for s <- Mtrace.top(1_000_000, group: :erlang, library: "leaky"), do: {s.bytes, s.stack |> List.last() |> Mtrace.Format.label()}
        """,
        @erlang
      )

    assert {6001, "(Erlang caller unknown)"} in sites
    assert {6002, "Mtrace.Test.Chain.c/1 (chain.ex:11)"} in sites
  end

  test "a node started without +JPperf map says what is lost, whatever file is at its map's path" do
    # A map left behind by an earlier process of the same pid: the node does not hold it open.
    # (recorder_test checks the library's own answer, which stats/0 reports.)
    {stats, frames} =
      in_node(
        """
        stale = "/tmp/perf-\#{System.pid()}.map"
        File.write!(stale, "7f0000000000 100 Elixir.Stale:left_behind/0\\n")
        _ = Chain.a(7001)
        result = {Mtrace.stats(), #{@erlang_frames}.(7001)}
        File.rm!(stale)
        result
        """,
        [{"MTRACE_UNWIND", "erlang"}]
      )

    assert stats.erlang_frames == :no_perf_map
    # The stack ends at its first JIT frame, which the VM's debugger entries name.
    assert frames == [{nil, "global::call_nif_shared", nil}]
  end

  test "JIT code is named, with the Erlang source line, from the entries the VM makes for a debugger" do
    source = """
    _ = Chain.a(7101)
    site = Enum.find(Mtrace.top(1_000_000), &(&1.bytes == 7101))
    for %{kind: :erlang} = f <- site.stack, do: {f.function, f.file && Path.basename(f.file), f.line}
    """

    # A node with the defaults: no perf map, and a NIF's stack ends at the JIT code that called it.
    assert in_node(source, []) == [{"global::call_nif_shared", nil, nil}]

    # Through the Erlang frames (+JPperf map), each with the line of its call, which no perf map
    # line has: chain.ex's a/1, b/1 and c/1 call on lines 9 to 11.
    assert [{"global::call_nif_shared", nil, nil}, c, b, a | _] = in_node(source, @erlang)
    assert [c, b, a] == [{:c, "chain.ex", 11}, {:b, "chain.ex", 10}, {:a, "chain.ex", 9}]
  end

  test "under load, through garbage collections and code purges, each block keeps its own callers" do
    # Four processes on one scheduler call the NIF from the same native frames, two through a/1
    # and two through b/1 directly, taking turns: a stack cache that took one process's Erlang
    # frames for another's would give a block the other path. Each keeps one block in ten: 1000
    # records of its size, every one with its own path.
    paths =
      in_node(
        """
        parent = self()
        workers =
          for i <- 1..4 do
            spawn_link(fn ->
              call = if rem(i, 2) == 1, do: &Chain.a/1, else: &Chain.b/1
              kept =
                Enum.reduce(1..10000, [], fn k, kept ->
                  addr = List.flatten(call.(64 + i)) |> hd()
                  if rem(k, 97) == 0, do: :erlang.garbage_collect()
                  if rem(k, 10) == 0, do: [addr | kept], else: (Leaky.release(:malloc, addr); kept)
                end)
              send(parent, {:done, kept})
            end)
          end

        for _ <- 1..20 do
          {Chain, beam, _} = :code.get_object_code(Chain)
          :code.purge(Chain)
          {:module, Chain} = :code.load_binary(Chain, ~c"chain.ex", beam)
          Process.sleep(10)
        end

        for _ <- workers, do: receive(do: ({:done, _} -> :ok))
        paths =
          for {_, size, _, _, stack} <- Mtrace.olds(1_000_000, min_size: 65), size in 65..68 do
            {size, stack |> Enum.filter(&match?({:erlang, "'Elixir.Mtrace.Test.Chain'" <> _}, &1)) |> Enum.map(&elem(&1, 1))}
          end
        Enum.frequencies(paths)
        """,
        [{"MTRACE_UNWIND", "erlang"}, {"ERL_AFLAGS", "+JPperf map +S 1"}]
      )

    c = "'Elixir.Mtrace.Test.Chain':c/1"
    b = "'Elixir.Mtrace.Test.Chain':b/1"
    a = "'Elixir.Mtrace.Test.Chain':a/1"

    assert paths == %{
             {65, [c, b, a]} => 1000,
             {66, [c, b]} => 1000,
             {67, [c, b, a]} => 1000,
             {68, [c, b]} => 1000
           }
  end

  test "the exit report and every output format name the Erlang functions" do
    wrapped = """
    [[[_]]] = Mtrace.Test.Chain.a(8001)
    sites = Mtrace.top(1_000_000, erlang: "Mtrace.Test.Chain:c")
    none = Mtrace.top(1_000_000, erlang: "Mtrace.Test.Chain:c/2")
    rendered =
      for format <- Mtrace.Format.names() do
        text = IO.iodata_to_binary(Mtrace.render(sites, format))
        text = if format == :pprof, do: :zlib.gunzip(text), else: text
        {format, text =~ "Mtrace.Test.Chain.c/1"}
      end
    File.rm("/tmp/perf-\#{System.pid()}.map")
    IO.puts("RENDERED \#{inspect({length(sites), length(none), rendered})}")
    """

    {out, 0} =
      run_node(wrapped, [
        {"LD_PRELOAD", mtrace_so()},
        {"MTRACE_REPORT", "stderr"},
        {"MTRACE_REPORT_REACHABLE", "1"},
        {"MTRACE_REPORT_DEPTH", "12"} | @erlang
      ])

    [_, rendered] = Regex.run(~r/^RENDERED (.*)$/m, out)
    {found, none, formats} = Code.eval_string(rendered) |> elem(0)
    assert found == 1 and none == 0
    for {format, named} <- formats, do: assert(named, "#{format} does not name it")

    assert out =~ ~r/by 0x[0-9a-f]+: 'Elixir.Mtrace.Test.Chain':c\/1 \(chain.ex:11\) \(erlang\)\n/
    # Lost, or kept by a stale word (the mark is conservative): in one list or the other.
    sites = Mtrace.Report.sites(out) ++ Mtrace.Report.sites(out, reachable: true)
    [site] = for s <- sites, s.bytes == 8001, do: s

    assert [
             %Mtrace.Frame{
               kind: :erlang,
               module: Mtrace.Test.Chain,
               function: :c,
               arity: 1,
               file: "chain.ex",
               line: 11
             }
             | _
           ] = Enum.filter(site.stack, &(&1.kind == :erlang and &1.arity != nil))
  end
end
