# Run by bin/bench as `mix run bench/erlang.exs CALLS REPS` (MIX_ENV=test, for the test NIF and
# test/support/chain.ex), in a node started with +JPperf map: malloc+free made by a NIF called from
# Erlang code (Chain.a/1 -> b/1 -> c/1 -> Leaky.alloc/2, then Leaky.release/2), so that the stacks
# reach JIT code; the loop's garbage collections move the process's stack now and then. Prints the
# median and the best of REPS, in ns a call, and removes the node's perf map.
[calls, reps] = Enum.map(System.argv(), &String.to_integer/1)
alias Mtrace.Test.{Chain, Leaky}

loop = fn
  0, _loop -> :ok
  n, loop -> Leaky.release(:malloc, Chain.address(Chain.a(100))) && loop.(n - 1, loop)
end

times =
  for _ <- 1..reps do
    t0 = System.monotonic_time(:nanosecond)
    loop.(calls, loop)
    System.monotonic_time(:nanosecond) - t0
  end

File.rm("/tmp/perf-#{System.pid()}.map")
per_call = fn ns -> Float.round(ns / calls, 2) end
sorted = Enum.sort(times)

IO.puts(
  "erlang calls=#{calls} reps=#{reps} ns_per_call=#{per_call.(Enum.at(sorted, div(reps, 2)))} " <>
    "ns_per_call_min=#{per_call.(hd(sorted))}"
)
