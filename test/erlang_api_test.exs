defmodule Mtrace.ErlangApiTest do
  # The Erlang API (src/mtrace.erl) in a node started with plain erl and the preload: no Elixir
  # on its code path, only mtrace's ebin and a NIF (test/support/erl/) that loses one block of
  # every ten requests. The node writes what it answered to files; this side reads them.
  use ExUnit.Case, async: true
  import Mtrace.Test.Helpers

  @moduletag timeout: 180_000
  @leaky_so Path.expand("support/c_src/leaky_erl.so", __DIR__)
  @leaky_erl Path.expand("support/erl/mtrace_test_leaky.erl", __DIR__)

  # Runs script (Erlang expressions, with Dir bound to dir) in a plain erl node with the preload;
  # its exit status and output.
  defp erl(dir, script) do
    {:ok, :mtrace_test_leaky} =
      :compile.file(String.to_charlist(@leaky_erl), outdir: String.to_charlist(dir))

    File.cp!(@leaky_so, Path.join(dir, "leaky_erl.so"))
    ebin = Path.join(:code.lib_dir(:mtrace), "ebin")
    eval = ~s[Dir = "#{dir}", #{script}, halt(0).]

    System.cmd("erl", ["-noshell", "-pa", ebin, "-pa", dir, "-eval", eval],
      env: [
        {"LD_PRELOAD", mtrace_so()},
        {"ERL_LIBS", nil},
        {"ERL_AFLAGS", nil},
        {"ERL_CRASH_DUMP_SECONDS", "0"}
      ],
      cd: dir,
      stderr_to_stdout: true
    )
  end

  defp term(dir, name), do: dir |> Path.join(name) |> File.read!() |> :erlang.binary_to_term()

  @tag :tmp_dir
  test "mtrace:leaks() in a node without Elixir finds the lost blocks with their stacks, and prints them as the exit report does",
       %{tmp_dir: dir} do
    # 100 requests lose 10 blocks, older than leaks/0's minimum age of a second when it looks;
    # stale words of the stacks may keep one or two: at least 7 must be found, and nothing else.
    {out, 0} =
      erl(dir, """
      ok = mtrace_test_leaky:requests(4096, 100),
      timer:sleep(1100),
      Sites = mtrace:leaks(),
      Write = fun(Name, T) -> ok = file:write_file(filename:join(Dir, Name), term_to_binary(T)) end,
      Write("leaks", Sites),
      Write("elixir", {code:which('Elixir.Enum'),
                       [M || {M, _} <- code:all_loaded(), lists:prefix("Elixir.", atom_to_list(M))]}),
      Write("top", mtrace:top(3, [{library, "leaky_erl"}])),
      Write("olds", mtrace:olds(2, true)),
      Write("stats", mtrace:stats()),
      ok = mtrace:write(filename:join(Dir, "leaks.txt"), text, \#{what => leaks}),
      mtrace:print(Sites)
      """)

    assert term(dir, "elixir") == {:non_existing, []}

    sites = term(dir, "leaks")
    {stacked, _unrecorded} = Enum.split_with(sites, &(&1.stack != []))
    assert length(stacked) == 1, "#{out}\n#{inspect(sites)}"
    assert [%{blocks: lost, stack: stack}] = stacked
    assert lost >= 7, out
    assert [%{function: "malloc"}, %{function: "leak_malloc", file: file} | _] = stack
    assert Path.basename(file) == "leaky.c"
    # A site has every field of Mtrace.Site, a frame every field of Mtrace.Frame.
    assert Map.keys(hd(stacked)) == Map.keys(Map.from_struct(%Mtrace.Site{}))
    assert Map.keys(hd(stack)) == Map.keys(Map.from_struct(%Mtrace.Frame{}))

    # print/1 and write/3 give the text of the exit report, which Mtrace.Report reads back.
    for text <- [out, File.read!(Path.join(dir, "leaks.txt"))] do
      assert {:ok, read} = Mtrace.Report.read(text)
      assert Enum.any?(read, &match?([_, %{function: "leak_malloc"} | _], &1.stack)), text
    end

    assert [%{bytes: bytes, stack: [_, %{function: "leak_malloc"} | _]}] = term(dir, "top")
    assert bytes >= 4096
    assert [{age, size, address, _, [{_, "malloc"} | _]} | _] = term(dir, "olds")
    assert is_float(age) and size > 0 and address > 0
    assert %{recording: true, malloc_cnt: mallocs} = term(dir, "stats")
    assert mallocs > 0
  end

  @tag :tmp_dir
  test "a bad argument raises badarg with a sentence naming the function; options come as a proplist or a map",
       %{tmp_dir: dir} do
    {out, 0} =
      erl(dir, """
      Why = fun(F) ->
                try F() of
                    R -> {answered, R}
                catch
                    error:badarg:St -> maps:get(general, mtrace:format_error(badarg, St))
                end
            end,
      Answers = [Why(fun() -> mtrace:leaks([{min_age, -1}]) end),
                 Why(fun() -> mtrace:top(-1) end),
                 Why(fun() -> mtrace:top(1, \#{colour => true}) end),
                 Why(fun() -> mtrace:leaks([{nodes, [node()]}]) end),
                 Why(fun() -> mtrace:write("x", html) end),
                 element(1, Why(fun() -> mtrace:top(1, [{library, "leaky"}, demangle]) end)),
                 element(1, Why(fun() -> mtrace:top(1, \#{group => function, library => <<"leaky">>}) end)),
                 element(1, Why(fun() -> mtrace:top(1, \#{library => "leaky"}) end)),
                 Why(fun() -> mtrace:top(1, [{library, "a"}, {library, "b"}]) end),
                 Why(fun() -> mtrace:top(1, [demangle | false]) end),
                 Why(fun() -> mtrace:write("x", text, 5) end),
                 Why(fun() -> mtrace:write("x", text, [{what, leaks}, {colour, true}]) end),
                 Why(fun() -> mtrace:diff(\#{}) end),
                 Why(fun() -> mtrace:top(1, [{erlang, <<255>>}]) end)],
      ok = file:write_file(filename:join(Dir, "answers"), term_to_binary(Answers))
      """)

    assert [min_age, n, colour, nodes, html, :answered, :answered, :answered | more] =
             term(dir, "answers"),
           out

    assert [twice, improper, not_options, write_colour, mark, utf8] = more
    assert min_age == "mtrace:leaks/1: min_age must be a number of seconds, 0 or more, got: -1"
    assert n == "mtrace:top/2: n must be a non-negative integer, got: -1"
    assert colour =~ ~r/^mtrace:top\/2: unknown option colour; the options are demangle, group, /
    assert nodes =~ "mtrace:leaks/1: nodes is for Elixir's Mtrace"
    assert html =~ "mtrace:write/3: format must be text"
    assert twice == "mtrace:top/2: option library is given more than once"
    assert improper =~ "mtrace:top/2: expected a list of {Key, Value} or a map, got: "
    assert not_options == "mtrace:write/3: expected a list of {Key, Value} or a map, got: 5"
    assert write_colour =~ "mtrace:write/3: unknown option colour; "
    assert mark == "mtrace:diff/2: expected a mark (mtrace:mark/0), got: \#{}"
    assert utf8 =~ "mtrace:top/2: erlang must be a string, "
  end
end
