defmodule Mtrace.Test.Demo do
  @moduledoc false
  # bin/demo's check of its own claim: where mtrace listed fewer blocks than its NIF lost, what
  # keeps each of the others (Mtrace.why/2), so that a run that misses one says why.

  alias Mtrace.Test.Leaky

  # A request's block freed, or on every `every`th request forgotten: the blocks lost so far.
  def free_or_forget(lost, request, every, kind, block) do
    if rem(request, every) == 0 do
      [block | lost]
    else
      Leaky.release(kind, block)
      lost
    end
  end

  # The sites as iex shows them, each with its first five frames: a limit of inspect's would cut
  # the stacks by how many fields come before them (Elixir 1.18 spends one budget on them all).
  def show(sites) do
    IO.puts("iex> Mtrace.leaks()")

    IO.inspect(Enum.map(sites, &%{&1 | stack: Enum.take(&1.stack, 5)}),
      width: 100,
      limit: :infinity
    )
  end

  def explain(lost, listed) when listed >= length(lost), do: :ok

  def explain(lost, listed) do
    IO.puts("""

    The NIF lost #{length(lost)} blocks and mtrace listed #{listed}: the mark is conservative, and \
    a stale word that holds a lost block's address keeps it. What keeps each one now:\
    """)

    for address <- lost, path <- [Mtrace.why(address)], path != nil do
      IO.puts("iex> Mtrace.why(0x#{Integer.to_string(address, 16)})")
      IO.inspect(path, width: 100, limit: :infinity)
    end

    :ok
  end
end
