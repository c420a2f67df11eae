"""What `NAME.tune("fn", trials=N)` did, whatever `fn` is: a row per kernel (a PrimFunc is its
own one kernel; a Relax function has those its pipeline makes)."""

from __future__ import annotations

from dataclasses import dataclass

from ..tables import text_table


@dataclass(frozen=True)
class KernelRow:
    """One kernel of a tuned function: runs per call, trials kept, its time before and after."""

    kernel: str
    calls: int
    trials: int
    before: float | None
    after: float | None

    def cells(self) -> tuple[str, ...]:
        speedup = f"{self.before / self.after:.1f}×" if self.before and self.after else ""
        before, after = milliseconds(self.before), milliseconds(self.after)
        return (self.kernel, str(self.calls), str(self.trials), before, after, speedup)


@dataclass(frozen=True)
class TuningReport:
    """Trials measured now and kept in the database (`where`: its folder, or "in memory"), and
    a row per kernel."""

    function: str
    trials_run: int
    trials_kept: int
    seconds: float
    rows: tuple[KernelRow, ...]
    where: str

    HEADER = ("kernel", "calls", "trials", "time before", "time after", "speedup")

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
        return (
            f"tuned {self.function}: {kernels}, {self.trials_run} trials measured now in "
            f"{self.seconds:.1f} s, {self.trials_kept} in its database ({kept}){change}"
        )

    def table_rows(self) -> list[tuple[str, ...]]:
        return [row.cells() for row in self.rows]

    def __repr__(self) -> str:
        return f"{self.summary()}\n{text_table(self.HEADER, self.table_rows())}"

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))


def milliseconds(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:.3f} ms"
