# Run by bin/bench as `mix run bench/leaks.exs` in a node with priv/mtrace.so preloaded
# (MIX_ENV=test, for the test NIF): LEAKS_KEPT reachable and LEAKS_LOST lost 64-byte blocks,
# then times Mtrace.leaks_info/1 on them: the whole call, and the pause of the other threads.
kept = String.to_integer(System.get_env("LEAKS_KEPT", "500000"))
lost = String.to_integer(System.get_env("LEAKS_LOST", "500000"))
:ok = Mtrace.Test.Lost.many(kept, lost, 64)
Process.sleep(1100)
{us, {sites, info}} = :timer.tc(Mtrace, :leaks_info, [[library: "lost.so"]])
found = sites |> Enum.map(& &1.blocks) |> Enum.sum()

IO.puts(
  "leaks live=#{info.live_blocks} lost=#{found} threads=#{info.threads} " <>
    "pause_us=#{div(info.pause_ns, 1000)} total_us=#{us}"
)
