defmodule Mtrace.Report do
  @moduledoc false
  # Reads the text reports the C side writes (report.c) back into sites, so that one writer a
  # format serves them too (bin/mtrace run --format, bin/mtrace convert). A site header
  # `N bytes in M blocks[ lost (d direct, i indirect)], site k of n`, then its frames
  # `    at|by 0xADDR: NAME (WHERE)`, WHERE a library's path, a file:line, or `erlang` (NAME is
  # then the BEAM's perf map's).

  alias Mtrace.{Frame, Site, Sites}

  @site ~r/^([+-]?\d+) bytes in ([+-]?\d+) blocks?(?: lost \((\d+) direct, (\d+) indirect\))?.*, site \d+ of \d+$/
  @frame ~r/^    (?:at|by) 0x([0-9a-f]+): (.*)$/

  @doc """
  The sites of the first report in text: the lost (or live, or changed) ones, or with
  `reachable: true` those of its "still reachable" list.
  """
  @spec sites(String.t(), keyword()) :: [Site.t()]
  def sites(text, opts \\ []) do
    [main | rest] = String.split(text, "\nstill reachable: ", parts: 2)
    part = if opts[:reachable], do: List.first(rest) || "", else: main

    part
    |> String.split("\n")
    |> Enum.reduce([], &line/2)
    |> Enum.map(fn s -> %{s | stack: Enum.reverse(s.stack)} end)
    |> Enum.reverse()
  end

  defp line(text, sites) do
    case {Regex.run(@site, text), sites != [] and Regex.run(@frame, text)} do
      {[_ | _] = m, _} -> [site(m) | sites]
      {nil, [_ | _] = m} -> add_frame(sites, m)
      _ -> sites
    end
  end

  defp site([_, bytes, blocks | lost]) do
    [direct, indirect] =
      case lost do
        [d, i] -> [String.to_integer(d), String.to_integer(i)]
        _ -> [0, 0]
      end

    %Site{
      bytes: String.to_integer(bytes),
      blocks: String.to_integer(blocks),
      direct_blocks: direct,
      indirect_blocks: indirect
    }
  end

  defp add_frame([site | rest], [_, address, text]) do
    [%{site | stack: [frame(String.to_integer(address, 16), text) | site.stack]} | rest]
  end

  # "name (where)", "?? (where)", or "where+0xoffset"; where a path or file:line.
  defp frame(address, text) do
    case Regex.run(~r/^(.*) \(([^()]*)\)$/, text) do
      [_, name, "erlang"] ->
        Sites.erlang_frame(address, name, false)

      [_, name, where] ->
        function = if name == "??", do: nil, else: name

        case Regex.run(~r/^(.*):(\d+)$/, where) do
          [_, file, line] ->
            Map.merge(%Frame{address: address, function: function}, %{
              file: file,
              line: String.to_integer(line)
            })

          nil ->
            %Frame{address: address, function: function, library: where}
        end

      nil ->
        case Regex.run(~r/^(.*)\+0x([0-9a-f]+)$/, text) do
          [_, lib, off] ->
            %Frame{address: address, library: lib, offset: String.to_integer(off, 16)}

          nil ->
            %Frame{address: address}
        end
    end
  end
end
