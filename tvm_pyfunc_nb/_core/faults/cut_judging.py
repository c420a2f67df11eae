"""Whether a cut of a function still shows its fault: each cut built in the worker and judged.

The fault (`Fault`) is one of:
- `NUMBERS`: the compiled numbers leave the reference's: a value the cut
  returns against the reference run's value of that binding (`compare`'s
  tolerance, with the rounding its op explains), or an argument that the run
  changed while no `call_tir_inplace` of the cut writes into it (a pure
  function leaves its arguments alone);
- `CRASH`: the build crashes with the same signal in the same stage (the
  same pass, codegen, the link);
- `FAILS`: the build raises an error that says what TVM said (`error_key`:
  its message without the names and numbers a cut changes);
- `PASS` (from a bisect result): the same pass still changes the numbers: the
  cut built with every pass on, against the cut built without that one.

Builds run in the build worker (`Builds`), so a crash is a data point and
never the end of the kernel.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
import tvm

from ...errors import WorkerCrash, reason_sentence
from ..build.worker.pass_log import PassRun
from ..build.worker.process import Crash
from ..inspect.comparing import difference, error_cells, values_summed
from ..inspect.tracing import written_in_place
from ..module_parts import ModuleParts
from .cutting import BINDING, Cut, DataflowCut, module_of
from .isolation import in_worker
from .reference_run import ReferenceValues

NUMBERS, CRASH, FAILS, PASS = "numbers", "crash", "fails", "pass"


@dataclass(frozen=True)
class Fault:
    """What a cut must still show."""

    kind: str  # NUMBERS, CRASH, FAILS or PASS
    signal: str | None = None  # CRASH: the signal ("SIGABRT"), None for an exit
    stage: str = ""  # CRASH: where ("pipeline pass FuseOps", "codegen")
    error: str = ""  # FAILS: TVM's reason
    culprit: str = ""  # PASS (and a CRASH bisect found): the pass
    reference: str = ""  # NUMBERS: what the numbers are compared with

    def __str__(self) -> str:
        if self.kind == CRASH:
            return f"the build crashes: {self.signal or 'an exit'} in {self.stage}"
        if self.kind == FAILS:
            return f"the build fails: {self.error}"
        if self.kind == PASS:
            return f"{self.culprit} changes the numbers"
        return f"the numbers leave those of {self.reference}"


@dataclass(frozen=True)
class Step:
    """One cut the search built: its size, and whether it showed the fault (and how)."""

    size: int
    shows: bool
    detail: str = ""

    def row(self) -> tuple[str, str, str]:
        return (str(self.size), "fault" if self.shows else "no fault", self.detail)


@dataclass
class Ran:
    """One build and run in the worker: what it returned and wrote, or how it ended."""

    outputs: list[np.ndarray] | None = None
    inputs: list[np.ndarray] | None = None  # the arguments after the run
    crash: Crash | None = None
    error: str = ""
    passes: tuple[PassRun, ...] = ()
    snapshots: dict = field(default_factory=dict)

    @property
    def why(self) -> str:
        """Why it did not run (a crash, an error)."""
        if self.crash is not None:
            return f"the worker {self.crash.cause} in {self.crash.stage}"
        return self.error


class Builds:
    """Builds of one function in the build worker (minimize's cuts, report's passes): a crash or
    an error is an outcome (`Ran`), not an exception."""

    def __init__(self, parts: ModuleParts, fn: str):
        self.parts, self.fn = parts, fn
        self.builder = in_worker(parts.build.builder, parts.name)

    def run(self, mod, inputs, skip=frozenset(), snapshots=frozenset(), heard=None) -> Ran:
        try:
            report = self.builder.build_and_run(
                self.parts.options, mod, self.fn, inputs,
                skip=skip, snapshots=snapshots, on_stage=heard,
            )  # fmt: skip
        except WorkerCrash as err:
            return Ran(crash=err.crash)
        except Exception as err:  # TVM raises many types: each means "this does not build"
            return Ran(error=reason_sentence(err))
        return Ran(report.outputs, report.inputs, None, "", report.passes, report.snapshots)


def crash_stage(stage: str) -> str:
    """A crash's stage without the names of what was built ("lowering main" -> "lowering")."""
    return stage.split(" ", 1)[0] if stage.startswith(("lowering ", "building ")) else stage


def error_key(error: str) -> str:
    """What TVM said in `error`, as TVM's own message has it, without the names and numbers a
    cut changes: the condition of an internal check that failed, else the longest phrase free
    of them (of the part after "TVM says:" where the error quotes TVM)."""
    check = re.search(r"internal check `([^`]+)` failed", error)
    if check:
        return check.group(1)
    said = error.split("TVM says: ", 1)[-1]
    phrases = [p.strip(" .,;:") for p in re.split(r"`[^`]*`|[()\[\]\n]|\. ", said)]
    plain = [p for p in phrases if p and not re.search(r"\d", p)] or [p for p in phrases if p]
    return max(plain, key=len) if plain else error


