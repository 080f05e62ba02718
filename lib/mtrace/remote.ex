defmodule Mtrace.Remote do
  @moduledoc false
  # bin/mtrace --node: a running BEAM node that has neither mtrace nor Elixir on its code path,
  # reached as a hidden node. What the readers need in it is the NIF and src/'s Erlang modules
  # (the readers' bodies, and the Erlang API with them): their code goes over distribution
  # (code:load_binary/3), the library's bytes too, written by the node itself where it may write,
  # so that its user, PrivateTmp and ProtectHome do not matter. Its code path and applications
  # are left as they were. The readers run there (Mtrace.Target), their maps made structs here:
  # the results are the same as in the node itself.

  @modules [
    :mtrace_nif,
    :mtrace_node,
    :mtrace_options,
    :mtrace_sites,
    :mtrace_read,
    :mtrace_text,
    :mtrace
  ]

  @doc """
  Connects to `name` (an atom, or a string; `name@host`, the host this one's when left out):
  `{:ok, node}`, or `{:error, line}` saying what stands in the way and what to do. Distribution is
  started here first, as a hidden node of the name kind the target's name asks for.
  """
  @spec connect(String.t(), String.t() | nil) :: {:ok, node()} | {:error, String.t()}
  def connect(name, cookie) do
    {node, kind} = full_name(name)

    with :ok <- distribution(kind),
         {cookie_from, _} = cookie(node, cookie),
         :ok <- reach(node, cookie_from),
         :ok <- same_release(node) do
      {:ok, node}
    end
  end

  defp full_name(name) do
    name = to_string(name)

    {name, host} =
      case String.split(name, "@", parts: 2) do
        [name, host] -> {name, host}
        [name] -> {name, :inet_db.gethostname() |> to_string()}
      end

    kind = if String.contains?(host, "."), do: :longnames, else: :shortnames
    {String.to_atom("#{name}@#{host}"), kind}
  end

  defp distribution(kind) do
    me = :"mtrace_cli_#{System.pid()}"

    case :net_kernel.start(me, %{name_domain: kind, hidden: true}) do
      {:ok, _} ->
        :ok

      {:error, {:already_started, _}} ->
        :ok

      {:error, reason} ->
        {:error,
         "cannot start distribution here (#{inspect(reason)}): is epmd running " <>
           "(epmd -daemon), and is the name #{me} free?"}
    end
  end

  # The cookie: --cookie, else $RELEASE_COOKIE (an Elixir release's), else the one the VM read
  # from $HOME/.erlang.cookie. Returns where it came from, for the refusal's line.
  defp cookie(node, given) do
    case {given, System.get_env("RELEASE_COOKIE")} do
      {nil, nil} ->
        {"#{Path.join(System.user_home() || "~", ".erlang.cookie")}", Node.get_cookie()}

      {nil, env} ->
        Node.set_cookie(node, String.to_atom(env))
        {"$RELEASE_COOKIE", env}

      {given, _} ->
        Node.set_cookie(node, String.to_atom(given))
        {"--cookie", given}
    end
  end

  defp reach(node, cookie_from) do
    [name, host] = node |> Atom.to_string() |> String.split("@", parts: 2)

    cond do
      Node.connect(node) ->
        :ok

      not known?(name, host) ->
        {:error,
         "epmd on #{host} knows no node named #{name} (#{names(host)}): check the name " <>
           "(and -sname against -name)"}

      true ->
        {:error,
         "#{node} refused the connection: a wrong cookie (the one from #{cookie_from}; give " <>
           "the node's with --cookie), or its distribution port is closed to this host " <>
           "(a firewall, inet_dist_use_interface)"}
    end
  end

  defp known?(name, host) do
    case :erl_epmd.names(String.to_charlist(host)) do
      {:ok, names} -> Enum.any?(names, fn {n, _} -> to_string(n) == name end)
      _ -> false
    end
  end

  defp names(host) do
    case :erl_epmd.names(String.to_charlist(host)) do
      {:ok, []} -> "it knows none"
      {:ok, names} -> "it knows " <> Enum.map_join(names, ", ", fn {n, _} -> to_string(n) end)
      {:error, reason} -> "epmd did not answer: #{inspect(reason)}"
    end
  end

  defp same_release(node) do
    mine = :erlang.system_info(:otp_release)

    case :erpc.call(node, :erlang, :system_info, [:otp_release]) do
      ^mine ->
        :ok

      theirs ->
        {:error,
         "#{node} runs OTP #{theirs}, and this mtrace was built for OTP #{mine}: " <>
           "build mtrace with the node's OTP release"}
    end
  end

  @doc """
  Makes sure the node has the NIF loaded: its own (a node with the mtrace application), one this
  function loaded before, or the file the node preloads (`LD_PRELOAD`, the same library and
  table); else mtrace's modules and library are loaded into it. `{:ok, path, how}` (the library
  the node runs; how: `:found`, or `{:loaded, written}`, written the file this call wrote there
  or nil), or `{:error, line}`, with whatever it loaded taken out again.
  """
  @spec prepare(node()) ::
          {:ok, String.t(), :found | {:loaded, String.t() | nil}} | {:error, String.t()}
  def prepare(node) do
    if call(node, :mtrace_nif, :loaded, []) == true,
      do: {:ok, loaded_path(node), :found},
      else: load(node)
  end

  @doc """
  Takes out of the node what prepare/1 loaded (its modules, and with them the library, which
  has rewritten nothing: an attach that was refused), and the file it wrote.
  """
  @spec withdraw(node(), :found | {:loaded, String.t() | nil}) :: :ok
  def withdraw(_node, :found), do: :ok

  def withdraw(node, {:loaded, written}) do
    unload_modules(node)
    if written, do: :erpc.call(node, :file, :delete, [written])
    :ok
  end

  defp call(node, module, fun, args) do
    :erpc.call(node, module, fun, args, 60_000)
  catch
    :error, {:exception, :undef, _} -> :undef
  end

  defp loaded_path(node) do
    node |> mapped_libraries() |> Enum.find("mtrace.so", &String.ends_with?(&1, ".so"))
  end

  defp load(node) do
    with :ok <- load_modules(node),
         {:ok, path, written} <- load_library(node) do
      {:ok, path, {:loaded, written}}
    else
      {:error, line} ->
        unload_modules(node)
        {:error, line}
    end
  end

  defp load_modules(node) do
    Enum.reduce_while(@modules, :ok, fn module, :ok ->
      {^module, beam, file} = :code.get_object_code(module)
      :erpc.call(node, :code, :purge, [module])

      case :erpc.call(node, :code, :load_binary, [module, file, beam]) do
        {:module, ^module} ->
          {:cont, :ok}

        {:error, reason} ->
          {:halt, {:error, "#{node} refused mtrace's module #{module} (#{inspect(reason)})"}}
      end
    end)
  end

  defp unload_modules(node) do
    for module <- @modules do
      :erpc.call(node, :code, :purge, [module])
      :erpc.call(node, :code, :delete, [module])
      :erpc.call(node, :code, :purge, [module])
    end
  end

  # The preloaded file where the node preloads one; else the library's bytes written to the
  # first directory where the node may write and map code, and loaded from there.
  defp load_library(node) do
    case preloaded(node) do
      nil ->
        with {:ok, path} <- write_and_load(node, directories(node), []), do: {:ok, path, path}

      path ->
        with {:ok, path} <- load_from(node, path), do: {:ok, path, nil}
    end
  end

  defp preloaded(node) do
    with value when is_list(value) <- :erpc.call(node, :os, :getenv, [~c"LD_PRELOAD"]) do
      value
      |> to_string()
      |> String.split([" ", ":"], trim: true)
      |> Enum.find(&(Path.basename(&1) == "mtrace.so"))
    else
      _ -> nil
    end
  end

  defp load_from(node, path) do
    case :erpc.call(node, :mtrace_nif, :load, [path]) do
      :ok -> {:ok, path}
      {:error, {_, text}} -> {:error, "#{node} could not load #{path}: #{text}"}
    end
  end

  defp directories(node) do
    env = for var <- [~c"TMPDIR"], dir = :erpc.call(node, :os, :getenv, [var]), dir, do: dir
    {:ok, cwd} = :erpc.call(node, :file, :get_cwd, [])
    Enum.uniq(Enum.map(env ++ [~c"/tmp", ~c"/var/tmp", ~c"/dev/shm", cwd], &to_string/1))
  end

  defp write_and_load(node, [], tried) do
    {:error,
     "#{node} could not write and load mtrace.so anywhere (#{Enum.join(Enum.reverse(tried), "; ")}): " <>
       "give it a directory it may write and map code in, as TMPDIR in its environment"}
  end

  defp write_and_load(node, [dir | dirs], tried) do
    path = Path.join(dir, "mtrace-#{System.pid()}-#{System.unique_integer([:positive])}.so")
    bytes = File.read!(Mtrace.Nif.library_path())

    case :erpc.call(node, :file, :write_file, [path, bytes, [:exclusive]]) do
      :ok ->
        case load_from(node, path) do
          {:ok, path} ->
            {:ok, path}

          {:error, _} = error ->
            :erpc.call(node, :file, :delete, [path])
            write_and_load(node, dirs, ["#{dir}: #{elem(error, 1)}" | tried])
        end

      {:error, reason} ->
        write_and_load(node, dirs, ["#{dir}: #{reason}" | tried])
    end
  end

  defp mapped_libraries(node) do
    case :erpc.call(node, :file, :read_file, [~c"/proc/self/maps"]) do
      {:ok, maps} ->
        for line <- String.split(maps, "\n"),
            [_, _, _, _, _, path | _] <- [String.split(line, " ", trim: true)],
            String.contains?(path, "mtrace"),
            uniq: true,
            do: path

      _ ->
        []
    end
  end
end
