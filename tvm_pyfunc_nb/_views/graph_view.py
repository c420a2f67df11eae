"""`NAME.graph("fn")` on screen: the graph as DOT, laid out by Graphviz, in a widget that folds.

Why Graphviz, run in the kernel, and not Google's Model Explorer (each was tried here on a
small model, offline, in headless Chromium):

- Model Explorer (`ai-edge-model-explorer` 0.1.34, a JSON graph with namespaces and node-data
  overlays) folds layers well and paints node data, but it is a Flask server on a port of its
  own: `visualize` embeds it in a cell only in Colab (in Jupyter it opens a browser tab and
  blocks the cell), so Binder would need a proxy; its page asks fonts.gstatic.com for fonts
  and draws with WebGL; it gives no static picture for a saved notebook, GitHub or nbval; and
  with the adapter it requires it weighs 480 MB.
- Graphviz (`@hpcc-js/wasm-graphviz` 1.29.2: Graphviz 16.1 compiled to WebAssembly, one
  0.8 MB file) lays out clusters, which are the `nn.Module` groups, and colours nodes from
  their DOT attributes. It runs in the browser (0.2 s to load in Chromium, offline), but the
  static picture must be made where the notebook runs, without a browser (nbclient, nbval):
  so it runs in the kernel, in `mini-racer`'s V8 (graphviz_engine.py), and its one SVG is both
  the widget's picture and the `image/svg+xml` a saved notebook and GitHub show. No server,
  no port, no CDN, the same bytes on every CPU; the widget's own script stays 2 KB, and a
  saved notebook does not carry the engine in each widget's state.

A fold is a new layout: a folded group is one box (its member count and the worst of its
members' marks) and takes its members' edges. The widget (graph_widget.js, anywidget) sends
a click to the kernel, which lays the graph out again (a tiny BERT, 179 nodes in 40 groups,
takes 0.13 s unfolded). A click on a node shows what it is: binding, op, TVMScript line,
source line, values, the overlay's word. Saved with its widget state, the picture and the
details still show; folding needs the kernel.
"""

from __future__ import annotations

from .._core.inspect.graph import INPUT, KERNEL, Graph, Node
from .._core.inspect.graph_marks import FAIL, FINITE, NONFINITE, NOT_COMPARED, PASS, TIME, Mark
from . import graphviz_engine

MAX_SHOWN = 40  # nodes and folded groups shown at first; deeper groups fold beyond that
MAX_LINE = 90  # characters of a TVMScript or source line a node's details show
FONT = "Helvetica"
_FILL = {  # level -> (fill, border)
    FAIL: ("#f8d0d0", "#b00020"),
    NONFINITE: ("#ffe0b2", "#e65100"),
    PASS: ("#dcefdc", "#2e7d32"),
    NOT_COMPARED: ("#f2f2f2", "#9e9e9e"),
    FINITE: ("#ffffff", "#777777"),
}
_PLAIN = ("#ffffff", "#777777")
_INPUT = ("#e8eef7", "#5b7bb4")
_GROUP = "#8a94a6"
_HOT = (255, 152, 0)  # the slowest node's fill; others fade to white with their time


# -- DOT ---------------------------------------------------------------------------------
def group_ids(graph: Graph) -> dict[str, str]:
    """`{module path: "g3"}`: the ids of the groups in the picture."""
    return {path: f"g{i}" for i, path in enumerate(graph.groups)}


def node_ids(graph: Graph) -> dict[str, str]:
    """`{node key: "n7"}`: the ids of the nodes in the picture (never a binding's own name, which
    DOT and SVG would need quoted)."""
    return {node.key: f"n{i}" for i, node in enumerate(graph.nodes)}


def dot(graph: Graph, folded: set[str]) -> str:
    """The DOT text of `graph` with the groups `folded` (module paths) drawn as one node each."""
    groups, nodes = group_ids(graph), node_ids(graph)
    shown = {n.key: _representative(n.group, folded) or nodes[n.key] for n in graph.nodes}
    shown = {k: groups.get(v, v) for k, v in shown.items()}
    hottest = max((n.mark.heat for n in graph.nodes if n.mark is not None), default=0.0)
    lines = [
        f'digraph "{_quoted(graph.function)}" {{',
        f'graph [fontname="{FONT}", fontsize=10, nodesep=0.25, ranksep=0.3, id="graph"];',
        f'node [shape=box, style="rounded,filled", fontname="{FONT}", fontsize=9, height=0.3, '
        'margin="0.08,0.03"];',
        'edge [color="#8a8a8a", arrowsize=0.6];',
    ]
    lines += _cluster(graph, None, folded, groups, nodes, hottest)
    edges = dict.fromkeys((shown[a], shown[b]) for a, b in graph.edges if shown[a] != shown[b])
    lines += [f'"{a}" -> "{b}";' for a, b in edges]
    return "\n".join([*lines, "}"])


def _representative(group: str, folded: set[str]) -> str | None:
    """The outermost folded group that holds `group` (a node's module path), if one does."""
    return next((path for path in _enclosing(group) if path in folded), None)


