defmodule Mtrace.FormatsTest do
  # Each format opened by the tool its users use: dot renders the DOT, protoc decodes the pprof
  # profile against pprof's own profile.proto, Python's json reads the gprof2dot JSON; the
  # folded lines and the tree add up to the exact bytes; the HTML holds the frames it draws.
  # async: false, so that only this test's blocks go through the test NIF meanwhile.
  use ExUnit.Case, async: false
  alias Mtrace.Test.Leaky

  @moduletag timeout: 120_000

  setup do
    blocks =
      for(_ <- 1..3, do: {:malloc, Leaky.alloc(:malloc, 5000)}) ++
        for(_ <- 1..2, do: {:cxx_new, Leaky.alloc(:cxx_new, 7000)})

    on_exit(fn -> for {kind, a} <- blocks, do: Leaky.release(kind, a) end)
    %{sites: Mtrace.top(100, library: "leaky.so", min_size: 5000)}
  end

  defp cmd(program, args, input) do
    path = Path.join(System.tmp_dir!(), "mtrace_fmt_#{System.unique_integer([:positive])}")
    File.write!(path, input)

    result =
      System.cmd(program, args ++ [path],
        stderr_to_stdout: true,
        env: [{"LD_PRELOAD", nil}]
      )

    File.rm(path)
    result
  end

  test "folded lines sum to the exact bytes, outermost frame first", %{sites: sites} do
    lines =
      sites |> Mtrace.render(:folded) |> IO.iodata_to_binary() |> String.split("\n", trim: true)

    counts = Enum.map(lines, &(&1 |> String.split(" ") |> List.last() |> String.to_integer()))
    assert Enum.sort(counts) == [14000, 15000]
    assert Enum.all?(lines, &String.contains?(&1, ";malloc "))
    assert Enum.any?(lines, &String.contains?(&1, ";nif_alloc;leak_malloc;malloc "))
  end

  test "the tree's shares add up, and small branches fold", %{sites: sites} do
    text = sites |> Mtrace.render(:tree) |> IO.iodata_to_binary()
    assert text =~ ~r/^100.00% 29000 bytes in 5 blocks: all$/m
    assert text =~ ~r/51.72% 15000 bytes in 3 blocks: leak_malloc \(leaky.c:\d+\) \(leaky.so\)/
    assert text =~ "48.28% 14000 bytes in 2 blocks: operator new(unsigned long)"
    folded = sites |> Mtrace.render(:tree, threshold: 50) |> IO.iodata_to_binary()
    assert folded =~ "1 more path below 50%"
    refute folded =~ "leaky::cxx_new"
  end

  test "dot renders the graph to SVG, with the leaking function's node", %{sites: sites} do
    {svg, 0} = cmd("dot", ["-Tsvg"], Mtrace.render(sites, :dot))
    assert svg =~ "<svg" and svg =~ "leak_malloc" and svg =~ "15000 bytes"
  end

  test "protoc decodes the pprof profile: exact totals, and each sample's locations, functions, lines and mappings",
       %{sites: sites} do
    p = sites |> Mtrace.render(:pprof) |> Mtrace.Test.Pprof.decode!()
    assert p.strings |> Enum.take(5) == ["", "inuse_objects", "count", "inuse_space", "bytes"]

    # Each sample is [inuse_objects, inuse_space].
    assert p.samples |> Enum.map(& &1.value) |> Enum.sort() == [[2, 14000], [3, 15000]]

    location = Map.new(p.locations, &{&1.id, &1})
    function = Map.new(p.functions, &{&1.id, &1})
    mapping = Map.new(p.mappings, &{&1.id, &1})
    assert map_size(location) == length(p.locations) and map_size(function) == length(p.functions)
    assert Enum.all?(p.samples, fn s -> Enum.all?(s.location_id, &Map.has_key?(location, &1)) end)

    # leak_malloc's sample, innermost first: malloc in mtrace.so, then leak_malloc at its call
    # of malloc in leaky.so, then nif_alloc.
    [sample] = for s <- p.samples, s.value == [3, 15000], do: s
    [hook, leak, nif | _] = for id <- sample.location_id, do: location[id]

    names = fn loc -> for l <- loc.line, do: function[l.function_id].name end

    assert {names.(hook), names.(leak), names.(nif)} ==
             {["malloc"], ["leak_malloc"], ["nif_alloc"]}

    [line] = leak.line
    assert Path.basename(function[line.function_id].filename) == "leaky.c"
    assert line.line == line_of_return("test/support/c_src/leaky.c", "*leak_malloc(size_t n)")

    # Each location of a native frame lies in the mapping of its library.
    for {loc, lib} <- [{hook, "mtrace.so"}, {leak, "leaky.so"}, {nif, "leaky.so"}] do
      m = mapping[loc.mapping_id]
      assert Path.basename(m.filename) == lib
      assert m.memory_start <= loc.address and loc.address < m.memory_limit
      assert m.has_functions
    end
  end

  # The line of the first return after the line where a function starts.
  defp line_of_return(file, signature) do
    lines = Path.expand("../" <> file, __DIR__) |> File.read!() |> String.split("\n")
    start = Enum.find_index(lines, &String.contains?(&1, signature))
    start + 1 + Enum.find_index(Enum.drop(lines, start), &(&1 =~ ~r/^\s*return /))
  end

  test "the gprof2dot JSON is JSON, with the exact costs", %{sites: sites} do
    script =
      "import json,sys; d=json.load(open(sys.argv[1])); print(d['version'], sum(e['cost'][0] for e in d['events']), len(d['functions']))"

    {out, 0} = cmd("python3", ["-c", script], Mtrace.render(sites, :json))
    assert out =~ ~r/^0 29000 \d+$/m
  end

  test "the HTML flame graph is one file, with every frame it draws and nothing external",
       %{sites: sites} do
    html = sites |> Mtrace.render(:html) |> IO.iodata_to_binary()
    assert html =~ "<svg" and html =~ "<script>"
    # Nothing to fetch: no script or style source, no link, no url(); the one URL is the SVG
    # namespace's name.
    refute html =~ ~r/src=|href=|<link|url\(/
    assert Regex.scan(~r/https?:/, html) == [["http:"]]

    for label <- ["leak_malloc", "nif_alloc", "leaky::cxx_new(unsigned long)"],
        do: assert(html =~ label)

    assert html =~ "15000 bytes in 3 blocks (51.72%)"
  end

  # The picture in docs/reading-results.md (docs/flamegraph.png) is this test's screenshot: with
  # MTRACE_UPDATE_DOCS=1 (bin/test test/formats_test.exs) the test writes it there, after its
  # checks passed.
  @tag :tmp_dir
  test "headless Chromium draws the flame graph: leak_malloc's cell in its place and colour, the labels in the DOM, search highlights",
       %{sites: sites, tmp_dir: dir} do
    html =
      sites
      |> Mtrace.render(:html,
        title: ~s|mtrace: Mtrace.top(100, library: "leaky.so", min_size: 5000)|
      )
      |> IO.iodata_to_binary()

    # The page as drawn, plus a script that writes where leak_malloc's rectangle is on it into
    # the DOM, for the DOM dump to read; it draws nothing.
    probe = """
    <script>
    var g = Array.prototype.slice.call(document.querySelectorAll("#flame g.f")).filter(function (g) {
      return /^leak_malloc /.test(g.querySelector("title").textContent);
    })[0];
    var r = g.querySelector("rect").getBoundingClientRect();
    document.body.setAttribute("data-box", [r.left, r.top, r.width, r.height].join(" "));
    </script></body>
    """

    html_path = Path.join(dir, "leak.html")
    File.write!(html_path, String.replace(html, "</body>", probe))
    png = Path.join(dir, "leak.png")
    window = "--window-size=1230,230"

    {_, 0} =
      System.cmd("chromium", chromium() ++ ["--screenshot=#{png}", window, "file://#{html_path}"],
        stderr_to_stdout: true,
        env: [{"LD_PRELOAD", nil}]
      )

    {dom, 0} =
      System.cmd("chromium", chromium() ++ ["--dump-dom", window, "file://#{html_path}#cxx_new"],
        stderr_to_stdout: true,
        env: [{"LD_PRELOAD", nil}]
      )

    {w, h, rows} = Mtrace.Test.Png.decode!(File.read!(png))
    assert {w, h} == {1230, 230}

    # leak_malloc's share of the bytes is 15000 of 29000: its cell is that share of the 1200
    # pixels wide, one row high.
    [_, box] = Regex.run(~r/data-box="([^"]+)"/, dom)
    [left, top, width, height] = box |> String.split() |> Enum.map(&parse_number/1)
    assert_in_delta width, 1200 * 15000 / 29000, 2
    assert_in_delta height, 17, 1

    [_, hue] =
      Regex.run(
        ~r|<title>leak_malloc[^\n]*\n[^<]*</title><rect[^>]*fill="hsl\((\d+), 70%, 65%\)"|,
        html
      )

    colour = Mtrace.Test.Png.hsl(String.to_integer(hue), 70, 65)

    # Every pixel inside the cell, but its rounded corners and its label (about 170 pixels at its
    # left end), is its library's colour.
    inside =
      for y <- round(top + 3)..round(top + height - 3),
          x <- round(left + 220)..round(left + width - 4),
          do: rows |> Enum.at(y) |> Enum.at(x)

    off = Enum.reject(inside, &close?(&1, colour))
    assert length(inside) > 4000 and off == [], "#{length(off)} of #{length(inside)} pixels off"

    assert dom =~ ~r|<text [^>]*>leak_malloc \(leaky.c:\d+\)</text>|
    # The search given in the address (#cxx_new) ran: two frames match it, and their share shows.
    assert length(Regex.scan(~r/class="f hit"/, dom)) == 2
    assert dom =~ "matched: 48.28%"

    if System.get_env("MTRACE_UPDATE_DOCS") == "1",
      do: File.cp!(png, Path.expand("../docs/flamegraph.png", __DIR__))
  end

  defp parse_number(text) do
    case Float.parse(text) do
      {f, ""} -> f
    end
  end

  defp chromium, do: ~w(--headless --disable-gpu --no-sandbox --hide-scrollbars)

  defp close?({r, g, b}, {r2, g2, b2}), do: abs(r - r2) + abs(g - g2) + abs(b - b2) <= 12

  test "a text report's frames read back with their library, line, offset and unloaded state" do
    text = """
    # mtrace report v1
    42 bytes in 2 blocks lost (2 direct, 0 indirect), site 1 of 1
        at 0x7f00000d601: malloc (hooks.c:73) /opt/m t/mtrace.so+0xd601
        by 0x7f100001234: operator()(int) (/usr/lib/libx.so)
        by 0x7f200002000: /usr/lib/liby.so+0x2000
        by 0x7f300000010: gone (gone.c:9) /tmp/gone.so+0x10 [unloaded]
        by 0x7f400000020: /tmp/old.so+0x20 [unloaded]
        by 0x7f500000030: ?? (unloaded or replaced)
        by 0x7f600000040: ?? (no module)
        by 0x7f700000050: main (main.c:5) /p/prog+0x50
    """

    assert [%Mtrace.Site{bytes: 42, blocks: 2, direct_blocks: 2, stack: stack}] =
             Mtrace.Report.sites(text)

    fields = &Map.take(&1, [:function, :file, :line, :library, :offset, :unloaded])

    assert Enum.map(stack, fields) == [
             %{
               function: "malloc",
               file: "hooks.c",
               line: 73,
               library: "/opt/m t/mtrace.so",
               offset: 0xD601,
               unloaded: false
             },
             %{
               function: "operator()(int)",
               file: nil,
               line: nil,
               library: "/usr/lib/libx.so",
               offset: nil,
               unloaded: false
             },
             %{
               function: nil,
               file: nil,
               line: nil,
               library: "/usr/lib/liby.so",
               offset: 0x2000,
               unloaded: false
             },
             %{
               function: "gone",
               file: "gone.c",
               line: 9,
               library: "/tmp/gone.so",
               offset: 0x10,
               unloaded: true
             },
             %{
               function: nil,
               file: nil,
               line: nil,
               library: "/tmp/old.so",
               offset: 0x20,
               unloaded: true
             },
             %{
               function: nil,
               file: nil,
               line: nil,
               library: nil,
               offset: nil,
               unloaded: :maybe
             },
             %{function: nil, file: nil, line: nil, library: nil, offset: nil, unloaded: false},
             %{
               function: "main",
               file: "main.c",
               line: 5,
               library: "/p/prog",
               offset: 0x50,
               unloaded: false
             }
           ]

    assert Enum.map(stack, & &1.address) |> hd() == 0x7F00000D601
  end

  test "sites written as a report's text (bin/mtrace --node) read back as they were" do
    text = """
    # mtrace report v1
    42 bytes in 2 blocks lost (1 direct, 1 indirect) (1 possibly: string_end), site 1 of 2
        at 0x7f00000d601: malloc (hooks.c:73) /opt/m t/mtrace.so+0xd601
        by 0x7f100001234: operator()(int) (/usr/lib/libx.so)
        by 0x7f200002000: /usr/lib/liby.so+0x2000
        by 0x7f300000010: gone (gone.c:9) /tmp/gone.so+0x10 [unloaded]
        by 0x7f500000030: ?? (unloaded or replaced)
        by 0x7f600000040: ?? (no module)
        by 0x7f650000040: global::call_nif_shared (erlang)
        by 0x7f680000040: 'Elixir.Mtrace.Test.Chain':c/1 (chain.ex:11) (erlang)
        by 0x7f690000040: lists:map/2 (erlang)
        by 0x7f700000050: main (main.c:5) /p/prog+0x50
    4104 bytes in 1 block lost (1 direct, 0 indirect), site 2 of 2
    """

    # A library's path is bytes, not always UTF-8.
    text = text <> "    at 0x7f710000060: /usr/lib/l\xFF.so+0x60\n"
    sites = Mtrace.Report.sites(text)
    assert [%{certainty: :possible, rules: [:string_end]}, %{certainty: :definite}] = sites
    written = sites |> Mtrace.Format.Text.render(title: "n@h, pid 7, on request") |> to_string()
    assert written =~ "\nmtrace report 1: n@h, pid 7, on request\n"
    assert written =~ "  lost now: 4146 bytes in 3 blocks (2 direct, 1 indirect)\n"
    assert Mtrace.Report.sites(written) == sites
    assert [_, %{stack: [%{library: "/usr/lib/l\xFF.so", offset: 0x60}]}] = sites

    # As the library's report does (c_src/out/report.c): a frame without its module has no name.
    orphan = %Mtrace.Frame{kind: :native, address: 16, function: "f", file: "f.c", line: 3}

    assert Mtrace.Format.Text.render([%Mtrace.Site{bytes: 1, blocks: 1, stack: [orphan]}], [])
           |> to_string() =~ "\n    at 0x10: ?? (no module)\n"
  end

  test "every format parts lost sites by certainty, at their outermost frame" do
    sites =
      Mtrace.Report.sites("""
      # mtrace report v1
      42 bytes in 2 blocks lost (2 direct, 0 indirect) (1 possibly: string_end), site 1 of 2
          at 0x7f00000d601: malloc (hooks.c:73) /m/mtrace.so+0xd601
          by 0x7f700000050: main (main.c:5) /p/prog+0x50
      10 bytes in 1 block lost (1 direct, 0 indirect), site 2 of 2
          at 0x7f00000d601: malloc (hooks.c:73) /m/mtrace.so+0xd601
          by 0x7f700000090: other (main.c:9) /p/prog+0x90
      """)

    folded = sites |> Mtrace.render(:folded) |> IO.iodata_to_binary()

    assert folded ==
             "possibly lost (string_end);main;malloc 42\ndefinitely lost;other;malloc 10\n"

    for format <- Mtrace.Format.names() do
      data = sites |> Mtrace.render(format) |> IO.iodata_to_binary()
      data = if format == :pprof, do: :zlib.gunzip(data), else: data

      assert data =~ "definitely lost" and data =~ "possibly lost (string_end)",
             "#{format} does not say the sites' certainty"
    end
  end

  test "a text report's inlined functions read back as inlined frames of their caller's address" do
    text = """
    # mtrace report v1
    10 bytes in 1 block lost (1 direct, 0 indirect), site 1 of 1
        at 0x7f00000d601: malloc (hooks.c:73) /m/mtrace.so+0xd601
        by 0x55000001234: inner (a.c:3) /p/prog+0x1234
        by 0x55000001234: middle (a.c:6) /p/prog+0x1234
        by 0x55000001234: outer (a.c:9) /p/prog+0x1234
        by 0x55000001300: main (a.c:20) /p/prog+0x1300
    """

    assert [%Mtrace.Site{stack: stack}] = Mtrace.Report.sites(text)

    assert Enum.map(stack, &{&1.function, &1.inlined}) == [
             {"malloc", false},
             {"inner", true},
             {"middle", true},
             {"outer", false},
             {"main", false}
           ]
  end

  test "a sampled report's reachable list, its head marked estimated, reads apart from the lost one" do
    text = """
    # mtrace report v1
    mtrace report 1: prog, pid 7, at exit
    leaks (estimated): 80 bytes in 1 block by call site, largest first (1 site):

    80 bytes in 1 block lost (1 direct, 0 indirect), site 1 of 1
        at 0x7f00000d601: malloc (hooks.c:73) /m/mtrace.so+0xd601

    still reachable by calling function, largest first (1 function):
      72704 bytes in 1 block from /usr/lib/libstdc++.so.6+0xa57ba

    still reachable (estimated): 72704 bytes in 1 block by call site, largest first (1 site):

    72704 bytes in 1 block, site 1 of 1
        at 0x7f00000d601: malloc (hooks.c:73) /m/mtrace.so+0xd601
        by 0x7f1000a57ba: /usr/lib/libstdc++.so.6+0xa57ba

    mtrace: end of report 1
    """

    assert [%Mtrace.Site{bytes: 80, direct_blocks: 1}] = Mtrace.Report.sites(text)

    assert [%Mtrace.Site{bytes: 72704, stack: [_, %{offset: 0xA57BA}]}] =
             Mtrace.Report.sites(text, reachable: true)
  end

  @tag :tmp_dir
  test "write/3 what: {:diff, mark} writes what grew since the mark", %{tmp_dir: dir} do
    mark = Mtrace.mark()
    grown = for _ <- 1..2, do: Leaky.alloc(:malloc, 3000)

    try do
      path = Path.join(dir, "diff.folded")
      assert :ok = Mtrace.write(path, :folded, what: {:diff, mark}, library: "leaky.so")
      # The setup's blocks were live at the mark: only the two new ones are growth.
      assert [line] = path |> File.read!() |> String.split("\n", trim: true)
      assert String.ends_with?(line, ";nif_alloc;leak_malloc;malloc 6000"), line
    after
      for a <- grown, do: Leaky.release(:malloc, a)
    end
  end

  test "write/3 what: :leaks writes leaks/1's sites: the lost blocks, not the kept ones" do
    # In nodes of their own: the mark wants every live block recorded. lost.c's list is lost
    # (320 bytes) and its static array kept (300); :live writes both. The mark is conservative:
    # a stale word may keep the list (leaks_test: in a node of at most six, with busy cores),
    # but never calls a kept block lost.
    Mtrace.Test.Helpers.at_least!(1, 6, "the lost list written", fn _ ->
      {leaks, live} = lost_and_kept()
      assert live =~ ~r/;static_block;malloc 300$/m and live =~ ~r/;lost_node;malloc 320$/m
      refute leaks =~ "static_block"
      Mtrace.Test.Helpers.outcome(leaks =~ ~r/;lost_node;malloc 320$/m, true, leaks)
    end)
  end

  defp lost_and_kept do
    Mtrace.Test.Helpers.node_result(
      """
      :ok = Mtrace.Test.Lost.lose_list(5)
      :ok = Mtrace.Test.Lost.keep_static(3, 100)
      write = fn what ->
        path = Path.join(System.tmp_dir!(), "mtrace_leaks_\#{System.unique_integer([:positive])}")
        :ok = Mtrace.write(path, :folded, what: what, library: "lost.so", min_age: 0)
        File.read!(path) |> tap(fn _ -> File.rm!(path) end)
      end
      {write.(:leaks), write.(:live)}
      """,
      [{"LD_PRELOAD", Mtrace.Test.Helpers.mtrace_so()}]
    )
  end

  test "write/3 and render/3 refuse nodes: and the map it answers, saying what to do instead" do
    assert_raise ArgumentError,
                 ~r/write\/3: nodes: is not taken: .* render\/3 each node's list/,
                 fn ->
                   Mtrace.write("unwritten.html", :html, nodes: [node()])
                 end

    refute File.exists?("unwritten.html")
    answer = Mtrace.top(10, nodes: [node()], library: "leaky.so")
    assert is_map(answer) and is_list(answer[node()])

    assert_raise ArgumentError, ~r/expected a list of sites, got a map/, fn ->
      Mtrace.render(answer, :folded)
    end

    assert answer[node()] |> Mtrace.render(:folded) |> IO.iodata_to_binary() =~ "leak_malloc"
  end

  test "write/3 writes the leaks of a node, or refuses a bad format" do
    path =
      Path.join(System.tmp_dir!(), "mtrace_write_#{System.unique_integer([:positive])}.folded")

    assert :ok = Mtrace.write(path, :folded, library: "leaky.so", min_size: 5000)
    assert File.read!(path) =~ "leak_malloc;malloc 15000"
    File.rm!(path)
    assert_raise ArgumentError, ~r/format must be one of/, fn -> Mtrace.render([], :svg) end
    assert_raise ArgumentError, ~r/what must be/, fn -> Mtrace.write(path, :tree, what: :all) end
  end

  # Adding a format is one line in Mtrace.Format's list: this test tells what else must name it.
  test "each format of the one list is a writer of the behaviour, documented and offered by bin/mtrace",
       %{sites: sites} do
    {:docs_v1, _, _, _, _, _, docs} = Code.fetch_docs(Mtrace)
    [write_doc] = for {{:function, :write, 3}, _, _, %{"en" => doc}, _} <- docs, do: doc
    root = Path.expand("..", __DIR__)
    {usage, 0} = System.cmd(Path.join(root, "bin/mtrace"), ["--help"], env: [{"LD_PRELOAD", nil}])
    [_, offered] = Regex.run(~r/\n  --format FORMAT(.*?)\n  --/s, usage)
    page = File.read!(Path.join(root, "docs/reading-results.md"))
    names = Mtrace.Format.names()
    assert names != [] and length(Enum.uniq(names)) == length(names)

    for name <- names do
      {:ok, writer} = Mtrace.Format.writer(name)
      behaviours = writer.module_info(:attributes) |> Keyword.get_values(:behaviour)
      assert Mtrace.Format in List.flatten(behaviours), "#{inspect(writer)}"
      assert write_doc =~ "* `#{inspect(name)}` - ", "write/3's doc does not describe #{name}"

      assert page =~ "| `#{inspect(name)}` |",
             "docs/reading-results.md's table does not list #{name}"

      assert offered =~ ~r/\b#{name}\b/, "bin/mtrace --help does not offer #{name}"

      assert IO.iodata_length(Mtrace.render(sites, name)) > 0
    end

    assert Mtrace.Format.writer(:svg) == :error and Mtrace.Format.writer("html") == :error
  end

  # One text of a frame: Format.label/2, which the writers use, and with where: true the Inspect
  # of Mtrace.Frame; every kind of frame, in both.
  test "a frame reads alike in the formats' labels and in Inspect" do
    alias Mtrace.Frame
    lib = "/usr/lib/x86_64-linux-gnu/libfoo.so.1"

    frames = [
      {%Frame{function: "f", file: "/src/a.c", line: 7, library: lib, offset: 0x1A2B},
       "f (a.c:7)", "f (a.c:7) libfoo.so.1+0x1a2b"},
      {%Frame{function: "g(int)", library: lib, offset: 0x10, inlined: true}, "g(int)",
       "g(int) libfoo.so.1+0x10 inlined"},
      {%Frame{library: lib, offset: 0xFF, unloaded: true}, "libfoo.so.1+0xff",
       "?? libfoo.so.1+0xff unloaded"},
      {%Frame{address: 0xABC, unloaded: :maybe}, "0xabc", "?? (unloaded or replaced) 0xabc"},
      {%Frame{address: 0xDEF}, "0xdef", "?? 0xdef"},
      {%Frame{kind: :erlang, module: Mtrace.Test.Chain, function: :c, arity: 1},
       "Mtrace.Test.Chain.c/1", "Mtrace.Test.Chain.c/1 (Erlang)"},
      {%Frame{
         kind: :erlang,
         module: :lists,
         function: :map,
         arity: 2,
         file: "src/lists.erl",
         line: 9
       }, ":lists.map/2 (lists.erl:9)", ":lists.map/2 (lists.erl:9) (Erlang)"},
      {%Frame{kind: :erlang}, "(Erlang caller unknown)", "(Erlang caller unknown)"}
    ]

    for {frame, label, inspected} <- frames do
      assert Mtrace.Format.label(frame) == label
      assert inspect(frame) == "#Mtrace.Frame<#{inspected}>"
    end

    assert Mtrace.Format.label(hd(frames) |> elem(0), lines: false) == "f"
    assert Mtrace.Format.function(Enum.at(frames, 6) |> elem(0)) == ":lists.map/2"
  end
end
