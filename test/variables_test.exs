defmodule Mtrace.VariablesTest do
  # The variables are named once, in the library's sources: the README's table lists exactly
  # those (and the scripts' own MTRACE_NIF_API), and bin/bench and the test helpers clear them all.
  use ExUnit.Case, async: true
  import Mtrace.Test.Helpers

  @root Path.expand("..", __DIR__)

  test "the README's table lists every variable the library reads, and no other" do
    readme = File.read!(Path.join(@root, "README.md"))
    listed = Regex.scan(~r/^\| `(MTRACE_[A-Z_]+)` \|/m, readme, capture: :all_but_first)
    assert Enum.sort(List.flatten(listed)) == Enum.sort(["MTRACE_NIF_API" | variables()])
  end

  test "the library reads at least the variables the test helpers once listed by hand" do
    for name <- ~w(MTRACE_SLOTS MTRACE_LANES MTRACE_SAMPLE MTRACE_REPORT MTRACE_CSV MTRACE_FORK),
        do: assert(name in variables())
  end

  test "bin/bench clears every variable the library reads" do
    bench = File.read!(Path.join(@root, "bin/bench"))
    assert bench =~ ~s|unset LD_PRELOAD $(grep -oh '"MTRACE_[A-Z_]*"' "$ROOT"/c_src/*.c|
  end
end
