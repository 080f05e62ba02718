defmodule Mtrace.ReadmeTest do
  # The README's first steps, replayed as written: its first commands in a fresh copy of this
  # repository, then the blocks marked `<!-- replay` in a newcomer's project beside it (the
  # fixture test/fixtures/myapp, a NIF that leaks at start, with the README's dependency line),
  # in iex and in a release.
  use ExUnit.Case, async: true
  import Mtrace.Test.Release

  @moduletag timeout: 600_000
  @root Path.expand("..", __DIR__)
  @readme Path.join(@root, "README.md")
  @external_resource @readme

  @mix_vars ~w(MIX_BUILD_PATH MIX_BUILD_ROOT MIX_DEPS_PATH MIX_EXS MIX_LOCKFILE MIX_TARGET)
  @clean [{"LD_PRELOAD", nil}, {"MIX_ENV", nil}, {"ERL_AFLAGS", nil}] ++
           Enum.map(@mix_vars, &{&1, nil})

  # Where the README's transcripts have the newcomer's project.
  @their_app "/home/me/myapp"

  test "the README's commands run as written, and find the leak in iex and in a release" do
    dir = Path.join(System.tmp_dir!(), "mtrace_readme_#{System.pid()}_#{System.unique_integer()}")
    on_exit(fn -> File.rm_rf!(dir) end)
    copy = Path.join(dir, "mtrace")
    app = Path.join(dir, "myapp")
    File.mkdir_p!(copy)
    Mtrace.Test.Helpers.fresh_copy!(copy)

    text = File.read!(@readme)
    demo!(copy, first_commands(text))

    File.cp_r!(Path.join(@root, "test/fixtures/myapp"), app)
    with_readme_dependency!(app, text)

    node = "myapp_readme_#{System.unique_integer([:positive])}"
    env = @clean ++ [{"RELEASE_NODE", node}]
    on_exit(fn -> stop(Path.join(app, "_build/prod/rel/myapp/bin/myapp"), env, node) end)
    Mtrace.Test.Helpers.epmd!()

    outputs = for block <- replayed_blocks(text), step <- block, do: replay!(app, env, step)

    iex = Enum.find(outputs, &(&1.command =~ "iex -S mix"))
    refute iex.output =~ "** (", iex.output
    # iex answers each line after its prompt; the first three typed (after the replay's sleep),
    # leaks/0, leaks/1 and top/2, name the NIF's allocating function, with its line.
    [_banner, _sleep | answers] = String.split(iex.output, ~r/iex\(\d+\)> /)
    assert length(answers) >= 3, iex.output

    for answer <- Enum.take(answers, 3) do
      assert answer =~ ~r/#Mtrace.Frame<my_nif_leak \(my_nif.c:\d+\) my_nif.so/, iex.output
    end

    assert Enum.at(answers, 0) =~ "direct_blocks:", iex.output
    assert iex.output =~ "preloaded: true"

    rpc = Enum.find(outputs, &(&1.command =~ " rpc "))
    # Of the three lost blocks, one may read as reachable: the mark is conservative.
    assert rpc.output =~ ~r/blocks: [123],.*my_nif_leak \(my_nif.c:\d+\)/s, rpc.output
  end

  # The indented block at the top: the two commands. bin/test is this suite itself.
  defp first_commands(text) do
    [block | _] = Regex.run(~r/\n\n((?:    \S.*\n)+)/, text, capture: :all_but_first)

    commands =
      for line <- String.split(block, "\n", trim: true),
          do: line |> String.trim() |> String.split("#") |> hd() |> String.trim()

    assert commands == ["bin/demo", "bin/test"]
    commands -- ["bin/test"]
  end

  defp demo!(copy, commands) do
    for command <- commands do
      {out, status} =
        System.cmd("sh", ["-c", command], cd: copy, env: @clean, stderr_to_stdout: true)

      assert status == 0, out
      assert out =~ ~r/\d+ sites? lost \d+ blocks?/, out
      assert out =~ ~r/#Mtrace.Frame<nif_alloc \(leaky.c:\d+\) leaky.so/, out
    end
  end

  # The project's deps/0 becomes the README's dependency line.
  defp with_readme_dependency!(app, text) do
    [line] = Regex.run(~r/```elixir\n(\{:mtrace, .*\})\n```/, text, capture: :all_but_first)
    assert line == ~s|{:mtrace, path: "../mtrace"}|
    mix_exs = Path.join(app, "mix.exs")
    source = File.read!(mix_exs)

    replaced =
      Regex.replace(~r/  defp deps do\n.*?\n  end\n/s, source, "  defp deps, do: [#{line}]\n")

    assert replaced != source
    File.write!(mix_exs, replaced)
  end

  # Each marked block as steps: a command, the iex lines typed into it, the output it shows.
  defp replayed_blocks(text) do
    blocks = Regex.scan(~r/<!-- replay[^>]*-->\n```\n(.*?)```\n/s, text, capture: :all_but_first)
    assert length(blocks) == 2

    for [block] <- blocks do
      block
      |> String.split("\n", trim: true)
      |> Enum.reduce([], fn
        "$ " <> command, steps -> [%{command: command, input: [], shown: []} | steps]
        "iex> " <> input, [step | steps] -> [%{step | input: step.input ++ [input]} | steps]
        shown, [step | steps] -> [%{step | shown: step.shown ++ [shown]} | steps]
      end)
      |> Enum.reverse()
    end
  end

  defp replay!(app, env, step) do
    # A person types slower than leaks/1's default min_age of one second.
    input =
      if step.input == [], do: "", else: Enum.join(["Process.sleep(1100)" | step.input], "\n")

    path = Path.join(app, ".replay_input")
    File.write!(path, input)

    {out, status} =
      System.cmd("sh", ["-c", ~s(#{step.command} < "$1"), "sh", path],
        cd: app,
        env: env,
        stderr_to_stdout: true
      )

    assert status == 0, "#{step.command}:\n#{out}"

    for line <- step.shown,
        do: assert(out =~ String.replace(line, @their_app, app), "#{step.command}:\n#{out}")

    # As a person would, wait for the daemon to come up before asking it, and longer than
    # leaks/1's default min_age.
    if String.ends_with?(step.command, " daemon") do
      wait_until_up(Path.join(app, hd(String.split(step.command))), env)
      Process.sleep(1100)
    end

    %{command: step.command, output: out}
  end
end
