defmodule Mtrace.Test.Report do
  @moduledoc false
  # Helpers of the tests of mtrace outside the BEAM: builds test/report's programs, runs them with
  # an explicit environment, and parses the text reports.

  @root Path.expand("../..", __DIR__)

  def root, do: @root
  def so, do: Path.join(@root, "priv/mtrace.so")
  def bin(name), do: Path.join(@root, "test/report/bin/#{name}")
  def mtrace, do: Path.join(@root, "bin/mtrace")

  @doc "Builds the programs (safe to run from several test modules at once)."
  def build!, do: Mtrace.Test.Helpers.make!(Path.join(@root, "test/report"))

  @doc """
  Runs program with args and env (a nil value unsets; LD_PRELOAD defaults to the library, give
  nil to run without it). Options: :cd, :timeout (seconds, 60). Returns {stdout and stderr, exit
  status}.
  """
  def run(program, args, env, opts \\ []) do
    # Every variable the library reads, unset unless given: the test node has its own.
    env =
      Map.new(Mtrace.Test.Helpers.variables(), &{&1, nil})
      |> Map.put("LD_PRELOAD", so())
      |> Map.merge(Map.new(env))

    # Preloaded into the program alone, not into timeout: env sets it just before the exec.
    preload = env["LD_PRELOAD"]
    command = if preload, do: ["env", "LD_PRELOAD=#{preload}", program], else: [program]

    System.cmd("timeout", ["#{Keyword.get(opts, :timeout, 60)}" | command ++ args],
      env: Map.to_list(%{env | "LD_PRELOAD" => nil}),
      cd: Keyword.get(opts, :cd, @root),
      stderr_to_stdout: true
    )
  end

  @doc """
  Plants a symbolic link at link to a file "victim" beside it, holding "precious", as an attacker
  would at a path mtrace writes; returns the victim's path.
  """
  def plant_link!(link) do
    victim = Path.join(Path.dirname(link), "victim")
    File.write!(victim, "precious")
    File.ln_s!(victim, link)
    victim
  end

  @doc "The rows sql gives on a CSV file imported into sqlite3 as table t, as lists of fields."
  def sqlite(file, sql) do
    {out, 0} =
      System.cmd("sqlite3", ["-bail", ":memory:", "-cmd", ".import --csv #{file} t", sql],
        env: [{"LD_PRELOAD", nil}],
        stderr_to_stdout: true
      )

    for line <- String.split(out, "\n", trim: true), do: String.split(line, "|")
  end

  @doc "The lines of out that mtrace itself wrote as errors or warnings."
  def said(out),
    do:
      out
      |> String.split("\n")
      |> Enum.filter(&String.starts_with?(&1, "mtrace: "))
      |> Enum.reject(&String.starts_with?(&1, "mtrace: end of report"))

  @doc "The reports in a text, parsed, in order."
  def reports(text) do
    Regex.split(~r/^(?=mtrace report \d+: )/m, text, trim: true)
    |> Enum.filter(&String.starts_with?(&1, "mtrace report "))
    |> Enum.map(&parse/1)
  end

  def report!(text) do
    [report] = reports(text)
    report
  end

  defp parse(text) do
    lines = String.split(text, "\n")

    [_, seq, prog, pid, rest] =
      Regex.run(~r/^mtrace report (\d+): (\S+), pid (\d+), (.*)$/, hd(lines))

    %{
      seq: String.to_integer(seq),
      prog: prog,
      pid: String.to_integer(pid),
      title: rest,
      live:
        amount(
          text,
          ~r/^  (?:leaked at exit|lost now|live heap)(?: \(estimated\))?: (\d+) bytes in (\d+) blocks?(?: \(\d+ direct, \d+ indirect\))?$/m
        ),
      lost:
        case Regex.run(
               ~r/^  (?:leaked at exit|lost now): \d+ bytes in \d+ blocks? \((\d+) direct, (\d+) indirect\)$/m,
               text
             ) do
          [_, d, i] -> {String.to_integer(d), String.to_integer(i)}
          nil -> nil
        end,
      untabled:
        amount(
          text,
          ~r/^  live at exit without a record \(table full; see MTRACE_SLOTS_MAX\): (\d+) bytes in (\d+) blocks?$/m
        ),
      reachable:
        amount(text, ~r/^  still reachable (?:at exit|now): (\d+) bytes in (\d+) blocks?$/m),
      unrecorded: number(text, ~r/^  glibc's heap walked: (\d+) live blocks without a record/m),
      peak: number(text, ~r/^  peak live heap(?: \(estimated\))?: (\d+) bytes$/m),
      estimated:
        text =~
          ~r/^(?:  (?:leaked at exit|live heap|peak live heap)|leaks|live|still reachable) \(estimated\): /m,
      sampled: number(text, ~r/^  sampled: (\d+) allocations, about one per \d+ bytes/m),
      tracked: amount(text, ~r/^  tracked \(mtrace_track\): (\d+) bytes in (\d+) resources?$/m),
      calls: calls(text),
      dropped: number(text, ~r/^  dropped: (\d+) allocations/m),
      stacks_dropped: number(text, ~r/, (\d+) recorded without a stack/m),
      unmatched_frees: number(text, ~r/^  frees without a record: (\d+)$/m),
      sites: text |> String.split("\nstill reachable: ") |> hd() |> String.split("\n") |> sites(),
      reachable_sites:
        case String.split(text, "\nstill reachable: ", parts: 2) do
          [_, rest] -> sites(String.split(rest, "\n"))
          [_] -> nil
        end,
      totals:
        case Regex.run(
               ~r/^changes since [^:]+: allocated (\d+) bytes in (\d+) blocks?, freed (\d+) bytes in (\d+) blocks?, net ([+-]?\d+) bytes in ([+-]?\d+) blocks?/m,
               text
             ) do
          [_ | numbers] -> Enum.map(numbers, &String.to_integer/1)
          nil -> nil
        end,
      more:
        amount(text, ~r/^\.\.\. and \d+ more sites?: ([+-]?\d+) bytes in ([+-]?\d+) blocks?$/m),
      complete: String.contains?(text, "mtrace: end of report #{seq}")
    }
  end

  defp number(text, re) do
    case Regex.run(re, text) do
      [_, n] -> String.to_integer(n)
      nil -> nil
    end
  end

  defp amount(text, re) do
    case Regex.run(re, text) do
      [_, bytes, blocks] -> {String.to_integer(bytes), String.to_integer(blocks)}
      nil -> nil
    end
  end

  defp calls(text) do
    case Regex.run(~r/^  calls: (.*)$/m, text) do
      [_, list] ->
        for pair <- String.split(list, ", "), into: %{} do
          [name, n] = String.split(pair, " ")
          {name, String.to_integer(n)}
        end

      nil ->
        %{}
    end
  end

  @site ~r/^([+-]?\d+) bytes in ([+-]?\d+) blocks?(?: lost \((\d+) direct, (\d+) indirect\)(?: \(\d+ possibly: \w+\))?)?(?: \(allocated (\d+) bytes in (\d+) blocks?, freed (\d+) bytes in (\d+) blocks?\))?, site \d+ of \d+$/
  @frame ~r/^    (?:at|by) 0x[0-9a-f]+: (.*)$/

  defp sites(lines) do
    {sites, current} =
      Enum.reduce(lines, {[], nil}, fn line, {done, cur} ->
        site = Regex.run(@site, line)
        frame = cur && Regex.run(@frame, line)

        cond do
          site ->
            {push(done, cur), new_site(site)}

          frame ->
            [_, text] = frame
            {done, %{cur | frames: cur.frames ++ [frame_of(text)]}}

          true ->
            {done, cur}
        end
      end)

    push(sites, current) |> Enum.reverse()
  end

  # A frame's text, as {name, where}: "fn (file.c:12) path+0xoff" gives {fn, "file.c:12"},
  # "fn (path)", "?? (no module)" and "?? (unloaded or replaced)" what is in the parentheses,
  # "path+0xoff" {"??", path}; a frame of an unloaded library ends in " [unloaded]", which is
  # dropped.
  @doc false
  def frame_of(text) do
    text = String.replace_suffix(text, " [unloaded]", "")

    with nil <- Regex.run(~r/^(.*?) \(([^()]*:\d+)\) .+\+0x[0-9a-f]+$/, text),
         nil <- Regex.run(~r/^(.*) \(([^()]*)\)$/, text) do
      {"??", text |> String.split("+0x") |> hd()}
    else
      [_, name, where] -> {name, where}
    end
  end

  @doc "Whether a frame's place (the second of its pair) is in mtrace.so or its sources."
  def tracer?(where) do
    sources = Path.wildcard(Path.join(@root, "c_src/**/*.c")) |> Enum.map(&Path.basename/1)
    where == so() or (where =~ ~r/:\d+$/ and hd(String.split(where, ":")) in sources)
  end

  @doc "Whether a frame's place is a line of one of the given source files."
  def line_in?(where, files), do: where =~ ~r/:\d+$/ and hd(String.split(where, ":")) in files

  defp push(done, nil), do: done
  defp push(done, site), do: [site | done]

  defp new_site([_, bytes, blocks | rest]) do
    [direct, indirect, ab, an, fb, fn_] =
      (rest ++ List.duplicate("", 6 - length(rest)))
      |> Enum.map(fn
        "" -> nil
        n -> String.to_integer(n)
      end)

    %{
      bytes: String.to_integer(bytes),
      blocks: String.to_integer(blocks),
      lost: direct && {direct, indirect},
      allocated: ab && {ab, an},
      freed: fb && {fb, fn_},
      frames: []
    }
  end

  @doc "Function names of a site's frames, innermost first."
  def names(site), do: Enum.map(site.frames, &elem(&1, 0))

  @doc "The one site whose stack has a frame named fun."
  def site!(report, fun) do
    case Enum.filter(report.sites, &(fun in names(&1))) do
      [site] ->
        site

      other ->
        raise "expected one site through #{fun}, got #{length(other)}: #{inspect(report.sites)}"
    end
  end

  @doc "Waits until fun returns a truthy value (every 50 ms, at most ms)."
  def wait_until(fun, ms \\ 10_000) do
    cond do
      value = fun.() -> value
      ms <= 0 -> flunk_timeout()
      true -> Process.sleep(50) && wait_until(fun, ms - 50)
    end
  end

  defp flunk_timeout, do: raise(ExUnit.AssertionError, message: "timed out waiting")
end
