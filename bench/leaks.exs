# Run by bin/bench as `mix run bench/leaks.exs` in a node with priv/mtrace.so preloaded
# (MIX_ENV=test, for the test NIF): LEAKS_KEPT reachable and LEAKS_LOST lost 64-byte blocks,
# then times Mtrace.leaks_info/1 on them (the whole call, and the pause of the other threads), and
# Mtrace.heap/0 (the walk of glibc's heap alone: the whole call and its pause), and Mtrace.why/2
# of the oldest live block (its mark, a breadth-first search that notes each block's parent).
kept = String.to_integer(System.get_env("LEAKS_KEPT", "500000"))
lost = String.to_integer(System.get_env("LEAKS_LOST", "500000"))
:ok = Mtrace.Test.Lost.many(kept, lost, 64)
Process.sleep(1100)
# Under MTRACE_SAMPLE most lost blocks have no stack, so no library: all lost blocks count.
filter = if System.get_env("MTRACE_SAMPLE"), do: [], else: [library: "lost.so"]
{us, {sites, info}} = :timer.tc(Mtrace, :leaks_info, [filter])
found = sites |> Enum.map(& &1.blocks) |> Enum.sum()
{walk_us, heap} = :timer.tc(Mtrace, :heap, [])
[{_, _, oldest, _, _}] = Mtrace.olds(1, false)
{why_us, path} = :timer.tc(Mtrace, :why, [oldest])

IO.puts(
  "leaks live=#{info.live_blocks} lost=#{found} threads=#{info.threads} " <>
    "pause_us=#{div(info.pause_ns, 1000)} total_us=#{us} " <>
    "chunks=#{heap.blocks + heap.free_chunks} walk_us=#{walk_us} " <>
    "walk_pause_us=#{div(heap.pause_ns, 1000)} why_us=#{why_us} " <>
    "why_links=#{if match?(%Mtrace.Path{}, path), do: length(path.links), else: inspect(path)}"
)
