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
end
