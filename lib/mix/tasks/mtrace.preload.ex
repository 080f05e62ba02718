defmodule Mix.Tasks.Mtrace.Preload do
  @shortdoc "Prints the environment that starts a node traced by mtrace"
  @moduledoc """
  Prints the variables that start a node of this project traced by mtrace, for the current
  `MIX_ENV`, on one line:

      $ mix mtrace.preload
      LD_PRELOAD=/app/_build/dev/lib/mtrace/priv/mtrace.so
      $ eval "$(mix mtrace.preload) iex -S mix"

  `LD_PRELOAD` is the file the NIF loads (`Mtrace.library_path/0`), wherever the dependency
  lives (path, git, or this repository itself). What NIFs allocate through the NIF API
  (`enif_alloc`, resources, `enif_alloc_binary`) is seen with the VM's default flags. With
  `--vm-flags`, also `ERL_AFLAGS='+MRe false +MBe false'`: the VM's `driver_alloc` and
  `binary_alloc` then hand their blocks to `malloc`, so that what the VM itself allocates there
  (its refc binaries, ports' buffers) is seen too. With `--erlang`, stacks go on into the Erlang
  functions that called the NIF (`MTRACE_UNWIND=erlang`, and `+JPperf map` for the names). With
  `--export`, `export` lines instead, for `eval "$(mix mtrace.preload --export)"` in a
  script. A release does the same with the block of mtrace's `rel/env.sh.eex`.

  The project is compiled first, so that the file exists.
  """
  use Mix.Task

  @impl true
  def run(args) do
    {opts, _} =
      OptionParser.parse!(args, strict: [export: :boolean, erlang: :boolean, vm_flags: :boolean])

    # Quietly: the line is meant for $(...), which would take what compile prints too.
    shell = Mix.shell()
    Mix.shell(Mix.Shell.Quiet)

    try do
      Mix.Task.run("compile", [])
    after
      Mix.shell(shell)
    end

    path =
      if Code.ensure_loaded?(Mtrace),
        do: Mtrace.library_path(),
        else: Mix.raise("mtrace is not compiled here: is it a dependency of this project?")

    unless File.exists?(path),
      do: Mix.raise("#{path} is missing: is mtrace a dependency of this project, and compiled?")

    flags =
      Enum.concat(
        if(opts[:erlang], do: ["+JPperf map"], else: []),
        if(opts[:vm_flags], do: ["+MRe false +MBe false"], else: [])
      )

    vars =
      Enum.concat([
        [LD_PRELOAD: path],
        if(opts[:erlang], do: [MTRACE_UNWIND: "erlang"], else: []),
        if(flags == [], do: [], else: [ERL_AFLAGS: "'#{Enum.join(flags, " ")}'"])
      ])

    Mix.shell().info(
      if opts[:export],
        do: Enum.map_join(vars, "\n", fn {k, v} -> "export #{k}=#{v}" end),
        else: Enum.map_join(vars, " ", fn {k, v} -> "#{k}=#{v}" end)
    )
  end
end
