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
  The MTRACE_* variables the library reads, as its build lists them from its one declaration
  (c_src/base/config.c, priv/mtrace-options.txt): {name, default, meaning}.
  """
  def options do
    Path.expand("../../priv/mtrace-options.txt", __DIR__)
    |> File.read!()
    |> String.split("\n", trim: true)
    |> Enum.map(fn line -> line |> String.split("\t") |> List.to_tuple() end)
  end

  @doc "Every MTRACE_* variable the library reads."
  def variables, do: Enum.map(options(), &elem(&1, 0))

  @doc "The number of the line of a source file that carries the marker `site:<name>`."
  def line_of(file, name) do
    file
    |> File.read!()
    |> String.split("\n")
    |> Enum.find_index(&(&1 =~ ~r/site:#{name}\b/))
    |> Kernel.+(1)
  end

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

  # The list first: a tree that is no git repository (or no git) must fail, not copy nothing.
  @copy ~S"""
  set -e
  list=$(mktemp)
  trap 'rm -f "$list"' EXIT
  git ls-files -z >"$list"
  tar --null -T "$list" -cf - | tar -xf - -C "$1"
  """

  @doc """
  Copies into dest the files of this repository that a clone has, as they are in the working
  tree, and none of its build outputs.
  """
  def fresh_copy!(dest) do
    {out, status} =
      System.cmd(
        "sh",
        ["-c", @copy, "sh", dest],
        cd: Path.expand("../..", __DIR__),
        stderr_to_stdout: true
      )

    ExUnit.Assertions.assert(status == 0, out)
  end

  @doc """
  The value of an Elixir expression evaluated in a fresh node (see run_node/3), brought back as
  a term; the node must end well.
  """
  def node_result(code, env, runner \\ []) do
    wrapped = """
    result = (#{code})
    IO.puts("RESULT " <> Base.encode64(:erlang.term_to_binary(result)))
    """

    {out, status} = run_node(wrapped, env, runner)
    ExUnit.Assertions.assert(status == 0, out)

    case Regex.run(~r/^RESULT (\S+)$/m, out) do
      [_, b64] -> b64 |> Base.decode64!() |> :erlang.binary_to_term()
      nil -> ExUnit.Assertions.flunk("no result from the node:\n" <> out)
    end
  end

  @doc """
  A result that may miss by chance, held to a stated budget: `run.(i)` for i in 1..n, each
  returning `{:hit, value}` or `{:miss, why}`; at least k must hit. Each miss is printed with
  why, so that a rate that creeps up shows before it fails. The runs stop once k have hit, or
  once k no longer can (the verdict all n would give), unless opts say `every: true` (each run
  also checks what must hold in every node). Returns the hits' values, first first.
  """
  def at_least!(k, n, what, opts \\ [], run) do
    every = Keyword.get(opts, :every, false)

    {hits, misses} =
      Enum.reduce_while(1..n, {[], []}, fn i, {hits, misses} ->
        {hits, misses} =
          case run.(i) do
            {:hit, value} ->
              {[value | hits], misses}

            {:miss, why} ->
              print_miss(what, i, n, why)
              {hits, [why | misses]}
          end

        decided = length(hits) >= k or length(misses) > n - k
        if decided and not every, do: {:halt, {hits, misses}}, else: {:cont, {hits, misses}}
      end)

    assert_budget!(k, n, what, Enum.reverse(hits), Enum.reverse(misses))
  end

  @doc """
  The budget of at_least!/5 over outcomes already had, for runs that answer several budgets at
  once: of the n outcomes (each `{:hit, value}` or `{:miss, why}`), at least k must hit. Prints
  each miss; returns the hits' values, first first.
  """
  def budget!(k, what, outcomes) do
    n = length(outcomes)

    for {{:miss, why}, i} <- Enum.with_index(outcomes, 1), do: print_miss(what, i, n, why)

    assert_budget!(
      k,
      n,
      what,
      for({:hit, value} <- outcomes, do: value),
      for({:miss, why} <- outcomes, do: why)
    )
  end

  defp print_miss(what, i, n, why), do: IO.puts("\n#{what}: missed in run #{i} of #{n}: #{why}")

  defp assert_budget!(k, n, what, hits, misses) do
    ExUnit.Assertions.assert(
      length(hits) >= k,
      "#{what}: #{length(hits)} runs hit, the budget is #{k} of #{n}: #{inspect(misses)}"
    )

    hits
  end

  @doc """
  The usable sizes glibc may give a block of `asked` bytes without a record, as the heap walk
  reports it: its chunk's (the request and the 8-byte header, to 16 bytes, at least 32), or 16
  bytes more, where glibc gave the whole of a free chunk whose remainder would have been too
  small to split.
  """
  def usable_sizes(asked) do
    usable = max(32, div(asked + 8 + 15, 16) * 16) - 8
    [usable, usable + 16]
  end

  @doc "A run's outcome for at_least!/4,5: `{:hit, value}` when hit?, else `{:miss, why}`."
  def outcome(hit?, value, why), do: if(hit?, do: {:hit, value}, else: {:miss, why})

  @doc """
  Starts epmd without the preload (a daemon a node started would outlive the test with it) and
  waits until it answers: `epmd -daemon` returns before the daemon listens, and a node that
  registers in between fails with econnrefused.
  """
  def epmd! do
    System.cmd("epmd", ["-daemon"], env: [{"LD_PRELOAD", nil}])
    wait_for_epmd(100)
  end

  defp wait_for_epmd(0), do: ExUnit.Assertions.flunk("epmd did not answer within 5 s")

  defp wait_for_epmd(tries) do
    case System.cmd("epmd", ["-names"], env: [{"LD_PRELOAD", nil}], stderr_to_stdout: true) do
      {_, 0} ->
        :ok

      _ ->
        Process.sleep(50)
        wait_for_epmd(tries - 1)
    end
  end

  @doc """
  Runs Elixir code in a fresh node that has this project's modules, with env (a nil value
  unsets a variable; LD_PRELOAD is unset unless given), under runner (a command and its
  arguments that run the node's command, none by default). Returns {output, exit_status}.
  """
  def run_node(code, env \\ [], runner \\ []) do
    ebin = Path.join(:code.lib_dir(:mtrace), "ebin")

    env =
      Map.new(["LD_PRELOAD" | variables()], &{&1, nil})
      |> Map.merge(Map.new(env))
      |> Map.to_list()

    [command | args] = runner ++ ["timeout", "120", "elixir", "-pa", ebin, "-e", code]

    System.cmd(command, args,
      env: env,
      stderr_to_stdout: true
    )
  end
end
