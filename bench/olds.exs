# Run by bin/bench as `mix run bench/olds.exs` in a node with priv/mtrace.so preloaded
# (MIX_ENV=test, for the test NIF): fills the live table, then times Mtrace.olds(100, true) on
# it twice, cold (the first symbolization reads the libraries' symbol tables) and warm.
slots = Mtrace.stats().slots
# Twice the slots: addresses that hash to full windows are dropped (bin/bench caps the table at
# its start), the rest fill the gaps.
Enum.each(1..(2 * slots), fn _ -> Mtrace.Test.Leaky.alloc(:malloc, 64) end)
s = Mtrace.stats()
{cold, _} = :timer.tc(Mtrace, :olds, [100, true])
{warm, _} = :timer.tc(Mtrace, :olds, [100, true])

IO.puts(
  "olds slots=#{s.slots} records=#{s.records} stacks=#{s.stacks} " <>
    "stack_bytes=#{s.stack_bytes} cold_us=#{cold} warm_us=#{warm}"
)
