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
    * `:leaks` - when `true`, each report also scans for lost blocks (`Mtrace.leaks/1`, with
      `:library`, `:function` and `:erlang`) and logs the lost sites this watch has not logged
      before. A block found lost stays lost until it is freed, so the scans add up: a lost block
      that a stale word hid from one scan is logged by a later one. Each scan collects every
      process first, as `Mtrace.leaks/1` does by default. Default `false`.

  A report is one log entry at level `:info`, a line a site, `+bytes in +blocks` and the site's
  first frames; sites that did not grow are left out, and nothing is logged when none grew. New
  lost sites are one entry at level `:warning`, a line a site: `bytes in blocks`, how many
  scans have found it (`Mtrace.Site`'s `:scans`) and its first frames. A scan that cannot call
  blocks lost (`Mtrace.IncompleteError`) is logged once as an error, and the watch goes on
  without scans. On a node without the preload it logs one error and does not start
  (`:ignore`).
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
    if Mtrace.stats().recording do
      {:ok, %{opts: opts, mark: Mtrace.mark(), left: opts[:count], lost: MapSet.new()},
       opts[:interval]}
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
    state = if opts[:leaks], do: scan(state), else: state
    state = %{state | mark: Mtrace.mark(), left: left && left - 1}
    if state.left == 0, do: {:stop, :normal, state}, else: {:noreply, state, opts[:interval]}
  end

  # Logs the lost sites not logged before, each known by its stack (or, without a record, by
  # what it holds).
  defp scan(%{opts: opts, lost: logged} = state) do
    new =
      opts
      |> Keyword.take([:library, :function, :erlang])
      |> Mtrace.leaks()
      |> Enum.reject(&MapSet.member?(logged, lost_key(&1)))

    if new != [], do: Logger.warning(lost_report(new))
    %{state | lost: Enum.into(new, logged, &lost_key/1)}
  rescue
    e in Mtrace.IncompleteError ->
      Logger.error("Mtrace.Watch: no more scans for lost blocks: " <> Exception.message(e))
      %{state | opts: Keyword.put(opts, :leaks, false)}
  end

  defp lost_key(%Mtrace.Site{stack: [], contents: contents}), do: contents
  defp lost_key(%Mtrace.Site{stack: stack}), do: stack

  defp lost_report(sites) do
    lines =
      for s <- sites do
        found = if s.scans, do: ", found by #{s.scans} #{plural(s.scans, "scan")}", else: ""
        what = if s.stack == [], do: s.contents, else: frames(s)
        "  #{s.bytes} bytes in #{s.blocks} #{plural(s.blocks, "block")}#{found}: #{what}"
      end

    Enum.join(["mtrace: new lost sites" | lines], "\n")
  end

  defp plural(1, word), do: word
  defp plural(_, word), do: word <> "s"

  defp frames(site),
    do: site.stack |> Enum.take(4) |> Enum.map_join(" < ", &Mtrace.Format.label/1)

  defp report(sites) do
    lines =
      for s <- sites,
          do: "  +#{s.bytes} bytes in +#{s.blocks} #{plural(s.blocks, "block")}: #{frames(s)}"

    Enum.join(["mtrace: growth by call site since the previous report" | lines], "\n")
  end
end
