defmodule Mtrace.Report do
  @moduledoc false
  # Reads the text reports the C side writes (report.c) back into sites, so that one writer a
  # format serves them too (bin/mtrace run --format, bin/mtrace convert). A site header
  # `N bytes in M blocks[ lost (d direct, i indirect)], site k of n`, then its frames
  # `    at|by 0xADDR: FRAME` (report.h lists the forms): every native frame names its library, a
  # file:line frame after its line as `LIBRARY+0xOFFSET`.

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
    |> Enum.map(fn s -> %{s | stack: s.stack |> Enum.reverse() |> inlined()} end)
    |> Enum.reverse()
  end

  # An address with inlined functions has a line for each, innermost first, all with that
  # address: every frame but the last of such a run is inlined.
  defp inlined([frame, next | rest]),
    do: [%{frame | inlined: frame.address == next.address} | inlined([next | rest])]

  defp inlined(stack), do: stack

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

  # "name (file:line) library+0xoffset" (an older report: without the library), "name (library)",
  # "library+0xoffset", "name (erlang)", "?? (no module)", "?? (unloaded or replaced)"; a frame
  # of a library unloaded since ends in " [unloaded]".
  defp frame(address, text) do
    case String.replace_suffix(text, " [unloaded]", "") do
      ^text -> named(address, text)
      loaded -> %{named(address, loaded) | unloaded: true}
    end
  end

  defp named(address, "?? (unloaded or replaced)"), do: %Frame{address: address, unloaded: :maybe}
  defp named(address, "?? (no module)"), do: %Frame{address: address}

  defp named(address, text) do
    cond do
      m = Regex.run(~r/^(.*?) \(([^()]*):(\d+)\)(?: (.+)\+0x([0-9a-f]+))?$/, text) ->
        [_, name, file, line | place] = m
        [library, offset] = if place == [], do: [nil, nil], else: place
        frame = %Frame{address: address, function: function(name), file: file}
        %{frame | line: String.to_integer(line), library: library, offset: offset && hex(offset)}

      m = Regex.run(~r/^(.*) \(([^()]*)\)$/, text) ->
        case m do
          [_, name, "erlang"] ->
            Sites.erlang_frame(address, name, false)

          [_, name, library] ->
            %Frame{address: address, function: function(name), library: library}
        end

      m = Regex.run(~r/^(.+)\+0x([0-9a-f]+)$/, text) ->
        [_, library, offset] = m
        %Frame{address: address, library: library, offset: hex(offset)}

      true ->
        %Frame{address: address}
    end
  end

  defp function("??"), do: nil
  defp function(name), do: name

  defp hex(digits), do: String.to_integer(digits, 16)
end
