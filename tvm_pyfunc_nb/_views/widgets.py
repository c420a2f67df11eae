"""The ipywidgets views: a `%%tvmmodule` cell's output and `NAME.show()`.

A view is a box of HTML widgets holding the fragments `render` makes. After
every cell, the registry asks each view to `refresh()`: panes whose
`live.last_calls[name]` record is not the one they show render again. That
is an identity check, so a call itself notifies no one and the hot path stays
as it is.
"""

from __future__ import annotations

import ipywidgets as widgets

from .._core.live.cells import PYFUNC
from .._core.live.live_module import LiveModule, UpdateResult
from . import render


class FunctionPane(widgets.HBox):
    """One function: its script left (or, on demand, its lowered IR or generated code), its
    latest call right."""

    def __init__(self, live: LiveModule, name: str, script: str):
        self.live, self.name = live, name
        entry = live.entry(name)
        self._run = entry.run  # which definition of `name` this pane shows
        self._shown: object = _NOTHING
        self._texts = {"script": render.script_html(script)}
        self.script = widgets.HTML(self._texts["script"])
        code = [self.script]
        if entry.kind != PYFUNC:  # TVM compiles it: what it made can be looked at
            self.views = widgets.ToggleButtons(
                options=VIEWS, value="script", style={"button_width": "6em"}
            )
            self.views.observe(self._show_view, "value")
            code.insert(0, self.views)
        self.results = widgets.HTML(layout=_column("2 1 0%", "16em"))
        row = widgets.Layout(width="100%", grid_gap="12px")
        super().__init__(
            [widgets.VBox(code, layout=_column("3 1 0%", "0")), self.results], layout=row
        )
        self.refresh()

    def _show_view(self, change) -> None:
        """Computed on a click, never on a call's path, and kept for this definition."""
        view = change["new"]
        if view not in self._texts:
            self.script.value = render.muted_html(f"computing the {view} view…")
            self._texts[view] = render.code_view_html(
                lambda: (
                    self.live.lowered(self.name)
                    if view == "lowered"
                    else self.live.source(self.name)
                )
            )
        self.script.value = self._texts[view]

    def refresh(self) -> bool:
        """Render the results again if the latest call changed, or say why they no longer do;
        True if the pane changed."""
        if not self.is_current():
            if self._shown is _REPLACED:
                return False
            self.results.value = render.replaced_html(self.live, self.name)
            self._shown = _REPLACED
            return True
        record = self.live.last_calls.get(self.name)
        shown = record.end if record is not None else None  # a new call has a new end
        if shown == self._shown:
            return False
        first = self._shown is _NOTHING
        self.results.value = render.results_html(self.live, self.name, record)
        self._shown = shown
        return not first

    def is_current(self) -> bool:
        """Whether this pane's definition of its function is still the module's."""
        live = self.live
        return self.name in live.functions and live.entry(self.name).run == self._run


class _View(widgets.VBox):
    """What cell and module views share: a running compile's line, a text and HTML fallback."""

    live: LiveModule
    css_class: str  # names the view in the page, for styles and browser tests

    def __init__(self, children: list[widgets.Widget]):
        # set when the view is shown with a display id: its text and HTML follow its panes
        self.display_handle = None
        self.progress = widgets.HTML(layout=widgets.Layout(display="none"))
        super().__init__([self.progress, *children], layout=widgets.Layout(width="100%"))
        self.add_class(self.css_class)

    def show_progress(self, html: str) -> None:
        """Show `html` about a running compile; "" hides the line."""
        self.progress.value = html
        self.progress.layout.display = "" if html else "none"

    def close(self) -> None:
        """Close this view and every widget in it (the widgets library closes only the box)."""
        close_tree(self.children)
        close_parts(self)
        super().close()

    def _repr_mimebundle_(self, **kwargs) -> dict:
        bundle = super()._repr_mimebundle_(**kwargs)
        bundle.update({"text/plain": self.text(), "text/html": self.html()})
        return bundle

    def follow(self, changed: bool) -> None:
        """After a pane `changed`, the text and HTML a front end without widgets shows (GitHub's
        rendering of a saved notebook) are made again."""
        if changed and self.display_handle is not None:
            self.display_handle.update(self)

    def text(self) -> str:
        raise NotImplementedError

    def html(self) -> str:
        raise NotImplementedError