def _cluster(graph, parent, folded, groups, nodes, hottest) -> list[str]:
    """The DOT lines of what sits directly in group `parent` (None: the top): its nodes, its
    folded groups as nodes, its other groups as clusters."""
    lines = [_node_line(n, nodes[n.key], hottest) for n in graph.nodes if n.group == (parent or "")]
    for path, group in graph.groups.items():
        if group.parent != parent:
            continue
        members = graph.members(path)
        if path in folded:
            lines.append(_folded_line(graph, group.label, groups[path], members, hottest))
            continue
        tip = f"{path}: {len(members)} nodes; click the label to fold"
        lines += [
            f'subgraph "cluster_{groups[path]}" {{',
            f'id="{groups[path]}"; label="▾ {_quoted(group.label)}"; '
            f'tooltip="{_quoted(tip)}"; style="rounded"; color="{_GROUP}"; '
            'fontsize=9; labeljust="l";',
            *_cluster(graph, path, folded, groups, nodes, hottest),
            "}",
        ]
    return lines


def _node_line(node: Node, node_id: str, hottest: float) -> str:
    fill, border = _colours(node, hottest)
    label = "\n".join(p for p in (_head(node), node.shape, _mark_text(node.mark)) if p)
    width = 3 if node.mark is not None and node.mark.first else 1
    shape = ', shape="box", style="filled"' if node.kind == KERNEL else ""
    return (
        f'"{node_id}" [id="{node_id}", label="{_quoted(label)}", fillcolor="{fill}", '
        f'color="{border}", penwidth={width}, tooltip="{_quoted(tooltip(node))}"{shape}];'
    )


def _folded_line(graph: Graph, label: str, group_id: str, members, hottest: float) -> str:
    worst = graph.worst(members)
    proxy = Node(group_id, "group", "", "", (), "", mark=worst)
    fill, border = _colours(proxy, hottest)
    count = f"{len(members)} nodes"
    text = "\n".join(p for p in (f"▸ {label}", count, _mark_text(worst)) if p)
    width = 3 if worst is not None and worst.first else 1.5
    tip = f"{label}: {count}; click to unfold"
    return (
        f'"{group_id}" [id="{group_id}", label="{_quoted(text)}", shape="box3d", '
        f'style="filled", fillcolor="{fill}", color="{border}", penwidth={width}, '
        f'tooltip="{_quoted(tip)}"];'
    )


def _head(node: Node) -> str:
    if node.kind == INPUT:
        return f"{node.key} (input)"
    if node.kind == KERNEL:
        return node.op
    return f"{node.key} = {node.op}"


def _mark_text(mark: Mark | None) -> str:
    return mark.text if mark is not None else ""


def _colours(node: Node, hottest: float) -> tuple[str, str]:
    mark = node.mark
    if mark is None:
        return _INPUT if node.kind == INPUT else _PLAIN
    if mark.level == TIME:
        return _heat(mark.heat / hottest if hottest else 0.0), _PLAIN[1]
    return _FILL[mark.level]


def _heat(share: float) -> str:
    """White for no time, orange for the slowest node's."""
    return "#" + "".join(f"{round(255 - (255 - c) * share):02x}" for c in _HOT)


def _quoted(text: str) -> str:
    """`text` inside a DOT double-quoted string (a newline a line break)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# -- what a node says ----------------------------------------------------------------------
def details(node: Node) -> list[tuple[str, str]]:
    """`(label, text)` rows of what a reader asks of a node, in the widget and its tooltip."""
    rows = [("binding" if node.kind != KERNEL else "kernel", _head(node))]
    if node.kind == KERNEL:
        rows.append(("bindings", ", ".join(node.bindings)))
    rows.append(("shape", node.shape))
    rows += [("TVMScript", f"line {n}: {_short(text)}") for n, text in node.script]
    rows += [("source", _short(source)) for source in node.sources]
    if node.values:
        rows.append(("values", f"min / max / mean: {node.values}"))
    if node.mark is not None and node.mark.text:
        rows.append((node.mark.level, node.mark.text))
    return [(label, text) for label, text in rows if text]


def tooltip(node: Node) -> str:
    return "\n".join(f"{label}: {text}" for label, text in details(node))


def _short(text: str) -> str:
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 1] + "…"


# -- what is folded at first -----------------------------------------------------------------
def initial_folds(graph: Graph, most: int = MAX_SHOWN) -> set[str]:
    """The groups folded when the graph is first drawn: none if it shows at most `most` boxes,
    else every group at the deepest depth that brings it within `most` (the top groups if none
    does). The groups around the node the overlay names open, their other members folded."""
    folded: set[str] = set()
    for depth in sorted({_depth(p) for p in graph.groups}, reverse=True):
        if _shown(graph, folded) <= most:
            break
        folded = {p for p in graph.groups if _depth(p) == depth}
    focus = graph.focus
    for path in _enclosing(focus.group) if focus is not None else ():
        if path in folded:
            folded.discard(path)
            folded |= {p for p, group in graph.groups.items() if group.parent == path}
    return folded


def _depth(path: str) -> int:
    return path.count(".") + 1


def _enclosing(group: str) -> list[str]:
    """`a`, `a.b`, `a.b.c` for `a.b.c`: the groups around a node, outermost first."""
    parts = group.split(".") if group else []
    return [".".join(parts[:depth]) for depth in range(1, len(parts) + 1)]


def _shown(graph: Graph, folded: set[str]) -> int:
    """How many boxes the picture has with `folded` folded."""
    return len({_representative(n.group, folded) or n.key for n in graph.nodes})


def picture(graph: Graph, folded: set[str]) -> str:
    """The SVG of `graph` with `folded` folded."""
    return graphviz_engine.svg(dot(graph, folded))
