defmodule Mtrace.SeccompTest do
  # A node whose seccomp profile refuses process_vm_readv, as Docker's default profile refuses it
  # to a container without CAP_SYS_PTRACE (test/support/c_src/no_readv.c sets such a filter and
  # runs the node): a production node in a container. mtrace then reads its own process's memory
  # through /proc/self/mem (proc.h), so what it learns of the VM and of glibc's blocks is what it
  # learns elsewhere. Before, in such a node, the process layout was not learnt (every process's
  # unused heap and the free id lists were read as roots), a lost block without a record said
  # nothing of what it held, and JIT code had no name.
  use ExUnit.Case, async: false
  import Mtrace.Test.Helpers

  @moduletag timeout: 180_000
  @no_readv Path.expand("support/c_src/no_readv", __DIR__)

  test "with process_vm_readv refused, the VM is learnt, lost blocks say what they hold and JIT code is named" do
    # A node without the preload, attached to, as bin/demo's second part starts one. A stale word
    # may keep the lost string (see leaks_test): one node of at most three must list it.
    [contents] =
      at_least!(1, 3, "the lost string listed", fn _ ->
        {status, learnt, info, lost, stack} =
          node_result(
            """
            alias Mtrace.Test.Leaky
            {:ok, status} = :file.read_file("/proc/self/status")
            text = Bitwise.bxor(Leaky.alloc(:strdup, 30), 1)
            learnt = :mtrace_node.learn()
            :ok = Mtrace.attach()
            _ = Leaky.alloc(:malloc, 4321)
            Process.sleep(1100)
            {sites, info} = Mtrace.leaks_info(blocks: true)
            [{_, _, _, _, stack}] = Mtrace.olds(1, min_size: 4321)
            lost = for s <- sites, s.address == Bitwise.bxor(text, 1), do: s.contents
            {status, learnt, Map.take(info, [:processes, :id_list_bytes]), lost, stack}
            """,
            [],
            [@no_readv]
          )

        # the filter is on (mode 2), and what needs the call was read all the same
        assert status =~ ~r/^Seccomp:\s+2$/m
        assert learnt == :ok
        assert info.processes > 0 and info.id_list_bytes > 0, inspect(info)
        assert {:erlang, "global::call_nif_shared"} in stack, inspect(stack)

        case lost do
          [contents] -> {:hit, contents}
          _ -> {:miss, "not listed: #{inspect(lost)}"}
        end
      end)

    assert contents =~ ~r/^\d+-byte strings without a record, such as "xxxx/
  end

  test "with process_vm_readv refused, MTRACE_UNWIND=erlang goes on through the Erlang frames" do
    stack =
      node_result(
        """
        alias Mtrace.Test.{Chain, Leaky}
        _ = Chain.a(4321)
        [{_, _, _, _, stack}] = Mtrace.olds(1, erlang: "Mtrace.Test.Chain:b/1", min_size: 4321)
        File.rm("/tmp/perf-\#{System.pid()}.map")
        Enum.drop_while(stack, &(&1 != {:erlang, "global::call_nif_shared"}))
        """,
        [
          {"LD_PRELOAD", mtrace_so()},
          {"MTRACE_UNWIND", "erlang"},
          {"ERL_AFLAGS", "+JPperf map"}
        ],
        [@no_readv]
      )

    assert [
             {:erlang, "global::call_nif_shared"},
             {:erlang, "'Elixir.Mtrace.Test.Chain':c/1"},
             {:erlang, "'Elixir.Mtrace.Test.Chain':b/1"},
             {:erlang, "'Elixir.Mtrace.Test.Chain':a/1"} | _
           ] = stack
  end
end
