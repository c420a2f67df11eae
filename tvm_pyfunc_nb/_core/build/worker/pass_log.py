"""Every pass a build runs, as the worker sees it: a stage for each, passes switched off on
request, and the IR before and after the passes asked for.

TVM's pass instrument (`tvm.instrument.pass_instrument`) is asked `should_run`
for every pass a `PassContext` runs: the Relax pipeline's and, inside
`tirx.build`, the TIR build's (79 runs for a small module). A pass is named by
its name and which run of that name it is (`("tirx.StmtSimplify", 2)`: the
third), which stays true when other passes are switched off, as long as those
are leaves: switching off a pass that runs others (`sequential`, a pipeline)
switches them off too, and the runs of their names after it are counted
anew. `PassRun.depth` tells leaves from the passes that hold them.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import tvm

from ..pass_contexts import with_instruments

if TYPE_CHECKING:
    from .child import StageLog

PassKey = tuple[str, int]  # a pass's name and which run of that name it is (0 for the first)
PIPELINE, TIR = "pipeline", "tir"  # the phases: the Relax pipeline, a TIR build
CODEGEN = "codegen"


@dataclass(frozen=True)
class PassRun:
    """One pass of a build, in the order they were asked to run."""

    index: int
    name: str
    occurrence: int  # which run of `name` this is, from 0
    depth: int  # how many passes hold it (0: run by the build itself)
    phase: str  # PIPELINE or TIR
    ran: bool  # False: switched off

    @property
    def key(self) -> PassKey:
        return (self.name, self.occurrence)


def leaves(runs: tuple[PassRun, ...]) -> list[PassRun]:
    """The passes of `runs` that hold no other pass (those that can be switched off alone)."""
    return [
        run
        for i, run in enumerate(runs)
        if not (i + 1 < len(runs) and runs[i + 1].depth > run.depth and run.ran)
    ]


@tvm.instrument.pass_instrument
class PassLog:
    """Records each pass, tells the parent its stage, and switches off the passes in `skip`;
    keeps the IR (JSON) before and after each pass in `snapshots` (before only, for a pass
    switched off: the IR it would have been given)."""

    def __init__(self, log: StageLog, skip: frozenset = frozenset(), snapshots=frozenset()):
        self.log = log
        self.skip = skip
        self.wanted = snapshots
        self.phase = PIPELINE
        self.runs: list[PassRun] = []
        self.snapshots: dict[PassKey, tuple[str, str]] = {}
        self._seen: Counter = Counter()
        self._open: list[PassRun] = []  # the passes running now, outermost first

    def should_run(self, mod, info) -> bool:
        key = (info.name, self._seen[info.name])
        self._seen[info.name] += 1
        ran = key not in self.skip
        run = PassRun(len(self.runs), info.name, key[1], len(self._open), self.phase, ran)
        self.runs.append(run)
        if ran:
            self._open.append(run)
        if key in self.wanted:
            self.snapshots[key] = (tvm.ir.save_json(mod), "")
        return ran

    def run_before_pass(self, mod, info) -> None:
        run = self._open[-1]
        self.log.stage(f"{run.phase} pass {run.name}")

    def run_after_pass(self, mod, info) -> None:
        run = self._open.pop()
        if run.key in self.wanted:
            self.snapshots[run.key] = (self.snapshots[run.key][0], tvm.ir.save_json(mod))
        if run.phase == TIR and not self._open:  # what follows in tirx.build is LLVM's code
            self.log.stage(CODEGEN)

    def compiling(self, kind: str, names: tuple[str, ...]) -> contextlib.AbstractContextManager:
        """`Build.compiling`: the passes of a Relax lowering ("vm") are the pipeline's, those of
        a PrimFunc build ("tir") the TIR build's."""
        if kind == "vm":
            return self.in_phase(PIPELINE, f"lowering {', '.join(names)}")
        return self.in_phase(TIR, f"building {', '.join(names)}")

    @contextlib.contextmanager
    def in_phase(self, phase: str, what: str) -> Iterator[None]:
        before = self.phase
        self.phase = phase
        self.log.stage(what)
        try:
            yield
        finally:
            self.phase = before


@contextlib.contextmanager
def logged_passes(
    log: StageLog, skip: frozenset = frozenset(), snapshots: frozenset = frozenset()
) -> Iterator[PassLog]:
    """The `PassContext` in force, its passes logged (and switched off, and kept) by a
    `PassLog`."""
    passes = PassLog(log, skip, snapshots)
    with with_instruments(passes):
        yield passes
