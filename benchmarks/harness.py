"""Small timing helpers shared by the benchmark sections, and the shell they run cells in.

The shell is the package's own `tvm_pyfunc_nb.testing.NotebookShell`: IPython's
`InteractiveShell` with the extension loaded, running cells as a notebook front end does.
"""

from __future__ import annotations

import atexit
import shutil
import statistics
import tempfile
import time
import timeit
from collections.abc import Callable
from dataclasses import asdict, dataclass

from IPython.core.interactiveshell import InteractiveShell

from tvm_pyfunc_nb.testing import NotebookShell

_SCRATCH = tempfile.mkdtemp(prefix="tvm-pyfunc-nb-bench-")
atexit.register(shutil.rmtree, _SCRATCH, True)


def scratch(prefix: str) -> str:
    """A new directory for this run's caches and notebooks, deleted when the process ends."""
    return tempfile.mkdtemp(prefix=prefix, dir=_SCRATCH)


def notebook_shell(cache_dir: str | None = None) -> NotebookShell:
    """IPython's shell with the extension loaded and a compile cache of this run's own (empty)."""
    return NotebookShell(InteractiveShell.instance(), cache_dir=cache_dir or scratch("cache-"))


def module_cell(
    shell: NotebookShell, name: str, cell_id: str, body: str, options: str = ""
) -> None:
    """Run `%%tvmmodule name --quiet options` with `body` under front-end cell id `cell_id` (no
    history, as the timed cells of a notebook front end would be if history were off)."""
    shell.cell(name, body, cell_id=cell_id, options=f"--quiet {options}", store_history=False)


@dataclass
class Row:
    """One line of a results table: two figures measured in the same run, ours and what it is
    compared with (upstream, PyTorch; in some tables two settings of ours: `run.TABLES` names the
    columns). The ratio is the second over the first."""

    table: str
    what: str
    ours: float  # seconds: the first column
    upstream: float  # seconds: the second column
    goal: str = ""
    met: bool | None = None
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.upstream / self.ours

    def to_json(self) -> dict:
        return asdict(self)


def median_of(measure: Callable[[int], float], repeats: int) -> float:
    """Median of `measure(i)` for i in 0..repeats-1; each call returns the seconds it measured."""
    return statistics.median(measure(i) for i in range(repeats))


def per_call(
    calls: dict[str, Callable[[], object]], *, number: int, rounds: int
) -> dict[str, float]:
    """Seconds per call of each callable: median over `rounds`, the callables interleaved within
    each round.
    """
    for fn in calls.values():
        for _ in range(max(1, number // 10)):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            samples[name].append(timeit.timeit(fn, number=number) / number)
    return {name: statistics.median(values) for name, values in samples.items()}


def timed(fn: Callable[[], object]) -> tuple[object, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start