class Judge:
    """Whether a cut of `fn` still shows `fault`: each cut built (once) and judged."""

    def __init__(
        self,
        builds: Builds,
        cuts: DataflowCut,
        mod: tvm.IRModule,
        values: ReferenceValues,
        fault: Fault,
        *,
        rtol: float = 1e-5,
        atol: float = 1e-6,
        without: frozenset = frozenset(),
        culprit_key=None,
        on_step: Callable[[Step], None] | None = None,
    ):
        self.builds, self.cuts, self.mod, self.values, self.fault = builds, cuts, mod, values, fault
        self.rtol, self.atol = rtol, atol
        self.skip_without = without  # PASS: the keys that switch the pass off (the rest is on)
        self.culprit_key = culprit_key  # PASS: its run (for the IR right before it)
        self.on_step = on_step or (lambda step: None)  # told of each cut judged
        self.steps: list[Step] = []
        self.seen: dict[frozenset[int], bool] = {}

    def module(self, cut: Cut) -> tvm.IRModule | None:
        return module_of(self.mod, self.builds.fn, cut)

    def shows(self, kept: frozenset[int]) -> bool:
        if kept not in self.seen:
            cut = self.cuts.cut(kept)
            mod = self.module(cut)
            shown, detail = (False, "not well formed") if mod is None else self.judge(cut, mod)
            self.seen[kept] = shown
            self.steps.append(Step(cut.size, shown, detail))
            self.on_step(self.steps[-1])
        return self.seen[kept]

    def judge(self, cut: Cut, mod: tvm.IRModule) -> tuple[bool, str]:
        inputs = [self.values.of(s) for s in cut.entering]
        ran = self.builds.run(mod, inputs)
        fault = self.fault
        if fault.kind == CRASH:
            crash = ran.crash
            same = (
                crash is not None
                and crash.signal == fault.signal
                and crash_stage(crash.stage) == fault.stage
            )
            return same, "" if same else (ran.why or "it builds and runs")
        if fault.kind == FAILS:
            same = fault.error in ran.error
            return same, "" if same else (ran.why or "it builds and runs")
        if ran.outputs is None:
            return False, ran.why
        if fault.kind == NUMBERS:
            return self.differs(cut, ran, self.expected(cut), unchanged(cut, inputs))
        without = self.builds.run(mod, inputs, self.skip_without)
        if without.outputs is None:
            return False, f"without {fault.culprit}: {without.why}"
        return self.differs(cut, ran, without.outputs, without.inputs)

    def differs(self, cut: Cut, ran: Ran, expected, expected_inputs) -> tuple[bool, str]:
        """Whether `ran`'s outputs leave `expected` (flat; None where nothing says what is
        right) or its arguments leave `expected_inputs` (likewise); how."""
        sources = [src for index in cut.outputs for src in self.cuts.leaves(index)]
        for source, mine, theirs in zip(sources, ran.outputs, expected, strict=True):
            if theirs is None:
                continue
            diff = difference(
                torch.from_numpy(mine),
                torch.from_numpy(np.asarray(theirs)),
                self.rtol,
                self.atol,
                reduction=self._summed(source),
            )
            if not diff.passed:
                max_abs, _ = error_cells(diff)
                note = diff.note or f"max abs error {max_abs}"
                return True, f"`{self.cuts.source_name(source)}`: {note}"
        for var, after, want in zip(cut.reads, ran.inputs or (), expected_inputs, strict=False):
            if want is not None and not np.array_equal(after, want, equal_nan=True):
                return True, f"the run writes into its argument `{self.cuts.name_of(var)}`"
        return False, ""

    def expected(self, cut: Cut) -> list[np.ndarray | None]:
        """The reference's value of each value the cut returns, flat."""
        return [
            None if src is None else self.values.of(src)
            for index in cut.outputs
            for src in self.cuts.leaves(index)
        ]

    def _summed(self, source) -> int:
        """How many values each of the binding `source` names sums (1 for a parameter)."""
        if source is None or source[0] != BINDING:
            return 1
        index = source[1]
        shapes = {self.cuts.names[i]: v.shape for i, v in self.values.bindings.items()}
        params = zip(self.cuts.func.params, self.values.arguments, strict=True)
        shapes |= {p.name: a.shape for p, a in params}
        value = self.cuts.bindings[index].value
        return values_summed(value, shapes, tuple(self.values.bindings[index].shape))


def unchanged(cut: Cut, inputs) -> list[np.ndarray | None]:
    """What each argument must be after the run: as it was, unless a `call_tir_inplace` of the
    cut writes into it (None: any value)."""
    written = written_in_place(cut.function)
    params = cut.function.params
    return [None if p in written else a for p, a in zip(params, inputs, strict=True)]
