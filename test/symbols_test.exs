defmodule Mtrace.SymbolsTest do
  # Frames from DWARF in this node: the file and line of each allocating call, an inlined
  # function as a frame of its own, static functions, C++ and Rust names, debug information in
  # separate files (by .gnu_debuglink, by build id, MiniDebugInfo), and the frames of a library
  # unloaded since its stack was recorded, never named after the library loaded after it.
  use ExUnit.Case, async: true
  import Mtrace.Test.Helpers
  alias Mtrace.Test.Dl

  @dir Path.expand("support/c_src", __DIR__)
  @c Path.join(@dir, "symbolic.c")
  @cxx Path.join(@dir, "symbolic_cxx.cc")

  # Loads lib, has symbol allocate size bytes (a size no other test uses), and returns the
  # frames of that block's site with the library's load bias; the library stays loaded unless
  # close is :close or :close_unseen.
  defp site_frames(lib, symbol, size, opts \\ []) do
    {:ok, handle, bias} = Dl.open(String.to_charlist(lib))
    address = Dl.call(handle, String.to_charlist(symbol), size)
    if close = opts[:close], do: :ok = apply(Dl, close, [handle])
    stack = stack_of(size, Keyword.get(opts, :demangle, true))
    Dl.free(address)
    {stack, bias}
  end

  defp stack_of(size, demangle \\ true) do
    [site] =
      Enum.filter(Mtrace.top(10_000, min_size: size, demangle: demangle), &(&1.bytes == size))

    site.stack
  end

  test "a static function's call: its file and line, and its caller's" do
    lib = Path.join(@dir, "symbolic.so")
    {[hook, f1, f2 | _], bias} = site_frames(lib, "sym_static", 70_001)
    assert hook.function == "malloc" and hook.library == mtrace_so()

    assert %{function: "hidden_alloc", library: ^lib, file: @c, inlined: false} = f1
    assert f1.line == line_of(@c, "static")
    assert f1.offset == f1.address - bias
    assert %{function: "sym_static", file: @c, inlined: false, unloaded: false} = f2
    assert f2.line == line_of(@c, "static_caller")
  end

  test "an always_inline helper is a frame of its own, flagged, before its caller at one address" do
    lib = Path.join(@dir, "symbolic.so")
    {[_hook, inlined, caller, next | _], _} = site_frames(lib, "sym_inline", 70_002)
    assert %{function: "inlined_alloc", file: @c, inlined: true} = inlined
    assert inlined.line == line_of(@c, "inline")
    assert %{function: "sym_inline", file: @c, inlined: false} = caller
    assert caller.line == line_of(@c, "inline_caller")
    assert inlined.address == caller.address and inlined.offset == caller.offset
    assert next.address != caller.address

    assert inspect(inlined) ==
             "#Mtrace.Frame<inlined_alloc (symbolic.c:#{inlined.line}) symbolic.so+0x" <>
               String.downcase(Integer.to_string(inlined.offset, 16)) <> " inlined>"
  end

  test "inlined functions nested two deep: each a frame, innermost first, then their caller" do
    lib = Path.join(@dir, "symbolic.so")
    {[_hook, inner, middle, caller | _], _} = site_frames(lib, "sym_nested", 70_015)

    assert [
             {"inner_alloc", line_of(@c, "inner"), true},
             {"middle_alloc", line_of(@c, "middle"), true},
             {"sym_nested", line_of(@c, "nested_caller"), false}
           ] == Enum.map([inner, middle, caller], &{&1.function, &1.line, &1.inlined})

    assert inner.address == caller.address
  end

  test "C++ and Rust (legacy and v0) names, demangled or not" do
    lib = Path.join(@dir, "symbolic.so")
    {[_, cxx | _], _} = site_frames(lib, "sym_cxx", 70_003)
    assert cxx.function == "char* symbolic::make<char>(unsigned long)"
    assert {cxx.file, cxx.line} == {@cxx, line_of(@cxx, "cxx")}

    legacy = "_ZN8symbolic6legacy5alloc17h0123456789abcdefE"
    {[_, f | _], _} = site_frames(lib, legacy, 70_004)
    assert f.function =~ ~r/^symbolic::legacy::alloc/
    assert f.line == line_of(@c, "rust_legacy")
    {[_, f | _], _} = site_frames(lib, legacy, 70_005, demangle: false)
    assert f.function == legacy

    v0 = "_RNvNtC8symbolic2v05alloc"
    {[_, f | _], _} = site_frames(lib, v0, 70_006)
    assert f.function =~ ~r/^symbolic(\[[0-9a-f]+\])?::v0::alloc$/
    assert f.line == line_of(@c, "rust_v0")
  end

  test "a copy stripped of DWARF gets its lines from the debug file its .gnu_debuglink names" do
    lib = Path.join(@dir, "symbolic-link/symbolic.so")
    {[_, inlined, caller | _], _} = site_frames(lib, "sym_inline", 70_007)
    assert %{function: "inlined_alloc", library: ^lib, inlined: true, file: @c} = inlined
    assert inlined.line == line_of(@c, "inline")
    assert {caller.function, caller.line} == {"sym_inline", line_of(@c, "inline_caller")}
  end

  test "a copy found only by build id: lines with its directory in MTRACE_DEBUG_DIRS, not without" do
    lib = Path.join(@dir, "symbolic-id/symbolic.so")
    {[_, f | _], _} = site_frames(lib, "sym_static", 70_008)
    assert %{function: "hidden_alloc", file: nil, line: nil} = f

    code = """
    {:ok, h, _} = Mtrace.Test.Dl.open(~c"#{lib}")
    Mtrace.Test.Dl.call(h, ~c"sym_inline", 70_009)
    [site] = Enum.filter(Mtrace.top(10_000, min_size: 70_009), &(&1.bytes == 70_009))
    for f <- Enum.take(site.stack, 3), do: IO.puts("frame \#{f.function} \#{f.file}:\#{f.line} \#{f.inlined}")
    """

    {out, 0} =
      run_node(code, [
        {"LD_PRELOAD", mtrace_so()},
        {"MTRACE_DEBUG_DIRS", "/nonexistent:" <> Path.join(@dir, "debug")}
      ])

    frames = for "frame " <> rest <- String.split(out, "\n"), do: rest

    assert [
             "malloc " <> _,
             "inlined_alloc " <> inlined,
             "sym_inline " <> caller
           ] = frames

    assert inlined == "#{@c}:#{line_of(@c, "inline")} true", out
    assert caller == "#{@c}:#{line_of(@c, "inline_caller")} false", out
  end

  test "a copy with no .symtab names its static functions from MiniDebugInfo (.gnu_debugdata)" do
    lib = Path.join(@dir, "symbolic-mini/symbolic.so")
    {[_, f1, f2 | _], _} = site_frames(lib, "sym_static", 70_010)
    assert %{function: "hidden_alloc", library: ^lib, file: nil} = f1
    assert f2.function == "sym_static"
  end

  @tag :tmp_dir
  test "an unloaded library's frames say so, and never name the library loaded after it",
       %{tmp_dir: dir} do
    a = Path.join(dir, "a.so")
    b = Path.join(dir, "b.so")
    File.cp!(Path.join(@dir, "symbolic.so"), a)
    File.cp!(Path.join(@dir, "other.so"), b)
    {[_, f1, f2 | _], bias_a} = site_frames(a, "sym_static", 70_011, close: :close)
    {[_, other | _], bias_b} = site_frames(b, "other_alloc", 70_012)

    # dlclose passed through mtrace: the walks before and after it date the unload exactly.
    assert %{function: "hidden_alloc", library: ^a, unloaded: true} = f1
    assert {f1.file, f1.line} == {@c, line_of(@c, "static")}
    assert %{function: "sym_static", library: ^a, unloaded: true} = f2
    assert f1.offset == f1.address - bias_a
    assert %{function: "other_alloc", library: ^b, unloaded: false} = other
    # Whether b.so took a.so's place is up to the loader; say so when it did not.
    if bias_a != bias_b, do: IO.puts("note: b.so was not loaded where a.so was")
  end

  @tag :tmp_dir
  test "after an unload mtrace did not see, the frames there are not known, never misnamed",
       %{tmp_dir: dir} do
    a = Path.join(dir, "a.so")
    b = Path.join(dir, "b.so")
    File.cp!(Path.join(@dir, "symbolic.so"), a)
    File.cp!(Path.join(@dir, "other.so"), b)
    {:ok, ha, bias_a} = Dl.open(String.to_charlist(a))
    address_a = Dl.call(ha, ~c"sym_static", 70_013)
    :ok = Dl.close_unseen(ha)
    {:ok, hb, bias_b} = Dl.open(String.to_charlist(b))
    address_b = Dl.call(hb, ~c"other_alloc", 70_014)
    [_, f1, f2 | _] = stack_of(70_013)
    if bias_a != bias_b, do: IO.puts("note: b.so was not loaded where a.so was")

    for f <- [f1, f2] do
      assert {f.library, f.function, f.file} == {nil, nil, nil}
      assert f.unloaded in [false, :maybe]
    end

    # b.so was loaded in the same unseen stretch: its own frames may not be named either, but
    # never after a.so.
    [_, other | _] = stack_of(70_014)
    assert other.library in [b, nil] and other.function in ["other_alloc", nil]
    Dl.free(address_a)
    Dl.free(address_b)
  end
end
