defmodule Mtrace.Format.Protobuf do
  @moduledoc false
  # A protocol buffers writer, the part of the wire format pprof's profile.proto needs: varints
  # (int64 in two's complement, as proto3 does), length-delimited fields (strings, embedded
  # messages) and packed repeated integers. A message is a list of {field, kind, value}.

  import Bitwise

  @type field ::
          {pos_integer(), :varint, integer()}
          | {pos_integer(), :bytes, iodata()}
          | {pos_integer(), :packed, [integer()]}

  @spec message([field()]) :: iodata()
  def message(fields), do: Enum.map(fields, &field/1)

  defp field({n, :varint, v}), do: [key(n, 0), varint(v)]

  defp field({n, :bytes, data}) do
    data = IO.iodata_to_binary(data)
    [key(n, 2), varint(byte_size(data)), data]
  end

  defp field({n, :packed, values}), do: field({n, :bytes, Enum.map(values, &varint/1)})

  defp key(n, wire), do: varint(n <<< 3 ||| wire)

  @doc "A varint; a negative number as its 64-bit two's complement (ten bytes)."
  @spec varint(integer()) :: binary()
  def varint(v) when v < 0, do: varint(v + (1 <<< 64))
  def varint(v) when v < 0x80, do: <<v>>
  def varint(v), do: <<0x80 ||| (v &&& 0x7F)>> <> varint(v >>> 7)
end
