defmodule Mtrace.CTest do
  # The C-level tests of test/c run as plain programs, without LD_PRELOAD: the recorder, table and
  # interning (torn reads, growth under four threads, a capped full table, fork under churn) and the symbolizer (ELF parsing,
  # demangling, malformed files).
  use ExUnit.Case, async: true

  @dir Path.expand("c", __DIR__)

  setup_all do
    Mtrace.Test.Helpers.make!(@dir)
  end

  # MTRACE_SAMPLE=1 samples every block of the recorder test, but in a sparse table (a census
  # answers the frees), whose bookkeeping must then be as exact as the plain table's.
  # recorder_test_asan is the same test over the recorder built with ASan and UBSan.
  for {program, sample} <- [
        {"recorder_test", nil},
        {"recorder_test", "1"},
        {"recorder_test_asan", nil},
        {"symbols_test", nil}
      ] do
    @tag timeout: 120_000
    test "#{program} passes every check#{if sample, do: " with MTRACE_SAMPLE=#{sample}"}" do
      {out, status} =
        System.cmd("timeout", ["100", Path.join(@dir, unquote(program))],
          env: [
            {"LD_PRELOAD", nil},
            {"MTRACE_SLOTS", nil},
            {"MTRACE_SLOTS_MAX", nil},
            {"MTRACE_SAMPLE", unquote(sample)}
          ],
          stderr_to_stdout: true
        )

      assert status == 0, out
      assert [_, passed] = Regex.run(~r/^(\d+) passed, 0 failed$/m, out), out
      assert String.to_integer(passed) >= 10
    end
  end
end
