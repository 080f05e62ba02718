defmodule Mix.Tasks.Compile.Mtrace do
  @moduledoc false
  # Defined here, not in lib/, so that it exists before this project (or a project that depends
  # on it) compiles anything: hex.pm and elixir_make are out of reach.
  use Mix.Task.Compiler

  @impl true
  def run(_args) do
    make = System.get_env("MAKE", "make")
    dir = Path.join(__DIR__, "c_src")

    case System.cmd(make, ["-C", dir], stderr_to_stdout: true) do
      {out, 0} ->
        if out =~ ~r/\bcc\b|mv /, do: Mix.shell().info(String.trim_trailing(out))
        {:ok, []}

      {out, status} ->
        Mix.shell().error(out)
        Mix.raise("#{make} -C #{dir} failed with status #{status}")
    end
  end

  @impl true
  def clean do
    System.cmd(System.get_env("MAKE", "make"), ["-C", Path.join(__DIR__, "c_src"), "clean"])
    :ok
  end
end

defmodule Mtrace.MixProject do
  use Mix.Project

  def project do
    [
      app: :mtrace,
      version: "0.1.0",
      elixir: "~> 1.14",
      compilers: [:mtrace | Mix.compilers()],
      elixirc_paths: elixirc_paths(Mix.env()),
      start_permanent: Mix.env() == :prod,
      deps: []
    ]
  end

  def application, do: [extra_applications: [:logger]]

  defp elixirc_paths(:test), do: ["lib", "test/support"]
  defp elixirc_paths(_), do: ["lib"]
end
