defmodule Mtrace.NodeCliTest do
  # bin/mtrace attach|leaks|top|stats|detach --node on a node started with plain erl: no Elixir,
  # no mtrace in its code path, default flags, running a NIF (test/support/erl/) that loses one
  # block of every ten requests. Everything the readers need in it goes over distribution.
  use ExUnit.Case, async: true
  import Mtrace.Test.Helpers

  @moduletag timeout: 180_000
  @mtrace Path.expand("../bin/mtrace", __DIR__)
  @leaky_so Path.expand("support/c_src/leaky_erl.so", __DIR__)
  @leaky_erl Path.expand("support/erl/mtrace_test_leaky.erl", __DIR__)
  @cookie "node_cli_test"

  setup_all do
    epmd!()
    :ok
  end

  # A node named name serving requests of 4096 bytes, one every 20 ms, from tmp_dir's copy of the
  # NIF and its module; its port.
  defp start_server(dir, name, env \\ []) do
    {:ok, :mtrace_test_leaky} =
      :compile.file(String.to_charlist(@leaky_erl), outdir: String.to_charlist(dir))

    File.cp!(@leaky_so, Path.join(dir, "leaky_erl.so"))

    Port.open({:spawn_executable, System.find_executable("erl")}, [
      :binary,
      :exit_status,
      :stderr_to_stdout,
      args:
        ~w(-sname #{name} -setcookie #{@cookie} -noshell -pa #{dir} -eval) ++
          ["mtrace_test_leaky:serve(4096, 20)"],
      env: [{~c"LD_PRELOAD", false}, {~c"ERL_LIBS", false} | env]
    ])
  end

  defp mtrace(args) do
    System.cmd(@mtrace, args, env: [{"LD_PRELOAD", nil}], stderr_to_stdout: true)
  end

  # bin/mtrace's answer once the node has registered with epmd (a second at most).
  defp when_up(args, tries \\ 50) do
    case mtrace(args) do
      {"mtrace: epmd on " <> _, 2} when tries > 0 ->
        Process.sleep(100)
        when_up(args, tries - 1)

      answer ->
        answer
    end
  end

  defp stop(port) do
    {:os_pid, pid} = Port.info(port, :os_pid)
    System.cmd("kill", ["#{pid}"])
  end

  @tag :tmp_dir
  test "a plain erl node is attached by name, its lost blocks reported with their stacks, and detached; it goes on serving",
       %{tmp_dir: dir} do
    name = "mtrace_node_cli_#{System.pid()}"
    port = start_server(dir, name)
    node = ["--node", name, "--cookie", @cookie]

    {out, 0} = when_up(["attach" | node])
    assert out =~ ~r/^mtrace: attached to #{name}@\S+ \(pid \d+\), which records from now on/

    # Some 12 blocks are lost in the 2.5 s that follow; leaks/1 leaves out those younger than a
    # second. Stale words may keep a few: at least 3 must be found, and nothing else.
    Process.sleep(2500)
    {text, 0} = mtrace(["leaks" | node])
    assert {:ok, sites} = Mtrace.Report.read(text)
    {stacked, unrecorded} = Enum.split_with(sites, &(&1.stack != []))

    assert [%{blocks: lost, stack: stack}] = stacked, text
    assert lost >= 3, text
    assert [_malloc, %{function: "leak_malloc", file: "leaky.c"} | _] = stack

    # Blocks lost before the attach have no record: known from glibc's heap, by their usable
    # size (usable_sizes/1).
    for site <- unrecorded do
      assert site.bytes in Enum.map(usable_sizes(4096), &(&1 * site.blocks)), text
    end

    assert length(unrecorded) <= 2, text

    {folded, 0} = mtrace(["leaks", "--format", "folded" | node])
    assert folded =~ ~r/;nif_alloc;leak_malloc;malloc \d+\n/

    {stats, 0} = mtrace(["stats" | node])
    assert stats =~ "attach: :attached\n"
    assert stats =~ "nif_api_hooked: true\n"

    {out, 0} = mtrace(["detach" | node])
    assert out =~ "mtrace: detached from #{name}@"
    {stats, 0} = mtrace(["stats" | node])
    assert stats =~ "attach: :detached\n"

    # It serves on: a second attach finds the library it loaded, and records again.
    {out, 0} = mtrace(["attach" | node])
    assert out =~ "attached"
    {_, 0} = mtrace(["detach" | node])
    refute_received {^port, {:exit_status, _}}
    stop(port)
  end

  @tag :tmp_dir
  test "a node that epmd does not know, and a wrong cookie, each get one line that says what to do",
       %{tmp_dir: dir} do
    name = "mtrace_node_cli_cookie_#{System.pid()}"
    port = start_server(dir, name)

    assert {"mtrace: epmd on " <> rest, 2} = mtrace(["leaks", "--node", "mtrace_nowhere"])
    assert rest =~ ~r/knows no node named mtrace_nowhere \(.*\): check the name/

    {out, 2} = when_up(["attach", "--node", name, "--cookie", "wrong"])

    assert out =~
             ~r/^mtrace: #{name}@\S+ refused the connection: a wrong cookie \(the one from --cookie/

    assert length(String.split(out, "\n", trim: true)) == 1

    {out, 2} = mtrace(["leaks", "--node", name, "--cookie", @cookie])
    assert out =~ "mtrace: mtrace is not in #{name}@"
    stop(port)
  end

  # Another copy of mtrace, preloaded from another path, is its malloc and records already: the
  # attach is refused, in one line, and what was loaded for it is taken out again (its modules,
  # the library, the file written in its TMPDIR).
  @tag :tmp_dir
  test "an attach the node refuses leaves nothing of mtrace in it", %{tmp_dir: dir} do
    name = "mtrace_node_cli_other_#{System.pid()}"
    tmp = Path.join(dir, "node_tmp")
    other = Path.join(dir, "other/mtrace.so")
    File.mkdir_p!(tmp)
    File.mkdir_p!(Path.dirname(other))
    File.cp!(mtrace_so(), other)

    env = [
      {~c"LD_PRELOAD", String.to_charlist(other)},
      {~c"TMPDIR", String.to_charlist(tmp)}
    ]

    port = start_server(dir, name, env)
    node = ["--node", name, "--cookie", @cookie]

    {out, 2} = when_up(["attach" | node])

    assert out =~ ~r/^mtrace: mtrace is preloaded in this process \(LD_PRELOAD\)/
    assert length(String.split(out, "\n", trim: true)) == 1
    assert File.ls!(tmp) == []
    assert {"mtrace: mtrace is not in " <> _, 2} = mtrace(["stats" | node])
    refute_received {^port, {:exit_status, _}}
    stop(port)
  end
end
