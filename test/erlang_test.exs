defmodule Mtrace.ErlangTest do
  # MTRACE_UNWIND=erlang in nodes started with +JPperf map: native stacks go on through the
  # Erlang functions that called the NIF (test/support/chain.ex), named from the perf map.
  use ExUnit.Case, async: true
  import Mtrace.Test.Helpers

  @moduletag timeout: 180_000

  @erlang [{"MTRACE_UNWIND", "erlang"}, {"ERL_AFLAGS", "+JPperf map"}]

  # Runs code in a fresh node with the preload and env; code leaves its answer in `result`.
  defp in_node(code, env) do
    wrapped = """
    alias Mtrace.Test.{Chain, Leaky}
    result = (#{code})
    IO.puts("RESULT " <> Base.encode64(:erlang.term_to_binary(result)))
    """

    {out, status} = run_node(wrapped, [{"LD_PRELOAD", mtrace_so()} | env])
    assert status == 0, out

    case Regex.run(~r/^RESULT (\S+)$/m, out) do
      [_, b64] -> b64 |> Base.decode64!() |> :erlang.binary_to_term()
      nil -> flunk("no result from the node:\n" <> out)
    end
  end

  # The perf map's name of each address of the stack of the live site of `bytes` bytes, read
  # here and not by mtrace: "?" outside the map, nil for frames in a library.
  @jit_names """
  (fn bytes ->
    ranges =
      for line <- String.split(File.read!("/tmp/perf-\#{System.pid()}.map"), "\\n", trim: true) do
        [start, size, name] = String.split(line, " ", parts: 3)
        {String.to_integer(String.trim_leading(start, "0x"), 16), String.to_integer(size, 16), name}
      end

    site = Enum.find(Mtrace.top(1_000_000), &(&1.bytes == bytes))

    for f <- site.stack do
      if f.library, do: nil, else:
        ranges
        |> Enum.filter(fn {a, s, _} -> f.address >= a and f.address < a + s end)
        |> Enum.map(&elem(&1, 2))
        |> List.last() || "?"
    end
  end)
  """

  test "a NIF's stack goes on through the Erlang functions that called it, in order" do
    names =
      in_node(
        """
        _ = Chain.a(4321)
        #{@jit_names}.(4321)
        """,
        @erlang
      )

    erlang = Enum.reject(names, &is_nil/1)

    chain = [
      "$'Elixir.Mtrace.Test.Chain':c/1",
      "$'Elixir.Mtrace.Test.Chain':b/1",
      "$'Elixir.Mtrace.Test.Chain':a/1"
    ]

    assert ["$global::call_nif_shared" | rest] = erlang
    assert Enum.take(rest, 3) == chain
    refute "?" in erlang
  end
end
