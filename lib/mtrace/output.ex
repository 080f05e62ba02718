defmodule Mtrace.Output do
  @moduledoc false
  # Mtrace.write/3 and render/3: the format and the options checked once, the sites read by the
  # reader that :what names, and rendered by the format's writer (Mtrace.Format).

  alias Mtrace.{Mark, Options, Site}

  @spec write(Path.t(), atom(), keyword()) :: :ok | {:error, File.posix()}
  def write(path, format, opts) do
    path = path!(path)
    writer!("Mtrace.write/3", format)

    if Keyword.has_key?(Options.keyword!("Mtrace.write/3", opts), :nodes),
      do:
        raise(
          ArgumentError,
          "Mtrace.write/3: nodes: is not taken: one file holds one node's sites; " <>
            "render/3 each node's list of the map top(n, nodes: ...) returns"
        )

    {what, opts} = Keyword.pop(opts, :what, :live)
    {format_opts, opts} = Keyword.split(opts, [:threshold, :title])

    sites =
      case what do
        :live ->
          Mtrace.top(Options.no_limit(), opts)

        :leaks ->
          Mtrace.leaks(opts)

        {:diff, %Mark{} = mark} ->
          Mtrace.diff(mark, opts)

        other ->
          raise ArgumentError,
                "Mtrace.write/3: what must be :live, :leaks or {:diff, mark}, got: #{inspect(other)}"
      end

    File.write(path, render(sites, format, format_opts))
  end

  @spec render([Site.t()], atom(), keyword()) :: iodata()
  def render(sites, _format, _opts) when is_map(sites),
    do:
      raise(
        ArgumentError,
        "Mtrace.render/3: expected a list of sites, got a map: with nodes:, a reader answers " <>
          "each node's sites in a map; render each node's list"
      )

  def render(sites, format, opts) do
    writer = writer!("Mtrace.render/3", format)

    unless Options.list_of?(sites, &is_struct(&1, Site)),
      do:
        raise(
          ArgumentError,
          "Mtrace.render/3: expected a list of Mtrace.Site structs, got: #{inspect(sites)}"
        )

    opts = Options.validate!(:render, "Mtrace.render/3", opts)

    sites
    |> Enum.map(&Mtrace.Format.certain/1)
    |> writer.render(Enum.reject(opts, fn {_, value} -> is_nil(value) end))
  end

  defp writer!(name, format) do
    case Mtrace.Format.writer(format) do
      {:ok, writer} ->
        writer

      :error ->
        raise ArgumentError,
              "#{name}: format must be one of #{Mtrace.Format.names() |> Enum.sort() |> inspect()}, " <>
                "got: #{inspect(format)}"
    end
  end

  defp path!(path) when is_binary(path), do: path

  defp path!(path) do
    case is_list(path) && :unicode.characters_to_binary(path) do
      text when is_binary(text) -> text
      _ -> raise ArgumentError, "Mtrace.write/3: path must be a string, got: #{inspect(path)}"
    end
  rescue
    ArgumentError ->
      raise ArgumentError, "Mtrace.write/3: path must be a string, got: #{inspect(path)}"
  end
end
