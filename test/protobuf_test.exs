defmodule Mtrace.ProtobufTest do
  # The protocol buffers writer behind :pprof: varints byte for byte as the encoding's
  # specification gives them, and messages as protoc reads them against pprof's profile.proto,
  # negative int64 values (a diff's freed bytes) among them.
  use ExUnit.Case, async: true
  alias Mtrace.Format.Protobuf, as: Pb
  alias Mtrace.Test.Pprof
  import Bitwise

  test "varints: seven bits a byte, least significant first; a negative int64 in ten bytes" do
    assert Pb.varint(0) == <<0>>
    assert Pb.varint(1) == <<1>>
    assert Pb.varint(127) == <<127>>
    assert Pb.varint(150) == <<0x96, 0x01>>
    assert Pb.varint(300) == <<0xAC, 0x02>>

    assert Pb.varint(0x7FFF_FFFF_FFFF_FFFF) ==
             <<0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F>>

    assert Pb.varint(-1) == <<0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01>>
    assert Pb.varint(-2) == <<0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01>>

    assert Pb.varint(-0x8000_0000_0000_0000) ==
             <<0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01>>
  end

  test "protoc reads embedded messages, packed repeated int64 (negative too) and strings" do
    profile =
      Pb.message([
        {1, :bytes, Pb.message([{1, :varint, 1}, {2, :varint, 2}])},
        {2, :bytes, Pb.message([{1, :packed, [1, 300]}, {2, :packed, [-1, -2000, 1 <<< 62]}])},
        {6, :bytes, ""},
        {6, :bytes, "inuse_space"},
        {6, :bytes, ["by", "tes ", "ü"]},
        {14, :varint, -5}
      ])

    text = Pprof.text!(:zlib.gzip(IO.iodata_to_binary(profile)))

    assert text == """
           sample_type {
             type: 1
             unit: 2
           }
           sample {
             location_id: 1
             location_id: 300
             value: -1
             value: -2000
             value: #{1 <<< 62}
           }
           string_table: ""
           string_table: "inuse_space"
           string_table: "bytes \\303\\274"
           default_sample_type: -5
           """
  end

  test "a diff's site, fewer bytes and blocks than at its mark, is a negative sample" do
    frame = %Mtrace.Frame{function: "leak", address: 0x1000, library: "/lib/x.so", offset: 0x10}
    site = %Mtrace.Site{bytes: -2000, blocks: -2, stack: [frame]}
    p = Pprof.decode!(Mtrace.render([site], :pprof))
    assert [%{value: [-2, -2000]}] = p.samples
  end
end
