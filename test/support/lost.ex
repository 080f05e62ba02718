defmodule Mtrace.Test.Lost do
  @moduledoc false
  # The test NIF of the leaks tests (test/support/c_src/lost.c): blocks lost and kept in known
  # ways, from named functions.

  @on_load :load
  def load do
    path = Path.expand("c_src/lost", __DIR__)
    :erlang.load_nif(String.to_charlist(path), 0)
  end

  def lose_list(_n), do: :erlang.nif_error(:not_loaded)
  def keep_lookalikes(_n), do: :erlang.nif_error(:not_loaded)
  def holders(_blocks), do: :erlang.nif_error(:not_loaded)
  def drop_lookalikes, do: :erlang.nif_error(:not_loaded)
  def lose_in_vm_free(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_vm_carrier(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_port(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_merged_heap(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_released_carrier(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_terms_carrier(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_terms_block(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_sub_bits(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_bin_ref(_size), do: :erlang.nif_error(:not_loaded)
  def lose_on_4g(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_rows(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_binary27(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_heap_binary(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_heap_bits(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_fun(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_atom(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_dead_thread(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_unwritten(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_jit_bits(_size), do: :erlang.nif_error(:not_loaded)
  def jit_bits_blocks, do: :erlang.nif_error(:not_loaded)
  def lose_in_altstack(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_fix_list(_size, _scheduler), do: :erlang.nif_error(:not_loaded)
  def lose_in_sleeping_frames(_size), do: :erlang.nif_error(:not_loaded)
  def dead_stack_holds(_masked), do: :erlang.nif_error(:not_loaded)
  def lose_in_dirty_frames(_size, _n), do: :erlang.nif_error(:not_loaded)
  def dirty_frames_hold(_masked), do: :erlang.nif_error(:not_loaded)
  def binary_bytes(_binary), do: :erlang.nif_error(:not_loaded)
  def lose_over(_bytes), do: :erlang.nif_error(:not_loaded)
  def lose_in_heap(_size), do: :erlang.nif_error(:not_loaded)
  def free_heap_holds(_masked), do: :erlang.nif_error(:not_loaded)
  def lose_in_float_regs(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_text_tail(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_counted_text(_size), do: :erlang.nif_error(:not_loaded)
  def keep_by_text_pointer(_size), do: :erlang.nif_error(:not_loaded)
  def lose_in_library_name(_path), do: :erlang.nif_error(:not_loaded)
  def hold_scheduler(_ms), do: :erlang.nif_error(:not_loaded)
  def lose_in_binary_tail(_size), do: :erlang.nif_error(:not_loaded)

  # A process whose heap holds, in its unused part between the heap top and the stack, the only
  # word with a lost block's address: an 8-byte heap binary made high on its heap, dead at once,
  # then two collections, the second of which gives it its first heap's block back (the heap's
  # size is fixed, and the VM takes the lowest free block that fits). Then it calls
  # then.(masked) (by default it does nothing) and waits for :stop. Returns {pid, address xor
  # mask, the word's address (and the heap top and stack top) or false, what then returned}.
  def lose_in_free_heap(size, then \\ fn _ -> nil end) do
    parent = self()

    pid =
      :erlang.spawn_opt(
        fn ->
          garbage = Enum.to_list(1..3000)
          masked = lose_in_heap(size)
          true = length(garbage) == 3000
          :erlang.garbage_collect()
          :erlang.garbage_collect()
          held = free_heap_holds(masked)
          send(parent, {self(), masked, held, then.(masked)})

          receive do
            :stop -> :ok
          end
        end,
        min_heap_size: 10_000
      )

    receive do
      {^pid, masked, held, result} -> {pid, masked, held, result}
    end
  end

  # Three lost blocks of size bytes whose only words lie in a message's heap fragment: allocated on
  # scheduler 1 (its sender's instance of eheap_alloc, the receiver's messages being off its heap)
  # and freed on scheduler 2 by its receiver's collection, so queued to scheduler 1's instance,
  # which frees it when it next runs. Scheduler 1 waits meanwhile in hold_scheduler(ms), called by
  # a process whose heap was made before the blocks: a running process's unused heap is read whole
  # (the NIF may have built terms there), and the sender's, made since, may hold a stale copy. The
  # sender waits in receive meanwhile, its heap collected. then.(the addresses xor mask) runs on
  # scheduler 2 once the fragment is freed, and what it returns is returned.
  def lose_in_queued_fragment(size, ms, then) do
    parent = self()

    run = fn ->
      me = self()

      # The message is taken only once scheduler 1 is held: taken, its fragment's size starts a
      # collection, which frees it.
      receiver = fn ->
        receive do: (:drop -> :ok)
        receive do: ({:fragment, _} -> :ok)
        :erlang.garbage_collect()
        send(me, :dropped)
        receive do: (:stop -> :ok)
      end

      holder = fn ->
        receive do: (:hold -> :ok)
        send(me, :holding)
        hold_scheduler(ms)
      end

      to = :erlang.spawn_opt(receiver, [{:scheduler, 2}, {:message_queue_data, :off_heap}])
      held = :erlang.spawn_opt(holder, [{:scheduler, 1}])
      masked = lose_masked(3, size)

      sender = fn ->
        send(to, {:fragment, [words(masked) | Enum.to_list(1..1000)]})
        :erlang.garbage_collect()
        send(held, :hold)
        receive do: (:stop -> :ok)
      end

      from = :erlang.spawn_opt(sender, [{:scheduler, 1}])
      receive do: (:holding -> :ok)
      # the holder in hold_scheduler/1 by then
      Process.sleep(100)
      send(to, :drop)
      receive do: (:dropped -> :ok)
      result = then.(masked)
      for pid <- [to, from], do: send(pid, :stop)
      send(parent, {self(), result})
    end

    pid = :erlang.spawn_opt(run, [{:scheduler, 2}])
    receive do: ({^pid, result} -> result)
  end

  # One heap binary of the three addresses (a binary built in steps would be a growing one, off
  # the heap).
  defp words([x1, x2, x3]) do
    m = mask()

    <<Bitwise.bxor(x1, m)::native-64, Bitwise.bxor(x2, m)::native-64,
      Bitwise.bxor(x3, m)::native-64>>
  end

  # A process with an old heap (two minor collections promote its list), whose old heap's unused
  # part, above its top, holds the only word that points into a lost block (lose_in_old_heap/3).
  # It waits for :stop. Returns {pid, address xor mask}, or {pid, false} when its old heap was
  # not found.
  def lose_in_old_heap(size) do
    parent = self()

    pid =
      spawn(fn ->
        data = Enum.to_list(1..1000)
        :erlang.garbage_collect(self(), type: :minor)
        :erlang.garbage_collect(self(), type: :minor)
        {:garbage_collection_info, gc} = Process.info(self(), :garbage_collection_info)
        masked = lose_in_old_heap(size, gc[:old_heap_block_size], gc[:old_heap_size])
        send(parent, {self(), masked})

        receive do
          :stop -> data
        end
      end)

    receive do
      {^pid, masked} -> {pid, masked}
    end
  end

  def lose_in_old_heap(_size, _block_words, _used_words), do: :erlang.nif_error(:not_loaded)
  def keep_static(_n, _size), do: :erlang.nif_error(:not_loaded)
  def keep_tree(_depth), do: :erlang.nif_error(:not_loaded)
  def keep_tls(_size), do: :erlang.nif_error(:not_loaded)
  def buffer(_size), do: :erlang.nif_error(:not_loaded)
  def leaky_buffer(_size), do: :erlang.nif_error(:not_loaded)

  # A process that made a leaky buffer and dropped its term, which then lies dead on its heap
  # until the heap is collected (it waits, and does not grow). Returns {pid, data xor mask}.
  def dead_buffer(size) do
    parent = self()

    pid =
      spawn(fn ->
        {_resource, data} = leaky_buffer(size)
        send(parent, {self(), data})

        receive do
          :stop -> :ok
        end
      end)

    receive do
      {^pid, data} -> {pid, data}
    end
  end

  def buffer_addresses(_buffer), do: :erlang.nif_error(:not_loaded)
  def lose_resource(_size), do: :erlang.nif_error(:not_loaded)
  def resource_header(_size), do: :erlang.nif_error(:not_loaded)
  def enif_blocks(_lost, _kept, _size), do: :erlang.nif_error(:not_loaded)
  def freed_behind(_n, _size), do: :erlang.nif_error(:not_loaded)
  def lose_on_stack(_size), do: :erlang.nif_error(:not_loaded)
  def storm(_threads), do: :erlang.nif_error(:not_loaded)
  def many(_kept, _lost, _size), do: :erlang.nif_error(:not_loaded)
  # Lost blocks' addresses, each xor mask/0: no Erlang term points to them.
  def lose_masked(_n, _size), do: :erlang.nif_error(:not_loaded)
  def mask, do: 0x5A5A5A5A5A5A5A5A
  # The preloaded library's report of the blocks lost now, written by report.c as the exit report
  # is (mtrace_lib_leaks): 0, or -1.
  def report_leaks(_path), do: :erlang.nif_error(:not_loaded)
  # A block freed behind mtrace's back (glibc's __libc_free): its address xor mask/0.
  def free_behind(_size), do: :erlang.nif_error(:not_loaded)
  # Writes the masked address into a block a static keeps (a word that points at it).
  def hold_word(_masked), do: :erlang.nif_error(:not_loaded)
  # Frees the block at the masked address, then allocates size bytes that a static keeps:
  # whether it got the same address.
  def free_and_reuse(_masked, _size), do: :erlang.nif_error(:not_loaded)
  # Masked addresses of kept blocks: kept_static[i]; a chain of three under a static.
  def static_address(_i), do: :erlang.nif_error(:not_loaded)
  def keep_chain, do: :erlang.nif_error(:not_loaded)
  # A thread whose stack alone keeps a block: {masked address, the thread's id}; and its end.
  def hold_on_stack(_size), do: :erlang.nif_error(:not_loaded)
  def release_stack, do: :erlang.nif_error(:not_loaded)
  # keep_tls/1, and {the block's masked address, the thread's id}.
  def keep_tls_here(_size), do: :erlang.nif_error(:not_loaded)
  # lose_masked/2's blocks left unwritten, as new char[n] leaves them: what their chunk held.
  def lose_raw(_n, _size), do: :erlang.nif_error(:not_loaded)

  # n blocks lost by the NIF, each in the chunk of an off-heap binary of `bytes` (a malloc block
  # with +MBe false, after the Binary's 24-byte header) just collected, after a warm-up block of
  # the same call site: [{warm, lost}], masked. Written over, or left as malloc gives them (raw:
  # true). Compiled, so that no binding of the evaluator keeps the binary.
  def lose_in_binary_chunks(n, bytes \\ 100, raw \\ false) do
    lose = if raw, do: &lose_raw/2, else: &lose_masked/2

    for _ <- 1..n do
      [warm] = lose.(1, bytes + 24)
      _ = byte_size(:binary.copy(<<0::size(bytes)-unit(8)>>))
      :erlang.garbage_collect()
      [lost] = lose.(1, bytes + 24)
      {warm, lost}
    end
  end

  # The same, the binary kept across one collection first: the collector moves its ProcBin and
  # leaves, where it was, a pointer to the copy in place of the thing word. A block malloc'd just
  # before the binary and freed after it merges with its chunk, and the lost block, twice the
  # size, starts there: the dead ProcBin's val lies inside the lost block.
  def lose_in_moved_binary_chunks(n, bytes) do
    for _ <- 1..n do
      [warm] = lose_raw(1, 2 * bytes + 48)
      before = Mtrace.Test.Leaky.alloc(:malloc, bytes + 24)
      bin = :binary.copy(<<0::size(bytes)-unit(8)>>)
      :erlang.garbage_collect()
      _ = byte_size(bin)
      :erlang.garbage_collect()
      Mtrace.Test.Leaky.release(:malloc, before)
      [lost] = lose_raw(1, 2 * bytes + 48)
      {warm, lost}
    end
  end

  # An off-heap binary allocated and never released.
  def lose_binary(_size), do: :erlang.nif_error(:not_loaded)
end
