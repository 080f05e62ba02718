defmodule Mtrace.Test.Release do
  @moduledoc false
  # A release's node started by a test: waiting for it to answer, and stopping it with every
  # process started for it. Each test gives its node a unique RELEASE_NODE, which all those
  # processes carry in their environment.

  import ExUnit.Assertions

  @doc "Waits until `bin rpc` answers, or flunks after `ms` milliseconds."
  def wait_until_up(bin, env, ms \\ 120_000),
    do: wait(bin, env, System.monotonic_time(:millisecond) + ms, ms)

  defp wait(bin, env, deadline, ms) do
    case System.cmd(bin, ["rpc", "IO.puts(:up)"], env: env, stderr_to_stdout: true) do
      {_, 0} ->
        :ok

      {out, _} ->
        if System.monotonic_time(:millisecond) > deadline,
          do: flunk("the release did not answer rpc within #{ms} ms:\n" <> out)

        Process.sleep(200)
        wait(bin, env, deadline, ms)
    end
  end

  @doc """
  Stops the node, then kills what is left of the processes started for it (the node, run_erl
  and their shells), also when the test failed early. An epmd the node started is spared: it
  serves every node of the machine, and killing it fails other tests' distribution.
  """
  def stop(bin, env, node) do
    System.cmd(bin, ["stop"], env: env, stderr_to_stdout: true)
    deadline = System.monotonic_time(:millisecond) + 30_000
    pids = wait_for_exit(node, deadline)
    # The shell's kill: kill(1) is in procps, which a minimal Debian image lacks.
    if pids != [],
      do: System.cmd("sh", ["-c", ~s(kill -KILL "$@"), "sh" | pids], stderr_to_stdout: true)
  end

  defp wait_for_exit(node, deadline) do
    pids = pids_of(node)

    if pids == [] or System.monotonic_time(:millisecond) > deadline do
      pids
    else
      Process.sleep(200)
      wait_for_exit(node, deadline)
    end
  end

  defp pids_of(node) do
    marker = "\0RELEASE_NODE=#{node}\0"

    for pid <- File.ls!("/proc"),
        pid =~ ~r/^\d+$/,
        {:ok, environ} <- [File.read("/proc/#{pid}/environ")],
        String.contains?("\0" <> environ, marker),
        File.read("/proc/#{pid}/comm") != {:ok, "epmd\n"},
        do: pid
  end
end
