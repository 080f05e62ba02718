defmodule Mtrace.RulesTest do
  # The mark's rules discount a word only where the memory is proved to be the structure they
  # know (docs/rules.md). Here the same shapes lie where nothing proves them: in C structs that a
  # NIF allocates, with and without a record, and in a static; and real C libraries (OpenSSL with
  # the system's CA store, zlib, libxml2, sqlite3, libyaml) run as servers run them, checked
  # against memcheck. Nothing that is still referenced may be reported lost.
  use ExUnit.Case, async: true
  import Mtrace.Test.Helpers

  @moduletag timeout: 300_000
  @root Path.expand("..", __DIR__)
  @rules_doc Path.join(@root, "docs/rules.md")

  # In a fresh node: the blocks the look-alikes point to (every one still referenced), the
  # addresses leaks/1 lists among them, and what the mark said of itself.
  @lookalikes """
  alias Mtrace.Test.Lost
  attach? = System.get_env("ATTACH") == "1"
  if attach?, do: :ok = Mtrace.attach()
  targets = Lost.keep_lookalikes(4) |> Enum.map(&Bitwise.bxor(&1, Lost.mask()))
  lost = Lost.lose_masked(3, 48) |> Enum.map(&Bitwise.bxor(&1, Lost.mask()))
  {sites, info} = Mtrace.leaks_info(blocks: true, min_age: 0)
  addresses = MapSet.new(sites, & &1.address)
  reported = Enum.filter(targets, &MapSet.member?(addresses, &1))
  certainty = for s <- sites, s.address in lost, do: {s.certainty, s.rules, s.holder}
  {length(targets), reported, certainty, info.otp, info.rules}
  """

  defp lookalikes(env) do
    {n, reported, certainty, otp, rules} = node_result(@lookalikes, env)
    assert n == 9 * 9
    assert reported == [], "still referenced, reported lost: #{inspect(reported)}"
    # the plainly lost blocks, where the mark found them, are lost definitely, or possibly where
    # a word a rule discounted (a stale one, in memory the VM freed) points into them: then the
    # site names the rule and the word
    assert Enum.all?(certainty, fn
             {:definite, nil, nil} -> true
             {:possible, [_ | _], holder} -> is_integer(holder)
             _ -> false
           end),
           inspect(certainty)

    assert otp == 25 or otp == 27
    rules
  end

  test "C structs shaped as Erlang terms keep what they point to, in a preloaded node" do
    rules = lookalikes([{"LD_PRELOAD", mtrace_so()}])
    assert rules.term_tags > 0, "the node's own terms were read as terms: #{inspect(rules)}"
  end

  test "and in a node attached to, and in one never preloaded (the heap walk alone)" do
    lookalikes([{"ATTACH", "1"}])
    lookalikes([])
  end

  test "and in a preloaded node that samples" do
    lookalikes([{"LD_PRELOAD", mtrace_so()}, {"MTRACE_SAMPLE", "4096"}])
  end

  # In a fresh node: OpenSSL, zlib, libxml2, sqlite3 and libyaml driven as servers drive them
  # (test/support/c_src/reallibs.c), their state kept: the lost sites whose stacks pass through
  # one of those libraries, and all the lost sites, as {contents or first frames, certainty}.
  @libraries """
  if System.get_env("ATTACH") == "1", do: :ok = Mtrace.attach()
  _bytes = Mtrace.Test.RealLibs.run()
  sites = Mtrace.leaks(min_age: 0)
  libraries = ~w(libssl libcrypto libz. libxml2 libsqlite3 libyaml)

  from = fn s ->
    Enum.any?(s.stack, fn f ->
      f.library && Enum.any?(libraries, &String.starts_with?(Path.basename(f.library), &1))
    end)
  end

  shown = fn s -> {s.contents || Enum.map(Enum.take(s.stack, 4), & &1.function), s.certainty} end
  {for(s <- sites, from.(s), do: shown.(s)), Enum.map(sites, shown)}
  """

  defp libraries(env) do
    {false_sites, all} = node_result(@libraries, env)

    assert false_sites == [],
           "sites of the libraries, whose state is kept:\n#{inspect(all, pretty: true)}"

    all
  end

  test "real C libraries, their state kept, lose nothing: preloaded, sampled, attached and never preloaded nodes" do
    for env <- [
          [{"LD_PRELOAD", mtrace_so()}],
          [{"LD_PRELOAD", mtrace_so()}, {"MTRACE_SAMPLE", "4096"}],
          [{"ATTACH", "1"}]
        ],
        do: libraries(env)

    # Never preloaded, every block is known from glibc's heap alone, without a stack: what the
    # libraries made is not told apart by its site, and no site may be definite that a word
    # still points into (the verifier below).
    libraries([])
  end

  # The independent verifier: after leaks/1, every readable and writable mapping of the node is
  # read by the test's own NIF (Lost.holders/1, not through the mark), and a reported block that
  # an aligned word of a live block not reported lost (the whole word inside the block's size: a
  # word that runs past its end is no pointer the program can hold there, and the mark does not
  # read it), or of a loaded object's data, points into must be on a :possible site, in the four
  # kinds of node. The live blocks are those made before a Mtrace.mark/0 taken just before leaks/1:
  # one malloc returned since holds its chunk's old bytes, as the allocator gave them (no clearing
  # by default), and no word in it was there for the mark to read. Holders elsewhere (free heap
  # memory, stacks, the VM's anonymous memory) are not told apart here.
  @verified """
  alias Mtrace.Test.Lost
  if System.get_env("ATTACH") == "1", do: :ok = Mtrace.attach()
  _ = Lost.keep_lookalikes(4)
  _ = Mtrace.Test.RealLibs.run()
  _ = Lost.lose_masked(3, 48)
  # a node without the preload has no records: only the objects' data is told apart there
  records = fn opts -> try do Mtrace.olds(100_000_000, [min_age: 0] ++ opts) rescue Mtrace.NotPreloadedError -> [] end end
  before = try do Mtrace.mark() rescue Mtrace.NotPreloadedError -> nil end
  sites = Mtrace.leaks(blocks: true, min_age: 0)
  lost = for s <- sites, do: {s.address, s.bytes}
  lost_at = MapSet.new(lost, &elem(&1, 0))
  now = records.([])
  made_since = MapSet.new(records.(since: before), fn {_, size, a, _, _} -> {a, size} end)
  live = for {_, size, a, _, _} <- now, a not in lost_at, {a, size} not in made_since, do: {a, size}
  holders = Lost.holders(lost)
  sorted = fn ranges -> ranges |> Enum.sort() |> List.to_tuple() end
  {lost_t, live_t} = {sorted.(lost), sorted.(live)}

  # whether the width bytes at h lie inside one of the ranges t
  inside = fn t, h, width ->
    {lo, hi} = {0, tuple_size(t)}
    find = fn find, lo, hi ->
      if lo >= hi, do: lo, else: (mid = div(lo + hi, 2); if elem(elem(t, mid), 0) <= h, do: find.(find, mid + 1, hi), else: find.(find, lo, mid))
    end
    i = find.(find, lo, hi)
    i > 0 and (fn {a, n} -> h + width <= a + max(n, 1) end).(elem(t, i - 1))
  end

  static? = fn path -> path != "" and not String.starts_with?(path, "[") and not (path =~ "mtrace.so") end
  site = Map.new(sites, &{&1.address, &1})
  frames = fn stack -> stack |> Enum.take(5) |> Enum.map(&(&1.function || &1.library)) end
  # for a failure: the block that holds the word, as its record says, and the reported site
  holder_of = fn h -> for {age, size, a, _, st} <- now, h >= a and h < a + size, do: {a, size, age, frames.(st)} end

  wrong =
    for {b, h, path} <- holders, not inside.(lost_t, h, 1), inside.(live_t, h, 8) or static?.(List.to_string(path)),
        site[b].certainty != :possible,
        do: {b, h, List.to_string(path), holder_of.(h), site[b].certainty, frames.(site[b].stack)}

  {length(sites), length(holders), wrong}
  """

  test "the verifier finds no reported block that a live block or a static still points into, but on a :possible site" do
    for env <- [
          [{"LD_PRELOAD", mtrace_so()}],
          [{"LD_PRELOAD", mtrace_so()}, {"MTRACE_SAMPLE", "4096"}],
          [{"ATTACH", "1"}],
          []
        ] do
      {_sites, _holders, wrong} = node_result(@verified, env)
      assert wrong == [], inspect({env, wrong}, pretty: true, limit: :infinity)
    end
  end

  # Debian's erlang-jiffy, a JSON NIF, encoding and decoding an 18 KB document while another
  # process asks what is live: its enif_alloc blocks and resources come from the VM's carriers
  # (seen through the NIF API's hooks) or, with the allocator flags, from malloc; they are live
  # in top/2 while it works, and none of them is lost after. jiffy is named at run time, so that
  # an attach comes before its NIF library loads.
  @jiffy """
  jiffy = String.to_atom("jiffy")
  doc = %{"items" => for(i <- 1..300, do: %{"id" => i, "name" => "item \#{i}", "tags" => ["a", "b"], "price" => i * 1.5})}
  json = IO.iodata_to_binary(apply(jiffy, :encode, [doc]))
  work = Task.async(fn ->
    for _ <- 1..2000, do: apply(jiffy, :encode, [apply(jiffy, :decode, [json, [:return_maps]])])
  end)
  Process.sleep(50)
  live = length(Mtrace.top(10, library: "jiffy", min_age: 0))
  Task.await(work, 60_000)
  through = fn s -> Enum.any?(s.stack, &(&1.library && &1.library =~ "jiffy")) end
  {byte_size(json), for(s <- Mtrace.leaks(min_age: 0), through.(s), do: s.bytes), live,
   Mtrace.stats().resources_unseen}
  """

  for {kind, env, attach} <- [
        {"preloaded, the VM's defaults", [{"LD_PRELOAD", :so}], ""},
        {"preloaded, the allocator flags",
         [{"LD_PRELOAD", :so}, {"ERL_AFLAGS", "+MRe false +MBe false"}], ""},
        {"attached, the VM's defaults", [], ":ok = Mtrace.attach()\n"}
      ] do
    test "jiffy (JSON) loses nothing, and its live blocks are seen: #{kind}" do
      env =
        for {k, v} <- unquote(Macro.escape(env)), do: {k, if(v == :so, do: mtrace_so(), else: v)}

      {bytes, lost, live, unseen} = node_result(unquote(attach) <> @jiffy, env)

      assert bytes > 15_000
      assert lost == []
      assert live > 0
      assert unseen == 0
    end
  end

  test "docs/rules.md lists the library's own rules, each once" do
    {_sites, info} = Mtrace.leaks_info(min_age: 0)

    documented =
      Regex.scan(~r/^\| `([a-z_0-9]+)` \|/m, File.read!(@rules_doc), capture: :all_but_first)
      |> List.flatten()

    assert Enum.sort(documented) ==
             info.rules |> Map.keys() |> Enum.map(&to_string/1) |> Enum.sort()

    assert length(documented) == length(Enum.uniq(documented))
  end

  # memcheck's summary: {definitely, indirectly} lost as {bytes, blocks}.
  defp memcheck(program) do
    {out, _} =
      System.cmd(
        "valgrind",
        ~w(--leak-check=full --run-libc-freeres=no --run-cxx-freeres=no #{program}),
        env: [{"LD_PRELOAD", nil}],
        stderr_to_stdout: true
      )

    lost = fn kind ->
      [_, bytes, blocks] =
        Regex.run(~r/#{kind} lost: ([\d,]+) bytes in ([\d,]+) blocks/, out) ||
          flunk("no #{kind} lost in memcheck's output:\n#{out}")

      {number(bytes), number(blocks)}
    end

    {lost.("definitely"), lost.("indirectly")}
  end

  defp number(text), do: text |> String.replace(",", "") |> String.to_integer()

  @tag :tmp_dir
  test "a program of OpenSSL, zlib, libxml2, sqlite3 and libyaml: the exit report's lost blocks are memcheck's definitely lost",
       %{tmp_dir: dir} do
    program = Path.join(@root, "test/support/c_src/reallibs")
    report = Path.join(dir, "report.txt")

    {out, 0} =
      System.cmd(Path.join(@root, "bin/mtrace"), ["run", "-o", report, "--", program],
        env: [{"LD_PRELOAD", nil}],
        stderr_to_stdout: true
      )

    assert out =~ "tls: 6 rounds"
    text = File.read!(report)

    [_, bytes, blocks, direct, indirect] =
      Regex.run(
        ~r/leaked at exit: (\d+) bytes in (\d+) blocks? \((\d+) direct, (\d+) indirect\)/,
        text
      ) ||
        flunk(text)

    {{vg_bytes, vg_blocks}, {0, 0}} = memcheck(program)
    # the program's own five: three of 777 bytes, two strdup'd 40-character strings
    assert {vg_bytes, vg_blocks} == {2413, 5}
    assert {number(bytes), number(blocks)} == {vg_bytes, vg_blocks}, text
    assert {number(direct), number(indirect)} == {5, 0}
  end
end
