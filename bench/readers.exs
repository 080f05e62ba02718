# Run by bin/bench as `mix run bench/readers.exs` in a node with priv/mtrace.so preloaded
# (MIX_ENV=test, for the test NIF): fills the live table, then times one reader on it twice,
# cold (the first symbolization reads the libraries' symbol tables, and for top/2 their DWARF)
# and warm. READER: olds (Mtrace.olds(100, true)) or top (Mtrace.top(100), with file:line).
reader =
  case System.get_env("READER", "olds") do
    "olds" -> fn -> Mtrace.olds(100, true) end
    "top" -> fn -> Mtrace.top(100) end
  end

slots = Mtrace.stats().slots
# Twice the slots: addresses that hash to full windows are dropped (bin/bench caps the table at
# its start), the rest fill the gaps.
Enum.each(1..(2 * slots), fn _ -> Mtrace.Test.Leaky.alloc(:malloc, 64) end)
s = Mtrace.stats()
{cold, _} = :timer.tc(reader)
{warm, _} = :timer.tc(reader)

IO.puts(
  "reader slots=#{s.slots} records=#{s.records} stacks=#{s.stacks} " <>
    "stack_bytes=#{s.stack_bytes} cold_us=#{cold} warm_us=#{warm}"
)
