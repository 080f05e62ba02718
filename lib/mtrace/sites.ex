defmodule Mtrace.Sites do
  @moduledoc false
  # Sites from what the NIF returns: stacks turned into frames once per stack id, the filters
  # that need names (library, function, erlang), the grouping of top/2 and diff/2, and the order.

  alias Mtrace.{Frame, Nif, Site}

  @doc "Frames of each stack id, inlined functions expanded: %{id => [Frame.t()]}."
  @spec stacks([non_neg_integer()], boolean()) :: %{non_neg_integer() => [Frame.t()]}
  def stacks(ids, demangle) do
    frames =
      for frames <- Nif.frames_nif(ids, demangle) do
        for {address, library, function, offset, file, line, inlined, unloaded, erlang} <- frames do
          if erlang do
            %{erlang_frame(address, function, unloaded) | file: file, line: line}
          else
            %Frame{
              library: library,
              function: function,
              address: address,
              offset: offset,
              file: file,
              line: line,
              inlined: inlined,
              unloaded: unloaded
            }
          end
        end
      end

    ids |> Enum.zip(frames) |> Map.new()
  end

  @doc """
  A JIT range's name, "'Mod':fun/arity" (the BEAM writes atoms as Erlang does), as a frame: the
  MFA when it is one, else JIT code of the VM's own, named as it is.
  """
  @spec erlang_frame(non_neg_integer(), String.t(), boolean() | :maybe) :: Frame.t()
  def erlang_frame(address, name, unloaded) do
    frame = %Frame{kind: :erlang, address: address, function: name, unloaded: unloaded}

    case :erl_scan.string(String.to_charlist(name)) do
      {:ok, [{:atom, _, m}, {:":", _}, {:atom, _, f}, {:/, _}, {:integer, _, a}], _} ->
        %{frame | module: m, function: f, arity: a}

      _ ->
        frame
    end
  end

  @doc """
  The sites with a native frame whose function a `function:` Regex matches. The other stack
  filters (`library:`, a `function:` string, `erlang:`) are C's alone (filter.h), applied before
  a site is made: a Regex has no form there.
  """
  @spec matching_regex([Site.t()], keyword()) :: [Site.t()]
  def matching_regex(sites, opts) do
    case opts[:function] do
      %Regex{} = regex ->
        Enum.filter(sites, fn s ->
          Enum.any?(
            s.stack,
            &(&1.kind == :native and &1.function != nil and &1.function =~ regex)
          )
        end)

      _ ->
        sites
    end
  end

  @doc """
  Sites merged by group: :stack (as they are), {:depth, k} (equal first k frames), :function
  (equal allocating function, its stacks kept as paths), :erlang (equal nearest Erlang
  function, its stacks kept as paths; a frame of its own when there is none). The allocating
  function is the one that called the intercepted one; with a library (the `library:` filter),
  the first function in it: the user's own code rather than `operator new` or the VM's
  `erts_sys_alloc`.
  """
  @spec group(
          [Site.t()],
          :stack | :function | :erlang | {:depth, pos_integer()},
          String.t() | nil
        ) :: [Site.t()]
  def group(sites, group, library \\ nil)
  def group(sites, :stack, _library), do: sites

  def group(sites, :erlang, _library) do
    sites
    |> Enum.group_by(fn s ->
      case Enum.find(s.stack, &(&1.kind == :erlang and &1.arity != nil)) do
        %Frame{module: m, function: f, arity: a} -> {m, f, a}
        nil -> :unknown
      end
    end)
    |> Enum.map(fn {_, [first | _] = same} ->
      caller =
        Enum.find(first.stack, &(&1.kind == :erlang and &1.arity != nil)) ||
          %Frame{kind: :erlang}

      %{sum(same) | stack: [hd(first.stack), caller], paths: by_size(same)}
    end)
  end

  def group(sites, {:depth, k}, _library) do
    sites
    |> Enum.group_by(fn s -> s.stack |> Enum.take(k) |> Enum.map(& &1.address) end)
    |> Enum.map(fn {_, [first | _] = same} ->
      %{sum(same) | stack: Enum.take(first.stack, k)}
    end)
  end

  def group(sites, :function, library) do
    sites
    |> Enum.group_by(&key(&1, allocating(&1, library)))
    |> Enum.map(fn {_, [first | _] = same} ->
      %{
        sum(same)
        | stack: Enum.take(first.stack, allocating(first, library) + 1),
          paths: by_size(same)
      }
    end)
  end

  # The index of the allocating function's frame in the site's stack.
  defp allocating(site, library) do
    in_library =
      library &&
        site.stack
        |> Enum.drop(1)
        |> Enum.find_index(&(is_binary(&1.library) and &1.library =~ library))

    if in_library, do: in_library + 1, else: 1
  end

  defp key(site, i) do
    case Enum.at(site.stack, i) do
      %Frame{function: nil, address: a} -> {:address, a}
      %Frame{library: lib, function: fun} -> {lib, fun}
      nil -> :none
    end
  end

  # The merged site's why is its largest site's.
  defp sum(sites) do
    %Site{why: why} = sites |> by_size() |> hd()

    Enum.reduce(sites, %Site{oldest_age: 0.0, why: why}, fn s, acc ->
      %Site{
        acc
        | bytes: acc.bytes + s.bytes,
          blocks: acc.blocks + s.blocks,
          direct_blocks: acc.direct_blocks + s.direct_blocks,
          indirect_blocks: acc.indirect_blocks + s.indirect_blocks,
          oldest_age: max(acc.oldest_age, s.oldest_age || 0.0),
          allocated_bytes: add(acc.allocated_bytes, s.allocated_bytes),
          allocated_blocks: add(acc.allocated_blocks, s.allocated_blocks),
          freed_bytes: add(acc.freed_bytes, s.freed_bytes),
          freed_blocks: add(acc.freed_blocks, s.freed_blocks),
          estimated: acc.estimated || s.estimated,
          scans: max_known(acc.scans, s.scans)
      }
    end)
  end

  defp max_known(nil, b), do: b
  defp max_known(a, nil), do: a
  defp max_known(a, b), do: max(a, b)

  defp add(nil, b), do: b
  defp add(a, nil), do: a
  defp add(a, b), do: a + b

  @doc "Largest bytes first; then more blocks, then older."
  @spec by_size([Site.t()]) :: [Site.t()]
  def by_size(sites), do: Enum.sort_by(sites, &{-&1.bytes, -&1.blocks, -(&1.oldest_age || 0.0)})

  @doc """
  Lost sites, definite ones first, each group in the order given; only those of one certainty
  when `certainty` is `:definite` or `:possible`, all when `nil`.
  """
  @spec by_certainty([Site.t()], :definite | :possible | nil) :: [Site.t()]
  def by_certainty(sites, nil), do: Enum.sort_by(sites, &(&1.certainty != :definite))
  def by_certainty(sites, certainty), do: Enum.filter(sites, &(&1.certainty == certainty))
end
