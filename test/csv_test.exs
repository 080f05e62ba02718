defmodule Mtrace.CsvTest do
  # The CSV export (MTRACE_CSV), from test/report/csvprog: rows loaded into sqlite3 and checked
  # against what the program did; names that need RFC 4180 quoting; a file moved, deleted,
  # restarted past MTRACE_CSV_MAX; a file or a symbolic link already at the path.
  use ExUnit.Case, async: true
  import Mtrace.Test.Report

  @moduletag timeout: 120_000

  @header "event,time,address,size,allocated,tid,kind,stack_id,stack,weight"

  setup_all do
    build!()
  end

  defp env(path, extra \\ []),
    do: [{"MTRACE_CSV", path}, {"MTRACE_CSV_AGE", "0"}, {"MTRACE_CSV_PERIOD", "1"} | extra]

  # "what address" lines of csvprog's output.
  defp blocks(out) do
    for [_, what, address] <- Regex.scan(~r/^(\w+) (0x[0-9a-f]+)$/m, out), do: {address, what}
  end

  @tag :tmp_dir
  test "rows load into sqlite3 and match what the program did", %{tmp_dir: dir} do
    file = Path.join(dir, "out.csv")
    {out, 0} = run(bin("csvprog"), [], env(file))
    assert out =~ "freed\n"
    assert File.read!(file) |> String.split("\r\n") |> hd() == @header

    ours = Map.new(blocks(out))
    assert map_size(ours) == 7

    sql = """
    SELECT event, address, size, kind, allocated, time, weight,
           instr(stack, 'csv_keep ('), instr(stack, 'csv_drop ('),
           instr(stack, 'void* pair_alloc<int, char>(int, char) ('),
           instr(stack, 'operator"" _blk(unsigned long long) ('),
           instr(stack, 'malloc (') = 1
    FROM t ORDER BY event, address
    """

    rows =
      for [event, address, size, kind, allocated, time, weight | found] <- sqlite(file, sql),
          Map.has_key?(ours, address) do
        [keep, drop, pair, literal, malloc_first] = Enum.map(found, &(&1 != "0"))
        # Without sampling, every row stands for its one block.
        assert kind == "heap" and malloc_first and weight == "1"
        fun = Enum.find([keep: keep, drop: drop, pair: pair, literal: literal], &elem(&1, 1))
        assert elem(fun, 0) == String.to_atom(ours[address]), "stack of #{address}"
        {event, ours[address], String.to_integer(size), allocated, time}
      end

    count = fn event, what -> Enum.count(rows, &match?({^event, ^what, _, _, _}, &1)) end
    assert {count.("alloc", "keep"), count.("free", "keep")} == {2, 0}
    assert {count.("alloc", "drop"), count.("free", "drop")} == {3, 3}
    assert {count.("alloc", "pair"), count.("alloc", "literal")} == {1, 1}
    assert length(rows) == 10

    sizes = rows |> Enum.map(fn {_, what, size, _, _} -> {what, size} end) |> Enum.uniq()
    assert Enum.sort(sizes) == [{"drop", 222}, {"keep", 111}, {"literal", 96}, {"pair", 64}]

    # A free row names its block by address and allocation time, as its alloc row did.
    [[joined]] =
      sqlite(file, """
      SELECT count(*) FROM t f JOIN t a ON a.event = 'alloc' AND f.event = 'free'
        AND a.address = f.address AND a.allocated = f.allocated AND a.size = f.size
        AND a.stack = f.stack AND CAST(f.time AS REAL) >= CAST(a.time AS REAL)
      """)

    assert joined == "3"
  end

  @tag :tmp_dir
  test "a moved or deleted file is created again, with its header", %{tmp_dir: dir} do
    file = Path.join(dir, "out.csv")
    task = Task.async(fn -> run(bin("csvprog"), ["100"], env(file)) end)
    has_rows = fn -> File.exists?(file) and File.read!(file) =~ "\r\nalloc," end

    wait_until(has_rows)
    File.rename!(file, file <> ".moved")
    wait_until(has_rows)
    File.rm!(file)
    wait_until(has_rows)
    {_, 0} = Task.await(task, 30_000)

    for f <- [file, file <> ".moved"] do
      text = File.read!(f)
      assert String.starts_with?(text, @header <> "\r\n")
      assert length(String.split(text, @header)) == 2, "one header in #{f}"
    end
  end

  @tag :tmp_dir
  test "past MTRACE_CSV_MAX the file restarts with a header, at a pass with rows", %{tmp_dir: dir} do
    file = Path.join(dir, "out.csv")
    # 100 bytes: any row takes the file past it, so each pass with rows restarts it. The 2.5 s
    # after the ticks give two passes or more with no rows, which must leave the last rows be.
    {out, 0} = run(bin("csvprog"), ["25", "2500"], env(file, [{"MTRACE_CSV_MAX", "100"}]))
    text = File.read!(file)
    assert String.starts_with?(text, @header <> "\r\n")
    assert length(String.split(text, @header)) == 2
    # The first pass's rows (the program's first blocks) went with a restart.
    for {address, "keep"} <- blocks(out), do: refute(text =~ address)
    {last, "tick"} = List.last(blocks(out))
    assert [[_, "alloc"] | _] = rows = sqlite(file, "SELECT address, event FROM t")
    assert [last, "alloc"] in rows
  end

  @tag :tmp_dir
  test "an existing file is never written or emptied: one line, no CSV", %{tmp_dir: dir} do
    file = Path.join(dir, "keep.txt")
    File.write!(file, "data\n")
    # Three passes or more, each past MTRACE_CSV_MAX if it had written anything.
    {out, 0} = run(bin("csvprog"), ["25"], env(file, [{"MTRACE_CSV_MAX", "10"}]))
    assert said(out) == ["mtrace: cannot create the CSV file: #{file}: File exists"]
    assert File.read!(file) == "data\n"
  end

  @tag :tmp_dir
  test "a symbolic link at the path is refused, once, and its target untouched", %{tmp_dir: dir} do
    link = Path.join(dir, "out.csv")
    victim = plant_link!(link)
    # Three passes or more, one line.
    {out, 0} = run(bin("csvprog"), ["25"], env(link))
    assert [line] = said(out)
    assert line == "mtrace: cannot create the CSV file: #{link}: File exists"
    assert File.read!(victim) == "precious"
  end
end
