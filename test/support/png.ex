defmodule Mtrace.Test.Png do
  @moduledoc false
  # Just enough of PNG to read a headless browser's screenshot: 8-bit RGB or RGBA, not
  # interlaced. Returns {width, height, pixels}, pixels a list of rows of {r, g, b}.

  import Bitwise

  def decode!(<<137, ?P, ?N, ?G, 13, 10, 26, 10, chunks::binary>>) do
    {header, data} = chunks(chunks, nil, [])
    <<w::32, h::32, 8, type, 0, 0, 0>> = header
    bpp = %{2 => 3, 6 => 4}[type] || raise "PNG colour type #{type} is not read here"
    raw = :zlib.uncompress(IO.iodata_to_binary(data))
    {rows, _} = unfilter(raw, w * bpp, bpp, h, :binary.copy(<<0>>, w * bpp), [])
    {w, h, Enum.map(rows, &pixels(&1, bpp))}
  end

  defp chunks(
         <<len::32, type::binary-4, body::binary-size(len), _crc::32, rest::binary>>,
         hd,
         acc
       ) do
    case type do
      "IHDR" -> chunks(rest, body, acc)
      "IDAT" -> chunks(rest, hd, [acc, body])
      "IEND" -> {hd, acc}
      _ -> chunks(rest, hd, acc)
    end
  end

  defp unfilter(_raw, _stride, _bpp, 0, _prev, rows), do: {Enum.reverse(rows), nil}

  defp unfilter(raw, stride, bpp, h, prev, rows) do
    <<filter, line::binary-size(stride), rest::binary>> = raw
    row = unline(filter, line, prev, bpp)
    unfilter(rest, stride, bpp, h - 1, row, [row | rows])
  end

  defp unline(filter, line, prev, bpp) do
    Enum.reduce(0..(byte_size(line) - 1), <<>>, fn i, out ->
      x = :binary.at(line, i)
      b = :binary.at(prev, i)
      a = if i >= bpp, do: :binary.at(out, i - bpp), else: 0
      c = if i >= bpp, do: :binary.at(prev, i - bpp), else: 0

      v =
        case filter do
          0 -> x
          1 -> x + a
          2 -> x + b
          3 -> x + div(a + b, 2)
          4 -> x + paeth(a, b, c)
        end

      <<out::binary, band(v, 255)>>
    end)
  end

  defp paeth(a, b, c) do
    p = a + b - c
    {pa, pb, pc} = {abs(p - a), abs(p - b), abs(p - c)}

    cond do
      pa <= pb and pa <= pc -> a
      pb <= pc -> b
      true -> c
    end
  end

  defp pixels(row, bpp), do: for(<<px::binary-size(bpp) <- row>>, do: rgb(px))
  defp rgb(<<r, g, b, _a>>), do: {r, g, b}
  defp rgb(<<r, g, b>>), do: {r, g, b}

  @doc "CSS hsl(h, s%, l%) as {r, g, b}."
  def hsl(h, s, l) do
    {s, l} = {s / 100, l / 100}
    c = (1 - abs(2 * l - 1)) * s
    x = c * (1 - abs(:math.fmod(h / 60, 2) - 1))
    m = l - c / 2

    {r, g, b} =
      cond do
        h < 60 -> {c, x, 0}
        h < 120 -> {x, c, 0}
        h < 180 -> {0, c, x}
        h < 240 -> {0, x, c}
        h < 300 -> {x, 0, c}
        true -> {c, 0, x}
      end

    {round((r + m) * 255), round((g + m) * 255), round((b + m) * 255)}
  end
end
