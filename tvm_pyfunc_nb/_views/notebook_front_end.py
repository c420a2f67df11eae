"""The views on screen, and the front end the extension gives the core.

- Every view made is registered here, so that after each cell `refresh_views`
  can bring them up to date, and a new view of a cell closes the one of its
  previous run.
- `NotebookFrontEnd` is what the core asks for through `front_end_port.current()`:
  the module view (`NAME.show()`), a new cell below (`NAME.edit`), long
  compiles and tuning runs shown in the module's views.
- `register_formatters` makes a `LiveModule` that ends a cell show its module
  view, and a `Graph` (`NAME.graph`) its widget and picture (IPython's display
  formatters: the core has no `_repr_mimebundle_`).

A TVM compile runs in the kernel's own thread, so a view can only show one
from another thread: a `CompileWatch` per module writes what is compiling,
and for how long, into every view of the module once a compile has run for
`SHOW_COMPILE_AFTER` seconds. (A compile holds the GIL part of the time; the
ticker then runs late.)
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from .._core.front_end_port import FrontEnd, Progress
from .._core.inspect.graph import Graph
from .._core.live.live_module import LiveModule, UpdateResult
from . import render
from .widgets import CellWidget, ModuleWidget, ProgressLine

SHOW_COMPILE_AFTER = 0.5  # seconds a compile runs before the views show it
TICK = 0.25  # seconds between updates of a running compile's line

# Every view on screen; the widgets library keeps a view alive until it is closed.
# A compile watch reads it from its own thread, hence the lock.
_views: weakref.WeakSet = weakref.WeakSet()
_views_lock = threading.Lock()


def cell_view(live: LiveModule, result: UpdateResult) -> CellWidget:
    """The output of a `%%tvmmodule` cell: each function it defines, script beside latest call.

    A new view of a cell closes the view of that cell's previous run.
    """
    global _newest_cell
    view = CellWidget(live, result)
    _newest_cell = weakref.ref(view)
    for old in views_of(live):
        if view.cell_key is not None and getattr(old, "cell_key", None) == view.cell_key:
            with _views_lock:
                _views.discard(old)
            old.close()
    return _register(view)


def display_view(view) -> None:
    """Show `view` under a display id of its own, so that what a front end without widgets
    shows (its text and HTML) can follow the view's panes after later calls."""
    from IPython.display import display

    view.display_handle = display(view, display_id=True)


def newest_cell_view() -> CellWidget | None:
    """The cell view made last, while it is alive (what `NotebookShell` hands back)."""
    return _newest_cell() if _newest_cell is not None else None


_newest_cell: weakref.ref | None = None


def module_view(live: LiveModule) -> ModuleWidget:
    """`NAME.show()`: a tab per function (script and latest call), the module script, PyTorch."""
    return _register(ModuleWidget(live))


def refresh_views() -> None:
    """Bring every view up to date with the latest calls (the magics call this after each cell)."""
    with _views_lock:
        views = list(_views)
    for view in views:
        view.refresh()


def views_of(live: LiveModule) -> list:
    with _views_lock:
        return [view for view in _views if view.live is live]


def _register(view):
    with _views_lock:
        _views.add(view)
    return view


# -- the front end the core sees -----------------------------------------------------
class NotebookFrontEnd(FrontEnd):
    """The core's front end inside IPython: views, `set_next_input`, progress in the views."""

    def __init__(self, shell):
        self.shell = shell
        self._watches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def show(self, live: LiveModule) -> None:
        """The module view, shown as it is now: its static text and HTML stay as drawn (the
        module it shows may gain and lose functions later, as a cell's view does not)."""
        from IPython.display import display

        display(module_view(live))

    def next_input(self, text: str) -> bool:
        """`text` in a new cell below, and in this cell's output what was opened: a notebook
        run without a front end (nbclient, a saved notebook) makes no new cell."""
        from IPython.display import display

        self.shell.set_next_input(text, replace=False)
        display(render.opened_bundle(text), raw=True)
        return True

    def compiling(self, live: LiveModule, kind: str, names: tuple[str, ...]):
        watch = self._watches.get(live)
        if watch is None:
            watch = self._watches[live] = CompileWatch(live)
        return watch(kind, names)

    def progress(self, live: LiveModule, title: str, total: int, unit: str = "") -> Progress:
        return ViewProgress(title, total, unit)


