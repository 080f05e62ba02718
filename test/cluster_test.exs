defmodule Mtrace.ClusterTest do
  # Readers over Erlang distribution: a node with the preload answers, one without says so (but to
  # leaks/1, which walks glibc's heap there), a
  # node without mtrace's code says so, a node that is not there is :noconnection, and a node
  # stopped with SIGSTOP, which cannot answer, is :timeout.
  use ExUnit.Case, async: true
  import Mtrace.Test.Helpers

  @moduletag timeout: 180_000

  test "top, leaks, mark, diff and stats gather over nodes, with an error for each node that cannot answer" do
    code = """
    {:ok, _} = :net_kernel.start([:"mtrace_a\#{System.pid()}@127.0.0.1", :longnames])
    paths = :code.get_path()
    mine = String.to_charlist(Path.join(:code.lib_dir(:mtrace), "ebin"))
    # wait_boot: peer's 15 s ran out once for a start on a busy machine (Debian 13 image, CI).
    peer = fn name, preload, paths ->
      args = Enum.flat_map(paths, &[~c"-pa", &1])
      {:ok, _, node} = :peer.start_link(%{name: :"\#{name}\#{System.pid()}", host: ~c"127.0.0.1",
        longnames: true, args: args, env: [{~c"LD_PRELOAD", preload}], wait_boot: 60_000})
      node
    end
    b = peer.("mtrace_b", String.to_charlist("#{mtrace_so()}"), paths)
    c = peer.("mtrace_c", ~c"", paths)
    d = peer.("mtrace_d", ~c"", paths -- [mine])
    ghost = :"nobody@127.0.0.1"
    nodes = [b, c, d, ghost]
    marks = Mtrace.mark(nodes: [b])
    {:module, _} = :erpc.call(b, :code, :ensure_loaded, [Mtrace.Test.Leaky])
    address = :erpc.call(b, Mtrace.Test.Leaky, :alloc, [:malloc, 4242])
    shape = fn
      {:error, reason} -> {:error, reason}
      list when is_list(list) -> Enum.map(list, &{&1.bytes, &1.blocks})
      %{preloaded: p} -> {:preloaded, p}
    end
    # The mark is conservative: a stale word in a node's memory may keep its lost list for good
    # (leaks_test.exs), so each attempt loses one in a new preloaded peer, the lost one (:lost),
    # until its answer names the list, six peers at most.
    [leaks] =
      Mtrace.Test.Helpers.at_least!(1, 6, "the lost peer's list named", fn i ->
        e = peer.("mtrace_e\#{i}_", String.to_charlist("#{mtrace_so()}"), paths)
        {:module, _} = :erpc.call(e, :code, :ensure_loaded, [Mtrace.Test.Lost])
        :ok = :erpc.call(e, Mtrace.Test.Lost, :lose_list, [3])
        answers = Mtrace.leaks(nodes: [e, c, d, ghost], library: "lost.so", min_age: 0)
        answers = Map.new(answers, fn {n, v} -> {if(n == e, do: :lost, else: n), shape.(v)} end)
        Mtrace.Test.Helpers.outcome(answers[:lost] == [{192, 3}], answers, inspect(answers))
      end)
    pid = :erpc.call(c, :os, :getpid, [])
    {_, 0} = System.cmd("kill", ["-STOP", to_string(pid)])
    stopped = Map.new(Mtrace.stats(nodes: [b, c], timeout: 5000), fn {n, v} -> {n, shape.(v)} end)
    {_, 0} = System.cmd("kill", ["-CONT", to_string(pid)])
    result = %{
      stats: Map.new(Mtrace.stats(nodes: nodes, timeout: 10_000), fn {n, v} -> {n, shape.(v)} end),
      top: Map.new(Mtrace.top(5, nodes: nodes, library: "leaky.so"), fn {n, v} -> {n, shape.(v)} end),
      leaks: leaks,
      stopped: stopped,
      diff: Map.new(Mtrace.diff(marks, nodes: [b], library: "leaky.so"), fn {n, v} -> {n, shape.(v)} end),
      names: %{b: b, c: c, d: d, ghost: ghost},
      address: address
    }
    IO.puts("RESULT " <> Base.encode64(:erlang.term_to_binary(result)))
    """

    epmd!()
    {out, 0} = run_node(code)
    [_, b64] = Regex.run(~r/^RESULT (\S+)$/m, out)
    r = b64 |> Base.decode64!() |> :erlang.binary_to_term()
    %{b: b, c: c, d: d, ghost: ghost} = r.names

    assert r.stats == %{
             b => {:preloaded, true},
             c => {:error, :not_preloaded},
             d => {:error, :no_mtrace},
             ghost => {:error, :noconnection}
           }

    assert r.top[b] == [{4242, 1}]
    assert r.top[c] == {:error, :not_preloaded}
    assert r.top[d] == {:error, :no_mtrace}
    assert r.top[ghost] == {:error, :noconnection}
    assert r.diff == %{b => [{4242, 1}]}

    # leaks/1 answers in a node without the preload from glibc's heap: its blocks have no
    # stack, so the library filter leaves none.
    assert r.leaks == %{
             :lost => [{192, 3}],
             c => [],
             d => {:error, :no_mtrace},
             ghost => {:error, :noconnection}
           }

    assert r.stopped == %{b => {:preloaded, true}, c => {:error, :timeout}}
  end
end
