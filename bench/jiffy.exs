# Run by bin/bench as `mix run bench/jiffy.exs ROUNDS REPS`: a real NIF's work, Debian's
# erlang-jiffy decoding a 20 KB JSON document and encoding it again, ROUNDS times a repetition.
# Prints the median and the best of REPS, in microseconds a round. With MBENCH_ATTACH set, in a
# node started without the preload, mtrace is attached first.
[rounds, reps] = Enum.map(System.argv(), &String.to_integer/1)
if System.get_env("MBENCH_ATTACH"), do: :ok = Mtrace.attach()
# named at run time, so that nothing loads jiffy's NIF before the attach
jiffy = String.to_atom("jiffy")

doc = %{
  "items" =>
    for(
      i <- 1..340,
      do: %{"id" => i, "name" => "item #{i}", "tags" => ["a", "b"], "price" => i * 1.5}
    )
}

json = IO.iodata_to_binary(apply(jiffy, :encode, [doc]))

times =
  for _ <- 1..reps do
    t0 = System.monotonic_time(:nanosecond)
    for _ <- 1..rounds, do: apply(jiffy, :encode, [apply(jiffy, :decode, [json, [:return_maps]])])
    System.monotonic_time(:nanosecond) - t0
  end

per_round = fn ns -> Float.round(ns / rounds / 1000, 2) end
sorted = Enum.sort(times)

IO.puts(
  "jiffy rounds=#{rounds} reps=#{reps} bytes=#{byte_size(json)} " <>
    "us_per_round=#{per_round.(Enum.at(sorted, div(reps, 2)))} us_per_round_min=#{per_round.(hd(sorted))}"
)
