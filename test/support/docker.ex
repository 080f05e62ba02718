defmodule Mtrace.Test.Docker do
  @moduledoc false
  # The Docker engine that ./docker.sh needs, for docker_test.exs. The engine is shared by the
  # whole machine, and so are the names of its images (docker.sh makes the debian bases and
  # builds `mtrace:debian12` and `mtrace:debian13`): every step that starts, imports, builds or
  # runs holds one machine-wide lock, so that the suites of two checkouts take turns instead of
  # running each other's image.

  @lock "/tmp/mtrace-docker.lock"
  @log "/tmp/mtrace-dockerd.log"
  @clean [{"LD_PRELOAD", nil}, {"MIX_ENV", nil}, {"ERL_AFLAGS", nil}]

  @doc """
  :ok when a Docker engine answers, after starting dockerd (as root, when none runs and none is
  starting); {:skip, reason} otherwise. Safe to call again, and from two suites at once: a
  dockerd is started only when no live one holds /var/run/docker.pid.
  """
  def engine do
    cond do
      System.find_executable("docker") == nil ->
        {:skip, "no docker command (bin/setup installs docker.io outside containers)"}

      answers?() ->
        :ok

      System.find_executable("dockerd") == nil ->
        {:skip, "no Docker engine answers, and there is no dockerd to start"}

      System.cmd("id", ["-u"]) != {"0\n", 0} ->
        {:skip, "no Docker engine answers, and starting dockerd needs root"}

      true ->
        start()
    end
  end

  # A daemon that hangs would hang docker info too.
  defp answers?,
    do:
      match?(
        {_, 0},
        System.cmd("timeout", ["10", "docker", "info"], env: @clean, stderr_to_stdout: true)
      )

  # Under the lock: a dockerd is started unless a live one already holds the pid file (then it
  # is starting, or stuck); either way the engine has 60 s to answer. The daemon runs in a
  # session of its own, so that the suite's end or a ^C in its terminal does not stop it, and is
  # left running for the next run.
  @start ~S"""
  pid=$(cat /var/run/docker.pid 2>/dev/null || true)
  if [ -z "$pid" ] || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != dockerd ]; then
    pid=$(setsid dockerd </dev/null >>"$1" 2>&1 & echo $!)
  fi
  end=$(($(date +%s) + 60))
  until timeout 10 docker info >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || { echo "dockerd exited (see $1)"; exit 1; }
    [ "$(date +%s)" -lt "$end" ] || { echo "dockerd (pid $pid) did not answer in 60 s (see $1)"; exit 1; }
    sleep 1
  done
  """

  defp start do
    case locked(["sh", "-c", @start, "sh", @log]) do
      {_, 0} -> :ok
      {why, _} -> {:skip, String.trim(why)}
    end
  end

  @doc """
  Runs a command in dir while holding the machine-wide lock (held by flock itself: a daemon the
  command starts does not inherit it), with the suite's preload and Mix
  environment cleared and no terminal: {output, exit status}.
  """
  def locked(args, dir \\ File.cwd!()),
    do:
      System.cmd("flock", ["--close", @lock | args], cd: dir, env: @clean, stderr_to_stdout: true)

  @doc "docker with args, outside the lock: {output, exit status}."
  def docker(args), do: System.cmd("docker", args, env: @clean, stderr_to_stdout: true)
end