class CellWidget(_View):
    """The output of a `%%tvmmodule` cell: its notices, then a pane per function it defines."""

    css_class = "tvm-pyfunc-nb-cell"

    def __init__(self, live: LiveModule, result: UpdateResult):
        self.live, self.result = live, result
        self.cell_key = live.entry(result.defined[0]).contribution if result.defined else None
        members = render.scripts(live)[1] if result.defined else {}
        self.scripts = {name: members[name] for name in result.defined}
        self.panes = [FunctionPane(live, name, self.scripts[name]) for name in result.defined]
        self._ended: dict[str, str] | None = None  # each pane's results when its cell ended
        super().__init__([widgets.HTML(render.notices_html(result)), *self.panes])

    def refresh(self) -> None:
        """The panes follow every call. The static HTML (what a saved notebook shows without
        widgets) keeps each pane as it was when this view's cell ended: a later cell's call never
        shows early in an earlier cell; a later cell that replaces or removes a function is said."""
        before = self._static_results()
        for pane in self.panes:
            pane.refresh()
        if self._ended is None:  # the first refresh comes at the end of the view's own cell
            self._ended = {pane.name: pane.results.value for pane in self.panes}
        self.follow(self._static_results() != before)

    def _static_results(self) -> dict[str, str]:
        ended = self._ended or {}
        return {
            pane.name: ended.get(pane.name, pane.results.value)
            if pane.is_current()
            else pane.results.value  # the replaced or removed notice
            for pane in self.panes
        }

    def text(self) -> str:
        return render.cell_text(self.result)

    def html(self) -> str:
        return render.cell_html(self.result, self.scripts, self._static_results())


class ModuleWidget(_View):
    """`NAME.show()`: a tab per function (script and latest results), the module script, PyTorch.

    When the module changes, the tabs are built again from the new module.
    """

    css_class = "tvm-pyfunc-nb-module"

    def __init__(self, live: LiveModule):
        self.live = live
        self.tabs = widgets.Tab(layout=widgets.Layout(width="100%"))
        self.panes: list[FunctionPane] = []
        self._ir_mod = None
        super().__init__([self.tabs])
        self.refresh()

    def refresh(self) -> None:
        if self.live.ir_mod is not self._ir_mod:
            self._build()
        for pane in self.panes:
            pane.refresh()

    def _build(self) -> None:
        self._ir_mod = self.live.ir_mod
        script, members = render.scripts(self.live)
        kinds = self.live.functions
        old_children = self.tabs.children
        self.panes = [FunctionPane(self.live, name, members[name]) for name in kinds]
        children: list[widgets.Widget] = [*self.panes]
        titles = [f"{name} · {kind}" for name, kind in kinds.items()]
        children.append(widgets.HTML(render.script_html(script)))
        titles.append("module")
        torch_code = render.torch_sources(self.live)
        if torch_code:
            children.append(widgets.HTML(render.torch_html(torch_code)))
            titles.append("PyTorch")
        self.tabs.children, self.tabs.titles = children, titles
        close_tree(old_children)

    def text(self) -> str:
        return render.module_text(self.live)

    def html(self) -> str:
        return render.module_html(self.live)


class ProgressLine(widgets.HTML):
    """Long work (a tuning run) in progress, in the output of the cell that started it."""

    def __init__(self, title: str, total: int, unit: str = ""):
        self.title, self.total, self.unit, self.done, self.note = title, total, unit, 0, ""
        super().__init__(render.work_progress_html(title, 0, total, "", unit))

    def step(self, done: int, note: str) -> None:
        self.done, self.note = done, note
        self.value = render.work_progress_html(self.title, done, self.total, note, self.unit)

    def _repr_mimebundle_(self, **kwargs) -> dict:
        bundle = super()._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = render.work_progress_text(
            self.title, self.done, self.total, self.note, self.unit
        )
        bundle["text/html"] = self.value
        return bundle


def close_tree(children) -> None:
    for child in children:
        close_tree(getattr(child, "children", ()))
        close_parts(child)
        child.close()


def close_parts(widget: widgets.Widget) -> None:
    """Close a widget's layout and style: widgets of their own, which the library leaves open (and
    kept).
    """
    for part in (getattr(widget, "layout", None), getattr(widget, "style", None)):
        if isinstance(part, widgets.Widget):
            part.close()


def _column(flex: str, min_width: str) -> widgets.Layout:
    return widgets.Layout(flex=flex, min_width=min_width, overflow="auto")


_NOTHING, _REPLACED = object(), object()
VIEWS = ("script", "lowered", "source")
