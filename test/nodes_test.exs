defmodule Mtrace.NodesTest do
  # Nodes started apart from the test node: without the preload, with another copy of the file
  # preloaded, with the defaults, and with a table capped far below what they allocate.
  use ExUnit.Case, async: true
  import Mtrace.Test.Helpers

  @moduletag timeout: 180_000

  @report_error """
  IO.inspect(Mtrace.stats().preloaded, label: "preloaded")
  for call <- [fn -> Mtrace.olds(1) end, fn -> Mtrace.reset() end] do
    try do
      call.()
    rescue
      e in Mtrace.NotPreloadedError -> IO.puts("error: " <> Exception.message(e))
    end
  end
  """

  test "a node started without the preload says so and tells how to start it" do
    {out, 0} = run_node(@report_error)
    assert out =~ "preloaded: false"
    [line | _] = for l <- String.split(out, "\n"), String.starts_with?(l, "error: "), do: l
    assert line =~ "LD_PRELOAD=#{Path.join(:code.priv_dir(:mtrace), "mtrace.so")}"
    assert length(Regex.scan(~r/^error: /m, out)) == 2
  end

  test "where leaks/1 could not walk glibc's heap either, the error says why" do
    e = Mtrace.NotPreloadedError.exception(heap_refused: "main arena not found")
    assert Exception.message(e) =~ "could not walk glibc's heap either (main arena not found)."
    refute Exception.message(Mtrace.NotPreloadedError.exception([])) =~ "glibc's heap"
  end

  @tag :tmp_dir
  test "a node that preloaded another copy of the file is not mistaken for a traced one",
       %{tmp_dir: dir} do
    copy = Path.join(dir, "mtrace.so")
    File.cp!(mtrace_so(), copy)
    {out, 0} = run_node(@report_error, [{"LD_PRELOAD", copy}])
    assert out =~ "preloaded: false"
    assert length(Regex.scan(~r/^error: .*LD_PRELOAD=/m, out)) == 2
  end

  test "a full table counts what it drops and misattributes nothing" do
    code = """
    alias Mtrace.Test.Leaky
    Mtrace.reset()
    before = Mtrace.stats()
    blocks = for i <- 1..3000, do: {Leaky.alloc(:malloc, 16 * i), 16 * i}
    after_ = Mtrace.stats()
    sizes = Map.new(blocks)
    ours = Enum.filter(Mtrace.olds(100_000, false), fn {_, _, a, _, _} -> Map.has_key?(sizes, a) end)
    bad = Enum.reject(ours, fn {_, size, a, _, [_, {_, fun} | _]} -> sizes[a] == size and fun == "leak_malloc" end)
    IO.puts("slots=\#{after_.slots} records=\#{after_.records} ours=\#{length(ours)} " <>
            "dropped=\#{after_.dropped - before.dropped} bad=\#{length(bad)}")
    """

    {out, 0} =
      run_node(code, [
        {"LD_PRELOAD", mtrace_so()},
        {"MTRACE_SLOTS", "256"},
        {"MTRACE_SLOTS_MAX", "256"}
      ])

    [slots, records, ours, dropped, bad] =
      Regex.run(~r/slots=(\d+) records=(\d+) ours=(\d+) dropped=(\d+) bad=(\d+)/, out,
        capture: :all_but_first
      )
      |> Enum.map(&String.to_integer/1)

    assert slots == 256
    assert records <= 256
    assert bad == 0
    assert ours > 0
    # Every block is held or counted; BEAM threads may drop records of their own meanwhile.
    assert ours + dropped >= 3000
  end

  # Start-up alone has more live blocks than 4096 slots hold; then 50,000 more, all live at once.
  @grow """
  alias Mtrace.Test.Leaky
  blocks = for _ <- 1..50_000, do: Leaky.alloc(:malloc, 64)
  s = Mtrace.stats()
  Enum.each(blocks, &Leaky.release(:malloc, &1))
  IO.puts("slots=\#{s.slots} grown=\#{s.grown} records=\#{s.records} dropped=\#{s.dropped}")
  """

  defp grow_node(env) do
    {out, 0} = run_node(@grow, [{"LD_PRELOAD", mtrace_so()} | env])

    Regex.run(~r/slots=(\d+) grown=(\d+) records=(\d+) dropped=(\d+)/, out,
      capture: :all_but_first
    )
    |> Enum.map(&String.to_integer/1)
  end

  test "a node started with the defaults grows its table and drops nothing" do
    [slots, grown, records, dropped] = grow_node([])
    assert dropped == 0
    assert grown > 0 and slots == 4096 * 2 ** grown
    assert records >= 50_000
  end

  test "MTRACE_SLOTS_MAX at the start keeps the table at 4096 slots, which drop" do
    [slots, grown, records, dropped] = grow_node([{"MTRACE_SLOTS_MAX", "4096"}])
    assert {slots, grown} == {4096, 0}
    assert records <= 4096 and dropped > 0
  end

  # Each process under the preload (the launcher scripts too) says it once; never more.
  test "malformed MTRACE_* variables are reported and the node runs on defaults" do
    {out, 0} =
      run_node(
        ~s|s = Mtrace.stats(); IO.inspect({Bitwise.bsr(s.slots, s.grown), s.depth, s.lanes})|,
        [
          {"LD_PRELOAD", mtrace_so()},
          {"MTRACE_SLOTS", "lots"},
          {"MTRACE_DEPTH", "0"},
          {"MTRACE_LANES", "3"}
        ]
      )

    # One lane per CPU the node may run on, at most 2, and at least 2048 slots a lane; the table
    # started at 4096 slots, and doubled as the node grew.
    lanes = min(:erlang.system_info(:logical_processors_available), div(4096, 2048))
    assert out =~ "{4096, 20, #{lanes}}"
    said = out |> String.split("\n") |> Enum.filter(&String.starts_with?(&1, "mtrace: "))
    slots = Enum.filter(said, &String.starts_with?(&1, "mtrace: MTRACE_SLOTS=lots: expected "))
    depth = Enum.filter(said, &String.starts_with?(&1, "mtrace: MTRACE_DEPTH=0: expected "))
    lane = Enum.filter(said, &String.starts_with?(&1, "mtrace: MTRACE_LANES=3: expected "))
    assert slots != [] and length(slots) == length(depth) and length(slots) == length(lane)
    assert length(said) == 3 * length(slots)
  end
end
