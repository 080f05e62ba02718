defmodule Mtrace.DockerTest do
  # The image of ./docker.sh, built from a fresh copy of the repository on Debian 12, runs
  # bin/demo and a test file. Where no image registry is reachable, the debian:bookworm base is
  # made first with debootstrap from the machine's Debian mirror (docs: ../shared/NOTES.md). A
  # Docker engine is started as root when none runs; without one the test says why it did not run.
  use ExUnit.Case, async: true

  @moduletag timeout: 1_800_000
  @clean [{"LD_PRELOAD", nil}, {"MIX_ENV", nil}, {"ERL_AFLAGS", nil}]

  @tag :slow
  test "docker.sh builds the image, and bin/demo and a test file pass in it" do
    case engine() do
      :ok ->
        base!()
        dir = Path.join(System.tmp_dir!(), "mtrace_docker_#{System.unique_integer([:positive])}")
        on_exit(fn -> File.rm_rf!(dir) end)
        File.mkdir_p!(dir)
        Mtrace.Test.Helpers.fresh_copy!(dir)

        {out, status} = sh(dir, "./docker.sh bin/demo")
        assert status == 0, out
        assert out =~ ~r/\d+ sites? lost \d+ blocks?/, out
        assert out =~ ~r/#Mtrace.Frame<nif_alloc \(leaky.c:\d+\) leaky.so/, out

        {out, status} = sh(dir, "./docker.sh bin/test test/mtrace_test.exs")
        assert status == 0, out
        assert out =~ ~r/\d+ tests, 0 failures/, out

      {:skip, why} ->
        IO.puts("\nMtrace.DockerTest did not run: #{why}")
    end
  end

  defp sh(dir, command),
    do:
      System.cmd("sh", ["-c", command <> " </dev/null"],
        cd: dir,
        env: @clean,
        stderr_to_stdout: true
      )

  # A running engine, started here if need be.
  defp engine do
    cond do
      System.find_executable("docker") == nil ->
        {:skip, "no docker command (Debian's docker.io)"}

      match?({_, 0}, docker(["info"])) ->
        :ok

      System.find_executable("dockerd") == nil ->
        {:skip, "no Docker engine running, and no dockerd to start"}

      true ->
        System.cmd("sh", ["-c", "nohup dockerd >/tmp/mtrace-dockerd.log 2>&1 &"], env: @clean)
        wait_for_engine(60)
    end
  end

  defp wait_for_engine(0), do: {:skip, "dockerd did not answer in 60 s (/tmp/mtrace-dockerd.log)"}

  defp wait_for_engine(n) do
    case docker(["info"]) do
      {_, 0} ->
        :ok

      _ ->
        Process.sleep(1000)
        wait_for_engine(n - 1)
    end
  end

  defp docker(args), do: System.cmd("docker", args, env: @clean, stderr_to_stdout: true)

  # debian:bookworm from debootstrap, when the engine has no such image (no registry here).
  defp base! do
    with {_, status} when status != 0 <- docker(["image", "inspect", "debian:bookworm"]) do
      root = Path.join(System.tmp_dir!(), "mtrace_bookworm_#{System.unique_integer([:positive])}")
      on_exit(fn -> File.rm_rf!(root) end)

      {out, status} =
        System.cmd("debootstrap", ["--variant=minbase", "bookworm", root, mirror()],
          env: @clean,
          stderr_to_stdout: true
        )

      assert status == 0, out

      {out, status} =
        System.cmd(
          "sh",
          ["-c", ~s(tar -C "$1" -c . | docker import - debian:bookworm), "sh", root],
          env: @clean,
          stderr_to_stdout: true
        )

      assert status == 0, out
    end
  end

  # The machine's Debian mirror: the first URIs of a deb822 source, or of a one-line source.
  defp mirror do
    sources =
      Path.wildcard("/etc/apt/sources.list.d/*.sources") ++
        Path.wildcard("/etc/apt/sources.list*")

    text = sources |> Enum.filter(&File.regular?/1) |> Enum.map_join("\n", &File.read!/1)

    case Regex.run(~r/^URIs:\s*(\S+)|^deb\s+(?:\[[^\]]*\]\s+)?(\S+)/m, text) do
      [_, uri] -> uri
      [_, "", uri] -> uri
      nil -> "http://deb.debian.org/debian"
    end
  end
end
