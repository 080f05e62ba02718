defmodule Mtrace.WhyTest do
  # Mtrace.why/2 in a node of its own, started as a user starts one: blocks kept in known ways by
  # the test NIF (test/support/c_src/lost.c), whose addresses the node holds only masked (so that
  # no Erlang term points to them), and the chains that keep them, named exactly.
  use ExUnit.Case, async: false
  import Mtrace.Test.Helpers

  @moduletag timeout: 180_000

  defp in_node(code, env \\ []),
    do:
      node_result(
        "alias Mtrace.Test.Lost\nm = Lost.mask()\n#{code}",
        [{"LD_PRELOAD", mtrace_so()} | env]
      )

  # A path as plain terms: the root, and each link's masked address, size, offset and the
  # functions of its first two frames.
  @plain """
  plain = fn
    %Mtrace.Path{root: root, links: links} ->
      names = fn stack -> stack |> Enum.take(2) |> Enum.map(& &1.function) end
      {root, Enum.map(links, &{Bitwise.bxor(&1.address, m), &1.size, &1.offset, names.(&1.stack)})}
    other -> other
  end
  """

  @kept """
  #{@plain}
  :ok = Lost.keep_static(3, 100)
  one = Lost.static_address(1)
  chain = Lost.keep_chain()
  {held, tid} = Lost.hold_on_stack(256)
  {in_tls, tls_tid} = Lost.keep_tls_here(200)
  static = plain.(Mtrace.why(Bitwise.bxor(one, m)))
  last = plain.(Mtrace.why(Bitwise.bxor(List.last(chain), m)))
  # c + 8 made without c itself on the heap (c is 16-aligned): an integer equal to c would be a
  # word of the VM's memory that points to c, and the shortest chain
  interior = plain.(Mtrace.why(Bitwise.bxor(List.last(chain), Bitwise.bxor(m, 8))))
  stack = plain.(Mtrace.why(Bitwise.bxor(held, m)))
  tls = plain.(Mtrace.why(Bitwise.bxor(in_tls, m)))
  text = inspect(Mtrace.why(Bitwise.bxor(hd(chain), m)))
  :ok = Lost.release_stack()
  {one, chain, {held, in_tls}, {tid, tls_tid}, [static, last, interior, stack, tls], text}
  """

  # The chains a node gave are exact when the roots are the static array, the chain's static root,
  # the thread's stack and the other thread's TLS. A stale word (see leaks_test) may give a chain as short or shorter
  # from elsewhere: in every node each chain must end at the block asked about, and one node of
  # at most four must give the exact chains. Returns that node's answers.
  defp exact_chains do
    at_least!(1, 4, "the exact chains", fn _ ->
      {one, [_, _, c], {held, in_tls}, _tids, answers, _text} = result = in_node(@kept)

      for {{_root, links}, asked} <- Enum.zip(answers, [one, c, c, held, in_tls]) do
        assert {^asked, _, nil, _} = List.last(links)
      end

      case result do
        {_, _, _, {tid, tls_tid},
         [
           {%{kind: :static, name: "kept_static"}, [_]},
           {%{kind: :static, name: "chain_root"}, [_, _, _]},
           {%{kind: :static, name: "chain_root"}, [_, _, _]},
           {%{kind: :stack, thread: tid}, [_]},
           {%{kind: :tls, thread: tls_tid}, [_ | _]}
         ], _} ->
          {:hit, result}

        _ ->
          {:miss, inspect(answers)}
      end
    end)
    |> hd()
  end

  test "a block held by a library's static, a chain of three from a static, a thread's stack, TLS" do
    {one, [a, b, c], {held, in_tls}, {tid, tls_tid}, [static, chain, interior, stack, tls], text} =
      exact_chains()

    # kept_static[1]: the word 8 bytes into the static array
    assert {%{kind: :static, library: lib, name: "kept_static", offset: 8}, links} = static
    assert lib =~ ~r/lost\.so$/
    assert links == [{one, 100, nil, ["malloc", "static_block"]}]

    # chain_root -> a (its pointer at 16) -> b (at 40) -> c; an address inside c is c's
    assert {%{kind: :static, name: "chain_root", offset: 0}, links} = chain

    assert links == [
             {a, 64, 16, ["malloc", "chain_block"]},
             {b, 64, 40, ["malloc", "chain_block"]},
             {c, 64, nil, ["malloc", "chain_block"]}
           ]

    assert interior == chain

    # the first word that points to it, from the red zone below the stack pointer up: the
    # thread's local, or a copy a call it made left below
    assert {%{kind: :stack, thread: ^tid, offset: offset} = root, links} = stack
    assert offset >= -128
    # the frame that holds it, by unwinding the stopped thread: its local `kept`
    assert %{thread_name: "mt_holder", frame: %Mtrace.Frame{function: "stack_holder"}} = root
    assert root.frame.library =~ ~r/lost\.so$/
    assert links == [{held, 256, nil, ["malloc", "stack_block"]}]

    # lost.so's __thread variable, in dynamic TLS (a library loaded by dlopen): the thread's
    # control block points to its TLS vector (the word at 8), which points to lost.so's 8-byte
    # TLS block, whose one word is kept_tls
    assert {%{kind: :tls, thread: ^tls_tid, library: nil, offset: 8}, links} = tls
    assert [{_, _, _, _}, {_, 8, 0, _}, {^in_tls, 200, nil, ["malloc", "tls_block"]}] = links

    assert text =~
             ~r/^#Mtrace.Path<static lost.so:chain_root\+0 -> 0x[0-9A-F]+ \(64 B chain_block/
  end

  test "top/2 with why: true says what keeps each site's oldest reachable block, from one mark" do
    # A stale word may give a chain as short from elsewhere (see exact_chains/0): one node of at
    # most four must name both roots.
    at_least!(1, 4, "kept_static and chain_root named", fn _ ->
      {plain_sites, without} =
        in_node("""
        #{@plain}
        :ok = Lost.keep_static(3, 100)
        _chain = Lost.keep_chain()
        sites = Mtrace.top(10, why: true, library: "lost.so", min_age: 0)
        names = fn stack -> stack |> Enum.take(2) |> Enum.map(& &1.function) end
        {for(s <- sites, do: {names.(s.stack), s.blocks, plain.(s.why)}),
         Enum.map(Mtrace.top(10, library: "lost.so", min_age: 0), & &1.why)}
        """)

      assert Enum.all?(without, &is_nil/1)
      # keep_static's three blocks share a stack; keep_chain's three have one each
      assert [{3, {_, static_links} = static}] = whys(plain_sites, "static_block")
      assert [{1, _}, {1, _}, {1, _}] = chains = whys(plain_sites, "chain_block")
      # each chain ends at a block of its own site
      assert {_, 100, nil, ["malloc", "static_block"]} = List.last(static_links)

      for {1, {_, links}} <- chains,
          do: assert({_, 64, nil, ["malloc", "chain_block"]} = List.last(links))

      outcome(
        match?({%{kind: :static, name: "kept_static"}, [_]}, static) and
          Enum.map(chains, fn {1, {root, links}} -> {root[:name], length(links)} end)
          |> Enum.sort() == [{"chain_root", 1}, {"chain_root", 2}, {"chain_root", 3}],
        true,
        inspect({static, chains})
      )
    end)

    assert_raise ArgumentError, ~r/^Mtrace.top\/2: why must be true or false/, fn ->
      Mtrace.top(1, why: :yes)
    end
  end

  defp whys(plain_sites, function),
    do: for({["malloc", ^function], blocks, why} <- plain_sites, do: {blocks, why})

  # A resource that only an ETS table holds, made by a process that is gone since: the chain
  # starts in the VM's memory, in a carrier named by its allocator (the table's, or the freed
  # heap of the process that made it, where a dead copy of the term is read first as often as
  # not), and goes through the resource's block (malloc's with +MBe false) at the struct's one
  # field, after the VM's header, to the buffer it owns. A stale word may give a chain as short
  # from elsewhere: one node of at most four must give this one.
  test "a resource that an ETS table holds: the VM's memory, the resource, the buffer it owns" do
    code = """
    #{@plain}
    t = :ets.new(:held, [:public])
    parent = self()

    spawn(fn ->
      buf = Lost.buffer(777)
      :ets.insert(t, {:buf, buf})
      send(parent, {:addresses, Lost.buffer_addresses(buf)})
    end)

    {data, object} = receive do: ({:addresses, a} -> a)
    Process.sleep(100)
    {m, data, object, Lost.resource_header(8), plain.(Mtrace.why(Bitwise.bxor(data, m)))}
    """

    chains =
      for _ <- 1..4 do
        {m, data, object, header, path} =
          node_result(
            "alias Mtrace.Test.Lost\nm = Lost.mask()\n#{code}",
            [{"LD_PRELOAD", mtrace_so()}, {"ERL_AFLAGS", "+MBe false"}]
          )

        # nil: the buffer was found lost
        assert {root, links} = path
        assert {^data, 777, nil, ["malloc", "buffer_data"]} = List.last(links)

        {root, Enum.map(links, fn {a, size, off, _} -> {Bitwise.bxor(a, m), size, off} end),
         {Bitwise.bxor(data, m), Bitwise.bxor(object, m) - header, header}}
      end

    assert Enum.any?(chains, fn {root, links, {data, block, header}} ->
             root.kind == :vm and root.allocator in ["ets_alloc", "eheap_alloc"] and
               match?([{^block, size, ^header}, {^data, 777, nil}] when size >= header + 8, links)
           end),
           inspect(chains)
  end

  test "a lost block has no chain: nil, or the discounted word of a possibly lost one, as leaks/1 finds it lost" do
    # One node of at most four must find the block lost (a stale word may keep it, see
    # leaks_test); in every node, why/2 and leaks/1 agree.
    at_least!(1, 4, "the block found lost", fn _ ->
      {lost?, why} =
        in_node("""
        [masked] = Lost.lose_masked(1, 48)
        Process.sleep(1100)
        lost? = Enum.any?(Mtrace.leaks(blocks: true), &(Bitwise.bxor(&1.address, m) == masked))
        {lost?, Mtrace.why(Bitwise.bxor(masked, m))}
        """)

      assert lost? == lost_answer?(why),
             inspect(why)

      outcome(lost?, true, "kept by #{inspect(why)}")
    end)
  end

  test "a resource whose dead term waits for a collection: lost once every process is collected" do
    # dead_buffer/1: a process dropped the term of a resource whose destructor forgets its data;
    # the term lies dead on its heap, and keeps the resource, until that heap is collected. With
    # gc: false the data is kept, through the resource, in every node; by default leaks/1, why/2
    # and top/2's why: true collect every process first, and the data is lost: in one node of
    # three (another stale word may keep it for a scan, see leaks_test).
    at_least!(1, 3, "the resource's data lost once its term is collected", fn _ ->
      {kept, why_kept, top_kept, lost, why_lost, top_lost} =
        in_node("""
        {_pid, masked} = Lost.dead_buffer(777)
        Process.sleep(1100)
        found? = fn opts ->
          Enum.any?(Mtrace.leaks([blocks: true] ++ opts), &(Bitwise.bxor(&1.address, m) == masked))
        end
        top_why = fn opts ->
          Mtrace.top(100, [why: true, function: "leaky_buffer", min_size: 777] ++ opts)
          |> Enum.find(&(&1.bytes == 777 and &1.blocks == 1))
          |> Map.fetch!(:why)
        end
        kept = found?.(gc: false)
        why_kept = Mtrace.why(Bitwise.bxor(masked, m), gc: false)
        top_kept = top_why.(gc: false)
        # top/2 first: leaks/1 and why/2 would collect for it.
        top_lost = top_why.([])
        {kept, why_kept && List.last(why_kept.links).size,
         top_kept && List.last(top_kept.links).size, found?.([]),
         Mtrace.why(Bitwise.bxor(masked, m)), top_lost}
        """)

      assert {kept, why_kept, top_kept} == {false, 777, 777}

      # possibly lost where the freed resource's memory, a free block of the VM's, still points
      # to it: why/2 then names that word
      outcome(
        lost and top_lost == nil and
          lost_answer?(why_lost),
        true,
        inspect({lost, why_lost, top_lost})
      )
    end)
  end

  test "why/2 of a possibly lost block names the discounted word and its rule, as its site does" do
    # dead_buffer/1's data, once the resource is collected: the resource's memory, a free block of
    # the VM's now, may still point to it (free_vm_blocks). Where leaks/1 says :possible, why/2
    # gives that word, the rule the site names, and the block; in one node of three (leaks/1 and
    # why/2 each mark anew).
    at_least!(1, 3, "a possibly lost block's why", fn _ ->
      {site, why, address} =
        in_node("""
        {_pid, masked} = Lost.dead_buffer(777)
        Process.sleep(1100)
        address = Bitwise.bxor(masked, m)
        site = Enum.find(Mtrace.leaks(blocks: true), &(&1.address == address))
        {site && Map.take(site, [:certainty, :rules, :holder]), Mtrace.why(address, gc: false),
         address}
        """)

      case {site, why} do
        {%{certainty: :possible, rules: rules}, %Mtrace.Path{root: root, links: [link]}} ->
          assert %{kind: :discounted, rule: rule, address: at} = root
          assert is_integer(at)
          assert %{address: ^address, size: 777} = link
          # two marks, a moment apart: the node may have moved the word between them
          outcome(rule in rules, rule, "why/2's rule #{rule}, the site's #{inspect(rules)}")

        _ ->
          {:miss, inspect({site, why})}
      end
    end)
  end

  test "a word in a free block of the VM's carriers keeps nothing" do
    # lose_in_vm_free/1: the only word that held the block lay in enif_alloc's block (the VM's
    # driver_alloc), freed since: in a free block of one of the VM's carriers, which the mark
    # does not read (layouts.h). Read whole, it kept every block (why/2: the carrier's memory).
    # Every block of one node of three (another stale word may keep one: see leaks_test).
    all_found_in_a_node(fn ->
      {lost, whys, skipped} =
        in_node("""
        masked = for _ <- 1..3, do: Lost.lose_in_vm_free(48)
        Process.sleep(1100)
        {sites, info} = Mtrace.leaks_info(blocks: true)
        found = for s <- sites, do: Bitwise.bxor(s.address, m)
        {Enum.map(masked, &(&1 in found)),
         Enum.map(masked, &Mtrace.why(Bitwise.bxor(&1, m))), info.vm_free_bytes}
        """)

      assert skipped > 0
      {lost_say_nil!(lost, whys), whys}
    end)
  end

  test "a word in a free block of a carrier off the 256 KiB boundaries keeps nothing" do
    # lose_in_vm_carrier/1: the only words that held the block lie in the free block of a carrier
    # laid out as the VM's are, on a 128 KiB boundary that is not a 256 KiB one (as some ETS
    # carriers lie): the mark reads it whole and leaves its free blocks out (layouts.h). Read
    # in pieces from 256 KiB boundaries, it kept every block (why/2: that mapping).
    three_found("Lost.lose_in_vm_carrier(48)")
  end

  test "a single-block carrier the VM let go of keeps nothing; one it holds keeps its block" do
    # lose_in_released_carrier/1: single-block carriers laid out as the VM's, one it holds (alone
    # on its list, which its allocator names) full of pointers into a block only it keeps, two it
    # let go of (a stale link to the first, whose next is not it; alone, which its allocator does
    # not name; alone, beside an allocator whose list is empty), as the VM's segment cache keeps a
    # process's heap from before a collection, each full of pointers into a lost block. Read as
    # roots, they kept every lost block (why/2: that mapping). Blocks that held carriers keep are
    # never reported, nor the one of a carrier a stopped thread was moving (its previous carrier
    # still names an address unmapped since).
    lost_and_kept("Lost.lose_in_released_carrier(48)", 2, "test_alloc")
  end

  test "a tagged word in a carrier of Erlang terms keeps nothing; an aligned one keeps its block" do
    # lose_in_terms_carrier/1: words inside a lost block, with their low bits tagged as a list,
    # a boxed term or an immediate, in a carrier of the allocator of Erlang terms (eheap_alloc),
    # as an unwritten stack slot or a heap's garbage holds them: no term points at a NIF's block,
    # and the VM's raw pointers are aligned (layouts.h). Read as roots, they kept every lost
    # block (why/2: that mapping). An aligned word there, and tagged ones in another allocator's
    # carrier, still keep their blocks.
    lost_and_kept("Lost.lose_in_terms_carrier(48)", 2, "eheap_alloc")
  end

  test "a tagged word in a carrier of Erlang terms that malloc gave keeps nothing" do
    # lose_in_terms_block/1: the carriers of lose_in_terms_carrier/1 in malloc blocks that a
    # static keeps, as an allocator keeps its first carrier, which the VM takes from malloc
    # (sys_alloc, its main carrier): read as blocks, with the rules of a mapped carrier. The
    # mark read them as plain blocks, and kept every lost block (why/2: the static, then the
    # eheap_alloc carrier's block), as a word of eheap_alloc's main carrier can keep a real
    # program's lost buffer.
    all_found_in_a_node(fn ->
      {lost, reported, why_kept} =
        in_node("""
        made = for _ <- 1..3, do: Tuple.to_list(Lost.lose_in_terms_block(48))
        found = for s <- Mtrace.leaks(blocks: true, min_age: 0), do: Bitwise.bxor(s.address, m)
        {Enum.count(made, fn [lost | _] -> lost in found end),
         Enum.count(made, fn [_ | kept] -> Enum.any?(kept, &(&1 in found)) end),
         Mtrace.why(Bitwise.bxor(Enum.at(hd(made), 1), m))}
        """)

      # Kept: by the carrier, or by a shorter chain (a stack word the NIF left).
      assert reported == 0
      assert %Mtrace.Path{links: [_ | _] = links} = why_kept
      assert List.last(links).size == 48
      {lost, why_kept}
    end)
  end

  test "a word in a thread arena's heap that shares its mapping with the memory below keeps nothing" do
    # lose_in_merged_heap/1: the only words that held the block lie in a free chunk of a thread
    # arena's heap whose mapping the kernel merged with anonymous memory below it, as it merges the
    # VM's carriers: the mark finds the heap inside the mapping by its heap_info and leaves it out
    # of the roots. Taken only where a heap starts its mapping, it kept every block (why/2: the
    # merged mapping).
    three_found("Lost.lose_in_merged_heap(48)")
  end

  test "a word in the unused part of a live process's heap keeps nothing" do
    # lose_in_free_heap/1: the only word that held the block lies in a waiting process's heap,
    # above its heap top (free_heap_holds/1 proves it from the NIF's own view of that heap): the
    # mark leaves that part out (beam_heaps.h). Read, it kept the block. Tries that did not put the
    # word there (the second collection took another block) prove nothing and are left out. No
    # collection first: it would move the heap, and the word with the old heap into a free block.
    {tries, info} =
      in_node("""
      tries =
        for _ <- 1..6 do
          {pid, masked, held, nil} = Lost.lose_in_free_heap(64)
          found = for s <- Mtrace.leaks(blocks: true, gc: false, min_age: 0), do: Bitwise.bxor(s.address, m)
          send(pid, :stop)
          {held != false, masked in found}
        end

      {_, info} = Mtrace.leaks_info()
      {tries, Map.take(info, [:processes, :processes_read_whole, :process_free_bytes])}
      """)

    held = for {true, found} <- tries, do: found
    assert held != [], "no try left the word in the unused part: #{inspect(tries)}"
    assert Enum.all?(held), inspect(tries)
    assert info.processes > 10 and info.process_free_bytes > 0, inspect(info)
    assert info.processes_read_whole < info.processes, inspect(info)
  end

  test "a word in the unused part of a process's old heap keeps nothing" do
    # lose_in_old_heap/1: the only word that points into the block lies in a waiting process's
    # old heap, halfway between its top and its end (lost.c writes it there, having found the
    # old heap by the sizes process_info/2 gives): the mark leaves that part out (beam_heaps.h).
    # Read, it kept every block (why/2: that mapping, eheap_alloc). No collection first: it would
    # merge the old heap into a new one. Every block of one node of three.
    at_least!(1, 3, "every block lost in the old heap", fn _ ->
      {masked, found, whys} =
        in_node("""
        masked = for _ <- 1..3, do: elem(Lost.lose_in_old_heap(48), 1)
        found = for s <- Mtrace.leaks(blocks: true, gc: false, min_age: 0), do: Bitwise.bxor(s.address, m)
        {masked, found, Enum.map(masked, &(&1 && Mtrace.why(Bitwise.bxor(&1, m), gc: false)))}
        """)

      assert false not in masked, "no old heap found: #{inspect(masked)}"
      outcome(Enum.all?(masked, &(&1 in found)), true, inspect(whys))
    end)
  end

  test "a word in the unused part of the asking process's own heap keeps nothing" do
    # As above, but the process that holds the word asks leaks/1 itself: it runs (the NIF, on a
    # dirty scheduler) while the mark reads, and its heap is left out as the asker's
    # (mt_beam_heaps_asker): its NIF makes no term before the mark. Twelve tries a node, in up to
    # three nodes: where the VM places a heap varies by node, and a node's tries may all leave no
    # word there.
    [tries] =
      at_least!(1, 3, "a try that left the word in the unused part", fn _ ->
        tries =
          in_node("""
          ask = fn masked ->
            found = for s <- Mtrace.leaks(blocks: true, gc: false, min_age: 0), do: s.address
            Bitwise.bxor(masked, m) in found
          end

          for _ <- 1..12 do
            {pid, masked, held, found} = Lost.lose_in_free_heap(64, ask)
            # what kept a block missed, asked while its process still holds the word
            why = if held != false and not found, do: inspect(Mtrace.why(Bitwise.bxor(masked, m)))
            send(pid, :stop)
            {held != false, found, why}
          end
          """)

        outcome(Enum.any?(tries, &elem(&1, 0)), tries, inspect(tries))
      end)

    held = for {true, found, _} <- tries, do: found
    assert Enum.all?(held), inspect(tries)
  end

  test "a string after a zero word, in a block without a record, in memory a NIF made keep their block: nothing proves them the VM's" do
    # lose_in_text_tail/1: the word that holds each block is planted as the rule `string_end` knows
    # it (docs/rules.md), in memory the test NIF made. The rule applies only in blocks that are text
    # from their first byte, which nothing proves this memory is: the word is a pointer, and keeps
    # its block. The shape itself is checked in test/c/layouts_test.c.
    three_kept("Lost.lose_in_text_tail(1024)")
  end

  test "the bytes after a short string's NUL, after its length, in a block without a record, keep nothing" do
    # lose_in_counted_text/1: the only word that points into the block follows the count 3, as
    # libc's time zone name {next, 3, "UTC\0"} does in a 24-byte block from before an attach: the
    # word's low half is the string, its high half an old pointer's, and the block lies where
    # such a word points (moved there: lost.c). Read whole, it kept every block (why/2: that
    # block); a harness of bin/demo's part 2 with 100 C++ buffers lost before the attach and 10
    # after, run 465 times, once lost one to libc's own.
    three_found("Lost.lose_in_counted_text(33 * 1024 * 1024)")
  end

  test "a pointer that reads as four letters and a NUL, first in a block without a record, keeps its block" do
    # keep_by_text_pointer/1: every pointer into a heap mapped between 0x5600_0000_0000 and
    # 0x5600_ffff_ffff has a zero fifth byte, and its low four may be letters: such a block's
    # first word reads as a short string ("dcba" here). A text of at least a whole word is no
    # pointer (a pointer's two high bytes are zero); a shorter one proves nothing.
    three_kept("Lost.keep_by_text_pointer(33 * 1024 * 1024)")
  end

  test "a heap binary's words in memory a NIF made keep their block: nothing proves them the VM's" do
    # lose_in_heap_binary/1: the word that holds each block is planted as the rule `heap_binary`
    # knows it (docs/rules.md), in memory the test NIF made. The rule applies only in carriers of
    # Erlang terms, which nothing proves this memory is: the word is a pointer, and keeps its block.
    # The shape itself is checked in test/c/layouts_test.c.
    three_kept("Lost.lose_in_heap_binary(48)")
  end

  test "an OTP 27 heap bitstring's words in memory a NIF made keep their block: nothing proves them the VM's" do
    # lose_in_heap_bits/1: the word that holds each block is planted as the rule `heap_binary` knows
    # it (docs/rules.md), in memory the test NIF made. The rule applies only in carriers of Erlang
    # terms, in an OTP 27 VM, which nothing proves this memory is: the word is a pointer, and keeps
    # its block. The shape itself is checked in test/c/layouts_test.c.
    three_kept("Lost.lose_in_heap_bits(48)")
  end

  test "a fun's words in memory a NIF made keep their block: nothing proves them the VM's" do
    # lose_in_fun/1: the word that holds each block is planted as the rule `fun_padding` knows it
    # (docs/rules.md), in memory the test NIF made. The rule applies only in carriers of Erlang
    # terms, which nothing proves this memory is: the word is a pointer, and keeps its block. The
    # shape itself is checked in test/c/layouts_test.c.
    three_kept("Lost.lose_in_fun(48)")
  end

  test "a port's words in memory a NIF made keep their block: nothing proves them the VM's" do
    # lose_in_port/1: the word that holds each block is planted as the rule `port_reds` knows it
    # (docs/rules.md), in memory the test NIF made. The rule applies only in the VM's own carriers,
    # which nothing proves this memory is: the word is a pointer, and keeps its block. The shape
    # itself is checked in test/c/layouts_test.c.
    three_kept("Lost.lose_in_port(48)")
  end

  test "a dead OTP 27 sub-bitstring's words in memory a NIF made keep their block: nothing proves them the VM's" do
    # lose_in_sub_bits/1: the word that holds each block is planted as the rule `sub_bits` knows it
    # (docs/rules.md), in memory the test NIF made. The rule applies only in carriers of Erlang
    # terms, in an OTP 27 VM, which nothing proves this memory is: the word is a pointer, and keeps
    # its block. The shape itself is checked in test/c/layouts_test.c.
    three_kept("Lost.lose_in_sub_bits(4096)")
  end

  test "a dead OTP 27 BinRef's words in memory a NIF made keep their block: nothing proves them the VM's" do
    # lose_in_bin_ref/1: the word that holds each block is planted as the rule `dead_binref` knows
    # it (docs/rules.md), in memory the test NIF made. The rule applies only in carriers of Erlang
    # terms, in an OTP 27 VM, which nothing proves this memory is: the word is a pointer, and keeps
    # its block. The shape itself is checked in test/c/layouts_test.c.
    three_kept("Lost.lose_in_bin_ref(4096)")
  end

  test "an atom entry's words in memory a NIF made keep their block: nothing proves them the VM's" do
    # lose_in_atom/1: the word that holds each block is planted as the rule `atom_index` knows it
    # (docs/rules.md), in memory the test NIF made. The rule applies only in the VM's own carriers,
    # which nothing proves this memory is: the word is a pointer, and keeps its block. The shape
    # itself is checked in test/c/layouts_test.c.
    three_kept("Lost.lose_in_atom(48)")
  end

  test "the process and port tables' free id lists keep nothing" do
    # lose_on_4g/1: blocks of 1 MiB at h << 32. The two tables' lists of free ids, 32-bit
    # numbers (beam_heaps.h), hold nearly every pair (n, h) with n below 2^18: read as words,
    # they kept every such block (0 of 8 found in every node); bin/demo lost its last C++ buffer
    # to one, where a scheduler's arena started on such a boundary.
    three_found("Lost.lose_on_4g(1_048_576)")
  end

  test "mtrace's own stack caches keep nothing" do
    # lose_in_rows/1: the block's address fills the stack where mtrace's table unwinder then
    # makes a row for a new return address; the row's padding keeps the address's high bytes,
    # and with the row's rules they point into the block (16 MiB on a 4 GiB boundary). Read as a
    # root, that memory kept the first such block in every node; bin/demo lost a C++ buffer so.
    three_found("Lost.lose_in_rows(16_777_216)")
  end

  test "the dead part of a scheduler's stack keeps nothing while it runs Erlang code" do
    # On each scheduler a process loses blocks deep down the scheduler's stack (lose_masked/2),
    # then spins in compiled Erlang code. The JIT runs that code on the process's own stack, in
    # the VM's carriers, and the scheduler's own stack is live only above the JIT's register
    # block (rbx). Read whole, as a stack that did not hold its thread's stack pointer was, it
    # kept the last block lost on a spinning scheduler in most nodes. gc: false, as a
    # collection would overwrite the dead frames first.
    for _ <- 1..3 do
      {found, lost} =
        in_node("""
        defmodule Spin do
          def loop(n), do: loop(n + 1)
        end
        me = self()
        spinners =
          for _ <- 1..System.schedulers_online() do
            spawn(fn -> send(me, {:lost, Lost.lose_masked(3, 64)}); Spin.loop(0) end)
          end
        masked = for _ <- spinners, x <- (receive do {:lost, l} -> l end), do: x
        found = for s <- Mtrace.leaks(blocks: true, min_age: 0, gc: false), do: Bitwise.bxor(s.address, m)
        Enum.each(spinners, &Process.exit(&1, :kill))
        {Enum.count(masked, &(&1 in found)), length(masked)}
        """)

      assert found == lost
    end
  end

  test "an OTP 27 Binary's header, made by a NIF, in memory a NIF made keep their block: nothing proves them the VM's" do
    # lose_in_binary27/1: the word that holds each block is planted as the rule `binary_slack` knows
    # it (docs/rules.md), in memory the test NIF made. The rule applies only in blocks a live
    # ProcBin or BinRef names, which nothing proves this memory is: the word is a pointer, and keeps
    # its block. The shape itself is checked in test/c/layouts_test.c.
    three_kept("Lost.lose_in_binary27(64)")
  end

  test "the stack of a thread that exited keeps nothing" do
    # lose_in_dead_thread/1: the only word that held the block is in the stack of a NIF's thread,
    # which exited and was joined; glibc keeps the stack mapped for a later thread. Read as
    # memory, the last one's kept its block in every node.
    three_found("Lost.lose_in_dead_thread(48)")
  end

  test "with MTRACE_CLEAR, the bytes a kept block has not written keep nothing of what its chunk held" do
    # lose_in_unwritten/1: the only word that holds the block is byte 392 of a freed block, whose
    # chunk malloc gave to a block kept in a static, written in its first word only. With
    # MTRACE_CLEAR each new block is zeroed before the program has it (recorder.h's mt_clear);
    # without it (the default, which writes nothing the program receives) a block is kept where
    # malloc gave the freed chunk to the kept block (why/2: the static, then the kept block at
    # offset 392).
    three_found("Lost.lose_in_unwritten(48)", [{"MTRACE_CLEAR", "4096"}])
  end

  test "Asmjit's JitAllocatorBlock, made by a NIF in memory a NIF made keep their block: nothing proves them the VM's" do
    # lose_in_jit_bits/1: the word that holds each block is planted as the rule `jit_bit_vectors`
    # knows it (docs/rules.md), in memory the test NIF made. The rule applies only in blocks the
    # VM's own code allocated, which nothing proves this memory is: the word is a pointer, and keeps
    # its block. The shape itself is checked in test/c/layouts_test.c.
    three_kept("Lost.lose_in_jit_bits(48)")
  end

  test "a thread's alternate signal stack keeps nothing, though its stack points to it" do
    # lose_in_altstack/1: the only word that holds the block lies in the alternate signal stack
    # of a thread that keeps that stack's address in a local, as the BEAM's threads do. The
    # stack is reachable and its words, stale signal frames, are not read; when the thread's
    # stack was read first, the word kept every block (why/2: the thread's stack, then the
    # signal stack), as a scheduler's can keep a real program's lost buffer.
    three_found("Lost.lose_in_altstack(48)")
  end

  test "a free block on the VM's fix_alloc lists keeps nothing" do
    # lose_in_fix_list/2: the only word that holds the block is the third of the oldest block on
    # the longest of the free lists of fix_alloc's instance of scheduler 1 (most likely the Process
    # structs of 200 processes spawned there that exited), as a struct that died there left it. The lists' blocks past their links are not
    # read (beam_alloc.h). Read, the word kept its block in each of three runs (the last call's:
    # each writes over the same block; why/2: fix_alloc's memory, then a 64 KiB carrier of its,
    # from malloc, at the block's offset), as it can keep a real program's lost block.
    three_found("""
    (me = self()
     :erlang.spawn_opt(fn ->
       for _ <- 1..200, do: spawn(fn -> :ok end)
       Process.sleep(100)
       send(me, {:fix, Lost.lose_in_fix_list(48, :erlang.system_info(:scheduler_id))})
     end, [{:scheduler, 1}])
     receive do {:fix, masked} -> masked end)
    """)
  end

  test "a block queued to the allocator instance of a scheduler that has not run since keeps nothing" do
    # lose_in_queued_fragment/3: the only words that held three blocks lie in a message's heap
    # fragment, freed on scheduler 2 and queued to scheduler 1's allocator instance, which frees
    # it when it next runs (beam_alloc.h): scheduler 1 waits in a NIF meanwhile, so the mark finds
    # it queued (delayed_free_bytes, some 18 KiB), its words past the link and type not read.
    # Read, the fragment (in use by its header) kept the three blocks in every node.
    all_found_in_a_node(fn ->
      {lost, queued, why} =
        node_result(
          """
          alias Mtrace.Test.Lost
          m = Lost.mask()
          Mtrace.leaks_info(min_age: 0)

          Lost.lose_in_queued_fragment(48, 5000, fn masked ->
            {sites, info} = Mtrace.leaks_info(blocks: true, min_age: 0, gc: false)
            found = for s <- sites, do: Bitwise.bxor(s.address, m)
            kept = Enum.reject(masked, &(&1 in found))
            why = if kept != [], do: Mtrace.why(Bitwise.bxor(hd(kept), m), gc: false)
            {3 - length(kept), info.delayed_free_bytes, why}
          end)
          """,
          [{"LD_PRELOAD", mtrace_so()}, {"ERL_AFLAGS", "+S 2:2"}]
        )

      assert queued > 0, inspect({lost, why})
      {lost, why}
    end)
  end

  test "a scheduler's stack below the frames it sleeps in keeps nothing" do
    # lose_in_sleeping_frames/1, in a process bound to a scheduler: the only words that held the
    # block lie in the 32 KiB of the scheduler's stack below the NIF's frame, where it lays the
    # frames it sleeps in (the process waits): their slots that no call writes keep the word.
    # Before each mark every scheduler zeroes that part of its stack (scrub.h's mt_scrub):
    # once the mark is made, dead_stack_holds/1, on the same scheduler, finds no copy left. Without
    # it, each found hundreds, and OTP 25's polling scheduler kept the block in some nodes (why/2:
    # erts_poll_wait's frame), as it can keep a real program's lost buffer.
    all_found_in_a_node(fn ->
      {lost, holding} =
        in_node("""
        me = self()
        ids = Enum.take(Stream.cycle(1..:erlang.system_info(:schedulers_online)), 3)

        lose = fn ->
          send(me, {:lost, self(), Lost.lose_in_sleeping_frames(48)})
          receive do: ({:check, x} -> send(me, {:holds, Lost.dead_stack_holds(x)}))
        end

        losers = for id <- ids, do: :erlang.spawn_opt(lose, [{:scheduler, id}])
        masked = for pid <- losers, do: receive(do: ({:lost, ^pid, x} -> x))
        found = for s <- Mtrace.leaks(blocks: true, min_age: 0), do: Bitwise.bxor(s.address, m)

        holding =
          for {pid, x} <- Enum.zip(losers, masked) do
            send(pid, {:check, x})
            receive do: ({:holds, n} -> n)
          end

        {Enum.count(masked, &(&1 in found)), holding}
        """)

      assert holding == [0, 0, 0]
      {lost, holding}
    end)
  end

  test "an unused float register of the JIT, on a scheduler's stack, keeps nothing" do
    # lose_in_float_regs/1: the only word that holds the block is the 901st of the 1024 float
    # registers the JIT keeps on the calling scheduler's stack, which no float instruction wrote,
    # as the frames of the thread's start left theirs (malloc's and free's, with chunk addresses
    # a later block is given). Each scheduler notes where its registers lie before the mark, by a
    # float its caller leaves in the first (beam_regs.h). Read, they kept the block (why/2: the
    # scheduler's stack, 16 KiB above its stack pointer); the asker test above missed 10 tries in
    # 1283 so.
    three_found("Lost.lose_in_float_regs(48)")
  end

  test "a dirty scheduler's stack below the frames it sleeps in keeps nothing" do
    # lose_in_dirty_frames/2, called at once on every dirty CPU scheduler (each call waits for the
    # others, so each has one of its own): the only words that held each block lie in the 32 KiB
    # of that scheduler's stack below the NIF's frame, as a user's dirty NIF leaves them. No
    # process can be bound to a dirty scheduler: before each mark, as many calls as there are
    # dirty schedulers of each kind wait for one another in a NIF that then zeroes its stack (as
    # scrub_nif/2 does). Once the mark is made, dirty_frames_hold/1 finds no copy left there.
    all_found_in_a_node(fn ->
      {lost, holding} =
        in_node("""
        n = :erlang.system_info(:dirty_cpu_schedulers_online)
        me = self()
        for _ <- 1..n, do: spawn(fn -> send(me, {:lost, Lost.lose_in_dirty_frames(48, n)}) end)
        masked = for _ <- 1..n, do: receive(do: ({:lost, x} -> x))
        found = for s <- Mtrace.leaks(blocks: true, min_age: 0), do: Bitwise.bxor(s.address, m)
        holding = Enum.map(masked, &Lost.dirty_frames_hold/1)
        {Enum.count(masked, &(&1 in found)) == n, holding}
        """)

      assert Enum.all?(holding, &(&1 == 0)), inspect(holding)
      # all_found_in_a_node wants 3 found.
      {if(lost, do: 3, else: 0), holding}
    end)
  end

  test "the JIT's pointer into the last binary a scheduler built keeps nothing" do
    # In a process bound to each scheduler (+MBe false: binaries are malloc's blocks), a 308-byte
    # binary is built and dropped, a collection frees it, and lose_over/1 makes a block over its
    # chunk, on the same scheduler (again, where malloc gave the chunk to another block). The only word that points into the block is the JIT's
    # binary-construction state (OTP's erl_bits_state, in the scheduler's register block on its
    # stack), left at the freed binary's bytes. Before each mark, each scheduler builds a small
    # binary on its process's heap, and the state points there. Without it, the blocks were kept
    # (why/2: a scheduler's stack, no frame), as such a word can keep a real program's lost
    # buffer.
    all_found_in_a_node(fn ->
      {lost, whys} =
        node_result(
          """
          alias Mtrace.Test.Lost
          m = Lost.mask()
          me = self()
          ids = Enum.take(Stream.cycle(1..:erlang.system_info(:schedulers_online)), 3)
          built = fn x -> Lost.binary_bytes(<<x::64, :binary.copy(<<7>>, 300)::binary>>) end

          over = fn ->
            bytes = built.(:erlang.phash2(self()))
            :erlang.garbage_collect()
            Lost.lose_over(bytes)
          end

          lose = fn ->
            send(me, {:lost, self(), Enum.find_value(1..10, fn _ -> over.() end)})
            receive do: (:stop -> :ok)
          end

          losers = for id <- ids, do: :erlang.spawn_opt(lose, [{:scheduler, id}])
          masked = for pid <- losers, do: receive(do: ({:lost, ^pid, x} -> x))

          # malloc may not give the freed binary's chunk to the block in 10 tries: a miss
          answer =
            if Enum.all?(masked, &is_integer/1) do
              found =
                for s <- Mtrace.leaks(blocks: true, min_age: 0), do: Bitwise.bxor(s.address, m)

              whys = Enum.map(masked, &Mtrace.why(Bitwise.bxor(&1, m)))
              {Enum.map(masked, &(&1 in found)), whys}
            else
              {Enum.map(masked, fn _ -> false end), [:no_block_over_the_binary | masked]}
            end

          Enum.each(losers, &send(&1, :stop))
          answer
          """,
          [{"LD_PRELOAD", mtrace_so()}, {"ERL_AFLAGS", "+MBe false"}]
        )

      {lost_say_nil!(lost, whys), whys}
    end)
  end

  # Three blocks lost by the call `lose` (each returns a masked address) are all found, in one
  # node of three (another stale word may keep one: see leaks_test), and why/2 says nil for each
  # block found.
  defp three_found(lose, env \\ []) do
    all_found_in_a_node(fn ->
      {lost, whys} =
        in_node(
          """
          masked = for _ <- 1..3, do: #{lose}
          found = for s <- Mtrace.leaks(blocks: true, min_age: 0), do: Bitwise.bxor(s.address, m)
          {Enum.map(masked, &(&1 in found)), Enum.map(masked, &Mtrace.why(Bitwise.bxor(&1, m)))}
          """,
          env
        )

      {lost_say_nil!(lost, whys), whys}
    end)
  end

  # How many blocks leaks/1 found (found: a flag a block), each of which why/2 says nothing keeps
  # but, for a possibly lost one, a word a rule discounted. A block kept at leaks/1's mark may be
  # lost at why/2's, its stale holder gone between them: a nil for a block not found is no defect.
  defp lost_say_nil!(found, whys) do
    for {true, why} <- Enum.zip(found, whys), do: assert(lost_answer?(why), inspect(whys))
    Enum.count(found, & &1)
  end

  # why/2's answer for a lost block: nil, or for a possibly lost one the word a rule discounted.
  defp lost_answer?(why), do: why == nil or match?(%Mtrace.Path{root: %{kind: :discounted}}, why)

  # Three blocks lost by the call `lose` are each still held by the word it planted, in memory
  # that nothing proves to be the structure the word's shape is: none is reported lost. (why/2
  # cannot name a word equal to the address it is asked about in an anonymous mapping, where the
  # asker may hold it: see reach.h.)
  defp three_kept(lose) do
    {reported, sites} =
      in_node("""
      masked = for _ <- 1..3, do: #{lose}
      sites = for s <- Mtrace.leaks(blocks: true, min_age: 0), do: Bitwise.bxor(s.address, m)
      {Enum.count(masked, &(&1 in sites)), length(sites)}
      """)

    assert reported == 0, "#{reported} of 3 reported lost, among #{sites} sites"
  end

  # lose returns a tuple of masked addresses: first the blocks that must be found lost, then
  # `kept` blocks that must never be, the first of them held in a carrier of `allocator`.
  defp lost_and_kept(lose, kept, allocator) do
    all_found_in_a_node(fn ->
      {lost, reported, why_kept} =
        in_node("""
        made = for _ <- 1..3, do: Tuple.to_list(#{lose})
        found = for s <- Mtrace.leaks(blocks: true, min_age: 0), do: Bitwise.bxor(s.address, m)
        lost = length(hd(made)) - #{kept}
        {Enum.count(made, fn t -> Enum.all?(Enum.take(t, lost), &(&1 in found)) end),
         Enum.count(made, fn t -> Enum.any?(Enum.drop(t, lost), &(&1 in found)) end),
         Mtrace.why(Bitwise.bxor(Enum.at(hd(made), lost), m))}
        """)

      assert reported == 0
      assert %Mtrace.Path{root: %{kind: :vm, allocator: ^allocator}, links: [_]} = why_kept
      {lost, lost}
    end)
  end

  # try_node (one node's try: its assertions, then {how many of its three lost blocks were found,
  # what to show}) in up to three nodes, until one finds all three: another stale word may keep
  # one (see leaks_test).
  defp all_found_in_a_node(try_node) do
    at_least!(1, 3, "all three blocks found lost in a node", fn _ ->
      {found, shown} = try_node.()
      outcome(found == 3, found, "#{found} of 3: #{inspect(shown)}")
    end)
  end

  test "leaks/1 with why: true leads from a lost list's head to its oldest node, lost by lost" do
    # lose_list(4): each node's first word points to the node made before it, and the last made,
    # the head, is the direct one: the chain starts there and goes down the list, each link's
    # pointer at offset 0. A stale word may keep the list (see leaks_test): one node of four.
    [chained] =
      at_least!(1, 4, "the lost list's chain", fn _ ->
        {sites, without} =
          in_node("""
          :ok = Lost.lose_list(4)
          Process.sleep(1100)
          names = fn stack -> stack |> Enum.take(2) |> Enum.map(& &1.function) end
          sites = Mtrace.leaks(why: true, library: "lost.so")
          plain = fn nil -> nil
            %Mtrace.Path{root: root, links: links} ->
              {root, Enum.map(links, &{&1.size, &1.offset, names.(&1.stack)})}
          end
          {for(s <- sites, do: {names.(s.stack), s.blocks, s.direct_blocks, plain.(s.why)}),
           Enum.map(Mtrace.leaks(library: "lost.so"), & &1.why)}
          """)

        assert Enum.all?(without, &is_nil/1)
        node = ["malloc", "lost_node"]

        case sites do
          [{^node, 4, 1, why}] when why != nil -> {:hit, why}
          _ -> {:miss, inspect(sites)}
        end
      end)

    # an indirect node (three of four are), the oldest of them: made within one tick of the
    # clock, any of them, at its depth
    node = ["malloc", "lost_node"]
    assert {%{kind: :lost}, [_ | _] = links} = chained
    assert length(links) in 2..4, inspect(links)
    assert List.last(links) == {64, nil, node}
    assert Enum.all?(Enum.drop(links, -1), &(&1 == {64, 0, node})), inspect(links)

    assert_raise ArgumentError, ~r/^Mtrace.leaks\/1: why must be true or false/, fn ->
      Mtrace.leaks(why: :yes)
    end
  end

  test "an address in no live block, and bad arguments" do
    assert {{:error, :not_a_block}, {:error, :not_a_block}} =
             in_node("""
             {Mtrace.why(0), Mtrace.why(Bitwise.bxor(Lost.static_address(63), m) + 4096)}
             """)

    for bad <- [-1, 1.5, :nowhere, "0x10"] do
      assert_raise ArgumentError, ~r/^Mtrace.why\/2: address must be/, fn -> Mtrace.why(bad) end
    end

    # the NIF itself, called with no integer
    assert_raise ArgumentError, fn -> Mtrace.Nif.why_nif(:nowhere) end

    assert_raise ArgumentError, ~r/^Mtrace.why\/2: unknown option :colour/, fn ->
      Mtrace.why(16, colour: 1)
    end
  end
end
