# Run by bin/demo in a node started as bin/env.sh starts it.
alias Mtrace.Test.{Demo, Leaky}

IO.puts("""
A NIF (test/support/c_src/leaky.c) serves 1000 requests; each allocates three buffers and
frees them, but now and then forgets the C++ one (delete[]) or the enif_alloc one (enif_free).
""")

# The blocks it forgets, kept to check mtrace's answer.
lost =
  for i <- 1..1000, reduce: [] do
    lost ->
      cxx = Leaky.alloc(:cxx_new, 4096)
      enif = Leaky.alloc(:enif_alloc, 512)
      Leaky.release(:strdup, Leaky.alloc(:strdup, 100))

      lost
      |> Demo.free_or_forget(i, 250, :cxx_new, cxx)
      |> Demo.free_or_forget(i, 400, :enif_alloc, enif)
  end

# Blocks younger than a second may be in flight: leaks/1 skips them by default.
Process.sleep(1100)
{sites, info} = Mtrace.leaks_info()
listed = Enum.sum(Enum.map(sites, & &1.blocks))

Demo.show(sites)

IO.puts("""

#{length(sites)} sites lost #{listed} blocks; \
#{info.reachable_blocks} blocks (#{info.reachable_bytes} bytes) are still reachable. \
The #{info.threads} other threads were stopped for #{div(info.pause_ns, 1000)} us.\
""")

Demo.explain(lost, listed)

IO.puts(
  "\niex> Mtrace.stats() |> Map.take([:slots, :grown, :dropped, :nif_alloc_visible, :resources_visible])"
)

IO.inspect(
  Map.take(Mtrace.stats(), [:slots, :grown, :dropped, :nif_alloc_visible, :resources_visible])
)
