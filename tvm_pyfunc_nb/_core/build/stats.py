"""`NAME.stats`: every TVM compile a live module ran, and the compiles a cache served instead."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from ..tables import text_table

# time.time() - time.perf_counter(), read once: records keep perf_counter readings, so that a
# call and the compiles it triggered are placed on one clock (the wall clock is adjusted as the
# process runs, and would drift apart from perf_counter by more than a short call lasts)
CLOCK_OFFSET = time.time() - time.perf_counter()


@dataclass(frozen=True)
class CompileRecord:
    """One TVM compile: what it built (function names), for which target, and how long it took."""

    kind: str  # "tir": PrimFuncs built; "vm": the Relax VM lowered and linked
    functions: tuple[str, ...]
    target: str
    seconds: float
    end: float  # perf_counter() when it ended

    @property
    def when(self) -> float:
        """The wall-clock time (`time.time()`) at which it ended."""
        return self.end + CLOCK_OFFSET

    def __str__(self) -> str:
        return f"{self.kind} {', '.join(self.functions)} ({self.seconds * 1000:.1f} ms)"


@dataclass
class CompileStats:
    """`NAME.stats`: every TVM compile this live module ran, and what a cache served instead.

    `compiles` has one `CompileRecord` per TVM compile; `cache_hits` counts the
    compiles a cache avoided, and `served` says which functions each cache
    served, by name: `served["memory"]` (kept in this kernel) and
    `served["disk"]` (the compile cache shared by kernels), each a `Counter`.
    """

    compiles: list[CompileRecord] = field(default_factory=list)
    served: dict[str, Counter] = field(
        default_factory=lambda: {"memory": Counter(), "disk": Counter()}
    )
    # (artifact, bytes) sent to a remote device
    uploads: list[tuple[str, int]] = field(default_factory=list)
    seconds: float = 0.0  # total compile time, read by calls to tell their own run time apart

    @property
    def cache_hits(self) -> int:
        return sum(sum(counter.values()) for counter in self.served.values())

    def since(self, mark: int) -> list[CompileRecord]:
        """The compiles after position `mark` (a `len(stats.compiles)` taken earlier)."""
        return self.compiles[mark:]

    def served_by(self, where: str, name: str) -> None:
        self.served[where][name] += 1

    def by_function(self) -> dict[str, dict[str, float]]:
        """Per function: compiles, compile seconds, memory and disk cache hits (for the stats
        table).
        """
        table: dict[str, dict[str, float]] = {}

        def row(name: str) -> dict[str, float]:
            return table.setdefault(name, {"compiles": 0, "seconds": 0.0, "memory": 0, "disk": 0})

        for record in self.compiles:
            for name in record.functions:
                row(name)["compiles"] += 1
                row(name)["seconds"] += record.seconds / len(record.functions)
        for where, counter in self.served.items():
            for name, hits in counter.items():
                row(name)[where] += hits
        return table

    def summary(self) -> str:
        return (
            f"{len(self.compiles)} TVM compile{'s' * (len(self.compiles) != 1)} "
            f"({self.seconds:.3f} s); a cache served "
            f"{self.cache_hits} ({sum(self.served['memory'].values())} kept in memory, "
            f"{sum(self.served['disk'].values())} from the compile cache on disk)"
        )

    def rows(self) -> list[tuple[str, int, str, int, int]]:
        """`(function, compiles, compile seconds, served from memory, served from disk)`."""
        return [
            (name, int(r["compiles"]), f"{r['seconds']:.3f} s", int(r["memory"]), int(r["disk"]))
            for name, r in self.by_function().items()
        ]

    def __repr__(self) -> str:
        header = ("function", "compiles", "compile time", "from memory", "from disk")
        return f"{self.summary()}\n{text_table(header, self.rows())}"

    def record(self, kind: str, names, target: str, start: float) -> None:
        """One TVM compile of `names`, begun at `start` (`time.perf_counter()`), ended now."""
        end = time.perf_counter()
        self.seconds += end - start
        self.compiles.append(CompileRecord(kind, tuple(names), target, end - start, end))