class CompileWatch:
    """`with watch(kind, names):` around each TVM build of a module; long ones show in its views."""

    def __init__(self, live: LiveModule):
        self._live = weakref.ref(live)
        self._running: list[tuple[str, tuple[str, ...], float]] = []
        self._lock = threading.Lock()
        self._ticker: threading.Thread | None = None

    @contextmanager
    def __call__(self, kind: str, names: tuple[str, ...]) -> Iterator[None]:
        compile_ = (kind, tuple(names), time.perf_counter())
        with self._lock:
            self._running.append(compile_)
            if self._ticker is None:
                self._ticker = threading.Thread(target=self._tick, daemon=True)
                self._ticker.start()
        try:
            yield
        finally:
            with self._lock:
                self._running.remove(compile_)

    def _tick(self) -> None:
        shown = False
        while True:
            time.sleep(TICK)
            with self._lock:
                now = time.perf_counter()
                overdue = [
                    (kind, names, now - start)
                    for kind, names, start in self._running
                    if now - start >= SHOW_COMPILE_AFTER
                ]
                if not self._running:
                    self._ticker = None
                    break
            if overdue:
                _show_progress(self._live(), render.compile_progress_html(overdue))
                shown = True
        if shown:
            _show_progress(self._live(), "")


class ViewProgress(Progress):
    """Long work (tuning) shown as a progress line in the output of the cell that runs it.

    The widget follows every step. A front end without widgets shows the line's text or
    HTML as it was when drawn, so the line is drawn again when the work ends: what stays in
    the output says where it ended.
    """

    def __init__(self, title: str, total: int, unit: str = ""):
        from IPython.display import display

        self.line = ProgressLine(title, total, unit)
        self.handle = display(self.line, display_id=True)

    def step(self, done: int, note: str = "") -> None:
        self.line.step(done, note)

    def close(self) -> None:
        """The text and HTML a saved notebook shows say where the work ended, as the line does."""
        if self.handle is not None:
            self.handle.update(self.line)


def _show_progress(live: LiveModule | None, html: str) -> None:
    if live is not None:
        for view in views_of(live):
            view.show_progress(html)


# -- formatters ------------------------------------------------------------------------
def _live_module_bundle(live: LiveModule) -> dict:
    """`NAME` as a cell's last expression shows the module's widget (`repr` stays one line)."""
    return module_view(live)._repr_mimebundle_()


def _graph_bundle(graph) -> dict:
    """`NAME.graph(...)` as a cell's result: the widget and its picture, or, without the
    `graph` extra installed, the graph's text and how to get the picture."""
    try:
        from .graph_widget import GraphWidget
    except ImportError as missing:
        note = f"(no picture: {missing.name} is not installed; pip install 'tvm-pyfunc-nb[graph]')"
        return {"text/plain": f"{graph!r}\n{note}"}
    return GraphWidget(graph).bundle()


def _html_views() -> dict[type, object]:
    """The HTML of the core's results, next to their own text repr."""
    from .._core.build.stats import CompileStats
    from .._core.faults.bisecting import Bisection
    from .._core.faults.minimizing import Minimized
    from .._core.inspect.comparing import Comparison
    from .._core.inspect.kernel_compare import KernelComparison
    from .._core.inspect.lowered_views import KernelList
    from .._core.inspect.profiling import Profile
    from .._core.inspect.timing import Timing
    from .._core.inspect.tracing import Trace
    from .._core.tuning.report import TuningReport

    return {
        Trace: render.trace_html,
        Comparison: render.comparison_html,
        KernelComparison: render.kernel_comparison_html,
        Bisection: render.bisection_html,
        Minimized: render.minimized_html,
        Timing: render.timing_html,
        KernelList: render.kernels_html,
        Profile: render.profile_html,
        CompileStats: render.stats_html,
        UpdateResult: render.update_html,
        TuningReport: render.tuning_html,
    }


def register_formatters(shell) -> None:
    formatters = shell.display_formatter
    formatters.mimebundle_formatter.for_type(LiveModule, _live_module_bundle)
    formatters.mimebundle_formatter.for_type(Graph, _graph_bundle)
    for kind, view in _html_views().items():
        formatters.formatters["text/html"].for_type(kind, view)


def unregister_formatters(shell) -> None:
    formatters = shell.display_formatter
    formatters.mimebundle_formatter.pop(LiveModule, None)
    formatters.mimebundle_formatter.pop(Graph, None)
    for kind in _html_views():
        formatters.formatters["text/html"].pop(kind, None)
