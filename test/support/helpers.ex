defmodule Mtrace.Test.Helpers do
  @moduledoc false

  @doc "Records of the given addresses, from a read of the whole table."
  def records_at(addresses, demangle \\ true) do
    wanted = MapSet.new(addresses)

    Mtrace.olds(Mtrace.stats().slots, demangle)
    |> Enum.filter(fn {_age, _size, address, _ns, _stack} -> address in wanted end)
    |> Map.new(fn {_age, _size, address, _ns, _stack} = record -> {address, record} end)
  end

  @doc "The function names of a stack, nil for frames without one."
  def names(stack),
    do:
      Enum.map(stack, fn
        {_lib, name} -> name
        nil -> nil
      end)

  def mtrace_so, do: Path.expand("../../priv/mtrace.so", __DIR__)

  @doc """
  Builds a directory of test programs with make ($MAKE, else make), without the preload, one
  build of a directory at a time across test modules. Raises with make's output on failure.
  """
  def make!(dir) do
    :global.trans({{:mtrace_test_make, dir}, self()}, fn ->
      {out, status} =
        System.cmd(System.get_env("MAKE", "make"), ["-C", dir],
          stderr_to_stdout: true,
          env: [{"LD_PRELOAD", nil}]
        )

      if status != 0, do: raise("building #{dir} failed:\n" <> out)
    end)

    :ok
  end

  @doc """
  Runs Elixir code in a fresh node that has this project's modules, with env (a nil value
  unsets a variable; LD_PRELOAD is unset unless given). Returns {output, exit_status}.
  """
  def run_node(code, env \\ []) do
    ebin = Path.join(:code.lib_dir(:mtrace), "ebin")

    env =
      %{
        "LD_PRELOAD" => nil,
        "MTRACE_SLOTS" => nil,
        "MTRACE_SLOTS_MAX" => nil,
        "MTRACE_SAMPLE" => nil
      }
      |> Map.merge(Map.new(env))
      |> Map.to_list()

    System.cmd("timeout", ["120", "elixir", "-pa", ebin, "-e", code],
      env: env,
      stderr_to_stdout: true
    )
  end
end
