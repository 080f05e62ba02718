defmodule Mtrace.DockerTest do
  # The images of ./docker.sh, each built from a fresh copy of the repository: on Debian 12 it
  # runs bin/demo and a test file; on Debian 13 (OTP 27, Elixir 1.18, glibc 2.41, gcc 14) the
  # whole suite, so that every run of the suite also runs it on the newer system users have.
  # Where no image registry is reachable, docker.sh makes the debian base with debootstrap from
  # the machine's Debian mirror (docs: ../shared/NOTES.md). A Docker engine is started as root
  # when none runs; without one the tests are skipped, and say why.
  # Not async: a build and a suite in a container on a 2-core machine would slow the tests that
  # run beside them past their timeouts.
  use ExUnit.Case, async: false
  alias Mtrace.Test.Docker

  @moduletag :docker
  @moduletag timeout: 2_400_000

  # Decided as the file loads, so that ExUnit counts the tests as skipped where there is no engine.
  with {:skip, why} <- Docker.engine() do
    IO.puts("\nMtrace.DockerTest is skipped: #{why}")
    @moduletag skip: why
  end

  @tag :tmp_dir
  test "docker.sh builds the Debian 12 image; bin/demo, a test file and leaks/1 without SYS_PTRACE pass in it, leaving no container",
       %{tmp_dir: dir} do
    name = copy!(dir)
    out = docker_sh!(dir, name, ["bin/demo"])
    assert out =~ ~r/\d+ sites? lost \d+ blocks?/, out
    assert out =~ ~r/#Mtrace.Frame<nif_alloc \(leaky.c:\d+\) leaky.so/, out

    out = docker_sh!(dir, name, ["bin/test", "test/mtrace_test.exs"])
    assert out =~ ~r/\d+ tests, 0 failures/, out

    # Without SYS_PTRACE, as Docker runs containers by default, its seccomp profile refuses
    # process_vm_readv: the mark reads memory in place, and only where the mapping list says it
    # can (the rules read addresses that words give, which may be unmapped: the node crashed);
    # the other readers read /proc/self/mem (proc.h).
    stale =
      "cd /mtrace && . bin/env.sh && STALE_LOST=300 mix run --no-compile --no-start bench/stale.exs"

    run = ["docker", "run", "--rm", "--init", "-e", "MIX_ENV=test", "mtrace:debian12"]
    {out, status} = Docker.locked(run ++ ["sh", "-c", stale], dir)
    assert status == 0, out
    assert [_, first] = Regex.run(~r/^stale lost=300 found=(\d+),/m, out), out
    assert String.to_integer(first) >= 297, out
  end

  # The skips there, each with its reason: this module's tests (the container runs no engine of
  # its own) and the layout check (clang-format 19, not 14). The fault test mounts its file
  # systems (SYS_ADMIN).
  @tag :tmp_dir
  test "the whole suite passes in the Debian 13 image (OTP 27, Elixir 1.18)", %{tmp_dir: dir} do
    name = copy!(dir)
    out = docker_sh!(dir, name, ["--debian", "13", "bin/test"])
    [line] = Regex.run(~r/^\d+ doctests?, \d+ tests?, \d+ failures?.*$/m, out) || [out]
    IO.puts("\nDebian 13: #{line}")

    own =
      Enum.count(__MODULE__.__info__(:functions), &(&1 |> elem(0) |> to_string() =~ ~r/^test /))

    assert line =~ ~r/ 0 failures, #{own + 1} skipped$/, out
    assert out =~ "Mtrace.DockerTest is skipped: no docker command", out
    refute out =~ "tmpfs cannot be mounted", out
  end

  # A fresh copy of the repository in dir; the name of its container, which must not be left
  # running when the test gives up (its timeout).
  defp copy!(dir) do
    name = "mtrace_docker_#{System.unique_integer([:positive])}"
    on_exit(fn -> Docker.docker(["rm", "-f", name]) end)
    Mtrace.Test.Helpers.fresh_copy!(dir)
    name
  end

  # ./docker.sh with a container of the given name, which must be gone when it has ended.
  defp docker_sh!(dir, name, args) do
    {out, status} =
      Docker.locked(["env", "MTRACE_DOCKER_NAME=#{name}", "./docker.sh" | args], dir)

    assert status == 0, out
    assert {_, status} = Docker.docker(["container", "inspect", name])
    assert status != 0, "the container #{name} is still there"
    out
  end
end
