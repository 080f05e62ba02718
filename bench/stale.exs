# Run as `mix run --no-compile --no-start bench/stale.exs` in a node with priv/mtrace.so preloaded
# (MIX_ENV=test, for the test NIF; ERL_AFLAGS="+MRe false +MBe false" as bin/run starts one):
# STALE_LOST 48-byte blocks lost (their addresses known only masked), STALE_SCANS leaks/1 a second
# apart (what one found stays found: the lost bit), then why/2 of each lost block they missed: where the words that keep lost blocks sit (issue 26, part 2). Prints
# the blocks lost, found by each scan, and the missed ones by holder: the root's kind and name, the links,
# and the size and first program frame of the block that holds the word (:direct: a root does);
# nil: why/2's own scan found the block lost, so its holder was a word equal to the block's
# address in the VM's memory (which why/2 does not count), or one gone since the last scan (a dead
# term that a collection has since cleared).
alias Mtrace.Test.Lost

m = Lost.mask()
n = String.to_integer(System.get_env("STALE_LOST", "200"))
scans = String.to_integer(System.get_env("STALE_SCANS", "3"))
lost = Lost.lose_masked(n, 48)

founds =
  for _ <- 1..scans do
    Process.sleep(1100)
    for s <- Mtrace.leaks(blocks: true), do: Bitwise.bxor(s.address, m)
  end

missed = lost -- List.last(founds)
counts = Enum.map_join(founds, ",", &length(lost -- lost -- &1))

holders =
  for a <- missed do
    case Mtrace.why(Bitwise.bxor(a, m)) do
      %Mtrace.Path{root: root, links: links} ->
        holder =
          case Enum.drop(links, -1) do
            [] ->
              :direct

            [h | _] ->
              {h.size, h.stack |> Enum.drop(1) |> Enum.take(2) |> Enum.map(& &1.function)}
          end

        name = root[:name] || root[:register] || (root[:library] && Path.basename(root.library))
        {root.kind, name, length(links), holder}

      nil ->
        nil
    end
  end

IO.puts("stale lost=#{n} found=#{counts} holders=#{inspect(Enum.frequencies(holders))}")
