defmodule Mtrace.Format.Pprof do
  @moduledoc false
  @behaviour Mtrace.Format
  # pprof's profile.proto, gzipped: sample types inuse_objects/count and inuse_space/bytes, a
  # sample a site (its locations innermost first), a location an address, with its function and
  # line, and a mapping a library. `pprof -http`, Grafana Pyroscope and speedscope open it.

  alias Mtrace.Format
  alias Mtrace.Format.Protobuf, as: Pb

  @impl true
  def render(sites, _opts) do
    frames = for s <- sites, f <- s.stack, uniq: true, do: f
    strings = Enum.uniq(["", "inuse_objects", "count", "inuse_space", "bytes"] ++ names(frames))
    str = strings |> Enum.with_index() |> Map.new()
    libraries = frames |> Enum.map(& &1.library) |> Enum.uniq() |> Enum.reject(&is_nil/1)
    mapping_id = libraries |> Enum.with_index(1) |> Map.new()
    functions = frames |> Enum.map(&function_key/1) |> Enum.uniq()
    function_id = functions |> Enum.with_index(1) |> Map.new()

    location_id =
      frames |> Enum.map(& &1.address) |> Enum.uniq() |> Enum.with_index(1) |> Map.new()

    [
      for {type, unit} <- [{"inuse_objects", "count"}, {"inuse_space", "bytes"}] do
        {1, :bytes, Pb.message([{1, :varint, str[type]}, {2, :varint, str[unit]}])}
      end,
      for s <- sites do
        # Inlined frames share their caller's address: one location, several lines.
        ids = s.stack |> Enum.map(&location_id[&1.address]) |> Enum.dedup()
        {2, :bytes, Pb.message([{1, :packed, ids}, {2, :packed, [s.blocks, s.bytes]}])}
      end,
      for lib <- libraries do
        # A frame without an offset (a text report's `function (library)`) spans its address only.
        spans = for f <- frames, f.library == lib, do: {f.address - (f.offset || 0), f.address}
        start = spans |> Enum.map(&elem(&1, 0)) |> Enum.min()
        limit = (spans |> Enum.map(&elem(&1, 1)) |> Enum.max()) + 1

        {3, :bytes,
         Pb.message([
           {1, :varint, mapping_id[lib]},
           {2, :varint, start},
           {3, :varint, limit},
           {5, :varint, str[lib]},
           {7, :varint, 1}
         ])}
      end,
      for {address, [f | _] = same} <- Enum.group_by(frames, & &1.address) do
        # pprof's lines run from the innermost inlined function out to the one it is inlined in.
        lines =
          for g <- same,
              do:
                {4, :bytes,
                 Pb.message([{1, :varint, function_id[function_key(g)]}, {2, :varint, line(g)}])}

        {4, :bytes,
         Pb.message(
           [{1, :varint, location_id[address]}] ++
             if(f.library, do: [{2, :varint, mapping_id[f.library]}], else: []) ++
             [{3, :varint, address} | lines]
         )}
      end,
      for {{name, file}, id} <- Enum.with_index(functions, 1) do
        {5, :bytes,
         Pb.message([
           {1, :varint, id},
           {2, :varint, str[name]},
           {3, :varint, str[name]},
           {4, :varint, str[file]}
         ])}
      end,
      Enum.map(strings, &{6, :bytes, &1})
    ]
    |> List.flatten()
    |> Pb.message()
    |> IO.iodata_to_binary()
    |> :zlib.gzip()
  end

  defp names(frames) do
    Enum.flat_map(frames, fn f ->
      {name, file} = function_key(f)
      [name, file] ++ if(f.library, do: [f.library], else: [])
    end)
  end

  defp function_key(f), do: {Format.function(f), Map.get(f, :file) || ""}

  defp line(f), do: Map.get(f, :line) || 0
end
