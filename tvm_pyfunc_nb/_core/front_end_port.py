"""What the core asks of a front end, without knowing one: showing, new cells, long work.

The core imports nothing of IPython or of the views. The extension installs a
`FrontEnd` of its own when it loads (`install`) and the previous one when it
unloads; without one, these do the plain-Python thing.
"""

from __future__ import annotations

import weakref
from contextlib import AbstractContextManager, nullcontext

from ..errors import TVMModuleError


class Progress:
    """Reports the progress of long work (a tuning run): `step(done, note)` then `close()`."""

    def step(self, done: int, note: str = "") -> None:
        """`done` of the total steps are done; `note` says what happened last."""

    def close(self) -> None:
        """The work ended (or failed)."""


class FrontEnd:
    """The plain-Python front end: nothing to show on, no next cell, no progress shown."""

    def show(self, live) -> None:
        """Show the module view of `live`."""
        raise TVMModuleError(
            f"module `{live.name}` has no view outside a notebook; "
            "load the extension in IPython or Jupyter (%load_ext tvm_pyfunc_nb)"
        )

    def next_input(self, text: str) -> bool:
        """Put `text` into a new cell below the running one; False if there is no such cell."""
        return False

    def compiling(self, live, kind: str, names: tuple[str, ...]) -> AbstractContextManager:
        """A context manager around each TVM build of `live` (views show long ones)."""
        return nullcontext()

    def progress(self, live, title: str, total: int, unit: str = "") -> Progress:
        """A reporter for `total` steps (of `unit`, e.g. "trials") of long work on `live`."""
        return Progress()


_current = FrontEnd()


def current() -> FrontEnd:
    return _current


class Reporter:
    """What one live module's parts tell the front end, whichever is current when they tell
    it: each TVM build under way (views show long ones) and the progress of long work. The
    module the front end shows is held weakly, and only here: no part holds the module, and a
    build does not keep it alive."""

    def __init__(self, shown):
        self._shown = weakref.ref(shown)

    def compiling(self, kind: str, names: tuple[str, ...]) -> AbstractContextManager:
        """A context manager around one TVM build of the module (`kind` "tir" or "vm")."""
        return _current.compiling(self._shown(), kind, names)

    def progress(self, title: str, total: int, unit: str = "") -> Progress:
        """A reporter of long work on the module (`total` steps of `unit`)."""
        return _current.progress(self._shown(), title, total, unit)


def install(front_end: FrontEnd) -> FrontEnd:
    """Make `front_end` the one the core uses; returns the one it replaces."""
    global _current
    previous, _current = _current, front_end
    return previous
