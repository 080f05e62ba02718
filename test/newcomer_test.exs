defmodule Mtrace.NewcomerTest do
  # A newcomer's steps, replayed: a fresh project that depends on mtrace by path, the line
  # `mix mtrace.preload` prints, a preloaded iex started with it, and the error that a node
  # without it gets, naming the file to preload.
  use ExUnit.Case, async: true

  @moduletag timeout: 300_000
  @root Path.expand("..", __DIR__)
  @mix_vars ~w(MIX_BUILD_PATH MIX_BUILD_ROOT MIX_DEPS_PATH MIX_EXS MIX_LOCKFILE MIX_TARGET)
  @env [{"LD_PRELOAD", nil}, {"MIX_ENV", "dev"}, {"ERL_AFLAGS", nil}] ++
         Enum.map(@mix_vars, &{&1, nil})

  defp sh(dir, script) do
    System.cmd("sh", ["-c", script], cd: dir, env: @env, stderr_to_stdout: true)
  end

  @tag :tmp_dir
  test "a path dependency, mix mtrace.preload, and a preloaded iex -S mix", %{tmp_dir: dir} do
    {out, 0} = sh(dir, "mix new myapp")
    assert out =~ "myapp"
    app = Path.join(dir, "myapp")
    mix_exs = Path.join(app, "mix.exs")

    File.write!(
      mix_exs,
      String.replace(
        File.read!(mix_exs),
        "defp deps do\n    [",
        ~s|defp deps do\n    [{:mtrace, path: "#{@root}"}|
      )
    )

    {out, status} = sh(app, "mix compile")
    assert status == 0, out
    {line, 0} = sh(app, "mix mtrace.preload")
    path = Path.join(app, "_build/dev/lib/mtrace/priv/mtrace.so")
    assert line == "LD_PRELOAD=#{path}\n"

    assert sh(app, "mix mtrace.preload --erlang") ==
             {"LD_PRELOAD=#{path} MTRACE_UNWIND=erlang ERL_AFLAGS='+JPperf map'\n", 0}

    assert sh(app, "mix mtrace.preload --erlang --vm-flags") ==
             {"LD_PRELOAD=#{path} MTRACE_UNWIND=erlang ERL_AFLAGS='+JPperf map +MRe false +MBe false'\n",
              0}

    probe =
      ~s|s = Mtrace.stats(); IO.puts("preloaded=\#{s.preloaded} nif=\#{s.nif_alloc_visible}")|

    {out, status} =
      sh(app, ~s|printf '%s\\n' '#{probe}' \| eval "#{String.trim(line)} iex -S mix"|)

    assert status == 0, out
    assert out =~ "preloaded=true nif=hooks"

    # Without the line: the error says what is preloaded (nothing) and what to preload.
    probe = ~s|try do Mtrace.olds(1) rescue e -> IO.puts(Exception.message(e)) end|
    {out, 0} = sh(app, ~s|printf '%s\\n' '#{probe}' \| iex -S mix|)
    assert out =~ "nothing is preloaded (LD_PRELOAD is unset)"
    assert out =~ "Attach to it now with Mtrace.attach()"
    assert out =~ "start the node with: LD_PRELOAD=#{path} "
    assert out =~ "mix mtrace.preload"
  end

  @tag :tmp_dir
  test "a node that preloaded another copy of the file is told so", %{tmp_dir: dir} do
    copy = Path.join(dir, "mtrace.so")
    File.cp!(Path.join(@root, "priv/mtrace.so"), copy)
    ebin = Path.join(:code.lib_dir(:mtrace), "ebin")
    probe = ~s|try do Mtrace.top() rescue e -> IO.puts(Exception.message(e)) end|

    {out, 0} =
      System.cmd("elixir", ["-pa", ebin, "-e", probe],
        env: [{"LD_PRELOAD", copy}],
        stderr_to_stdout: true
      )

    assert out =~ "it preloads #{copy}, a copy of the file the NIF loads"
    assert out =~ "The NIF loads #{Mtrace.library_path()}"
  end
end
