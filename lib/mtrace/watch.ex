defmodule Mtrace.Watch do
  @moduledoc """
  Logs, every `interval`, the call sites whose live memory grew most since the previous report:
  tracelloc's periodic view, in a node, through `Logger`.

  Put it in a supervision tree:

      children = [{Mtrace.Watch, interval: 60_000, library: "my_nif"}]

  or start one from iex with `Mtrace.watch/1` and stop it with `Mtrace.unwatch/0`.

  ## Options

    * `:interval` - milliseconds between two reports. Default `10_000`.
    * `:n` - sites per report, largest growth first. Default `5`.
    * `:count` - reports to write before stopping; `nil` (the default) for no end.
    * `:group`, `:library`, `:function`, `:erlang` - as in `Mtrace.diff/2`.

  A report is one log entry at level `:info`, a line a site, `+bytes in +blocks` and the site's
  first frames; sites that did not grow are left out, and nothing is logged when none grew. On a
  node without the preload it logs one error and does not start (`:ignore`).
  """

  use GenServer
  require Logger

  @doc false
  @spec child_spec(keyword()) :: Supervisor.child_spec()
  def child_spec(opts) do
    %{id: __MODULE__, start: {__MODULE__, :start_link, [opts]}, restart: :transient}
  end

  @doc "Starts a watch linked to the caller; see the module's options."
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts) do
    {name, opts} = Keyword.pop(opts, :name)
    opts = Mtrace.Options.validate!(:watch, "Mtrace.Watch", opts)
    GenServer.start_link(__MODULE__, opts, if(name, do: [name: name], else: []))
  end

  @impl true
  def init(opts) do
    if Mtrace.stats().preloaded do
      {:ok, %{opts: opts, mark: Mtrace.mark(), left: opts[:count]}, opts[:interval]}
    else
      Logger.error(
        "Mtrace.Watch: mtrace is not this node's allocator (no LD_PRELOAD of " <>
          "#{Mtrace.Nif.library_path()}); not watching"
      )

      :ignore
    end
  end

  @impl true
  def handle_info(:timeout, %{opts: opts, mark: mark, left: left} = state) do
    filters = Keyword.take(opts, [:group, :library, :function, :erlang])

    grown = mark |> Mtrace.diff(filters) |> Enum.filter(&(&1.bytes > 0)) |> Enum.take(opts[:n])
    if grown != [], do: Logger.info(report(grown))
    state = %{state | mark: Mtrace.mark(), left: left && left - 1}
    if state.left == 0, do: {:stop, :normal, state}, else: {:noreply, state, opts[:interval]}
  end

  defp report(sites) do
    lines =
      for s <- sites do
        frames = s.stack |> Enum.take(4) |> Enum.map_join(" < ", &Mtrace.Format.label/1)

        "  +#{s.bytes} bytes in +#{s.blocks} #{if s.blocks == 1, do: "block", else: "blocks"}: " <>
          frames
      end

    Enum.join(["mtrace: growth by call site since the previous report" | lines], "\n")
  end
end
