defmodule Mtrace.LeaksTest do
  # Mtrace.leaks/1 in nodes of their own, started as a user starts them: blocks lost and kept in
  # known ways by the test NIF (test/support/c_src/lost.c), exact bytes and blocks.
  # Not async: a node's mark misses more lost blocks while other tests keep the cores busy.
  use ExUnit.Case, async: false
  import Mtrace.Test.Helpers

  @moduletag timeout: 180_000

  # Runs code in a fresh node with the preload and env: its value, as a term.
  defp in_node(code, env \\ []),
    do: node_result("alias Mtrace.Test.Lost\n#{code}", [{"LD_PRELOAD", mtrace_so()} | env])

  # The mark is conservative, as LeakSanitizer's and valgrind's are: a word that happens to hold
  # a lost block's address keeps the block. The commonest here is a refc binary's header left in
  # the garbage of an Erlang process heap, pointing at memory malloc has since handed to the lost
  # block. So a lost block may read as reachable, while a reachable block is never called lost;
  # such misses are rare in a quiet node and common when both cores are busy. So every node must
  # report nothing beyond the expected lost sites, and one node of at most six must report every
  # expected site exactly. Returns that node's result.
  defp exact(expected, attempt) do
    [result] =
      at_least!(1, 6, "every expected site reported exactly", fn _ ->
        {sites, _} = result = attempt.()

        for {fun, _bytes, blocks, _, _} <- sites do
          assert Enum.any?(expected, &match?({^fun, _, b, _, _} when blocks <= b, &1)),
                 "reported but not lost: #{inspect({fun, blocks})} in #{inspect(sites)}"
        end

        missing = expected -- sites
        outcome(missing == [], result, "#{inspect(missing)} not exact in #{inspect(sites)}")
      end)

    result
  end

  # The node's lost sites, each as {function, bytes, blocks, direct, indirect}: the function is
  # the site's first frame in lost.so, or, for a site of the VM's own, its stack.
  @lost_sites """
  (fn sites ->
    for s <- sites do
      f = Enum.find(s.stack, &(is_binary(&1.library) and &1.library =~ "lost.so"))
      name = if f, do: f.function, else: "the VM's: " <> Enum.map_join(s.stack, " < ", &inspect/1)
      {name, s.bytes, s.blocks, s.direct_blocks, s.indirect_blocks}
    end
    |> Enum.sort()
  end)
  """

  # Blocks kept in every way the scenarios keep them: a static array, a tree under a static root,
  # a thread-local variable, a resource in ETS, one in a process (holder).
  @kept """
  :ok = Lost.keep_static(3, 100)
  :ok = Lost.keep_tree(4)
  :ok = Lost.keep_tls(200)
  ets = :ets.new(:buffers, [:public])
  true = :ets.insert(ets, {:kept, Lost.buffer(300)})
  holder = spawn(fn -> b = Lost.buffer(400); receive do :stop -> b end end)
  """

  @scenario """
  :ok = Lost.lose_list(5)
  #{@kept}
  :ok = Lost.lose_on_stack(600)
  :ok = Lost.lose_resource(64)
  :ok = Lost.enif_blocks(2, 3, 128)
  Process.sleep(1100)
  """

  test "in a node started with the defaults, leaks/1 names exactly the lost blocks" do
    # The list's head is lost directly, its four other nodes through it; the block whose only
    # pointer is in a dead part of a stack is lost. What a static array, a tree under a static
    # root, a thread-local variable, and resources in ETS and in a process keep is not. Nothing
    # of the VM's own is called lost. enif_alloc'd blocks and resources come from the VM's own
    # driver_alloc and binary_alloc here, and are seen through the NIF API's hooks; a resource's
    # block is the VM's header (as large as the C library's block says with +MBe false) and the
    # 64 bytes asked for.
    header = in_node("Lost.resource_header(64)", [{"ERL_AFLAGS", "+MBe false"}])

    expected = [
      {"dead_block", 600, 1, 1, 0},
      {"lost_enif", 256, 2, 2, 0},
      {"lost_node", 320, 5, 1, 4},
      {"lost_resource", header + 64, 1, 1, 0}
    ]

    {_sites, {info, stats}} =
      exact(expected, fn ->
        in_node("""
        #{@scenario}
        {sites, info} = Mtrace.leaks_info()
        send(holder, :stop)
        {#{@lost_sites}.(sites), {info, Mtrace.stats()}}
        """)
      end)

    assert stats.dropped == 0
    assert stats.nif_alloc_visible == :hooks and stats.enif_alloc_cnt >= 5
    assert stats.resources_visible == :hooks and stats.resource_header_bytes == header
    assert stats.resources_unseen == 0
    assert info.threads_stopped == info.threads and info.threads > 10
    assert info.reachable_blocks > 500
  end

  test "a resource the garbage collector frees leaves no record; one a process or ETS keeps stays" do
    {bytes, blocks, stats} =
      in_node("""
      ets = :ets.new(:buffers, [:public])
      true = :ets.insert(ets, {:kept, Lost.buffer(300)})
      holder = spawn(fn -> b = Lost.buffer(400); receive do :stop -> b end end)
      spawn(fn -> for _ <- 1..1000, do: Lost.buffer(100) end)
      Process.sleep(200)
      for p <- Process.list(), do: :erlang.garbage_collect(p)
      Process.sleep(100)
      sites = for s <- Mtrace.top(10_000, min_age: 0),
                  match?([%{function: "hook_enif_alloc_resource"}, %{function: "new_buffer"} | _], s.stack),
                  do: {s.bytes, s.blocks}
      send(holder, :stop)
      {Enum.sum(for {b, _} <- sites, do: b), Enum.sum(for {_, n} <- sites, do: n), Mtrace.stats()}
      """)

    # the two kept, each the VM's header and the buffer's struct (a pointer to its bytes)
    assert {bytes, blocks} == {2 * (stats.resource_header_bytes + 8), 2}
    assert stats.resource_dtor_cnt >= 1000 and stats.resource_header_bytes > 0
  end

  test "a binary the NIF neither releases nor makes a term is lost; the ones made terms are the VM's" do
    {sites, stats} =
      in_node("""
      for _ <- 1..20, do: :ok = Lost.lose_binary(200)
      kept = for _ <- 1..50, do: Lost.buffer(10)
      made = for _ <- 1..200, do: Lost.lose_in_binary_tail(64)
      Process.sleep(1100)
      sites = for s <- Mtrace.leaks(), f = Enum.find(s.stack, &(is_binary(&1.library) and &1.library =~ "lost.so")),
                  f.function != "masked_block", do: {f.function, s.bytes, s.blocks}
      {length(kept) + length(made), {sites, Mtrace.stats()}} |> elem(1)
      """)

    # Each the Binary's header (the VM's: 24 bytes in OTP 25 and 26, 32 in 27) and the 200 bytes.
    # A stale word may still keep one of the last made: the VM's freed blocks are discounted, but
    # a block without a record that reused such memory is read whole. In 100 nodes of the Debian 13
    # image, two at a time beside busy loops, 20 were found in 74, 19 in 23, 18 in one and 10 in
    # two (what keeps half in those is not known yet): the budget is 10 of the 20.
    assert [{"lose_binary", bytes, blocks}] = sites
    assert blocks in 10..20 and div(bytes, blocks) in 224..232 and rem(bytes, blocks) == 0
    assert stats.enif_alloc_binary_cnt >= 220 and stats.enif_make_binary_cnt >= 200
  end

  test "with the VM's allocators routed to malloc, as bin/run starts a node, enif_alloc and resources are seen" do
    routed = [{"ERL_AFLAGS", "+MRe false +MBe false"}]
    # A resource's block is the VM's header and the 64 bytes asked for; the header's size is the
    # VM's own, read off the C library's block.
    header = in_node("Lost.resource_header(64)", routed)

    expected = [
      {"dead_block", 600, 1, 1, 0},
      {"lost_enif", 256, 2, 2, 0},
      {"lost_node", 320, 5, 1, 4},
      {"lost_resource", header + 64, 1, 1, 0}
    ]

    {_sites, stats} =
      exact(expected, fn ->
        in_node(
          """
          #{@scenario}
          sites = Mtrace.leaks()
          send(holder, :stop)
          {#{@lost_sites}.(sites), Mtrace.stats()}
          """,
          routed
        )
      end)

    assert stats.nif_alloc_visible == :hooks and stats.resources_visible == :hooks
  end

  test "a block freed behind mtrace's back is found free in glibc's heap, and its record goes" do
    # A walk that finds fewer mmapped chunks than glibc counts (mmapped_missing) cannot tell the
    # freed one from a missing one, and keeps its record: a node where that happens is tried
    # again, up to three in all.
    [{before, info, again, stats, listed}] =
      at_least!(1, 3, "a walk that finds every mmapped chunk", fn _ ->
        {_, info, _, _, _} =
          result =
          in_node("""
          before = Mtrace.stats().missed_frees
          address = Bitwise.bxor(Lost.free_behind(1_000_000), Lost.mask())
          listed = fn -> Enum.any?(Mtrace.olds(1_000_000, false), &(elem(&1, 2) == address)) end
          was = listed.()
          {_, info} = Mtrace.leaks_info()
          {_, again} = Mtrace.leaks_info()
          {before, info, again, Mtrace.stats(), {was, listed.()}}
          """)

        outcome(info.mmapped_missing == 0, result, "mmapped_missing: #{info.mmapped_missing}")
      end)

    assert before == 0
    # the scans' info says whether glibc's heap was walked, and why not
    assert info.missed_frees >= 1 and again.missed_frees == 0, inspect({info, again})
    assert stats.missed_frees == info.missed_frees
    assert listed == {true, false}
  end

  test "options: blocks, the block filters and library; and after a reset, lost blocks without stacks" do
    {sites, {blocks, young, other, after_reset, filtered}} =
      exact([{"lost_node", 192, 3, 1, 2}], fn ->
        in_node("""
        before = Mtrace.mark()
        :ok = Lost.lose_list(3)
        later = Mtrace.mark()
        Process.sleep(1100)
        sites = Mtrace.leaks(library: "lost.so")
        blocks = Mtrace.leaks(blocks: true, library: "lost.so")
        young = Mtrace.leaks(min_age: 3600)
        other = Mtrace.leaks(library: "no-such-library")
        filtered =
          for opts <- [[since: before], [min_size: 64], [since: later], [min_size: 65], [max_age: 1]],
              do: #{@lost_sites}.(Mtrace.leaks([library: "lost.so"] ++ opts))
        Mtrace.reset()
        :ok = Lost.lose_list(2)
        Process.sleep(1100)
        after_reset = for s <- Mtrace.leaks(), do: {s.bytes, s.blocks, s.stack != [], s.contents}
        {#{@lost_sites}.(sites),
         {Enum.map(blocks, &{&1.address, &1.bytes, &1.blocks, &1.direct_blocks}), young, other,
          after_reset, filtered}}
        """)
      end)

    # The list was lost after the first mark and before the second; its nodes are 64 bytes, and
    # more than a second old.
    assert filtered == [sites, sites, [], [], []]

    assert length(blocks) == 3
    assert Enum.all?(blocks, fn {address, 64, 1, _} -> is_integer(address) and address > 0 end)
    assert blocks |> Enum.map(&elem(&1, 3)) |> Enum.sort() == [0, 0, 1]
    assert young == [] and other == []
    # After the reset, the three nodes lost before it have no record (glibc's heap knows them:
    # 72 usable bytes each), the two lost after it have their stack. A stale word may keep a
    # lost block (see exact/2): never a kept one.
    assert after_reset != []

    assert Enum.all?(after_reset, fn
             {bytes, n, true, nil} -> n in 1..2 and bytes == 64 * n
             {bytes, n, false, "72-byte blocks without a record"} -> n in 1..3 and bytes == 72 * n
             _ -> false
           end),
           inspect(after_reset)
  end

  # The kept blocks, then 20 lost ones whose addresses the node knows only masked; the node
  # answers {lost, found, info}: the lost addresses, what leaks/1 found (blocks: true: each
  # block's address, bytes, whether it has a stack, and its contents), and leaks_info's map.
  @by_address """
  #{@kept}
  lost = Lost.lose_masked(20, 48) |> Enum.map(&Bitwise.bxor(&1, Lost.mask()))
  Process.sleep(1100)
  {sites, info} = Mtrace.leaks_info(blocks: true)
  send(holder, :stop)
  {lost, Enum.map(sites, &{&1.address, &1.bytes, &1.stack != [], &1.contents}), info}
  """

  # In every node, each block found is one of the lost ones (a kept block reported is the worse
  # failure); and the conservative mark finds at least 18 of the 20 in one node of at most four
  # (a stale word may keep one: in quiet trials here it kept the first block allocated, in every
  # kind of node alike; with the cores busy, three). Returns that node's blocks.
  defp by_address(run) do
    at_least!(1, 4, "at least 18 of the 20 lost blocks found", fn _ ->
      {lost, found, info} = run.()
      addresses = Enum.map(found, &elem(&1, 0))
      extra = Enum.reject(found, &(elem(&1, 0) in lost))
      assert extra == [], "reported but not lost: #{inspect(extra)}; the scan: #{inspect(info)}"
      assert info.heap_walked and info.heap_refused == nil
      missed = lost -- addresses
      outcome(length(missed) <= 2, found, "#{length(missed)} of the 20 missed")
    end)
    |> hd()
  end

  # A block without a record has the usable size of its chunk (usable_sizes/1).
  defp unrecorded?({_, bytes, stack?, contents}),
    do:
      bytes in usable_sizes(48) and not stack? and
        contents == "#{bytes}-byte blocks without a record"

  test "in a node that samples, leaks/1 finds every lost block by glibc's heap, sampled ones with their stacks" do
    found = by_address(fn -> in_node(@by_address, [{"MTRACE_SAMPLE", "524288"}]) end)

    # 48-byte blocks are sampled with p = 1 - exp(-48/524288): none, nearly always
    assert Enum.all?(found, &unrecorded?/1)
  end

  # leaks/1 and the exit report call blocks lost by one rule (reach.c's mt_reach_rule): where the
  # records are not every block (sampling; a table at its cap that dropped records), both walk
  # glibc's heap, and must find the same lost blocks. The report is report.c's, as the exit report
  # writes it, but asked for right after leaks/1 (mtrace_lib_leaks): a BEAM that halts loses
  # blocks of its own on the way out. The node's blocks: the kept ones and 20 lost ones; for the
  # drops, a table capped at 4096 slots, which a node fills. A stale word may keep a lost block in
  # one of the two scans and not in the other (exact/2): one node of at most four must agree, and
  # find at least 18 of the 20.
  for {mode, env} <- [
        sampling: [{"MTRACE_SAMPLE", "524288"}],
        drops: [{"MTRACE_SLOTS", "4096"}, {"MTRACE_SLOTS_MAX", "4096"}]
      ] do
    @tag :tmp_dir
    test "leaks/1 and report.c's report of the lost blocks agree (#{mode})", %{tmp_dir: dir} do
      report = Path.join(dir, "lost.txt")

      at_least!(1, 4, "leaks/1 and the report agree (#{unquote(mode)})", fn _ ->
        File.rm_rf!(report)

        {sites, info, dropped, written} =
          in_node(
            """
            #{@kept}
            _masked = Lost.lose_masked(20, 48)
            Process.sleep(1100)
            {sites, info} = Mtrace.leaks_info(min_age: 0)
            written = Lost.report_leaks(~c"#{report}")
            send(holder, :stop)
            {Enum.map(sites, &{&1.bytes, &1.blocks}), info, Mtrace.stats().dropped, written}
            """,
            unquote(env)
          )

        text = File.read!(report)
        assert written == 0 and info.heap_walked and text =~ "glibc's heap walked", text
        if unquote(mode) == :drops, do: assert(dropped > 0)

        [_, bytes, blocks] =
          Regex.run(~r/^  lost now: (\d+) bytes in (\d+) blocks?/m, text) || [text, -1, -1]

        ours = {Enum.sum(Enum.map(sites, &elem(&1, 0))), Enum.sum(Enum.map(sites, &elem(&1, 1)))}

        theirs = {String.to_integer(bytes), String.to_integer(blocks)}

        outcome(
          ours == theirs and elem(ours, 1) >= 18,
          ours,
          "{bytes, blocks} lost: leaks/1 #{inspect(ours)}, the report #{inspect(theirs)}"
        )
      end)
    end
  end

  test "in a node started without the preload, leaks/1 finds the lost blocks, without stacks" do
    found = by_address(fn -> node_result("alias Mtrace.Test.Lost\n#{@by_address}", []) end)

    assert Enum.all?(found, &unrecorded?/1)
  end

  test "lost blocks without a record say what they hold: a C++ object its class, text its first bytes" do
    # One node of at most four must name both (a stale word may keep a lost block: exact/2).
    at_least!(1, 4, "the lost widget and the lost string named", fn _ ->
      {widget, text, sites} =
        node_result(
          """
          alias Mtrace.Test.Leaky
          widget = Bitwise.bxor(Leaky.alloc(:cxx_widget, 1), 1)
          text = Bitwise.bxor(Leaky.alloc(:strdup, 30), 1)
          Process.sleep(1100)
          {widget, text, Enum.map(Mtrace.leaks(blocks: true), &{&1.address, &1.contents})}
          """,
          []
        )

      found = Map.new(sites)

      outcome(
        (found[Bitwise.bxor(widget, 1)] || "") =~ ~r/^\d+-byte leaky::Widget objects \(C\+\+/ and
          (found[Bitwise.bxor(text, 1)] || "") =~
            ~r/^\d+-byte strings without a record, such as "/,
        true,
        inspect(sites)
      )
    end)
  end

  test "lost blocks of the VM without a record say so: a resource, an off-heap binary" do
    # A resource's block is the VM's header and the 64 bytes asked for; the enif_alloc'd blocks
    # hold zeros, which tell nothing. Every node may report only these; one of at most four must
    # name the resource and the binary (a stale word may keep a lost block: see exact/2). A
    # failure shows what the mark left out and read: one node in about a hundred here reported the
    # two schedulers' 152-byte microstate accounting structs and their "scheduler" names, which a
    # static list keeps (why/2 in other nodes); why is not known yet.
    wanted = [~r/^\d+-byte Erlang resources \(magic binaries/, ~r/^\d+-byte Erlang binaries/]

    at_least!(1, 4, "the lost resource and the lost binary named", fn _ ->
      {sites, info} =
        node_result(
          """
          alias Mtrace.Test.Lost
          :ok = Lost.lose_resource(64)
          :ok = Lost.lose_binary(5000)
          :ok = Lost.enif_blocks(2, 0, 128)
          Process.sleep(1100)
          {sites, info} = Mtrace.leaks_info([])
          {for(s <- sites, do: {s.blocks, s.contents}), info}
          """,
          [{"ERL_AFLAGS", "+MRe false +MBe false"}]
        )

      assert Enum.all?(sites, fn {n, c} ->
               (n == 1 and Enum.any?(wanted, &(c =~ &1))) or
                 (n <= 2 and c =~ ~r/^\d+-byte blocks without a record$/)
             end),
             inspect({sites, info})

      outcome(
        for(re <- wanted, do: Enum.count(sites, fn {_, c} -> c =~ re end)) == [1, 1],
        true,
        inspect(sites)
      )
    end)
  end

  test "in a node without the preload, the unwritten bytes of a binary's block keep nothing" do
    # lose_in_binary_tail/1: the only word that holds the block is the last of a live 105-byte
    # off-heap binary's block, from malloc: its first byte the binary's last, the others past the
    # binary, up to glibc's usable size, which the mark reads in a block without a record. Read,
    # such words kept the lost binaries of this file's nodes without the preload (why/2: a
    # literal's binary, a loaded module's); here they are planted, so the block in every node.
    found_unpreloaded(
      """
      {bin, masked, _} = Lost.lose_in_binary_tail(48)
      lost = Bitwise.bxor(masked, Lost.mask())
      found = for s <- Mtrace.leaks(blocks: true), do: s.address
      if byte_size(bin) == 105 and lost in found, do: :found, else: Mtrace.why(lost)
      """,
      [{"ERL_AFLAGS", "+MRe false +MBe false"}]
    )
  end

  test "in a node without the preload, the bytes after a library's name keep nothing" do
    # lose_in_library_name/1: the only word that holds the block lies past the NUL of the name the
    # loader keeps for a library it opened, in the name's own block (its first whole word past the
    # NUL, inside glibc's usable size, which the mark reads in a block without a record). The
    # name, a path of 40 bytes, takes a 56-byte block: its last word is wholly what the chunk
    # held before. Read, such words keep lost buffers (a library's path, such as
    # "/mtrace/_build/test/lib/mtrace/priv/mtrace.so"); here, the block in every node.
    dir = String.pad_trailing("/tmp/mtrace-name-#{System.unique_integer([:positive])}", 34, "x")
    link = Path.join(dir, "dl.so")
    assert byte_size(link) == 40
    File.mkdir_p!(dir)
    on_exit(fn -> File.rm_rf!(dir) end)
    File.ln_s!(Path.expand("support/c_src/dl.so", __DIR__), link)

    found_unpreloaded(
      """
      masked = Lost.lose_in_library_name(#{inspect(String.to_charlist(link))})
      lost = Bitwise.bxor(masked, Lost.mask())
      found = for s <- Mtrace.leaks(blocks: true), do: s.address
      if lost in found, do: :found, else: Mtrace.why(lost)
      """,
      []
    )
  end

  # code, in a node without the preload and env, answers :found or why/2 of the block it lost:
  # one node of at most three must find it (a stale word of another kind may keep it).
  defp found_unpreloaded(code, env) do
    at_least!(1, 3, "the block found lost in a node without the preload", fn _ ->
      case node_result("alias Mtrace.Test.Lost\n#{code}", env) do
        :found -> {:hit, :found}
        why -> {:miss, "kept by #{inspect(why)}"}
      end
    end)
  end

  test "with full capture, every lost block has its record and stack" do
    found = by_address(fn -> in_node(@by_address) end)
    assert Enum.all?(found, &match?({_, 48, true, nil}, &1))
  end

  test "a block found lost stays lost, though a word pointing at it appears, until it is freed" do
    # One node of at most four must find the block lost at the first scan (a stale word may keep
    # it: see exact/2). Then a kept block gets a word that points at it: every later scan still
    # finds it, its site counting the scans; freed and its address given to a kept block, that
    # block is not lost (a new record, without the bit), even to a scan of blocks of any age.
    [result] =
      at_least!(1, 4, "the block found lost at the first scan", fn _ ->
        {a, scans} =
          in_node("""
          [masked] = Lost.lose_masked(1, 48)
          Process.sleep(1100)
          found = fn opts -> for s <- Mtrace.leaks([blocks: true] ++ opts), do: {s.address, s.scans} end
          first = found.([])
          :ok = Lost.hold_word(masked)
          later = for _ <- 1..3, do: found.([])
          reused = Lost.free_and_reuse(masked, 48)
          {Bitwise.bxor(masked, Lost.mask()), [first | later] ++ [reused, found.(min_age: 0)]}
          """)

        outcome({a, 1} in hd(scans), {a, scans}, "the first scan: #{inspect(hd(scans))}")
      end)

    assert {a, [_first, second, third, fourth, reused, last]} = result
    assert {a, 2} in second and {a, 3} in third and {a, 4} in fourth
    assert reused == true
    refute Enum.any?(last, &match?({^a, _}, &1)), inspect(last)
  end

  test "a block lost in the chunk of a freed off-heap binary is found, though the VM keeps a dead reference to it" do
    # With +MBe false an off-heap binary is a malloc block. Dropped and collected, its chunk goes
    # to the next malloc of that size on the thread (the NIF's, whose call site was run once
    # before, so that its first unwind takes nothing), and the VM's dead reference to it (a
    # ProcBin: val, the block, and bytes, val + 24) stays in its memory. Before reach.c knew them,
    # 4 to 7 of 60 such blocks were missed in each node (7 nodes); after, none in quiet nodes (6
    # nodes), while beside other tests other stale words still keep up to 6 (54 to 58 found in
    # three nodes).
    found_in_chunks("Lost.lose_in_binary_chunks(60)")
  end

  test "a block lost unwritten in the chunk of a freed 1100-byte binary is found: malloc's links lie where the Binary's flags and count were" do
    # 1124 bytes are past the tcaches: the freed chunk waits in glibc's unsorted bin, whose links
    # take the Binary's flags and reference count, and the next malloc of its size takes it as
    # it is. A count that is not zero is no proof of a live Binary: flags that are no flags are.
    found_in_chunks("Lost.lose_in_binary_chunks(60, 1100, true)")
  end

  test "blocks lost over the chunks of binaries whose ProcBins the collector moved are found" do
    # Kept across one collection, a binary's ProcBin is copied and its old place keeps val under
    # a pointer to the copy; the lost block starts in a chunk freed before the binary's, so val
    # lies inside it, over bytes a Binary's header left (bin/demo's preloaded part missed blocks
    # so). 8 nodes each, alternated: 454 of 480 found without the checks (three nodes 52), 480
    # with them. The rules' cases are checked one by one in layouts_test.
    found_in_chunks("Lost.lose_in_moved_binary_chunks(60, 1100)")
  end

  # Runs the scenario (a list of {warm, lost} masked addresses, 60 pairs) in nodes routed as
  # bin/run starts them: one node of at most five must find 58 of the 60, and no node may report
  # a block that is not lost (the warm-up calls lose a block each too).
  defp found_in_chunks(scenario) do
    at_least!(1, 5, "58 of the 60 blocks found", fn _ ->
      {pairs, found} = scenario(scenario)
      {warm, lost} = Enum.unzip(pairs)
      assert found -- (warm ++ lost) == [], inspect(found)
      n = length(lost) - length(lost -- found)
      outcome(n >= 58, n, "#{n} of 60 found")
    end)
  end

  # {pairs, the masked addresses of the lost blocks leaks/1 found} in a node started so.
  defp scenario(scenario) do
    in_node(
      """
      pairs = #{scenario}
      Process.sleep(1100)
      found = for s <- Mtrace.leaks(blocks: true), do: Bitwise.bxor(s.address, Lost.mask())
      {pairs, found}
      """,
      [{"ERL_AFLAGS", "+MRe false +MBe false"}]
    )
  end

  test "a mark while 8 threads allocate and a thread maps and unmaps memory finds what a quiet one does" do
    expected = [{"lost_node", 256, 4, 1, 3}]

    {_quiet, busy} =
      exact(expected, fn ->
        in_node("""
        :ok = Lost.lose_list(4)
        :ok = Lost.keep_tree(3)
        Process.sleep(1100)
        quiet = #{@lost_sites}.(Mtrace.leaks(library: "lost.so"))
        :ok = Lost.storm(8)
        busy = for _ <- 1..10, do: #{@lost_sites}.(Mtrace.leaks(library: "lost.so"))
        :ok = Lost.storm(0)
        {quiet, busy}
        """)
      end)

    assert Enum.all?(busy, &(&1 == expected))
  end

  test "a node whose schedulers free each other's blocks under load reports no block" do
    # Three loops spawn processes that build a binary and a list and die: a block freed on a
    # scheduler that did not allocate it is queued to the allocator instance that did, which
    # frees it when it next runs (beam_alloc.h); the queued blocks are left out of the mark.
    # Twenty marks under that load: none reports a site (a quiet mark reports none), with binaries
    # and NIF blocks taken from malloc. Whether a mark finds blocks queued is the schedulers' to
    # say: OTP 25 did in 7 to 10 of 10 here, and in none of 20 in two CI runs; OTP 27 in none.
    # why_test's queued-fragment test holds a queue still for its mark. The marks' figures
    # ({queued, sites, every thread stopped, fix lists' bytes}) show in a failure.
    {quiet, marks} =
      in_node(
        """
        {quiet, _} = Mtrace.leaks_info(min_age: 1)
        churn = fn churn, i ->
          me = self()
          spawn(fn ->
            b = :binary.copy("x", 100 + rem(i, 1000))
            send(me, {:d, byte_size(b) + length(Enum.to_list(1..(200 + rem(i, 3000))))})
          end)
          receive do {:d, _} -> :ok end
          churn.(churn, i + 1)
        end
        for _ <- 1..3, do: spawn(fn -> churn.(churn, 0) end)
        Process.sleep(1100)
        marks = for _ <- 1..20, do: Mtrace.leaks_info(min_age: 1)
        {length(quiet),
         for {sites, info} <- marks do
           {info.delayed_free_bytes, length(sites), info.threads_stopped == info.threads,
            info.fix_list_bytes}
         end}
        """,
        [{"ERL_AFLAGS", "+MRe false +MBe false"}]
      )

    assert quiet == 0
    assert Enum.all?(marks, fn {_, sites, _, _} -> sites == 0 end), inspect(marks)
  end

  test "bad options raise ArgumentError naming them" do
    for bad <- [[min_age: -1], [library: 3], [blocks: :yes], [demangle: 1], [colour: 1], :all] do
      assert_raise ArgumentError, ~r/^Mtrace.leaks\/1: /, fn -> Mtrace.leaks(bad) end
    end
  end
end
