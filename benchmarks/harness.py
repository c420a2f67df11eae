"""Small timing helpers shared by the benchmark sections, and the shell they run cells in."""

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

_SCRATCH = tempfile.mkdtemp(prefix="tvm-pyfunc-nb-bench-")
atexit.register(shutil.rmtree, _SCRATCH, True)


def scratch(prefix: str) -> str:
    """A new directory for this run's caches and notebooks, deleted when the process ends."""
    return tempfile.mkdtemp(prefix=prefix, dir=_SCRATCH)


@dataclass
class Row:
    """One line of the results table: a figure for us and for upstream, measured in the same run."""

    table: str
    what: str
    ours: float  # seconds
    upstream: float  # seconds
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


class Cells:
    """A real IPython shell with the extension loaded, running cells the way a notebook front end
    does.
    """

    def __init__(self, cache_dir: str | None = None):
        self.shell = InteractiveShell.instance()
        self.shell.run_line_magic("load_ext", "tvm_pyfunc_nb")
        self.cache_dir = cache_dir or scratch("cache-")
        self.shell.run_line_magic("config", f"TVMModuleMagics.cache_dir = {self.cache_dir!r}")
        self.magics = self.shell.magics_manager.registry["TVMModuleMagics"]

    @property
    def ns(self) -> dict:
        return self.shell.user_ns

    def run(self, code: str, cell_id: str | None = None) -> object:
        result = self.shell.run_cell(code, store_history=False, silent=False, cell_id=cell_id)
        result.raise_error()
        return result.result

    def tvmmodule(self, name: str, cell_id: str, body: str) -> None:
        self.run(f"%%tvmmodule {name} --quiet\n{body}", cell_id=cell_id)

    def flush_cache(self) -> None:
        """Wait for background exports (between timed edits: a person reads a result before editing
        again).
        """
        cache = self.magics.compile_cache()
        if cache is not None:
            cache.flush()


def timed(fn: Callable[[], object]) -> tuple[object, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start
