defmodule Mtrace.CTest do
  # The C-level tests of test/c run as plain programs, without LD_PRELOAD: the recorder, table and
  # interning (torn reads, full table, fork under churn) and the symbolizer (ELF parsing,
  # demangling, malformed files).
  use ExUnit.Case, async: true

  @dir Path.expand("c", __DIR__)

  setup_all do
    Mtrace.Test.Helpers.make!(@dir)
  end

  for program <- ["recorder_test", "symbols_test"] do
    @tag timeout: 120_000
    test "#{program} passes every check" do
      {out, status} =
        System.cmd("timeout", ["100", Path.join(@dir, unquote(program))],
          env: [{"LD_PRELOAD", nil}, {"MTRACE_SLOTS", nil}],
          stderr_to_stdout: true
        )

      assert status == 0, out
      assert [_, passed] = Regex.run(~r/^(\d+) passed, 0 failed$/m, out), out
      assert String.to_integer(passed) >= 10
    end
  end
end
