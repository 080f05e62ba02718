defmodule Mtrace.NotPreloadedError do
  @moduledoc """
  Raised by the readers (`Mtrace.leaks/1`, `Mtrace.olds/2`, `Mtrace.top/2`, ...) and
  `Mtrace.reset/0` when this node's allocator is not mtrace's.

  Its message says where you are: the node, what it preloads (nothing, or another copy of the
  file: a copy is a library of its own, with an empty table), the file the NIF loads, and the
  command that starts a traced node. In a node started by a release's `remote` or `rpc` command
  (a node of its own beside the release's), it names the release's node instead, and says
  whether that one is traced.

  `Mtrace.leaks/1` answers in such a node from a walk of glibc's heap; it raises this only when
  the walk was refused too, and says why (`:heap_refused`).

  Fields: `:node`, `:path` (the file the NIF loads), `:preloaded` (the `mtrace.so` files this
  process has mapped other than `:path`, and `LD_PRELOAD`), `:release_command`,
  `:release_node`, `:release_traced` (`true`, `false` or `nil` when it could not be asked),
  `:heap_refused` (`nil`, or why `leaks/1` could not walk glibc's heap).
  """
  defexception [
    :node,
    :path,
    :preloaded,
    :release_command,
    :release_node,
    :release_traced,
    :heap_refused
  ]

  @impl true
  def exception(opts) do
    path = Keyword.get_lazy(opts, :path, &Mtrace.Nif.library_path/0)
    command = System.get_env("RELEASE_COMMAND")
    release_node = full_name(System.get_env("RELEASE_NODE"))

    %__MODULE__{
      node: node(),
      path: path,
      preloaded: %{copies: copies(path), ld_preload: System.get_env("LD_PRELOAD")},
      release_command: command,
      release_node: release_node,
      release_traced:
        if(command in ["remote", "rpc"] and release_node, do: traced?(release_node)),
      heap_refused: Keyword.get(opts, :heap_refused)
    }
  end

  @impl true
  def message(e) do
    "mtrace is not the allocator of this node (#{e.node}): " <>
      preload_text(e) <>
      heap_text(e) <> " The NIF loads #{e.path}. " <> next_step(e)
  end

  defp heap_text(%{heap_refused: nil}), do: ""

  defp heap_text(%{heap_refused: why}),
    do: " Mtrace.leaks/1 could not walk glibc's heap either (#{why})."

  defp preload_text(%{preloaded: %{copies: [copy | _]}, path: path}),
    do:
      "it preloads #{copy}, a copy of the file the NIF loads, with a table of its own (#{path})."

  defp preload_text(%{preloaded: %{ld_preload: value}}) when value in [nil, ""],
    do: "nothing is preloaded (LD_PRELOAD is unset)."

  defp preload_text(%{preloaded: %{ld_preload: value}}),
    do: "LD_PRELOAD=#{value} holds no mtrace.so."

  defp next_step(%{release_command: command, release_node: release} = e)
       when command in ["remote", "rpc"] and is_binary(release) do
    traced =
      case e.release_traced do
        true -> "which is traced"
        false -> "which is not traced either: start it with the block of mtrace's rel/env.sh.eex"
        nil -> "which could not be asked"
      end

    "This node was started by the release's #{command} command: it is a node of its own, " <>
      "beside the release's node #{release}, #{traced}. Ask that node: " <>
      "bin/<release> rpc 'IO.inspect(Mtrace.leaks())', " <>
      "or :erpc.call(:\"#{release}\", Mtrace, :leaks, [])."
  end

  defp next_step(e) do
    "Attach to it now with Mtrace.attach() (no restart), or start the node with: LD_PRELOAD=#{e.path} iex -S mix " <>
      "(in a project, `mix mtrace.preload` prints this; in a release, put the block of " <>
      "mtrace's rel/env.sh.eex in your rel/env.sh.eex)."
  end

  # Other files named mtrace.so mapped into this process: preloaded copies. The maps name files
  # by their real paths, the NIF's through priv's symbolic link: a file is told apart by inode.
  defp copies(path) do
    case File.read("/proc/self/maps") do
      {:ok, maps} ->
        for line <- String.split(maps, "\n"),
            [file] <- [Regex.run(~r{(/\S*mtrace\.so)$}, line, capture: :all_but_first)],
            identity(file) != identity(path),
            uniq: true,
            do: file

      {:error, _} ->
        []
    end
  end

  defp identity(file) do
    case File.stat(file) do
      {:ok, %{major_device: dev, inode: inode}} -> {dev, inode}
      {:error, _} -> file
    end
  end

  # RELEASE_NODE may lack the host, which is then this node's (the release scripts start
  # `remote` and `rpc` nodes on the same host, with the same kind of name).
  defp full_name(nil), do: nil

  defp full_name(name) do
    case {String.contains?(name, "@"), String.split(Atom.to_string(node()), "@")} do
      {false, [_, host]} -> name <> "@" <> host
      _ -> name
    end
  end

  defp traced?(release) do
    :erpc.call(String.to_atom(release), Mtrace, :stats, [], 2_000).recording
  catch
    _, _ -> nil
  end
end
