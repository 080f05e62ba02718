defmodule Mtrace.DockerTest do
  # The image of ./docker.sh, built from a fresh copy of the repository on Debian 12, runs
  # bin/demo and a test file. Where no image registry is reachable, the debian:bookworm base is
  # made first with debootstrap from the machine's Debian mirror (docs: ../shared/NOTES.md). A
  # Docker engine is started as root when none runs; without one the test is skipped, and says why.
  # Not async: a build and a suite in a container on a 2-core machine would slow the tests that
  # run beside them past their timeouts.
  use ExUnit.Case, async: false
  alias Mtrace.Test.Docker

  @moduletag :docker
  @moduletag timeout: 1_800_000

  # Decided as the file loads, so that ExUnit counts the test as skipped where there is no engine.
  with {:skip, why} <- Docker.engine() do
    IO.puts("\nMtrace.DockerTest is skipped: #{why}")
    @tag skip: why
  end

  test "docker.sh builds the image, and bin/demo and a test file pass in it, leaving no container" do
    Docker.base!()
    dir = Path.join(System.tmp_dir!(), "mtrace_docker_#{System.unique_integer([:positive])}")
    name = Path.basename(dir)
    on_exit(fn -> File.rm_rf!(dir) end)
    # A run the test gave up on (its timeout) is not left running.
    on_exit(fn -> Docker.docker(["rm", "-f", name]) end)
    File.mkdir_p!(dir)
    Mtrace.Test.Helpers.fresh_copy!(dir)

    out = docker_sh!(dir, name, ["bin/demo"])
    assert out =~ ~r/\d+ sites? lost \d+ blocks?/, out
    assert out =~ ~r/#Mtrace.Frame<nif_alloc \(leaky.c:\d+\) leaky.so/, out

    out = docker_sh!(dir, name, ["bin/test", "test/mtrace_test.exs"])
    assert out =~ ~r/\d+ tests, 0 failures/, out
  end

  # ./docker.sh with a container of the given name, which must be gone when it has ended.
  defp docker_sh!(dir, name, command) do
    {out, status} =
      Docker.locked(["env", "MTRACE_DOCKER_NAME=#{name}", "./docker.sh" | command], dir)

    assert status == 0, out
    assert {_, status} = Docker.docker(["container", "inspect", name])
    assert status != 0, "the container #{name} is still there"
    out
  end
end
