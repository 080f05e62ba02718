defmodule Mtrace.SamplingTest do
  # The sampling mode (MTRACE_SAMPLE=N): about one allocation per N bytes is recorded, each
  # standing for 1/p blocks and size/p bytes (p = 1 - e^(-size/N)). These tests check that the
  # estimates are honest: large blocks are always seen and counted exactly, small ones are
  # estimated without bias, the same leaking sites are found as without sampling, churn that
  # frees everything leaves nothing, and both reports and stats/0 say that they are estimates.
  use ExUnit.Case, async: true
  import Mtrace.Test.Report
  import Mtrace.Test.Helpers, only: [run_node: 2, mtrace_so: 0]

  @moduletag timeout: 180_000

  setup_all do
    build!()
  end

  # What test/report/sampled.c leaks: {function, bytes, blocks}.
  @big {"big_leaks", 16 * 1_048_576, 16}
  @medium {"medium_leaks", 1000 * 8192, 1000}
  @small {"small_leaks", 50_000 * 100, 50_000}
  @sample 16_384

  defp report(dir, env) do
    File.mkdir_p!(dir)
    {out, 0} = run(bin("sampled"), [], [{"MTRACE_REPORT", Path.join(dir, "%p.txt")} | env])
    assert out == "sampled: done\n"
    [file] = Path.wildcard(Path.join(dir, "*.txt"))
    report!(File.read!(file))
  end

  # Without sampling the exit report splits lost from reachable, and sampled.c keeps its blocks
  # in a static array: its sites are the reachable ones.
  defp own_sites(r) do
    (r.reachable_sites || r.sites)
    |> Enum.filter(fn site -> "main" in names(site) end)
    |> Map.new(fn site -> {Enum.at(names(site), 1), site} end)
  end

  # The estimate's relative standard deviation is about sqrt(N / bytes): 6% for the small site,
  # 4% for the medium one. 25% is more than four of them.
  defp close?(estimate, truth), do: abs(estimate - truth) <= 0.25 * truth

  @tag :tmp_dir
  test "the exit report estimates each site without bias and sees every large block",
       %{tmp_dir: dir} do
    exact =
      report(Path.join(dir, "exact"), [
        {"MTRACE_SLOTS", "131072"},
        {"MTRACE_REPORT_REACHABLE", "1"}
      ])

    sampled =
      report(Path.join(dir, "sampled"), [
        {"MTRACE_SAMPLE", "#{@sample}"},
        {"MTRACE_REPORT_REACHABLE", "1"}
      ])

    # The same leaking sites with the same stacks, and churn nowhere: it freed every block.
    assert Map.keys(own_sites(sampled)) == Map.keys(own_sites(exact))

    for {fun, site} <- own_sites(sampled) do
      assert site.frames == own_sites(exact)[fun].frames, fun
    end

    assert Map.keys(own_sites(exact)) == Enum.sort(["big_leaks", "medium_leaks", "small_leaks"])
    refute Enum.any?(sampled.sites, &("churn" in names(&1)))

    # A 1 MiB block is sampled with p = 1 - e^-64: all of them, each weighing exactly itself.
    {fun, bytes, blocks} = @big
    big = own_sites(sampled)[fun]
    assert {big.bytes, big.blocks} == {bytes, blocks}

    for {fun, bytes, blocks} <- [@medium, @small] do
      site = own_sites(sampled)[fun]
      assert close?(site.bytes, bytes), "#{fun}: #{site.bytes} bytes estimated for #{bytes}"
      assert close?(site.blocks, blocks), "#{fun}: #{site.blocks} blocks estimated for #{blocks}"

      assert own_sites(exact)[fun] |> Map.take([:bytes, :blocks]) == %{
               bytes: bytes,
               blocks: blocks
             }
    end

    # The report says what it is: estimates, from this many samples out of all those calls.
    assert sampled.estimated and not exact.estimated
    assert exact.sampled == nil
    calls = sampled.calls["malloc"] + sampled.calls["calloc"]
    assert sampled.calls == exact.calls
    # About one sample per 16 KiB of the ~87 MB allocated (a 1 MiB block is one sample).
    assert sampled.sampled in 3_000..6_000
    assert sampled.sampled < calls / 100
    # The exit report walks glibc's heap when sampling left blocks without a record: lost and
    # reachable are split as in the exact run, and counted block by block, not estimated (a block
    # without a record by its usable size; mtrace's own blocks, allocated while it ran, are among
    # the reachable ones).
    {_, lost_blocks} = sampled.live
    {_, exact_lost} = exact.live
    assert lost_blocks == exact_lost
    {kept_bytes, kept_blocks} = sampled.reachable
    {exact_kept_bytes, exact_kept_blocks} = exact.reachable
    assert kept_blocks >= exact_kept_blocks and kept_bytes >= exact_kept_bytes
    assert close?(kept_bytes, exact_kept_bytes)
    assert sampled.peak >= 0.75 * kept_bytes
    assert sampled.dropped == 0
  end

  # The leaks still live at the last export, per function: {estimated bytes, estimated blocks,
  # rows, rows of weight 1}. The weight of a row is 1/p, to three decimals.
  defp csv_sites(file) do
    sql = """
    SELECT substr(a.stack, instr(a.stack, char(10)) + 1,
                  instr(substr(a.stack, instr(a.stack, char(10)) + 1), ' (') - 1) AS fun,
           sum(a.size * a.weight), sum(a.weight), count(*), sum(a.weight = '1')
    FROM t a
    WHERE a.event = 'alloc' AND NOT EXISTS (SELECT 1 FROM t f WHERE f.event = 'free'
      AND f.address = a.address AND f.allocated = a.allocated)
    GROUP BY fun
    """

    for [fun, bytes, blocks, rows, ones] <- sqlite(file, sql), into: %{} do
      {bytes, _} = Float.parse(bytes)
      {blocks, _} = Float.parse(blocks)
      {fun, {bytes, blocks, String.to_integer(rows), String.to_integer(ones)}}
    end
  end

  @tag :tmp_dir
  test "CSV rows carry their weight, so that sqlite3 sums estimate each site", %{tmp_dir: dir} do
    file = Path.join(dir, "sampled.csv")

    env = [
      {"MTRACE_SAMPLE", "#{@sample}"},
      {"MTRACE_CSV", file},
      {"MTRACE_CSV_AGE", "0"},
      {"MTRACE_SLOTS", "131072"}
    ]

    {out, 0} = run(bin("sampled"), [], env)
    assert out == "sampled: done\n"
    sites = csv_sites(file)

    # Every 1 MiB block has its row, of weight 1; the others stand for many blocks each.
    {fun, bytes, blocks} = @big
    assert sites[fun] == {bytes * 1.0, blocks * 1.0, blocks, blocks}

    for {fun, bytes, blocks} <- [@medium, @small] do
      {est_bytes, est_blocks, rows, ones} = sites[fun]
      assert close?(est_bytes, bytes), "#{fun}: #{est_bytes} bytes estimated for #{bytes}"
      assert close?(est_blocks, blocks), "#{fun}: #{est_blocks} blocks estimated for #{blocks}"
      assert rows < blocks / 2 and ones == 0
    end

    refute Map.has_key?(sites, "churn")
  end

  @tag :tmp_dir
  test "a sampling interval larger than every block still finds and weighs what it samples",
       %{tmp_dir: dir} do
    # One sample per 64 MiB: the 16 large blocks are each sampled with p = 1 - e^(-1/64), so
    # about one in 64. Whatever is found must weigh at least its own size, and nothing is torn.
    r = report(dir, [{"MTRACE_SAMPLE", "#{64 * 1_048_576}"}])
    assert r.estimated
    assert r.sampled <= 40

    for site <- r.sites, site.blocks > 0 do
      assert site.bytes >= site.blocks * 64
    end
  end

  test "stats/0 says a node samples, and olds/2 finds its large leaks" do
    code = """
    alias Mtrace.Test.Leaky
    big = for _ <- 1..4, do: Leaky.alloc(:malloc, 4_194_304)
    small = for _ <- 1..2000, do: Leaky.alloc(:malloc, 64)
    s = Mtrace.stats()
    found = Enum.filter(Mtrace.olds(s.slots, false), fn {_, _, a, _, _} -> a in big end)
    IO.puts("sample=\#{s.sample_bytes} estimated=\#{s.estimated} sampled=\#{s.sampled} " <>
            "mallocs=\#{s.malloc_cnt} live=\#{s.live_bytes} records=\#{s.records} " <>
            "found=\#{length(found)} small=\#{length(small)}")
    for {_, size, _, _, [_, {_, fun} | _]} <- found, do: IO.puts("big \#{size} \#{fun}")
    """

    {out, 0} = run_node(code, [{"LD_PRELOAD", mtrace_so()}, {"MTRACE_SAMPLE", "65536"}])

    [sample, estimated, sampled, mallocs, live, records, found] =
      Regex.run(
        ~r/sample=(\d+) estimated=(\w+) sampled=(\d+) mallocs=(\d+) live=(\d+) records=(\d+) found=(\d+)/,
        out,
        capture: :all_but_first
      )

    assert {sample, estimated} == {"65536", "true"}

    [sampled, mallocs, live, records, found] =
      Enum.map([sampled, mallocs, live, records, found], &String.to_integer/1)

    assert found == 4
    assert Regex.scan(~r/^big 4194304 leak_malloc$/m, out) |> length() == 4
    assert sampled > 0 and sampled < mallocs / 10
    assert records <= sampled
    assert live >= 4 * 4_194_304
  end

  test "top/2 in a node that samples weighs each sampled block by what it stands for, and says so" do
    # 4000 blocks of 1000 bytes kept: about one in 17 is sampled (p = 1 - e^(-1000/16384)), some
    # 240 records, so the estimate's deviation is about 6%.
    code = """
    alias Mtrace.Test.Leaky
    kept = for _ <- 1..4000, do: Leaky.alloc(:malloc, 1000)
    [site] = Mtrace.top(1, library: "leaky.so", group: :function)
    IO.puts("bytes=\#{site.bytes} blocks=\#{site.blocks} estimated=\#{site.estimated} " <>
            "kept=\#{length(kept)} records=\#{Mtrace.stats().records}")
    """

    {out, 0} = run_node(code, [{"LD_PRELOAD", mtrace_so()}, {"MTRACE_SAMPLE", "16384"}])

    [bytes, blocks, estimated] =
      Regex.run(~r/bytes=(\d+) blocks=(\d+) estimated=(\w+)/, out, capture: :all_but_first)

    assert estimated == "true", out
    assert close?(String.to_integer(bytes), 4_000_000), out
    assert close?(String.to_integer(blocks), 4000), out
  end

  test "a malformed MTRACE_SAMPLE is reported and recording stays exact" do
    code =
      "IO.puts(\"sample=\#{Mtrace.stats().sample_bytes} estimated=\#{Mtrace.stats().estimated}\")"

    {out, 0} = run_node(code, [{"LD_PRELOAD", mtrace_so()}, {"MTRACE_SAMPLE", "1k"}])

    assert out =~
             ~r/^mtrace: MTRACE_SAMPLE=1k: expected a whole number from 0 to 1099511627776; using 0$/m

    assert out =~ "sample=0 estimated=false"
  end
end
