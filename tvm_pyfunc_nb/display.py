"""What a cell shows: the text views (widgets build on these)."""

from __future__ import annotations

from .live_module import LiveModule, UpdateResult


class CellView:
    """The output of a `%%tvmmodule` cell."""

    def __init__(self, live: LiveModule, result: UpdateResult):
        self.live, self.result = live, result

    def __repr__(self) -> str:
        return self.result.summary()

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))


class ModuleList:
    """`%tvmmodules`: one line per live module."""

    def __init__(self, modules: list[LiveModule]):
        self.modules = modules

    def __repr__(self) -> str:
        if not self.modules:
            return "no live modules"
        return "\n".join(repr(m) for m in self.modules)

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))


def cell_view(live: LiveModule, result: UpdateResult) -> CellView:
    return CellView(live, result)


def refresh_views() -> None:
    """Bring every shown view up to date with the latest calls (after each cell)."""
