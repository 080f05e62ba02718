defmodule Mtrace.Lost do
  @moduledoc false
  # leaks/1's sites, from the lost blocks the NIF returns (nif.c's leaks): grouped by stack, or
  # for blocks without a record by usable size and what they hold, each with its certainty.

  alias Mtrace.{Site, Sites}

  # Lost blocks {address, size, age_ns, stack_id, direct, scans, certainty} grouped by stack (or
  # one a block); blocks known from glibc's heap alone (stack and scans nil, and what they hold
  # in age's place) grouped by usable size and what they hold. certainty: nil when the block is
  # lost definitely, {rule, holder} when a word a rule discounted points into it.
  # With why: each site of a stack gets its chain; with blocks: true, only the block it ends at.
  @spec sites([tuple()], %{non_neg_integer() => Mtrace.Path.t() | nil}, keyword()) :: [Site.t()]
  def sites(blocks, whys, opts) do
    ids = for {_, _, _, id, _, _, _} <- blocks, id != nil, uniq: true, do: id
    stacks = Sites.stacks(ids, opts[:demangle])

    if opts[:blocks] do
      Enum.map(blocks, fn {address, _, _, id, _, _, _} = b ->
        why =
          with %{links: links} = path <- whys[id],
               %{address: ^address} <- List.last(links),
               do: path,
               else: (_ -> nil)

        %{lost_site([b], stacks) | address: address, why: why}
      end)
    else
      blocks
      |> Enum.group_by(fn
        {_, _, _, nil, _, _, _} = b -> {:unrecorded, elem(b, 1), holds(b)}
        {_, _, _, id, _, _, _} -> id
      end)
      |> Enum.map(fn {id, bs} -> %{lost_site(bs, stacks) | why: whys[id]} end)
    end
  end

  defp holds({_, _, {:cxx, class}, nil, _, _, _}), do: {:cxx, class}

  defp holds({_, _, {kind, _}, nil, _, _, _}) when kind in [:erlang_binary, :erlang_resource],
    do: kind

  defp holds({_, _, {:string, _}, nil, _, _, _}), do: :string
  defp holds(_), do: nil

  defp lost_site([{_, size, what, id, _, scans, _} | _] = blocks, stacks) do
    direct = Enum.count(blocks, &elem(&1, 4))
    possible = for {_, _, _, _, _, _, {rule, holder}} <- blocks, do: {rule, holder}

    site = %Site{
      bytes: blocks |> Enum.map(&elem(&1, 1)) |> Enum.sum(),
      blocks: length(blocks),
      direct_blocks: direct,
      indirect_blocks: length(blocks) - direct,
      certainty: if(possible == [], do: :definite, else: :possible)
    }

    site =
      case possible do
        [] ->
          site

        [{_, holder} | _] ->
          rules = possible |> Enum.map(&elem(&1, 0)) |> Enum.uniq() |> Enum.sort()
          %{site | possible_blocks: length(possible), rules: rules, holder: holder}
      end

    if id,
      do: %{
        site
        | oldest_age: (blocks |> Enum.map(&elem(&1, 2)) |> Enum.max()) / 1.0e9,
          stack: Map.fetch!(stacks, id),
          scans: scans
      },
      else: %{site | oldest_age: nil, contents: contents(size, what)}
  end

  defp contents(size, {:cxx, class}),
    do: "#{size}-byte #{class} objects (C++, by their vtable) without a record"

  defp contents(size, {:erlang_binary, _}),
    do: "#{size}-byte Erlang binaries (off-heap, by their header) without a record"

  defp contents(size, {:erlang_resource, _}),
    do: "#{size}-byte Erlang resources (magic binaries, by their header) without a record"

  defp contents(size, {:string, text}),
    do: "#{size}-byte strings without a record, such as #{inspect(text)}"

  defp contents(size, nil), do: "#{size}-byte blocks without a record"
end
