# Run by bin/demo (its second part) in a node started without the preload and without the VM's
# allocator flags: a production node that cannot be restarted.
alias Mtrace.Test.{Demo, Leaky}

IO.puts("""

Part 2: a node started without the preload, as a production node runs. The same NIF serves 200
requests and loses 2 C++ buffers before anyone looks; then mtrace attaches from inside the node
(no restart, no ptrace, no root), the NIF serves 300 more and loses 3 more.
""")

# Every 100th request forgets its delete[]: the buffers lost.
serve = fn requests ->
  for i <- 1..requests, reduce: [] do
    lost -> Demo.free_or_forget(lost, i, 100, :cxx_new, Leaky.alloc(:cxx_new, 4096))
  end
end

IO.puts("iex> Mtrace.stats().preloaded")
IO.inspect(Mtrace.stats().preloaded)
before = serve.(200)
IO.puts("iex> Mtrace.attach()")
IO.inspect(Mtrace.attach())
since = serve.(300)
# Blocks younger than a second may be in flight: leaks/1 skips them by default.
Process.sleep(1100)
sites = Mtrace.leaks()
listed = Enum.sum(Enum.map(sites, & &1.blocks))
Demo.show(sites)

IO.puts("""

#{length(sites)} sites lost #{listed} blocks. The buffers lost since the attach come
with their stacks; those lost before it are known from glibc's own heap, by size and contents,
without a stack.
""")

Demo.explain(before ++ since, listed)

IO.puts("iex> Mtrace.detach()")
IO.inspect(Mtrace.detach())
