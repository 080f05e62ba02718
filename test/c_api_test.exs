defmodule Mtrace.CApiTest do
  # The C API of c_src/mtrace.h, from test/report/capi.c: reports on request (to a path and to a
  # descriptor), a snapshot, tracked resources, errors; and a no-op without the preload.
  use ExUnit.Case, async: true
  import Mtrace.Test.Report

  @moduletag timeout: 120_000

  setup_all do
    build!()
  end

  defp sites_by_function(report) do
    for site <- report.sites,
        fun <- ["api_leak", "api_after", "pool_take"],
        fun in names(site),
        do: {fun, site}
  end

  @tag :tmp_dir
  test "under the preload: reports, a snapshot, and tracked resources", %{tmp_dir: dir} do
    {out, 0} = run(bin("capi"), [dir], [{"MTRACE_REPORT", "none"}])

    assert out == """
           active 1
           report 0
           snapshot 0
           report_fd 0
           exists -1 EEXIST
           null -1 EINVAL
           """

    [live_file] = Path.wildcard(Path.join(dir, "capi-*-1.txt"))
    # MTRACE_REPORT=none: counts are kept, but no report is written at exit.
    assert Enum.sort(File.ls!(dir)) == Enum.sort([Path.basename(live_file), "capi-fd.txt"])

    live = report!(File.read!(live_file))
    assert live.title == "on request"
    assert live.live == {700, 1}
    assert live.tracked == {400, 2}
    assert live.calls["track"] == 3 and live.calls["untrack"] == 1
    found = sites_by_function(live)

    assert [{"api_leak", %{bytes: 700, blocks: 1}}] =
             Enum.filter(found, &(elem(&1, 0) == "api_leak"))

    pool = for {"pool_take", site} <- found, do: site
    assert Enum.sort(Enum.map(pool, & &1.bytes)) == [100, 300]

    for site <- pool do
      assert [{"mtrace_lib_track", lib} | _] = site.frames
      assert tracer?(lib)
    end

    changes = report!(File.read!(Path.join(dir, "capi-fd.txt")))
    assert changes.seq == 2
    assert changes.title == "on request, changes since the snapshot"

    assert Enum.sort(for {fun, s} <- sites_by_function(changes), do: {fun, s.bytes, s.blocks}) ==
             [{"api_after", 300, 1}, {"api_leak", -700, -1}]

    assert length(changes.sites) == 2
    assert changes.peak == 1000
  end

  @tag :tmp_dir
  test "without the preload every call is a no-op", %{tmp_dir: dir} do
    {out, 0} = run(bin("capi"), [dir], [{"LD_PRELOAD", nil}, {"MTRACE_REPORT", "stderr"}])

    assert out == """
           active 0
           report -1 ENOSYS
           snapshot -1 ENOSYS
           report_fd -1 ENOSYS
           exists -1 ENOSYS
           null -1 ENOSYS
           """

    # Only the program's own (empty) file.
    assert File.ls!(dir) == ["capi-fd.txt"]
    assert File.read!(Path.join(dir, "capi-fd.txt")) == ""
  end

  @tag :tmp_dir
  test "without MTRACE_REPORT reports still work, from the table; snapshots need it",
       %{tmp_dir: dir} do
    {out, 0} = run(bin("capi"), [dir], [])
    assert out =~ "report 0\nsnapshot -1 ENOTSUP\n"
    [live_file] = Path.wildcard(Path.join(dir, "capi-*-1.txt"))
    live = report!(File.read!(live_file))
    assert live.live == {700, 1} and live.tracked == {400, 2}
    assert live.peak == nil
    assert File.read!(live_file) =~ "peak live heap: not kept (MTRACE_REPORT is unset)"
    # No snapshot: the report through the descriptor lists the live blocks.
    live2 = report!(File.read!(Path.join(dir, "capi-fd.txt")))
    assert live2.title == "on request" and live2.live == {300, 1}
  end

  test "the header compiles as C and as C++, warning-free" do
    header = Path.join(root(), "c_src/mtrace.h")

    for {compiler, flags} <- [{"cc", ~w(-x c -Wmissing-prototypes)}, {"c++", ~w(-x c++)}] do
      {out, status} =
        System.cmd(compiler, ~w(-fsyntax-only -Wall -Wextra -Werror) ++ flags ++ [header],
          stderr_to_stdout: true,
          env: [{"LD_PRELOAD", nil}]
        )

      assert status == 0, out
    end
  end

  test "the library exports the API's entry points" do
    {symbols, 0} = System.cmd("nm", ["-D", "--defined-only", so()], env: [{"LD_PRELOAD", nil}])

    for name <- ~w(mtrace_lib_active mtrace_lib_report mtrace_lib_report_fd mtrace_lib_snapshot
                   mtrace_lib_track mtrace_lib_untrack) do
      assert symbols =~ ~r/ T #{name}$/m
    end
  end
end
