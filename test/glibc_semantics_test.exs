defmodule Mtrace.GlibcSemanticsTest do
  # The hooks promise that a program sees exactly what glibc gives. Each program in test/glibc
  # prints only what a caller can observe (NULL or not, errno, alignment, usable size against the
  # request, contents) and fails on a broken expectation, so a traced run must print the very
  # same lines as an untraced one and exit 0 as well.
  use ExUnit.Case, async: true

  import Mtrace.Test.Helpers, only: [mtrace_so: 0]

  @dir Path.expand("glibc", __DIR__)
  @programs ~w(malloc calloc realloc reallocarray free posix_memalign aligned_alloc memalign
               valloc pvalloc strdup strndup threads)

  setup_all do
    Mtrace.Test.Helpers.make!(@dir)
  end

  # The test node runs under the preload with its own MTRACE_* settings: children get neither
  # unless asked.
  defp env(extra) do
    unset =
      for {name, _} <- System.get_env(),
          name in ["LD_PRELOAD", "LD_BIND_NOW"] or String.starts_with?(name, "MTRACE_"),
          not List.keymember?(extra, name, 0),
          do: {name, nil}

    unset ++ extra
  end

  defp run(program, extra_env) do
    System.cmd(Path.join([@dir, "bin", program]), [], env: env(extra_env), cd: @dir)
  end

  for name <- @programs do
    program = "t_#{name}"

    # Three runs each; t_threads is slow on a loaded machine.
    @tag timeout: 180_000
    test "#{program} prints the same with and without the preload" do
      {plain, status} = run(unquote(program), [])
      assert status == 0, "untraced #{unquote(program)} exited #{status}:\n#{plain}"
      assert plain =~ "all checks passed\n"

      # The defaults, then the smallest table, which may not grow (most allocations dropped),
      # with the other unwinder.
      smallest = [{"MTRACE_SLOTS", "16"}, {"MTRACE_SLOTS_MAX", "16"}, {"MTRACE_UNWIND", "fp"}]

      for extra <- [[], smallest] do
        {traced, status} = run(unquote(program), [{"LD_PRELOAD", mtrace_so()} | extra])
        assert status == 0, "traced #{unquote(program)} #{inspect(extra)} exited #{status}"
        assert traced == plain, "traced with #{inspect(extra)}"
      end
    end
  end

  # t_cleared: the bytes of a new block past those the call wrote, over a chunk left written over
  # and freed, for each function that hands out a block glibc does not clear. glibc gives them
  # back as they were (the scenario is real), and so does the preload by default: a program reads
  # what its allocator gave it. With MTRACE_CLEAR they are zero, up to that many bytes.
  test "a new block holds what glibc left in it under the preload; with MTRACE_CLEAR, nothing of its chunk's past, that many bytes at most" do
    not_zero = fn extra ->
      {out, status} = run("t_cleared", extra)
      assert status == 0, out

      for [_, label, n | first] <-
            Regex.scan(~r/^(.+): (\d+) of \d+ bytes not zero(?:, the first at (\d+))?$/m, out),
          into: %{},
          do: {label, {String.to_integer(n), first}}
    end

    all_kept = fn seen -> assert Enum.all?(seen, fn {_, {n, _}} -> n > 0 end), inspect(seen) end

    # Cleared up to the cap: malloc(20000)'s bytes from 4096 on are not (pvalloc(2000)'s last 8
    # bytes either: it has a page and a word).
    cleared = fn seen ->
      assert {_, ["4096"]} = seen["malloc(20000)"]

      assert Enum.all?(seen, fn {_, {n, first}} -> n == 0 or first == ["4096"] end),
             inspect(seen)
    end

    plain = not_zero.([])
    assert map_size(plain) == 11
    all_kept.(plain)

    so = {"LD_PRELOAD", mtrace_so()}
    # the defaults write nothing a program receives: every block keeps what its chunk held (the
    # chunk itself may be another than without mtrace, whose own start allocates)
    defaults = not_zero.([so])
    assert Map.keys(defaults) == Map.keys(plain)
    all_kept.(defaults)
    traced = not_zero.([so, {"MTRACE_CLEAR", "4096"}])
    assert Map.keys(traced) == Map.keys(plain)
    cleared.(traced)
    all_kept.(not_zero.([so, {"MTRACE_CLEAR", "0"}]))
    all_kept.(not_zero.([so, {"MTRACE_SAMPLE", "524288"}]))
    cleared.(not_zero.([so, {"MTRACE_SAMPLE", "524288"}, {"MTRACE_CLEAR", "4096"}]))

    # 64 bytes: a block cleared from its start is cleared up to there, and a string's few bytes
    # past its NUL whole.
    capped = not_zero.([so, {"MTRACE_CLEAR", "64"}])

    for {label, {_, first}} <- capped,
        not String.starts_with?(label, ["realloc", "str"]),
        do: assert(first == ["64"], "#{label}: #{inspect(capped)}")

    for {"str" <> _ = label, {n, _}} <- capped, do: assert(n == 0, label)
  end
end
