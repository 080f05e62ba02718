# Run by bin/bench as `mix run bench/churn.exs ROUNDS REPS` (MIX_ENV=test, for the test NIF):
# malloc+free pairs made by a NIF inside the BEAM, test/support/c_src/leaky.c's churn (a ring of
# 64 blocks of 100..163 bytes), on a dirty scheduler. Prints the median over REPS.
[rounds, reps] = Enum.map(System.argv(), &String.to_integer/1)

times =
  for _ <- 1..reps do
    t0 = System.monotonic_time(:nanosecond)
    :ok = Mtrace.Test.Leaky.churn(rounds, 100)
    System.monotonic_time(:nanosecond) - t0
  end

median = Enum.at(Enum.sort(times), div(reps, 2))
IO.puts("churn rounds=#{rounds} reps=#{reps} ns_per_pair=#{Float.round(median / rounds, 2)}")
