defmodule Mtrace.CLI.Node do
  @moduledoc false
  # bin/mtrace attach|leaks|top|why|stats|detach --node NAME: the readers of Mtrace run on a BEAM
  # node that has neither mtrace nor Elixir in its code (Mtrace.Remote loads what they need),
  # printed as the library's own report prints them (Mtrace.Format.Text), or in a format of
  # Mtrace.write/3. Every refusal is one "mtrace:" line and exit status 2; a reader's own error
  # (Mtrace.IncompleteError, ...) its message and status 1.

  alias Mtrace.{CLI, Remote, Target}

  @switches [
    node: :string,
    cookie: :string,
    format: :string,
    output: :string,
    depth: :integer,
    min_age: :float,
    library: :string,
    reachable: :boolean
  ]

  @spec main([String.t()]) :: no_return()
  def main([command | args]) do
    {opts, rest} = OptionParser.parse!(args, strict: @switches, aliases: [o: :output])

    with {:ok, name} <- fetch(opts, :node),
         {:ok, format} <- format(opts[:format]),
         {:ok, node} <- Remote.connect(name, opts[:cookie]),
         {:ok, text} <- run(command, node, rest, Keyword.put(opts, :format, format)) do
      CLI.write(opts[:output], text)
      System.halt(0)
    else
      {:error, line} -> CLI.die(line)
    end
  rescue
    e in OptionParser.ParseError -> CLI.die(Exception.message(e) <> " (see mtrace --help)")
    e in [Mtrace.IncompleteError, Mtrace.NotPreloadedError, ArgumentError] -> fail(e)
  end

  defp fetch(opts, key) do
    case opts[key] do
      nil -> {:error, "--#{key} NAME is needed"}
      value -> {:ok, value}
    end
  end

  defp run("attach", node, [], opts) do
    with {:ok, path, how} <- Remote.prepare(node) do
      case Target.within(node, fn -> Mtrace.attach(Keyword.take(opts, [:depth])) end) do
        :ok ->
          {:ok,
           "mtrace: attached to #{node} (#{os_pid(node)}), which records from now on; " <>
             "its library: #{path}\n"}

        {:error, why} ->
          Remote.withdraw(node, how)
          {:error, why}
      end
    end
  end

  defp run("detach", node, [], _opts) do
    with :ok <- recording(node),
         :ok <- Target.within(node, &Mtrace.detach/0) do
      {:ok,
       "mtrace: detached from #{node}: every rewritten word has its old value back; the " <>
         "library stays loaded there, inert, and its records readable\n"}
    end
  end

  defp run("leaks", node, [], opts) do
    with :ok <- recording(node) do
      filters = Keyword.take(opts, [:min_age, :library])
      sites = Target.within(node, fn -> Mtrace.leaks(filters) end)
      {:ok, render(sites, :leaks, node, opts)}
    end
  end

  defp run("top", node, rest, opts) do
    with :ok <- recording(node),
         {:ok, n} <- count(rest) do
      sites = Target.within(node, fn -> Mtrace.top(n, Keyword.take(opts, [:library])) end)
      {:ok, render(sites, :live, node, opts)}
    end
  end

  defp run("why", node, [address], _opts) do
    with :ok <- recording(node),
         {:ok, address} <- address(address) do
      case Target.within(node, fn -> Mtrace.why(address) end) do
        nil -> {:ok, "lost: no chain of pointers from a root reaches #{address}\n"}
        {:error, :not_a_block} -> {:error, "no live block holds #{address} in #{node}"}
        path -> {:ok, inspect(path, pretty: true, width: 100) <> "\n"}
      end
    end
  end

  defp run("stats", node, [], _opts) do
    with :ok <- loaded(node) do
      stats = Target.within(node, &Mtrace.stats/0)
      {:ok, Enum.map_join(Enum.sort(stats), "", fn {k, v} -> "#{k}: #{inspect(v)}\n" end)}
    end
  end

  defp run(command, _node, rest, _opts) when command in ~w(attach detach leaks stats why top),
    do: {:error, "#{command} --node takes no #{Enum.join(rest, " ")} (see mtrace --help)"}

  defp run(command, _node, _rest, _opts),
    do: {:error, "#{command} does not take --node (see mtrace --help)"}

  defp loaded(node) do
    if :erpc.call(node, :erlang, :function_exported, [:mtrace_nif, :loaded, 0]) and
         :erpc.call(node, :mtrace_nif, :loaded, []),
       do: :ok,
       else: {:error, "mtrace is not in #{node}: bin/mtrace attach --node #{node} first"}
  end

  defp recording(node) do
    with :ok <- loaded(node) do
      case Target.within(node, &Mtrace.Nif.stats_nif/0) do
        %{recording: true} -> :ok
        _ -> {:error, "mtrace does not record in #{node}: bin/mtrace attach --node #{node} first"}
      end
    end
  end

  defp count([]), do: {:ok, 10}

  defp count([n]) do
    case Integer.parse(n) do
      {n, ""} when n >= 0 -> {:ok, n}
      _ -> {:error, "top --node takes a number of sites, not #{n}"}
    end
  end

  defp address(text) do
    case Integer.parse(String.replace_prefix(String.downcase(text), "0x", ""), 16) do
      {a, ""} -> {:ok, a}
      _ -> {:error, "why --node takes a block's address in hexadecimal, not #{text}"}
    end
  end

  defp format(nil), do: {:ok, :text}
  defp format(name), do: Mtrace.Format.parse(name)

  defp render(sites, what, node, opts) do
    case opts[:format] do
      :text ->
        Mtrace.Format.Text.render(sites, title: "#{node}, #{os_pid(node)}, on request", what: what)

      format ->
        Mtrace.render(sites, format)
    end
  end

  defp os_pid(node), do: "pid #{:erpc.call(node, :os, :getpid, [])}"

  defp fail(e) do
    IO.puts(:stderr, "mtrace: " <> Exception.message(e))
    System.halt(1)
  end
end
