defmodule Mtrace.Options do
  @moduledoc false
  # The readers' options, declared once: which reader takes which, their defaults, and one check
  # per option. A bad option raises ArgumentError naming the function and the option.

  @defaults %{
    olds: [demangle: false, min_age: 0, library: nil],
    leaks: [demangle: true, min_age: 1, library: nil, blocks: false]
  }

  @spec validate!(atom(), String.t(), term()) :: keyword()
  def validate!(reader, name, opts) do
    defaults = Map.fetch!(@defaults, reader)

    unless is_list(opts) and Keyword.keyword?(opts),
      do: raise(ArgumentError, "#{name}: expected a keyword list, got: #{inspect(opts)}")

    case Keyword.validate(opts, defaults) do
      {:ok, valid} ->
        Enum.map(valid, fn {key, value} -> {key, check!(name, key, value)} end)

      {:error, unknown} ->
        raise ArgumentError,
              "#{name}: unknown option #{inspect(hd(unknown))}; " <>
                "the options are #{defaults |> Keyword.keys() |> Enum.map_join(", ", &inspect/1)}"
    end
  end

  @doc "Seconds (a number) to whole nanoseconds."
  @spec ns(number()) :: non_neg_integer()
  def ns(seconds), do: round(seconds * 1_000_000_000)

  defp check!(_name, key, value) when key in [:demangle, :blocks] and is_boolean(value), do: value
  defp check!(_name, :min_age, value) when is_number(value) and value >= 0, do: value
  defp check!(_name, :library, value) when is_nil(value) or is_binary(value), do: value

  defp check!(name, key, value) do
    expected =
      case key do
        :min_age -> "a number of seconds, 0 or more"
        :library -> "a string or nil"
        _ -> "true or false"
      end

    raise ArgumentError, "#{name}: #{key} must be #{expected}, got: #{inspect(value)}"
  end
end
