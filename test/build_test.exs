defmodule Mtrace.BuildTest do
  # The makefiles are plain POSIX make: GNU make and BSD make (Debian's bmake) both build the
  # library from a clean copy of c_src, and it exports only the hooks, the C API and the NIF entry.
  use ExUnit.Case, async: true

  @moduletag timeout: 300_000

  # The hooked functions come from their one list (c_src/record/hooklist.h): a hook added there and
  # not to mtrace.version fails here, as an export added by mistake does. The NIF API's share
  # (MT_FOR_EACH_NIF_HOOK) is reached by rewritten words only, and never exported.
  @hooks "c_src/record/hooklist.h"
         |> File.read!()
         |> String.split("#define MT_FOR_EACH_NIF_HOOK")
         |> hd()
         |> then(&Regex.scan(~r/^\s*X\((\w+), MT_\w+\)/m, &1, capture: :all_but_first))
         |> List.flatten()
  @exports Enum.sort(
             @hooks ++
               ~w(_Exit _exit dlclose dlopen nif_init mtrace_lib_active mtrace_lib_attach mtrace_lib_attach_reason
                  mtrace_lib_detach mtrace_lib_leaks mtrace_lib_report mtrace_lib_report_fd
                  mtrace_lib_snapshot
                  mtrace_lib_track mtrace_lib_untrack)
           )

  for make <- ["make", "bmake"] do
    @tag :tmp_dir
    test "#{make} builds priv/mtrace.so from a clean tree", %{tmp_dir: dir} do
      src = Path.expand("../c_src", __DIR__)
      copy = Path.join(dir, "c_src")
      File.mkdir_p!(copy)

      for file <- sources(src) do
        File.mkdir_p!(Path.dirname(Path.join(copy, file)))
        File.cp!(Path.join(src, file), Path.join(copy, file))
      end

      {out, status} =
        System.cmd(unquote(make), ["-C", copy], stderr_to_stdout: true, env: [{"LD_PRELOAD", nil}])

      assert status == 0, out
      lib = Path.join(dir, "priv/mtrace.so")
      assert File.exists?(lib)

      {symbols, 0} = System.cmd("nm", ["-D", "--defined-only", lib])

      exported =
        for line <- String.split(symbols, "\n", trim: true),
            do: line |> String.split() |> List.last()

      assert Enum.sort(exported) == @exports

      {undefined, 0} = System.cmd("nm", ["-D", "--undefined-only", lib])

      strong_enif =
        for line <- String.split(undefined, "\n", trim: true),
            [kind, name] = String.split(line),
            String.starts_with?(name, "enif_"),
            kind != "w",
            do: name

      assert strong_enif == [], "enif_* must be weak to load outside the BEAM"
    end
  end

  # The hook path stands alone: a file of record/ reaches no layer above it (the mark, the
  # symbolizer, the output, attach, the NIF) and nothing of erl_nif.h, so that what runs inside a
  # program's malloc is what record/ holds.
  test "record/ includes nothing of the layers above it" do
    src = Path.expand("../c_src", __DIR__)

    reached =
      for file <- Path.wildcard(Path.join(src, "record/*.[ch]")),
          [_, header] <- Regex.scan(~r/^#include [<"]([^">]+)[">]/m, File.read!(file)),
          header =~ ~r{^(mark|symbols|out|attach|nif)/} or header =~ "erl_nif",
          do: {Path.relative_to(file, src), header}

    assert reached == []
    assert length(Path.wildcard(Path.join(src, "record/*.c"))) >= 8
  end

  # What a clean tree holds: sources, the makefiles and the version script, in every layer.
  defp sources(src) do
    for file <- Path.wildcard(Path.join(src, "**/*")),
        File.regular?(file),
        name = Path.basename(file),
        Path.extname(name) in [".c", ".h", ".sh", ".mk", ".version"] or name == "Makefile",
        name != "makevars.mk",
        do: Path.relative_to(file, src)
  end
end
