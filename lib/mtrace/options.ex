defmodule Mtrace.Options do
  @moduledoc false
  # The readers' options: their table is src/mtrace_options.erl's, which the Erlang API shares.
  # Here a reader's options come back as a keyword list, and what is wrong with them as an
  # ArgumentError in Elixir's words (values as inspect/1 writes them), naming the function.

  @spec validate!(atom(), String.t(), term()) :: keyword()
  def validate!(reader, name, opts) do
    keyword!(name, opts)

    case :mtrace_options.validate(reader, opts) do
      {:ok, valid} ->
        Map.to_list(valid)

      {:error, error} ->
        raise ArgumentError,
              name <>
                ": " <> IO.chardata_to_string(:mtrace_options.message(reader, error, :elixir))
    end
  end

  @doc "opts, or an ArgumentError of name's when it is not a keyword list."
  @spec keyword!(String.t(), term()) :: keyword()
  def keyword!(name, opts) do
    unless is_list(opts) and Keyword.keyword?(opts),
      do: raise(ArgumentError, "#{name}: expected a keyword list, got: #{inspect(opts)}")

    opts
  end

  @doc "The MTRACE_* variables that attach's validated options stand for, as \"NAME=value\"."
  @spec variables(keyword()) :: [String.t()]
  def variables(opts), do: :mtrace_options.variables(Map.new(opts))

  @doc "The largest number the NIF takes: no limit."
  @spec no_limit() :: non_neg_integer()
  def no_limit, do: :mtrace_options.no_limit()

  @doc "Whether value is a proper list whose every element satisfies check (`Enum.all?/2` raises on an improper list)."
  @spec list_of?(term(), (term() -> boolean())) :: boolean()
  def list_of?([], _check), do: true
  def list_of?([head | tail], check), do: check.(head) and list_of?(tail, check)
  def list_of?(_value, _check), do: false
end
