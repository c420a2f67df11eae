"""The widget of `NAME.graph` (an anywidget): the picture, groups that fold, a node's details.

The kernel draws (graph_view.py); the browser shows the SVG and sends clicks back:
`fold`/`unfold` a group, `fold_all`/`unfold_all`. A node's details travel with the widget, so
a click on a node needs no kernel. Its mimebundle also holds the picture as `image/svg+xml`:
what a saved notebook, GitHub and nbconvert show where the widget cannot run.
"""

from __future__ import annotations

from pathlib import Path

import anywidget
import traitlets

from .._core.inspect.graph import Graph
from .graph_view import details, group_ids, initial_folds, node_ids, picture

HERE = Path(__file__).parent


class GraphWidget(anywidget.AnyWidget):
    """`NAME.graph(...)` on screen."""

    _esm = HERE / "graph_widget.js"
    _css = HERE / "graph_widget.css"

    title = traitlets.Unicode("").tag(sync=True)
    svg = traitlets.Unicode("").tag(sync=True)
    details = traitlets.Dict().tag(sync=True)  # node id -> [[label, text], ...]
    folded = traitlets.List(traitlets.Unicode()).tag(sync=True)  # ids of the folded groups

    def __init__(self, graph: Graph):
        self.graph = graph
        self._ids = group_ids(graph)
        self._paths = {i: path for path, i in self._ids.items()}
        shown, folded = node_ids(graph), initial_folds(graph)
        super().__init__(
            title=_title(graph),
            details={shown[n.key]: details(n) for n in graph.nodes},
            folded=sorted(self._ids[p] for p in folded),
            svg=picture(graph, folded),
        )
        self.on_msg(self._clicked)

    def _clicked(self, widget, content: dict, buffers) -> None:
        event, group = content.get("event"), content.get("group")
        if event == "fold":
            self.fold(group)
        elif event == "unfold":
            self.unfold(group)
        elif event == "fold_all":
            self.fold(*(self._ids[p] for p, g in self.graph.groups.items() if g.parent is None))
        elif event == "unfold_all":
            self.unfold(*self.folded)

    def fold(self, *groups: str) -> None:
        """Fold the groups of these ids (`g3`): each becomes one node."""
        self._draw(set(self.folded) | {g for g in groups if g in self._paths})

    def unfold(self, *groups: str) -> None:
        self._draw(set(self.folded) - set(groups))

    def _draw(self, folded: set[str]) -> None:
        self.folded = sorted(folded)
        self.svg = picture(self.graph, {self._paths[i] for i in folded})

    def bundle(self) -> dict:
        """The widget, its picture as `image/svg+xml` (the static picture) and the graph's text."""
        data, _ = self._repr_mimebundle_()
        return {**data, "image/svg+xml": self.svg, "text/plain": repr(self.graph)}


def _title(graph: Graph) -> str:
    overlay = f" · {graph.overlay}: {graph.verdict}" if graph.overlay else ""
    return f"{graph.summary()}, by {graph.by}{overlay}"
