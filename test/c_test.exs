defmodule Mtrace.CTest do
  # The C-level tests of test/c run as plain programs, without LD_PRELOAD: the recorder, table and
  # interning (torn reads, growth under four threads, a capped full table, fork under churn), the
  # symbolizer (ELF parsing, demangling, malformed files, lookups from four threads), reports
  # written while four threads allocate (each whole, its totals within bounds, then exact), the
  # heap walker, the table unwinder against libunwind, frame for frame, and the layouts the mark
  # knows, rule by rule.
  use ExUnit.Case, async: true

  @dir Path.expand("c", __DIR__)

  setup_all do
    Mtrace.Test.Helpers.make!(@dir)
  end

  # MTRACE_SAMPLE=1 samples every block of the recorder test, but in a sparse table (a census
  # answers the frees), whose bookkeeping must then be as exact as the plain table's.
  # recorder_test_asan is the same test over the recorder built with ASan and UBSan,
  # recorder_test_tsan with TSan (which exits 66 on a race it sees). TSan's runtime crashes in
  # libunwind's thread-exit destructor, before any of mtrace's code runs: that build unwinds by
  # frame pointers, and the ASan one covers libunwind. symbols_test and report_test run in the same
  # three builds.
  for {program, env, checks} <- [
        {"recorder_test", [], 10},
        {"recorder_test", [{"MTRACE_SAMPLE", "1"}], 10},
        {"recorder_test_asan", [], 10},
        {"recorder_test_tsan", [{"MTRACE_UNWIND", "fp"}], 10},
        {"symbols_test", [], 10},
        {"symbols_test_asan", [], 10},
        {"symbols_test_tsan", [], 10},
        {"report_test", [], 5},
        {"report_test_asan", [], 5},
        {"report_test_tsan", [{"MTRACE_UNWIND", "fp"}], 5},
        {"heap_test", [], 26},
        {"heap_test_ubsan", [], 26},
        {"cfi_test", [], 5},
        {"cfi_test_asan", [], 5},
        {"layouts_test", [], 147}
      ] do
    # One to two minutes on a loaded machine (100 s at load 17, when its limit was 100 s), and
    # ten of them run at once: `bin/test --exclude slow` skips the slowest, CI never does.
    if program == "recorder_test_tsan", do: @tag(:slow)
    @tag timeout: 480_000
    test "#{program} passes every check#{for {k, v} <- env, do: " with #{k}=#{v}"}" do
      {out, status} =
        System.cmd("timeout", ["420", Path.join(@dir, unquote(program))],
          env:
            Map.merge(
              Map.new(
                ~w(LD_PRELOAD MTRACE_SLOTS MTRACE_SLOTS_MAX MTRACE_SAMPLE MTRACE_UNWIND),
                &{&1, nil}
              ),
              Map.new(unquote(env))
            )
            |> Map.to_list(),
          stderr_to_stdout: true
        )

      assert status == 0, out
      assert [_, passed] = Regex.run(~r/^(\d+) passed, 0 failed$/m, out), out
      assert String.to_integer(passed) >= unquote(checks)
    end
  end

  # attach_storm (test/c/attach_storm.c): 100 attaches and detaches while 16 threads allocate
  # and free through every hook, without the BEAM. Checked against an attach that skipped RELRO
  # words, a detach that wrote nothing back, and a recorder start that cleared the attaching
  # thread's guard: each failed its check.
  test "attach_storm: attach and detach under 16 allocating threads" do
    {out, status} =
      System.cmd(
        "timeout",
        ["300", Path.join(@dir, "attach_storm"), Mtrace.Test.Helpers.mtrace_so()],
        env: Map.to_list(Map.new(["LD_PRELOAD" | Mtrace.Test.Helpers.variables()], &{&1, nil})),
        stderr_to_stdout: true
      )

    assert status == 0, out
    assert out =~ ~r/^11 passed, 0 failed$/m, out
  end

  # Warnings, portability and performance; ElfW comes from <link.h>, which cppcheck does not
  # read. Newer cppchecks (2.17) also say where they limited their analysis of branches: a note,
  # not a finding. Not under the test node's preload: traced, cppcheck took over a minute on a busy
  # machine; untraced it takes about 2 s.
  test "cppcheck finds nothing in c_src" do
    sources = Path.wildcard(Path.expand("../c_src/**/*.c", __DIR__))

    {out, status} =
      System.cmd(
        "cppcheck",
        ~w(--quiet --enable=warning,portability,performance --std=c11 --error-exitcode=1
             --suppress=normalCheckLevelMaxBranches) ++
          ["-DElfW(type)=Elf64_##type", "-I", Path.expand("../c_src", __DIR__) | sources],
        env: [{"LD_PRELOAD", nil}],
        stderr_to_stdout: true
      )

    assert {status, out} == {0, ""}
  end

  # .clang-format settles the layout of every C and C++ file, the tests' own included, as
  # clang-format 14 (Debian 12's) lays them out: another version lays some of them out otherwise
  # (19 does, with the same .clang-format), so the layout is checked only where 14 is installed.
  @clang_format 14
  with {version, 0} <- System.cmd("clang-format", ["--version"]),
       [_, major] <- Regex.run(~r/version (\d+)\./, version),
       false <- String.to_integer(major) == @clang_format do
    @tag skip:
           "the layout is clang-format #{@clang_format}'s, and this is #{String.trim(version)}"
  end

  test "the C sources are laid out as clang-format #{@clang_format} lays them out" do
    root = Path.expand("..", __DIR__)

    sources =
      Path.wildcard(Path.join(root, "{c_src,bench,test}/**/*.{c,h,cc}"))
      |> Enum.reject(&String.contains?(&1, "/_build/"))

    assert length(sources) > 50

    {out, status} =
      System.cmd("clang-format", ["--dry-run", "--Werror" | sources],
        env: [{"LD_PRELOAD", nil}],
        stderr_to_stdout: true
      )

    assert {status, out} == {0, ""}
  end
end
