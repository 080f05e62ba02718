defmodule Mtrace.Report do
  @moduledoc false
  # Reads the reports the C side writes (report.c) back into sites, so that one writer a format
  # serves them too (bin/mtrace run --format, bin/mtrace convert). The format is versioned: a
  # report starts with "# mtrace report v1", and every line after it is one record of the grammar
  # of docs/report-format.md, told apart by its start (indent and first word), its fields by fixed
  # separators. A version this module does not know is refused, with the reason; lines of no
  # record (a program's own output around a report on stderr) are skipped.

  alias Mtrace.{Frame, Reader, Site}

  @magic "# mtrace report v"
  @version :mtrace_text.version()

  @doc "The report format's version this mtrace writes and reads (report.h, MT_REPORT_FORMAT)."
  @spec version() :: pos_integer()
  def version, do: @version

  @doc """
  The sites of the reports in text (one, or one a process of a program and its children on
  stderr), in order: the lost (or live, or changed) ones, or with `reachable: true` those of the
  "still reachable" lists; `{:error, reason}` when text holds no report, or one of a version this
  mtrace does not read.
  """
  @spec read(String.t(), keyword()) :: {:ok, [Site.t()]} | {:error, String.t()}
  def read(text, opts \\ []) do
    with {:ok, lines} <- body(String.split(text, "\n")) do
      want = if opts[:reachable], do: :reachable, else: :main

      {_, sites} =
        Enum.reduce(lines, {:main, []}, fn line, {section, sites} ->
          case record(line) do
            {:section, next} -> {next, sites}
            {:site, site} when section == want -> {section, [site | sites]}
            {:frame, frame} when section == want and sites != [] -> {section, add(sites, frame)}
            _ -> {section, sites}
          end
        end)

      {:ok,
       sites
       |> Enum.map(&%{&1 | stack: &1.stack |> Enum.reverse() |> inlined()})
       |> Enum.reverse()}
    end
  end

  @doc "read/2's sites; raises ArgumentError with its reason."
  @spec sites(String.t(), keyword()) :: [Site.t()]
  def sites(text, opts \\ []) do
    case read(text, opts) do
      {:ok, sites} -> sites
      {:error, reason} -> raise ArgumentError, reason
    end
  end

  # The lines of every report in lines (stderr may hold one of each process, and a program's own
  # output around them), each from after its header up to its end line.
  defp body(lines), do: reports(lines, [])

  defp reports(lines, done) do
    case {Enum.drop_while(lines, &(not String.starts_with?(&1, @magic))), done} do
      {[], []} ->
        {:error,
         "not an mtrace report: no #{inspect(@magic <> "#{@version}")} line (a report of an " <>
           "mtrace older than the versioned format, or another file)"}

      {[], done} ->
        {:ok, done |> Enum.reverse() |> Enum.concat()}

      {[@magic <> version | rest], done} ->
        {report, after_it} =
          Enum.split_while(rest, &(not String.starts_with?(&1, "mtrace: end of report ")))

        with :ok <- known(version), do: reports(after_it, [report | done])
    end
  end

  defp known(version) do
    case Integer.parse(version) do
      {@version, ""} ->
        :ok

      {n, ""} when n > @version ->
        {:error,
         "the report is in format v#{n}, newer than this mtrace reads (v#{@version}): " <>
           "read it with the mtrace that wrote it"}

      _ ->
        {:error, "not an mtrace report: its header is #{inspect(@magic <> version)}"}
    end
  end

  # One line: a frame ("    at|by 0xADDR: FRAME"), a site ("... , site K of N" at the start of a
  # line), a report's title (its lost or live sites follow) or the head of its "still reachable"
  # list; nil for the others.
  defp record("    " <> <<w::binary-size(2)>> <> " 0x" <> rest) when w in ["at", "by"] do
    with [hex, text] <- String.split(rest, ": ", parts: 2),
         {address, ""} <- Integer.parse(hex, 16),
         do: {:frame, frame(address, text)},
         else: (_ -> nil)
  end

  defp record("mtrace report " <> _), do: {:section, :main}
  defp record("still reachable" <> _), do: {:section, :reachable}
  defp record(" " <> _), do: nil

  defp record(line) do
    with [amount, rank] <- split_last(line, ", site "),
         [_, _] <- String.split(rank, " of "),
         [bytes, "bytes", "in", blocks, rest] <- String.split(amount, " ", parts: 5),
         {bytes, ""} <- Integer.parse(bytes),
         {blocks, ""} <- Integer.parse(blocks) do
      {direct, indirect} = lost(rest)
      site = %Site{bytes: bytes, blocks: blocks, direct_blocks: direct, indirect_blocks: indirect}
      {:site, certainty(site, rest)}
    else
      _ -> nil
    end
  end

  # A lost site's " (N possibly: RULE)" after its counts (RULE: the first of its rules); no
  # certainty for a site of no lost blocks.
  defp certainty(%Site{direct_blocks: 0, indirect_blocks: 0} = site, _rest), do: site

  defp certainty(site, rest) do
    case Regex.run(~r/ \((\d+) possibly: (\w+)\)/, rest) do
      nil ->
        %{site | certainty: :definite}

      [_, n, rule] ->
        %{
          site
          | certainty: :possible,
            possible_blocks: String.to_integer(n),
            rules: [String.to_atom(rule)]
        }
    end
  end

  # "blocks lost (D direct, I indirect)..." at exit, else no lost blocks.
  defp lost(rest) do
    with [_, counts] <- String.split(rest, " lost (", parts: 2),
         {direct, " direct, " <> more} <- Integer.parse(counts),
         {indirect, " indirect)" <> _} <- Integer.parse(more) do
      {direct, indirect}
    else
      _ -> {0, 0}
    end
  end

  defp add([site | rest], frame), do: [%{site | stack: [frame | site.stack]} | rest]

  # An address with inlined functions has a line for each, innermost first, all with that
  # address: every frame but the last of such a run is inlined.
  defp inlined([frame, next | rest]),
    do: [%{frame | inlined: frame.address == next.address} | inlined([next | rest])]

  defp inlined(stack), do: stack

  # FRAME: "?? (unloaded or replaced)", "?? (no module)", "NAME (erlang)" (with " (FILE:LINE)"
  # before " (erlang)" where the VM gives the line), or a native frame,
  # followed by " [unloaded]" when its library was unloaded since: "FUNCTION (FILE:LINE)
  # LIBRARY+0xOFFSET", "FUNCTION (LIBRARY)" or "LIBRARY+0xOFFSET".
  defp frame(address, "?? (unloaded or replaced)"), do: %Frame{address: address, unloaded: :maybe}
  defp frame(address, "?? (no module)"), do: %Frame{address: address}

  defp frame(address, text) do
    case String.replace_suffix(text, " [unloaded]", "") do
      ^text -> native(address, text)
      loaded -> %{native(address, loaded) | unloaded: true}
    end
  end

  # "NAME" or "NAME (FILE:LINE)".
  defp erlang(address, text) do
    with true <- String.ends_with?(text, ")"),
         {name, file, line} <- sourced(String.slice(text, 0..-2//1)) do
      %{Reader.frame(:mtrace_sites.erlang_frame(address, name, false)) | file: file, line: line}
    else
      _ -> Reader.frame(:mtrace_sites.erlang_frame(address, text, false))
    end
  end

  defp native(address, text) do
    bare = %Frame{address: address}

    cond do
      String.ends_with?(text, " (erlang)") ->
        erlang(address, String.replace_suffix(text, " (erlang)", ""))

      String.ends_with?(text, ")") ->
        case split_last(String.slice(text, 0..-2//1), " (") do
          [name, library] -> %{bare | function: function(name), library: library}
          [_] -> bare
        end

      true ->
        with [place, hex] <- split_last(text, "+0x"),
             {offset, ""} <- Integer.parse(hex, 16) do
          case located(place) do
            {name, file, line, library} ->
              %{
                bare
                | function: function(name),
                  file: file,
                  line: line,
                  library: library,
                  offset: offset
              }

            nil ->
              %{bare | library: place, offset: offset}
          end
        else
          _ -> bare
        end
    end
  end

  # "FUNCTION (FILE:LINE) LIBRARY": split at the last ") " whose left ends in " (FILE:LINE" (a
  # function's name may hold ") " too, and a library's path spaces).
  defp located(place) do
    place
    |> :binary.matches(") ")
    |> Enum.reverse()
    |> Enum.find_value(fn {at, 2} ->
      library = binary_part(place, at + 2, byte_size(place) - at - 2)

      case sourced(binary_part(place, 0, at)) do
        {name, file, line} -> {name, file, line, library}
        nil -> nil
      end
    end)
  end

  # "NAME (FILE:LINE", split at its last " (" and the last ":" after it.
  defp sourced(text) do
    with [name, source] <- split_last(text, " ("),
         [file, line] <- split_last(source, ":"),
         {line, ""} <- Integer.parse(line) do
      {name, file, line}
    else
      _ -> nil
    end
  end

  defp split_last(text, separator) do
    case :binary.matches(text, separator) do
      [] ->
        [text]

      matches ->
        {at, len} = List.last(matches)
        [binary_part(text, 0, at), binary_part(text, at + len, byte_size(text) - at - len)]
    end
  end

  defp function("??"), do: nil
  defp function(name), do: name
end
