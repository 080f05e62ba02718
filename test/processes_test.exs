defmodule Mtrace.ProcessesTest do
  # A release preloads mtrace.so into every process it starts, BEAM or not (sh, epmd,
  # erl_child_setup, ports). There it must be invisible: same output, same exit status, no file,
  # no message, no stolen descriptor, no hang after fork.
  use ExUnit.Case, async: true

  import Mtrace.Test.Helpers, only: [mtrace_so: 0]

  @glibc Path.expand("glibc", __DIR__)

  setup_all do
    Mtrace.Test.Helpers.make!(@glibc)
  end

  defp preload, do: [{"LD_PRELOAD", mtrace_so()}]

  # Runs argv with only `vars` set of what matters here (the test node's own LD_PRELOAD and
  # MTRACE_* are removed) and returns {stdout, stderr, status}. System.cmd cannot keep stderr
  # apart, so an untraced shell sends it to a file and execs env, which sets `vars`: only argv
  # itself runs under them.
  defp run(argv, vars, opts \\ []) do
    unset =
      for {name, _} <- System.get_env(),
          name in ["LD_PRELOAD", "LD_BIND_NOW"] or String.starts_with?(name, "MTRACE_"),
          do: {name, nil}

    err = Path.join(System.tmp_dir!(), "mtrace_stderr_#{System.unique_integer([:positive])}")

    try do
      assignments = Enum.map(vars, fn {name, value} -> "#{name}=#{value}" end)
      args = ["-c", ~S(exec env "$@" 2>"$0"), err | assignments ++ argv]
      {out, status} = System.cmd("sh", args, [env: unset] ++ opts)
      {out, File.read!(err), status}
    after
      File.rm(err)
    end
  end

  defp same_with_and_without(argv) do
    plain = run(argv, [])
    assert {_, "", 0} = plain
    assert run(argv, preload()) == plain
    plain
  end

  test "a shell pipeline prints the same under the preload" do
    assert {"HELLO\n", "", 0} = same_with_and_without(["sh", "-c", "echo hello | tr a-z A-Z"])
  end

  test "loads with LD_BIND_NOW=1 outside the BEAM, where no enif_* symbol exists" do
    assert run(["/bin/true"], preload() ++ [{"LD_BIND_NOW", "1"}]) == {"", "", 0}
  end

  @tag timeout: 180_000
  test "children forked while other threads allocate can allocate and exit" do
    {out, _, _} = same_with_and_without(["timeout", "60", Path.join(@glibc, "bin/t_fork")])
    assert out =~ "50 children forked, 50 exited 0\n"
    assert out =~ "all checks passed\n"
  end

  test "no descriptor of the tracer reads or writes a program's reused descriptors" do
    {out, _, _} = same_with_and_without([Path.join(@glibc, "bin/t_closefds")])
    assert out =~ "first pipe: 1 byte(s) 78, then EAGAIN\n"
    assert out =~ "second pipe: 0 byte(s), then EAGAIN\n"
  end

  test "a bad MTRACE_SLOTS is reported on one stderr line and the program still runs" do
    {out, err, status} = run(["/bin/sh", "-c", "echo ok"], preload() ++ [{"MTRACE_SLOTS", "abc"}])
    assert {out, status} == {"ok\n", 0}
    assert [line] = String.split(err, "\n", trim: true)
    assert String.starts_with?(line, "mtrace: MTRACE_SLOTS=abc")
    assert err == line <> "\n"
  end

  test "without MTRACE_* a preloaded program creates no file and prints nothing of its own" do
    dir = Path.join(System.tmp_dir!(), "mtrace_quiet_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    on_exit(fn -> File.rm_rf(dir) end)

    assert run(["sh", "-c", "echo ok"], preload(), cd: dir) == {"ok\n", "", 0}
    assert File.ls!(dir) == []
  end
end
