defmodule Mtrace.ReleaseTest do
  # A Mix release of an app that depends on mtrace, built with mtrace's rel/env.sh.eex: the node
  # it starts preloads the release's own copy of mtrace.so (the file the NIF loads, so the table
  # is live) and finds a leak in the app's own NIF, with its stack.
  use ExUnit.Case, async: true
  import Mtrace.Test.Release

  @moduletag timeout: 300_000

  @root Path.expand("..", __DIR__)
  @fixture Path.expand("fixtures/myapp", __DIR__)
  @leak_size 12_345

  # The test node runs preloaded, with Mix variables that point at its own build: children
  # would inherit both.
  @mix_vars ~w(MIX_BUILD_PATH MIX_BUILD_ROOT MIX_DEPS_PATH MIX_EXS MIX_LOCKFILE MIX_TARGET)
  @build_env [{"LD_PRELOAD", nil}, {"MIX_ENV", "prod"}, {"MTRACE_PATH", @root}] ++
               Enum.map(@mix_vars, &{&1, nil})

  # Encoded rather than inspected, so that the term comes back exactly, whatever it holds.
  @report """
  Mtrace.reset(); \
  :ok = MyNif.leak(#{@leak_size}); \
  stats = Mtrace.stats(); \
  records = Mtrace.olds(stats.slots, library: "my_nif.so"); \
  report = %{pid: System.pid(), root: System.get_env("RELEASE_ROOT"), \
             nif: Mtrace.Nif.library_path(), stats: stats, records: records}; \
  IO.puts(Base.encode64(:erlang.term_to_binary(report)))\
  """

  # The fixture app released in a directory of its own, with mtrace's rel/env.sh.eex or without
  # it (a release that knows nothing of the preload); its root, bin/myapp and a node name.
  defp release!(env_sh?) do
    unique = "#{System.pid()}_#{System.unique_integer([:positive])}"
    dir = Path.join(System.tmp_dir!(), "mtrace_release_#{unique}")
    on_exit(fn -> File.rm_rf!(dir) end)
    File.rm_rf!(dir)
    File.cp_r!(@fixture, dir)

    if env_sh? do
      File.mkdir_p!(Path.join(dir, "rel"))
      File.cp!(Path.join(@root, "rel/env.sh.eex"), Path.join(dir, "rel/env.sh.eex"))
    end

    {out, status} =
      System.cmd("mix", ["release", "--overwrite"],
        cd: dir,
        env: @build_env,
        stderr_to_stdout: true
      )

    assert status == 0, out
    rel = Path.join(dir, "_build/prod/rel/myapp")
    {rel, Path.join(rel, "bin/myapp"), "myapp_#{unique}"}
  end

  test "a release with mtrace's rel/env.sh.eex traces its node with its own copy of mtrace.so" do
    {rel, bin, node} = release!(true)
    mtrace_so = Path.join(rel, "lib/mtrace-#{Application.spec(:mtrace, :vsn)}/priv/mtrace.so")
    nif_so = Path.join(rel, "lib/myapp-0.1.0/priv/my_nif.so")
    assert File.regular?(mtrace_so) and File.regular?(nif_so)

    # A node name of its own, as other test runs may start this release at the same time; an
    # LD_PRELOAD already set, which env.sh must keep behind mtrace.so.
    env = [{"RELEASE_NODE", node}, {"LD_PRELOAD", "libm.so.6"}, {"MTRACE_SLOTS", "65536"}]
    on_exit(fn -> stop(bin, env, node) end)

    Mtrace.Test.Helpers.epmd!()
    {out, status} = System.cmd(bin, ["daemon"], env: env, stderr_to_stdout: true)
    assert status == 0, out
    wait_until_up(bin, env)

    {out, status} = System.cmd(bin, ["rpc", @report], env: env, stderr_to_stdout: true)
    assert status == 0, out
    report = out |> String.split("\n", trim: true) |> List.last() |> decode(out)

    assert report.root == rel
    assert report.nif == mtrace_so
    assert report.stats.preloaded == true
    assert report.stats.malloc_cnt > 0
    # with the VM's default flags, the node sees enif_alloc and resources through the hooks
    assert report.stats.nif_alloc_visible == :hooks and report.stats.resources_visible == :hooks

    # The reset cleared the app's start-up leaks from the table: one record is left.
    assert [{_age, @leak_size, _address, _ns, stack}] = report.records
    assert [{^mtrace_so, "malloc"}, {^nif_so, "my_nif_leak"} | _] = stack

    pid = report.pid
    environ = File.read!("/proc/#{pid}/environ") |> String.split(<<0>>)

    assert Enum.find(environ, &String.starts_with?(&1, "LD_PRELOAD=")) ==
             "LD_PRELOAD=#{mtrace_so}:libm.so.6"

    mapped =
      for line <- File.read!("/proc/#{pid}/maps") |> String.split("\n"),
          path = line |> String.split(" ", trim: true) |> Enum.at(5),
          path && Path.basename(path) == "mtrace.so",
          uniq: true,
          do: path

    assert mapped == [mtrace_so]

    # `remote` with piped input: with Elixir 1.14 (OTP 25), IEx's limited shell ignores --remsh
    # and starts a local node of its own, whose error says so, names the release's node, and
    # that one is traced; with Elixir 1.18 (OTP 27) the shell is the release's node's, where
    # the table answers.
    probe =
      ~S|try do IO.puts("probe: #{node()} #{length(Mtrace.olds(1))}") | <>
        ~S|rescue e -> IO.puts(Exception.message(e)) end|

    {out, _} =
      System.cmd("sh", ["-c", ~s|printf '%s\n' '#{probe}' \| "#{bin}" remote|],
        env: env,
        stderr_to_stdout: true
      )

    if Version.match?(System.version(), "< 1.15.0") do
      assert out =~ "This node was started by the release's remote command"
      assert out =~ "beside the release's node #{node}"
      assert out =~ "which is traced"
    else
      assert out =~ ~r/probe: #{node}@\S+ 1\n/, out
    end
  end

  # The README's production story: a release that was started without the preload is attached
  # from rpc, and leaks/1 then names what its NIF lost since, with the stack.
  test "a release started without the preload is attached from rpc, and leaks/1 names its NIF's lost blocks" do
    {_rel, bin, node} = release!(false)
    env = [{"RELEASE_NODE", node}, {"LD_PRELOAD", nil}]
    on_exit(fn -> stop(bin, env, node) end)
    Mtrace.Test.Helpers.epmd!()
    {out, 0} = System.cmd(bin, ["daemon"], env: env, stderr_to_stdout: true)
    wait_until_up(bin, env)

    rpc = fn code ->
      {out, status} = System.cmd(bin, ["rpc", code], env: env, stderr_to_stdout: true)
      assert status == 0, out
      out
    end

    assert rpc.("IO.inspect(Mtrace.stats().preloaded)") == "false\n"
    assert rpc.("IO.inspect(Mtrace.attach())") == ":ok\n"
    assert rpc.("for _ <- 1..3, do: :ok = MyNif.leak(#{@leak_size})") == ""

    sites =
      rpc.(
        "IO.puts(Base.encode64(:erlang.term_to_binary(" <>
          ~s|Mtrace.leaks(min_age: 0, library: "my_nif.so"))))|
      )
      |> String.trim()
      |> decode(out)

    # Each of the three buffers is held by no one; conservative marks may keep one by a stale
    # word (issue 26), never call a kept block lost.
    assert [%Mtrace.Site{bytes: bytes, blocks: blocks, stack: stack}] = sites
    assert blocks in 1..3 and bytes == blocks * @leak_size
    assert ["malloc", "my_nif_leak" | _] = Enum.map(stack, & &1.function)
    assert rpc.("IO.inspect(Mtrace.detach())") == ":ok\n"
  end

  defp decode(line, out) do
    line |> Base.decode64!() |> :erlang.binary_to_term()
  rescue
    _ -> flunk("unexpected rpc output:\n" <> out)
  end
end
