defmodule Mtrace.ScriptsTest do
  # bin/run is what a newcomer types for an iex with the preload: the node it starts must be
  # traced by this project's priv/mtrace.so.
  use ExUnit.Case, async: true

  @moduletag timeout: 300_000
  @root Path.expand("..", __DIR__)

  test "bin/run starts iex with the preload, and the NIF API seen through the hooks" do
    line =
      ~s|s = Mtrace.stats(); IO.puts("preloaded=\#{s.preloaded} records=\#{s.records > 0} | <>
        ~s|nif_api=\#{s.nif_alloc_visible} resources=\#{s.resources_visible}")|

    {out, status} =
      System.cmd("sh", ["-c", "printf '%s\\n' \"$0\" | bin/run", line],
        cd: @root,
        env: [{"LD_PRELOAD", nil}, {"MIX_ENV", "dev"}, {"MIX_BUILD_PATH", nil}],
        stderr_to_stdout: true
      )

    assert status == 0, out
    assert out =~ "preloaded=true records=true nif_api=hooks resources=hooks"
  end
end
