"""Run every tutorial in a fresh kernel and save it with its outputs and widget state.

`make notebooks` runs this after a change to the package or a tutorial: the
saved outputs are what GitHub shows and what `make test` (nbval) compares a
fresh run against, so a notebook whose outputs have gone stale fails the tests
until it is saved again. Pass notebook paths to save only those.

The kernels get an empty compile cache of their own, so what the tutorials
show never depends on what this machine compiled before.

A saved cell shows what its reader saw when that cell ended. A function's pane
follows later calls on screen; saved, it keeps the state it had when its cell
ended (the widgets' state here, their static HTML in the kernel: `CellWidget`),
so a later cell's call never shows early. What a later cell says about an
earlier pane is kept: that the function was replaced or removed.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
REPLACED = "this pane no longer updates"  # a pane whose function a later cell replaced or removed
CACHE_DIR_ENV = "TVM_PYFUNC_NB_CACHE_DIR"
KERNEL = "python3"  # the ipykernel of the environment running this script
CELL_TIMEOUT = 600  # seconds


class CellByCell(NotebookClient):
    """Stores each widget's state as it was when the cell that drew it ended: later changes to it
    (a later cell's call in a pane) are left out, except a pane saying its function was replaced
    or removed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ended: set[str] = set()  # widgets drawn by cells that have ended

    async def async_execute_cell(self, cell, cell_index, *args, **kwargs):
        try:
            return await super().async_execute_cell(cell, cell_index, *args, **kwargs)
        finally:
            self.ended.update(self.widget_state)

    def handle_comm_msg(self, outs, msg, cell_index) -> None:
        content = msg["content"]
        state = content.get("data", {}).get("state")
        later = content.get("comm_id") in self.ended and state is not None
        if not later or REPLACED in str(state.get("value", "")):
            super().handle_comm_msg(outs, msg, cell_index)
            return
        self.store_widget_state = False  # the comm is still handled, its state not stored
        try:
            super().handle_comm_msg(outs, msg, cell_index)
        finally:
            self.store_widget_state = True


def save(path: Path) -> float:
    """Execute `path` top to bottom in a new kernel and write it back; returns the seconds taken."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    CellByCell(
        nb,
        kernel_name=KERNEL,
        timeout=CELL_TIMEOUT,
        resources={"metadata": {"path": str(path.parent)}},
        store_widget_state=True,
        record_timing=False,  # no timestamps in cell metadata: a re-save changes only what changed
    ).execute()
    seconds = time.perf_counter() - start
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return seconds


def main(argv: list[str]) -> int:
    paths = [Path(p) for p in argv] or sorted(HERE.glob("[0-9][0-9]_*.ipynb"))
    cache_dir = tempfile.mkdtemp(prefix="tvm-pyfunc-nb-tutorials-")
    os.environ[CACHE_DIR_ENV] = cache_dir
    try:
        total = 0.0
        for path in paths:
            seconds = save(path)
            total += seconds
            print(f"{path.name}: {seconds:.1f} s")
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    print(f"{len(paths)} notebooks saved in {total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
