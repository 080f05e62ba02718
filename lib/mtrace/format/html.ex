defmodule Mtrace.Format.Html do
  @moduledoc false
  @behaviour Mtrace.Format
  # A flame graph (an icicle: callers on top, the allocating frames at the bottom) of the live
  # bytes, as one HTML file with the SVG and a little script inside: no network, nothing
  # external. Click a frame to zoom into it (the top bar zooms out), search to highlight
  # (Ctrl-F or the button), hover for bytes, blocks, share and file:line. Colours by library,
  # so that a NIF stands out from the VM.

  alias Mtrace.Format

  @width 1200
  @row 18

  @style """
  body { font-family: Helvetica, Arial, sans-serif; margin: 8px; }
  #bar { margin-bottom: 4px; }
  #flame text { font-size: 12px; pointer-events: none; fill: #000; }
  #flame rect { stroke: #fff; stroke-width: 0.5; cursor: pointer; }
  #flame .hit rect { fill: #ee00ee !important; }
  #flame .off { display: none; }
  #status { font-size: 12px; height: 16px; }
  """

  @script """
  (function () {
    var W = #{@width};
    var cells = Array.prototype.slice.call(document.querySelectorAll("#flame g.f"));
    function show(x0, w0, d0) {
      cells.forEach(function (g) {
        var x = +g.dataset.x, w = +g.dataset.w, d = +g.dataset.d;
        var inside = x + w > x0 + 1e-9 && x < x0 + w0 - 1e-9;
        var above = d < d0 && x <= x0 + 1e-9 && x + w >= x0 + w0 - 1e-9;
        g.classList.toggle("off", !(inside && (d >= d0 || above)));
        var nx = above ? 0 : (x - x0) / w0 * W, nw = above ? W : w / w0 * W;
        var r = g.querySelector("rect"), t = g.querySelector("text");
        r.setAttribute("x", nx); r.setAttribute("width", Math.max(nw - 0.5, 0));
        t.setAttribute("x", nx + 3);
        var label = g.querySelector("title").textContent.split("\\n")[0];
        var chars = Math.floor((nw - 6) / 7);
        t.textContent = chars < 3 ? "" : label.length <= chars ? label : label.slice(0, chars - 2) + "..";
      });
    }
    cells.forEach(function (g) {
      g.addEventListener("click", function () { show(+g.dataset.x, +g.dataset.w, +g.dataset.d); });
      g.addEventListener("mouseover", function () {
        document.getElementById("status").textContent =
          g.querySelector("title").textContent.replace(/\\n/g, " | ");
      });
    });
    document.getElementById("reset").addEventListener("click", function () { show(0, 1, 0); });
    function search(term) {
      var re = new RegExp(term), total = 0;
      cells.forEach(function (g) {
        var label = g.querySelector("title").textContent.split("\\n")[0];
        var hit = term !== "" && re.test(label);
        g.classList.toggle("hit", hit);
      });
      var roots = cells.filter(function (g) { return g.classList.contains("hit"); });
      roots.forEach(function (g) {
        var x = +g.dataset.x, w = +g.dataset.w, d = +g.dataset.d;
        var covered = roots.some(function (o) {
          return o !== g && +o.dataset.d < d && +o.dataset.x <= x && +o.dataset.x + +o.dataset.w >= x + w;
        });
        if (!covered) total += w;
      });
      document.getElementById("matched").textContent =
        term === "" ? "" : "matched: " + (100 * total).toFixed(2) + "%";
    }
    window.mtraceSearch = search;
    document.getElementById("search").addEventListener("click", function () {
      search(prompt("Search (a regular expression)", "") || "");
    });
    document.addEventListener("keydown", function (e) {
      if ((e.ctrlKey || e.metaKey) && e.key === "f") { e.preventDefault(); document.getElementById("search").click(); }
    });
    if (location.hash.length > 1) search(decodeURIComponent(location.hash.slice(1)));
  })();
  """

  @impl true
  def render(sites, opts) do
    root = Format.tree(sites)
    title = Keyword.get(opts, :title, "mtrace: live bytes by call path")
    {cells, depth} = layout(root, 0, 0.0, {root.bytes, hues(root)}, [], 0)
    height = (depth + 1) * @row + 60

    [
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>",
      esc(title),
      "</title>\n<style>",
      @style,
      "</style></head><body>\n<div id=\"bar\"><b>",
      esc(title),
      "</b> <button id=\"search\">Search</button> <button id=\"reset\">Reset zoom</button> ",
      "<span id=\"matched\"></span></div>\n",
      ~s|<svg id="flame" xmlns="http://www.w3.org/2000/svg" width="#{@width}" height="#{height}">\n|,
      Enum.reverse(cells),
      "</svg>\n<div id=\"status\">&nbsp;</div>\n<script>",
      @script,
      "</script></body></html>\n"
    ]
  end

  # Depth-first, each node at its x (a fraction of the total) and depth; returns the cells and
  # the deepest depth.
  defp layout(node, depth, x, {total, _} = ctx, acc, deepest) do
    w = if total > 0, do: node.bytes / total, else: 0.0
    acc = [cell(node, depth, x, w, ctx) | acc]

    {acc, deepest, _} =
      Enum.reduce(node.children, {acc, max(depth, deepest), x}, fn child, {acc, deepest, cx} ->
        {acc, deepest} = layout(child, depth + 1, cx, ctx, acc, deepest)
        {acc, deepest, cx + child.bytes / total}
      end)

    {acc, deepest}
  end

  defp cell(node, depth, x, w, {total, hues}) do
    info =
      "#{node.label}\n#{node.library}\n#{node.bytes} bytes in #{node.blocks} blocks " <>
        "(#{Format.percent(node.bytes, total)})"

    px = x * @width
    pw = w * @width
    y = depth * @row + 30

    ~s|<g class="f" data-x="#{num(x)}" data-w="#{num(w)}" data-d="#{depth}">| <>
      ~s|<title>#{esc(info)}</title>| <>
      ~s|<rect x="#{num(px)}" y="#{y}" width="#{num(max(pw - 0.5, 0.0))}" height="#{@row - 1}" | <>
      ~s|fill="#{colour(hues, node.library)}" rx="2"/>| <>
      ~s|<text x="#{num(px + 3)}" y="#{y + 13}">#{esc(fit(node.label, pw))}</text></g>\n|
  end

  defp fit(label, pw) do
    chars = trunc((pw - 6) / 7)

    cond do
      chars < 3 -> ""
      String.length(label) <= chars -> label
      true -> String.slice(label, 0, chars - 2) <> ".."
    end
  end

  # A hue per library, the libraries taken in order of their names and spread by the golden
  # angle, so that no two of a picture's libraries look alike (hashes put libstdc++ and a NIF
  # next to each other). The root is grey.
  defp hues(root) do
    root
    |> libraries()
    |> Enum.uniq()
    |> Enum.sort()
    |> Enum.with_index()
    |> Map.new(fn {lib, i} -> {lib, round(rem(trunc(i * 137.508 * 1000), 360_000) / 1000)} end)
  end

  defp libraries(node), do: [node.library | Enum.flat_map(node.children, &libraries/1)]

  defp colour(_hues, ""), do: "#cccccc"
  defp colour(hues, library), do: "hsl(#{Map.fetch!(hues, library)}, 70%, 65%)"

  defp num(f) when is_float(f), do: :erlang.float_to_binary(f, decimals: 6)
  defp num(n), do: Integer.to_string(n)

  defp esc(text) do
    text
    |> String.replace("&", "&amp;")
    |> String.replace("<", "&lt;")
    |> String.replace(">", "&gt;")
    |> String.replace("\"", "&quot;")
  end
end
