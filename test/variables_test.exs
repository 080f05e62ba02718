defmodule Mtrace.VariablesTest do
  # The variables are declared once, in c_src/base/config.c; the build lists them in
  # priv/mtrace-options.txt and docs/configuration.md's table (priv/mtrace-options.md). bin/mtrace
  # --help, bin/bench and the test helpers all follow that list, and no source reads a variable
  # outside it.
  use ExUnit.Case, async: true
  import Mtrace.Test.Helpers

  @root Path.expand("..", __DIR__)

  test "docs/configuration.md's table is the one the build writes from the library's list, each variable once with its default" do
    page = File.read!(Path.join(@root, "docs/configuration.md"))
    [_, table] = Regex.run(~r/^<!-- the options:.*-->\n(.*)^<!-- end of the options -->$/ms, page)

    assert table == File.read!(Path.join(@root, "priv/mtrace-options.md")),
           "docs/configuration.md's table is not the library's: run make -C c_src docs"

    listed =
      for [name, default] <-
            Regex.scan(~r/^\| `(MTRACE_[A-Z_]+)` \| ([^|]+) \|/m, table, capture: :all_but_first),
          do: {name, default |> String.trim() |> String.replace("`", "")}

    assert Enum.sort(listed) ==
             Enum.sort(for {name, default, _} <- options(), do: {name, default})
  end

  test "no C source reads a variable the table does not declare" do
    named =
      for file <- Path.wildcard(Path.join(@root, "c_src/**/*.c")),
          [name] <- Regex.scan(~r/"(MTRACE_[A-Z_]+)"/, File.read!(file), capture: :all_but_first),
          uniq: true,
          do: name

    assert Enum.sort(named) == Enum.sort(variables())

    # Only config.c calls getenv on them.
    for file <- Path.wildcard(Path.join(@root, "c_src/**/*.c")),
        Path.basename(file) != "config.c",
        do: refute(File.read!(file) =~ ~r/getenv\("MTRACE_/, file)
  end

  test "a node given malformed values runs with the defaults the table declares" do
    defaults = Map.new(options(), fn {name, default, _} -> {name, default} end)

    stats =
      node_result("Mtrace.stats()", [
        {"LD_PRELOAD", mtrace_so()},
        {"MTRACE_SLOTS_MAX", "lots"},
        {"MTRACE_DEPTH", "1e3"},
        {"MTRACE_UNWIND", "dwarf"},
        {"MTRACE_LANES", "9"},
        {"MTRACE_SAMPLE", "-1"},
        {"MTRACE_CLEAR", "4k"}
      ])

    assert stats.preloaded
    assert stats.slots_max == String.to_integer(defaults["MTRACE_SLOTS_MAX"])
    assert stats.depth == String.to_integer(defaults["MTRACE_DEPTH"])
    assert Atom.to_string(stats.unwind) == defaults["MTRACE_UNWIND"]
    assert stats.lanes == min(:erlang.system_info(:logical_processors_available), 2)
    assert stats.sample_bytes == String.to_integer(defaults["MTRACE_SAMPLE"])
    # nothing a program receives is written by default
    assert defaults["MTRACE_CLEAR"] == "0"
    assert stats.clear_bytes == 0
  end

  test "bin/mtrace --help lists every variable with its default and meaning" do
    {help, 0} = System.cmd(Path.join(@root, "bin/mtrace"), ["--help"])

    for {name, default, meaning} <- options() do
      assert help =~ ~r/^  #{name} +#{Regex.escape(default)} +#{Regex.escape(meaning)}$/m, name
    end
  end

  # Values no variable takes (a text variable takes any path: only the empty one and an
  # over-long one are malformed there).
  @malformed [
    "",
    " 1",
    "+1",
    "-1",
    "0x10",
    "99999999999999999999999",
    "1\n2",
    "\x01",
    "é",
    String.duplicate("7", 10_000)
  ]

  test "every variable, given malformed values: one line, the default, the program unchanged" do
    Mtrace.Test.Report.build!()

    {plain, 0} =
      Mtrace.Test.Report.run(Mtrace.Test.Report.bin("leaky"), [], [{"LD_PRELOAD", nil}])

    runs =
      for {name, _default, _} <- options(),
          value <- @malformed,
          not (name in ~w(MTRACE_REPORT MTRACE_CSV MTRACE_DEBUG_DIRS) and
                 value not in ["", String.duplicate("7", 10_000)]) do
        # Through env(1): an empty value given to System.cmd would unset the variable.
        {out, status} =
          Mtrace.Test.Report.run(
            "/usr/bin/env",
            ["#{name}=#{value}", Mtrace.Test.Report.bin("leaky")],
            []
          )

        said = Mtrace.Test.Report.said(out)
        assert status == 0, "#{name}=#{inspect(value)}: status #{status}"
        assert length(said) == 1, "#{name}=#{inspect(value)}: #{inspect(said)}"
        [line] = said
        assert String.starts_with?(line, "mtrace: #{name}="), line
        assert String.replace(out, line <> "\n", "") == plain, "#{name}=#{inspect(value)}"
      end

    assert length(runs) >= 150
  end

  test "bin/bench clears every variable the library reads, from the same list" do
    bench = File.read!(Path.join(@root, "bin/bench"))

    assert bench =~
             ~s|unset LD_PRELOAD $(make -s -C "$ROOT/c_src" >/dev/null && cut -f1 "$ROOT/priv/mtrace-options.txt")|
  end
end
