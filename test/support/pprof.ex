defmodule Mtrace.Test.Pprof do
  @moduledoc false
  # A pprof profile as protoc decodes it against pprof's own profile.proto (not mtrace's writer
  # read back by mtrace's reader), with the string table's indices resolved: samples, mappings,
  # locations with their lines, functions.

  @proto_dir "/usr/share/gocode/src/github.com/google/pprof/proto"

  @doc "protoc's text of a gzipped profile."
  def text!(gz) do
    path = Path.join(System.tmp_dir!(), "mtrace_pprof_#{System.unique_integer([:positive])}")
    File.write!(path, :zlib.gunzip(IO.iodata_to_binary(gz)))

    {text, 0} =
      System.cmd(
        "sh",
        [
          "-c",
          ~s|protoc --decode=perftools.profiles.Profile -I "#{@proto_dir}" profile.proto < "$1"|,
          "sh",
          path
        ],
        stderr_to_stdout: true,
        env: [{"LD_PRELOAD", nil}]
      )

    File.rm!(path)
    text
  end

  @doc """
  The profile as maps: `%{samples: [%{location_id: [..], value: [..]}], mappings: [..],
  locations: [%{id, mapping_id, address, line: [%{function_id, line}]}], functions: [..],
  strings: [..]}`, every field protoc printed, strings' indices replaced by the strings.
  """
  def decode!(gz) do
    text = text!(gz)
    strings = for [_, s] <- Regex.scan(~r/^string_table: "(.*)"$/m, text), do: unescape(s)
    blocks = for [_, kind, body] <- Regex.scan(~r/^(\w+) \{\n(.*?)^\}$/ms, text), do: {kind, body}
    of = fn kind -> for {^kind, body} <- blocks, do: fields(body) end
    str = &Enum.at(strings, &1)

    %{
      samples: of.("sample"),
      mappings: for(m <- of.("mapping"), do: Map.update(m, :filename, "", str)),
      locations: of.("location"),
      functions:
        for(
          f <- of.("function"),
          do: f |> Map.update(:name, "", str) |> Map.update(:filename, "", str)
        ),
      strings: strings
    }
  end

  # "key: value" lines, repeated keys as lists (location_id, value), nested "line { .. }" blocks
  # as a list of maps under :line.
  defp fields(body) do
    lines = for [_, b] <- Regex.scan(~r/^  line \{\n(.*?)^  \}$/ms, body), do: fields(b)
    flat = Regex.replace(~r/^  line \{\n.*?^  \}\n/ms, body, "")

    pairs =
      for [_, k, v] <- Regex.scan(~r/^\s*(\w+): (\S+)$/m, flat),
          do: {String.to_atom(k), value(v)}

    map =
      pairs
      |> Enum.group_by(&elem(&1, 0), &elem(&1, 1))
      |> Map.new(fn
        {k, [v]} when k not in [:location_id, :value] -> {k, v}
        {k, vs} -> {k, vs}
      end)

    if lines == [], do: map, else: Map.put(map, :line, lines)
  end

  defp value("true"), do: true
  defp value("false"), do: false
  defp value(v), do: String.to_integer(v)

  defp unescape(s), do: s |> String.replace("\\\"", "\"") |> String.replace("\\\\", "\\")
end
