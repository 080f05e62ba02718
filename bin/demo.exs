# Run by bin/demo in a node started with priv/mtrace.so preloaded.
alias Mtrace.Test.Leaky

IO.puts("""
A NIF (test/support/c_src/leaky.c) serves 1000 requests; each allocates three buffers
and frees two of them, except the C++ one, which it forgets to delete now and then.
""")

Mtrace.reset()

for i <- 1..1000 do
  kept = Leaky.alloc(:cxx_new, 4096)
  Leaky.release(:malloc, Leaky.alloc(:malloc, 2048))
  Leaky.release(:strdup, Leaky.alloc(:strdup, 100))
  if rem(i, 250) != 0, do: Leaky.release(:cxx_new, kept)
end

Process.sleep(1000)
IO.puts("iex> Mtrace.olds(3, true)")
IO.inspect(Mtrace.olds(3, true), limit: :infinity, printable_limit: 300, width: 100)
IO.puts("\niex> Mtrace.stats()")
IO.inspect(Mtrace.stats(), limit: :infinity, width: 100)
