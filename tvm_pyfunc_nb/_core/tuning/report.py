"""What `NAME.tune("fn", trials=N)` did, whatever `fn` is: a row per kernel (a PrimFunc is its
own one kernel; a Relax function has those its pipeline makes)."""

from __future__ import annotations

from dataclasses import dataclass

from ..tables import text_table

TUNED, KEPT, NOT_TUNED = "tuned", "kept", "not tuned"


@dataclass(frozen=True)
class KernelRow:
    """One kernel of a tuned function: runs per call, trials kept, its time before and after,
    and which schedule it runs now: `tuned` (the best candidate, faster than what it had),
    `kept` (what it had: no candidate was faster) or `not tuned` (its share of the function's
    time was too small to spend trials on)."""

    kernel: str
    calls: int
    trials: int
    before: float | None
    after: float | None
    schedule: str = TUNED

    @property
    def kept(self) -> bool:
        return self.schedule != TUNED

    def cells(self) -> tuple[str, ...]:
        speedup = f"{self.before / self.after:.1f}×" if self.before and self.after else ""
        before, after = milliseconds(self.before), milliseconds(self.after)
        trials = str(self.trials)
        return (self.kernel, str(self.calls), trials, before, after, speedup, self.schedule)


@dataclass(frozen=True)
class TuningReport:
    """Trials measured now and kept in the database (`where`: its folder, or "in memory"), a
    row per kernel, and where the candidates ran (`measured_on`: "here", or the remote device)."""

    function: str
    trials_run: int
    trials_kept: int
    seconds: float
    rows: tuple[KernelRow, ...]
    where: str
    measured_on: str = "here"

    HEADER = ("kernel", "calls", "trials", "time before", "time after", "speedup", "schedule")

    @property
    def kernel(self) -> str:
        """The function tuned (a PrimFunc is a kernel)."""
        return self.function

    @property
    def work_dir(self) -> str:
        return self.where

    @property
    def best_seconds(self) -> float | None:
        """The kernels' best time per call of the function."""
        return self.total("after")

    @property
    def kept(self) -> list[str]:
        """The kernels that keep the schedule they had: no candidate was faster."""
        return [r.kernel for r in self.rows if r.schedule == KEPT]

    def total(self, which: str) -> float | None:
        """The kernels' time per call of the function (each kernel times its calls)."""
        times = [(getattr(r, which), r.calls) for r in self.rows]
        if not times or any(t is None for t, _ in times):
            return None
        return sum(t * calls for t, calls in times)

    def summary(self) -> str:
        before, after = self.total("before"), self.total("after")
        change = ""
        if before and after:
            change = f"; kernels per call {milliseconds(before)} → {milliseconds(after)}"
        kernels = f"{len(self.rows)} kernel{'s' if len(self.rows) != 1 else ''}"
        kept = "in memory" if self.where == "in memory" else "`.where` says where"
        on = "" if self.measured_on == "here" else f" on {self.measured_on}"
        tried = [r for r in self.rows if r.schedule != NOT_TUNED]
        keeps = len(self.kept)
        verdict = f"; {keeps} of {len(tried)} kept their schedule (no candidate was faster)"
        return (
            f"tuned {self.function}: {kernels}, {self.trials_run} trials measured now{on} in "
            f"{self.seconds:.1f} s, {self.trials_kept} in its database ({kept}){change}"
            f"{verdict if keeps else ''}"
        )

    def table_rows(self) -> list[tuple[str, ...]]:
        return [row.cells() for row in self.rows]

    def __repr__(self) -> str:
        return f"{self.summary()}\n{text_table(self.HEADER, self.table_rows())}"

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))


def milliseconds(seconds: float | None) -> str:
    """`0.306 ms`, or `4.1 µs` below a tenth of a millisecond (a fused element-wise kernel)."""
    if seconds is None:
        return "—"
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-4 else f"{seconds * 1e6:.1f} µs"
