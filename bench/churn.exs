# Run by bin/bench as `mix run bench/churn.exs ROUNDS REPS` (MIX_ENV=test, for the test NIF):
# malloc+free pairs made by a NIF inside the BEAM, test/support/c_src/leaky.c's churn (a ring of
# 64 blocks of 100..163 bytes), on a dirty scheduler. Prints the median and the best of REPS.
# With MBENCH_ATTACH set, in a node started without the preload, mtrace is attached first. With
# CHURN_API=enif, the pairs are enif_alloc+enif_free (Leaky.enif_churn), from the VM's carriers.
[rounds, reps] = Enum.map(System.argv(), &String.to_integer/1)
if System.get_env("MBENCH_ATTACH"), do: :ok = Mtrace.attach()
churn = if System.get_env("CHURN_API") == "enif", do: :enif_churn, else: :churn

times =
  for _ <- 1..reps do
    t0 = System.monotonic_time(:nanosecond)
    :ok = apply(Mtrace.Test.Leaky, churn, [rounds, 100])
    System.monotonic_time(:nanosecond) - t0
  end

per_pair = fn ns -> Float.round(ns / rounds, 2) end
sorted = Enum.sort(times)

IO.puts(
  "churn rounds=#{rounds} reps=#{reps} ns_per_pair=#{per_pair.(Enum.at(sorted, div(reps, 2)))} " <>
    "ns_per_pair_min=#{per_pair.(hd(sorted))}"
)
