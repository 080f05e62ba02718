defmodule Mtrace.Options do
  @moduledoc false
  # The readers' options, declared once: which reader takes which, their defaults, and one check
  # per option. A bad option raises ArgumentError naming the function and the option. The
  # filters are turned here into the one term the NIF reads (nif.c, get_filter).

  @filters [
    min_age: 0,
    max_age: nil,
    min_size: 0,
    library: nil,
    function: nil,
    erlang: nil,
    since: nil
  ]

  @cluster [nodes: nil, timeout: 15_000]

  # A mark keeps each stack's totals, not its blocks: diff/2 (and the watch) can filter only by
  # what a stack is, never by a block's size or age.
  @by_stack [:library, :function, :erlang]

  # attach's numeric MTRACE_* variables, lowercase, without the prefix.
  @numbers [:slots, :slots_max, :lanes, :depth, :stacks, :sample, :clear]

  @defaults %{
    olds: [demangle: false] ++ @filters,
    leaks:
      [demangle: true, blocks: false, why: false, gc: true, certainty: nil] ++
        Keyword.put(@filters, :min_age, 1) ++ @cluster,
    top: [demangle: true, group: :stack, why: false, gc: true] ++ @filters ++ @cluster,
    diff: [demangle: true, group: :stack] ++ Keyword.take(@filters, @by_stack) ++ @cluster,
    mark: @cluster,
    why: [demangle: true, gc: true],
    stats: @cluster,
    watch:
      [interval: 10_000, n: 5, count: nil, group: :stack, leaks: false] ++
        Keyword.take(@filters, @by_stack),
    # The writers' own defaults (Mtrace.Format.*) hold for an option left nil.
    render: [threshold: nil, title: nil],
    # The recording's MTRACE_* variables (lowercase, without the prefix); nil: the variable's own
    # value, or the library's default.
    attach: Enum.map([:unwind | @numbers], &{&1, nil})
  }

  @doc """
  The MTRACE_* variables that attach's validated options stand for, as "NAME=value" strings.
  """
  @spec variables(keyword()) :: [String.t()]
  def variables(opts) do
    for {key, value} <- opts,
        value != nil,
        do: "MTRACE_" <> String.upcase(Atom.to_string(key)) <> "=" <> to_string(value)
  end

  @max_u64 0xFFFF_FFFF_FFFF_FFFF

  @spec validate!(atom(), String.t(), term()) :: keyword()
  def validate!(reader, name, opts) do
    defaults = Map.fetch!(@defaults, reader)
    keyword!(name, opts)

    case Keyword.validate(opts, defaults) do
      {:ok, valid} ->
        Enum.map(valid, fn {key, value} -> {key, check!(name, key, value)} end)

      {:error, [key | _]} ->
        why =
          if reader in [:diff, :watch] and Keyword.has_key?(@filters, key),
            do:
              "#{inspect(key)} filters blocks, and a mark keeps each stack's totals, not its blocks",
            else: "unknown option #{inspect(key)}"

        raise ArgumentError,
              "#{name}: #{why}; " <>
                "the options are #{defaults |> Keyword.keys() |> Enum.map_join(", ", &inspect/1)}"
    end
  end

  @doc "opts, or an ArgumentError of name's when it is not a keyword list."
  @spec keyword!(String.t(), term()) :: keyword()
  def keyword!(name, opts) do
    unless is_list(opts) and Keyword.keyword?(opts),
      do: raise(ArgumentError, "#{name}: expected a keyword list, got: #{inspect(opts)}")

    opts
  end

  @doc """
  The filter term of nif.c: {min_age_ns, max_age_ns, since_ns, min_size, library, function,
  erlang}; a block filter left out (diff/2 takes none) passes every block. A Regex function is
  matched on the Elixir side (Mtrace.Sites), so C gets nil for it;
  erlang is the start of the names the perf map gives ("'Elixir.Mod':fun/"), see erlang_mfa/1.
  """
  @spec filter(keyword()) :: tuple()
  def filter(opts) do
    {ns(opts[:min_age] || 0), if(opts[:max_age], do: ns(opts[:max_age]), else: @max_u64),
     if(opts[:since], do: opts[:since].time_ns, else: 0), opts[:min_size] || 0, opts[:library],
     if(is_binary(opts[:function]), do: opts[:function]),
     if(opts[:erlang], do: erlang_prefix(erlang_mfa(opts[:erlang])))}
  end

  @doc """
  "Mod", "Mod:fun" or "Mod:fun/arity" as {module, function | nil, arity | nil}; a module that
  starts with a capital is an Elixir alias ("MyApp.Cache" is MyApp.Cache, "lists" is :lists).
  """
  @spec erlang_mfa(String.t()) :: {module(), atom() | nil, non_neg_integer() | nil}
  def erlang_mfa(text) do
    {mod, fun} =
      case String.split(text, ":", parts: 2) do
        [mod, fun] -> {mod, fun}
        [mod] -> {mod, nil}
      end

    module = if mod =~ ~r/^[A-Z]/, do: Module.concat([mod]), else: String.to_atom(mod)

    case fun && Regex.run(~r{^(.+)/(\d+)$}, fun) do
      nil when fun in [nil, ""] -> {module, nil, nil}
      nil -> {module, String.to_atom(fun), nil}
      [_, name, arity] -> {module, String.to_atom(name), String.to_integer(arity)}
    end
  end

  # As the BEAM writes them in its perf map: atoms quoted where Erlang quotes them.
  defp erlang_prefix({module, function, arity}) do
    [
      :io_lib.format(~c"~w:", [module]),
      if(function, do: :io_lib.format(~c"~w/", [function]), else: []),
      if(arity, do: Integer.to_string(arity), else: [])
    ]
    |> IO.iodata_to_binary()
  end

  @doc "Seconds (a number) to whole nanoseconds."
  @spec ns(number()) :: non_neg_integer()
  def ns(seconds), do: round(seconds * 1_000_000_000)

  @doc "The largest number the NIF takes: no limit."
  @spec no_limit() :: non_neg_integer()
  def no_limit, do: @max_u64

  @doc "Whether value is a proper list whose every element satisfies check (`Enum.all?/2` raises on an improper list)."
  @spec list_of?(term(), (term() -> boolean())) :: boolean()
  def list_of?([], _check), do: true
  def list_of?([head | tail], check), do: check.(head) and list_of?(tail, check)
  def list_of?(_value, _check), do: false

  defp check!(_name, key, value)
       when key in [:demangle, :blocks, :leaks, :why, :gc] and is_boolean(value),
       do: value

  defp check!(_name, :min_age, value) when is_number(value) and value >= 0, do: value

  defp check!(_name, :max_age, value) when is_nil(value) or (is_number(value) and value >= 0),
    do: value

  defp check!(_name, :min_size, value)
       when is_integer(value) and value >= 0 and value <= @max_u64,
       do: value

  # The texts the NIF reads into buffers of 1024 bytes (nif.c, get_text), as C strings.
  defp check!(name, key, value)
       when key in [:library, :function] and
              (is_nil(value) or (is_binary(value) and byte_size(value) < 1024)) do
    if value && String.contains?(value, <<0>>), do: raise_bad(name, key, value), else: value
  end

  defp check!(_name, :function, %Regex{} = value), do: value

  # Module and function become atoms (erlang_mfa/1): 255 characters at most.
  defp check!(name, :erlang, value)
       when is_nil(value) or
              (is_binary(value) and value != "" and byte_size(value) < 1024 and
                 binary_part(value, 0, 1) != ":") do
    if value && (String.contains?(value, <<0>>) or not atom_sized?(value)),
      do: raise_bad(name, :erlang, value),
      else: value
  end

  defp check!(_name, :nodes, value) when is_nil(value), do: value

  defp check!(name, :nodes, value) when is_list(value) do
    if list_of?(value, &is_atom/1),
      do: value,
      else:
        raise(
          ArgumentError,
          "#{name}: nodes must be a list of node names, got: #{inspect(value)}"
        )
  end

  defp check!(_name, key, value)
       when key in [:timeout, :interval, :n] and is_integer(value) and value > 0,
       do: value

  defp check!(_name, :count, value) when is_nil(value) or (is_integer(value) and value > 0),
    do: value

  defp check!(_name, :threshold, value)
       when is_nil(value) or (is_number(value) and value >= 0 and value <= 100),
       do: value

  defp check!(_name, :title, value) when is_nil(value) or is_binary(value), do: value

  defp check!(_name, :group, value) when value in [:stack, :function, :erlang], do: value
  defp check!(_name, :group, {:depth, k} = value) when is_integer(k) and k > 0, do: value

  defp check!(name, :since, %Mtrace.Mark{node: node} = mark) do
    if node == node(),
      do: mark,
      else: raise(ArgumentError, "#{name}: since is a mark of #{node}, not of #{node()}")
  end

  defp check!(_name, :since, nil), do: nil

  defp check!(_name, key, value)
       when key in @numbers and
              (is_nil(value) or (is_integer(value) and value >= 0 and value <= @max_u64)),
       do: value

  defp check!(_name, :unwind, value) when value in [nil, :libunwind, :fp, :erlang], do: value

  defp check!(_name, :certainty, value) when value in [nil, :definite, :possible], do: value

  defp check!(name, key, value), do: raise_bad(name, key, value)

  defp atom_sized?(text),
    do: text |> String.split(["/", ":"]) |> Enum.all?(&(String.length(&1) <= 255))

  defp raise_bad(name, key, value) do
    expected =
      case key do
        k when k in [:min_age, :max_age] ->
          "a number of seconds, 0 or more"

        :min_size ->
          "a number of bytes, 0 or more"

        :library ->
          "a string or nil (a string of under 1024 bytes, without NUL)"

        :erlang ->
          ~s[a string, "Mod", "Mod:fun" or "Mod:fun/arity" (names of 255 characters at most), or nil]

        :function ->
          "a string, a Regex or nil (a string of under 1024 bytes, without NUL)"

        :group ->
          ":stack, :function, :erlang or {:depth, k} with k > 0"

        :since ->
          "a mark (Mtrace.mark/0)"

        :nodes ->
          "a list of node names"

        k when k in [:timeout, :interval] ->
          "a number of milliseconds, more than 0"

        :n ->
          "a whole number, more than 0"

        :count ->
          "nil or a whole number, more than 0"

        :threshold ->
          "a percentage, 0 to 100"

        :title ->
          "a string"

        :unwind ->
          ":libunwind, :fp, :erlang or nil"

        :certainty ->
          ":definite, :possible or nil"

        k when k in @numbers ->
          "a whole number or nil"

        _ ->
          "true or false"
      end

    raise ArgumentError, "#{name}: #{key} must be #{expected}, got: #{inspect(value)}"
  end
end
