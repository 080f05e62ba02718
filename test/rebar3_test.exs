defmodule Mtrace.Rebar3Test do
  # mtrace as a rebar3 dependency (rebar.config, src/mtrace.app.src): an Erlang project that
  # depends on it (a fresh copy in _checkouts) builds priv/mtrace.so with the same makevars build, and a node without Elixir
  # preloads the file its NIF loads, one table for both, which its own mtrace:stats() and
  # bin/mtrace --node then read.
  use ExUnit.Case, async: true
  import Mtrace.Test.Helpers

  @moduletag timeout: 300_000
  @root Path.expand("..", __DIR__)
  @cookie "rebar3_test"

  test "the version rebar3 builds is Mix's" do
    {:ok, [{:application, :mtrace, app}]} = :file.consult(Path.join(@root, "src/mtrace.app.src"))
    assert to_string(app[:vsn]) == Mix.Project.config()[:version]
  end

  @tag :tmp_dir
  test "a rebar3 project builds with mtrace as a dependency; its Erlang node preloads it and is read by name",
       %{tmp_dir: dir} do
    # A fresh copy, so that rebar3's own hook builds the library.
    File.mkdir_p!(Path.join(dir, "src"))
    File.mkdir_p!(Path.join(dir, "_checkouts/mtrace"))
    fresh_copy!(Path.join(dir, "_checkouts/mtrace"))
    File.write!(Path.join(dir, "rebar.config"), "{deps, [mtrace]}.\n")

    File.write!(Path.join(dir, "src/shop.app.src"), """
    {application, shop, [{description, "a shop"}, {vsn, "1"}, {registered, []},
                         {applications, [kernel, stdlib, mtrace]}, {env, []}, {modules, []}]}.
    """)

    File.cp!(
      Path.join(@root, "test/support/erl/mtrace_test_leaky.erl"),
      Path.join(dir, "src/mtrace_test_leaky.erl")
    )

    {out, 0} =
      System.cmd("rebar3", ["compile"],
        cd: dir,
        env: [{"LD_PRELOAD", nil}],
        stderr_to_stdout: true
      )

    assert out =~ "Compiling mtrace" and out =~ "mtrace.so"
    lib = Path.join(dir, "_build/default/checkouts/mtrace")
    so = Path.join(lib, "priv/mtrace.so")
    assert File.exists?(so)
    shop = Path.join(dir, "_build/default/lib/shop/ebin")
    File.cp!(Path.join(@root, "test/support/c_src/leaky_erl.so"), Path.join(shop, "leaky_erl.so"))

    epmd!()
    name = "mtrace_rebar3_#{System.pid()}"

    port =
      Port.open({:spawn_executable, System.find_executable("erl")}, [
        :binary,
        :exit_status,
        :stderr_to_stdout,
        args:
          ~w(-sname #{name} -setcookie #{@cookie} -noshell -pa #{Path.join(lib, "ebin")} #{shop} -eval) ++
            [
              "{ok, _} = application:ensure_all_started(shop), " <>
                "ok = mtrace_test_leaky:requests(4096, 100), " <>
                "io:format(\"~p~n\", [maps:with([preloaded, recording], mtrace:stats())]), " <>
                "receive after infinity -> ok end"
            ],
        env: [{~c"LD_PRELOAD", String.to_charlist(so)}, {~c"ERL_LIBS", false}]
      ])

    assert_receive {^port, {:data, said}}, 20_000

    assert said == "\#{preloaded => true,recording => true}\n"

    # Its NIF is loaded already: bin/mtrace finds it and the file it loads, and reads the leaks.
    # The 100 requests lost 10 blocks, older than the minimum age of a second by then; stale words
    # of the stacks may keep one or two (as in erlang_api_test).
    Process.sleep(1100)

    {text, 0} =
      System.cmd(Path.join(@root, "bin/mtrace"), ["leaks", "--node", name, "--cookie", @cookie],
        env: [{"LD_PRELOAD", nil}],
        stderr_to_stdout: true
      )

    assert {:ok, [%{stack: [_, %{function: "leak_malloc"} | _], blocks: lost}]} =
             Mtrace.Report.read(text)

    assert lost >= 7, text
    {:os_pid, pid} = Port.info(port, :os_pid)
    System.cmd("kill", ["#{pid}"])
  end
end
