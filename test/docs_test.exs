defmodule Mtrace.DocsTest do
  # The README is a front page and docs/ holds a page a topic: every relative link and anchor
  # between them resolves, the front page stays within its budget, and no page carries a commit
  # hash (measured history goes to commit messages and bench/README.md's log).
  use ExUnit.Case, async: true

  @root Path.expand("..", __DIR__)
  @pages [
    "README.md"
    | Path.wildcard(Path.join(@root, "docs/*.md")) |> Enum.map(&Path.relative_to(&1, @root))
  ]

  test "every relative link of the README and docs/ reaches a file, and every anchor a heading" do
    broken =
      for page <- @pages ++ ["bench/README.md"],
          [link] <-
            Regex.scan(~r/\]\(([^)\s]+)\)/, File.read!(Path.join(@root, page)),
              capture: :all_but_first
            ),
          not String.starts_with?(link, "http"),
          [path | anchor] = String.split(link, "#", parts: 2),
          target = if(path == "", do: page, else: Path.join(Path.dirname(page), path)),
          file = Path.expand(target, @root),
          not File.exists?(file) or
            (anchor != [] and Path.extname(file) == ".md" and hd(anchor) not in anchors(file)),
          do: "#{page}: #{link}"

    assert broken == []
  end

  test "the README is a front page: at most 250 lines and 20 KB, its two commands first" do
    text = File.read!(Path.join(@root, "README.md"))
    assert byte_size(text) <= 20_000
    assert length(String.split(text, "\n")) <= 251
    assert text =~ ~r/\A# mtrace\n\n    bin\/demo .*\n    bin\/test .*\n/
  end

  # docs/architecture.md has a table a layer of c_src/, and each names every file of its folder.
  test "docs/architecture.md names every file of c_src/ under its layer" do
    text = File.read!(Path.join(@root, "docs/architecture.md"))

    unnamed =
      for file <- Path.wildcard(Path.join(@root, "c_src/*/*.[ch]")),
          layer = file |> Path.dirname() |> Path.basename(),
          [_, table] <- [
            Regex.run(~r/\*\*`#{layer}\/`[^\n]*\n\n((?:\|[^\n]*\n)+)/, text) || [nil, ""]
          ],
          name = Path.basename(file),
          not (table =~ "`#{name}`" or table =~ "`#{Path.rootname(name)}.[ch]`"),
          do: Path.relative_to(file, @root)

    assert unnamed == []
  end

  test "no page of the README or docs/ carries a commit hash" do
    hashes =
      for page <- @pages,
          [hash] <-
            Regex.scan(
              ~r/(?<![0-9A-Za-z_])([0-9a-f]{7,12})(?![0-9A-Za-z_])/,
              File.read!(Path.join(@root, page)),
              capture: :all_but_first
            ),
          hash =~ ~r/[a-f]/ and hash =~ ~r/[0-9]/,
          do: "#{page}: #{hash}"

    assert hashes == []
  end

  # A Markdown file's headings as GitHub makes their anchors, outside code blocks.
  defp anchors(file) do
    {anchors, _} =
      file
      |> File.read!()
      |> String.split("\n")
      |> Enum.reduce({[], false}, fn
        "```" <> _, {acc, fenced} -> {acc, not fenced}
        "#" <> _ = line, {acc, false} -> {[anchor(line) | acc], false}
        _, state -> state
      end)

    anchors
  end

  defp anchor(line) do
    line
    |> String.trim_leading("#")
    |> String.trim()
    |> String.downcase()
    |> String.replace(~r/[^a-z0-9 _-]/, "")
    |> String.replace(" ", "-")
  end
end
