defmodule Mtrace.CLI do
  @moduledoc false
  # bin/mtrace's conversions: a text report (what the library writes at exit or on a signal)
  # into another format, by the writers of Mtrace.write/3; a report of a format version this
  # mtrace does not read is refused (Mtrace.Report).

  @spec convert([String.t()]) :: no_return()
  def convert(args) do
    {opts, files} =
      OptionParser.parse!(args,
        strict: [format: :string, output: :string, reachable: :boolean],
        aliases: [o: :output]
      )

    with [input] <- files,
         {:ok, format} <- Mtrace.Format.parse(opts[:format]),
         {:ok, text} <- File.read(input),
         {:ok, sites} <- read(input, text, opts[:reachable]) do
      data = Mtrace.render(sites, format)
      write(opts[:output], data)
      System.halt(0)
    else
      {:error, reason} when is_atom(reason) -> die("cannot read the report: #{reason}")
      {:error, message} -> die(message)
      _ -> die("expected one report file (see mtrace --help)")
    end
  end

  defp read(input, text, reachable) do
    with {:error, reason} <- Mtrace.Report.read(text, reachable: reachable),
         do: {:error, "#{input}: #{reason}"}
  end

  @doc "data to standard output (nil) or to the file path: bin/mtrace's outputs."
  @spec write(Path.t() | nil, iodata()) :: :ok
  def write(nil, data) do
    # The bytes as they are: a unicode standard output would encode them once more.
    :ok = :io.setopts(:standard_io, encoding: :latin1)
    IO.binwrite(data)
  end

  def write(path, data), do: File.write!(path, data)

  @doc "One `mtrace:` line on standard error, and exit status 2: a refusal."
  @spec die(String.t()) :: no_return()
  def die(message) do
    IO.puts(:stderr, "mtrace: " <> message)
    System.halt(2)
  end
end
