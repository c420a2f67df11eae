"""`NAME.minimize("fn", *args)`, and `.minimize()` on a bisect result: `fn` cut to the fewest
bindings whose build still shows the same fault.

In the spirit of the `torch.compile` minifier and Polygraphy's `debug reduce`:
what an upstream report needs is not a model of hundreds of bindings but the
two or three that go wrong. The fault is what the function's own build
shows (cut_judging.py): numbers that leave the reference's, a crash, an
error; or, from a bisect result, the pass that changes the numbers.

A cut (cutting.py) keeps some bindings; the values that enter it are the
reference run's (reference_run.py: the PyTorch model's where `fn` came from
one, else the build with every optional pass off), given as parameters. The
search (shrinking.py) narrows to a window, then delta-debugs inside it. Each
cut is built and run in the build worker, so a crash is a data point and
never the end of the kernel.

The result (`Minimized`) shows the cut as TVMScript, its size against the
original's and the verdict; `.save("repro.py")` writes it as a file that plain
TVM runs (minimize_repro.py).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import torch
import tvm
from tvm import relax

from ...errors import CallError
from ..build.worker.pass_log import PIPELINE, PassRun
from ..feature_checks import check_comparison
from ..inspect.comparing import flat_outputs
from ..live.cells import RELAX
from ..module_parts import ModuleParts
from ..run.tensors import to_torch
from .cut_judging import (
    CRASH,
    FAILS,
    NUMBERS,
    PASS,
    Builds,
    Fault,
    Judge,
    Step,
    crash_stage,
    error_key,
)
from .cutting import Cut, DataflowCut
from .minimize_repro import repro_of
from .reference_run import ReferenceValues, reference_values
from .shrinking import smallest
from .worker_builds import NEEDED, is_container, skip_keys, units, worker_inputs


@dataclass
class Minimized:
    """The result of `minimize`: the fewest bindings of `function` that still show the fault."""

    module: str
    function: str
    fault: Fault | None  # None: no fault to minimize (`summary` says why)
    original: int  # the bindings of the function
    cut: Cut | None = None
    script: str = ""  # the cut as TVMScript
    detail: str = ""  # how the cut shows the fault
    steps: list[Step] = field(default_factory=list)
    values: str = ""  # where the values entering the cut come from
    seconds: float = 0.0
    summary: str = ""
    repro: Any = None  # what .save writes (minimize_repro.Repro)
    inputs: list[np.ndarray] = field(default_factory=list, repr=False)  # the cut's arguments
    module_ir: tvm.IRModule | None = field(default=None, repr=False)  # the cut and its callees

    @property
    def found(self) -> bool:
        return self.cut is not None

    @property
    def size(self) -> int:
        return self.cut.size if self.cut is not None else self.original

    def verdict(self) -> str:
        if self.cut is None:
            return self.summary
        return (
            f"{self.function}: {self.original} bindings cut to {self.size} that still show "
            f"the fault: {self.fault}" + (f" ({self.detail})" if self.detail else "")
        )

    def rows(self) -> list[tuple[str, str, str]]:
        return [s.row() for s in self.steps]

    def __repr__(self) -> str:
        lines = [f"minimize {self.function}: {self.verdict()}"]
        if self.steps:
            lines.append(
                f"{len(self.steps)} cuts built in {self.seconds:.1f} s; the values entering a "
                f"cut: {self.values}"
            )
        if self.script:
            lines += ["", self.script.rstrip()]
        return "\n".join(lines)

    def save(self, path: str) -> str:
        """Write the cut as a standalone Python file (plain TVM and numpy) that shows the fault
        when run: exit status 1 while it shows, 0 when it does not, 2 when the file itself
        cannot run."""
        if self.repro is None:
            raise CallError(f"minimize found no fault in `{self.function}`: nothing to save")
        return self.repro.write(path)


def every_run_of(names, bound: int) -> frozenset:
    """The pass keys that switch off every run of the passes `names` (up to `bound` runs each)."""
    return frozenset((name, k) for name in names for k in range(bound))


def relax_passes_off(runs: tuple[PassRun, ...]) -> frozenset:
    """The keys that switch off the optional passes of the Relax pipeline in `runs`: the same
    in any build with that pipeline (each runs once), whatever the module."""
    optional = {p.index for p in units(runs) if p.phase == PIPELINE and p.name not in NEEDED}
    return skip_keys(runs, optional)


def minimize(
    parts: ModuleParts, fn: str, args: tuple, reference=None, rtol=1e-5, atol=1e-6
) -> Minimized:
    """`fn` cut to the fewest bindings whose build still shows its fault (see the module's
    docstring): a crash, an error, or numbers that leave `reference`'s (the PyTorch model `fn`
    came from, else the build with every optional pass off; a callable, or the outputs)."""
    started = time.perf_counter()
    check_comparison("minimize", fn, reference, args, rtol, atol, values=True)
    parts.entry(fn, kind=RELAX, needed_by="minimize")
    mod, inputs = worker_inputs(parts, fn, args, "minimize")
    builds, cuts = Builds(parts, fn), DataflowCut(mod[fn])
    if not len(cuts):
        raise CallError(f"minimize: `{fn}` has no bindings to cut", function=fn)
    heard: list[str] = []
    subject = builds.run(mod, inputs, heard=heard.append)
    runs = subject.passes or _heard_runs(heard)
    origin = parts.torch_origins.get(fn)
    if reference is not None and (origin is None or reference is not origin.model):
        origin = None
    values = reference_values(builds.run, cuts, mod, fn, inputs, relax_passes_off(runs), origin)
    cuts.valued &= set(values.bindings)
    described = _given_reference(values, cuts, fn, reference, args) or values.described
    if subject.crash is not None:
        fault = Fault(CRASH, subject.crash.signal, crash_stage(subject.crash.stage))
    elif subject.error:
        fault = Fault(FAILS, error=error_key(subject.error))
    elif values.outputs is None and reference is None and origin is None:
        raise CallError(
            f"minimize: `{fn}` builds and runs with the module's pipeline, but its reference "
            f"does not ({values.described}): nothing says what its numbers should be; pass "
            "reference= (a callable or the expected outputs)",
            function=fn,
        )
    else:
        fault = Fault(NUMBERS, reference=described)
    judge = partial(Judge, builds, cuts, mod, values, fault, rtol=rtol, atol=atol)
    return _shrunk(parts, judge, started)


def minimize_bisection(result) -> Minimized:
    """The cut of a bisect result's function (a `Bisection`, which keeps its search) that the
    same pass still breaks: its numbers change with the pass, or its build crashes there."""
    started = time.perf_counter()
    search = getattr(result, "search", None)
    if not result.found or search is None:
        raise CallError(
            f"bisect found no pass at fault in `{result.function}`: nothing to minimize",
            function=result.function,
        )
    parts, fn, mod = search.parts, search.fn, search.mod
    if not isinstance(mod[fn], relax.Function):
        raise CallError(
            f"minimize cuts a Relax function's bindings; `{fn}` is a PrimFunc, already as small "
            "as a cut gets",
            function=fn,
        )
    builds, cuts = Builds(parts, fn), DataflowCut(mod[fn])
    culprit = result.culprit
    if culprit.phase == PIPELINE:  # a pass of the Relax pipeline runs once: its run is its key
        skip_without = frozenset({culprit.key})
    else:  # a pass of the TIR build runs for each kernel, and a cut builds other kernels
        skip_without = every_run_of({culprit.name}, _bound(search.runs, cuts))
    origin = parts.torch_origins.get(fn)
    values = reference_values(
        builds.run, cuts, mod, fn, search.inputs, relax_passes_off(search.runs), origin
    )
    cuts.valued &= set(values.bindings)
    if result.outcome == "crashed":
        crash = result.crash
        fault = Fault(CRASH, crash.signal, crash_stage(crash.stage), culprit=culprit.name)
    else:
        fault = Fault(PASS, culprit=culprit.name)
    judge = partial(
        Judge, builds, cuts, mod, values, fault, rtol=search.rtol, atol=search.atol,
        without=skip_without, culprit_key=culprit.key,
    )  # fmt: skip
    return _shrunk(parts, judge, started)


def _shrunk(parts: ModuleParts, make_judge: Callable[..., Judge], started: float) -> Minimized:
    """The search (by the judge `make_judge(on_step=...)` makes), its progress shown, and the
    result."""

    def heard(step: Step) -> None:
        least = min((s.size for s in judge.steps if s.shows), default=count)
        verdict = "shows the fault" if step.shows else "does not"
        bindings = f"{step.size} binding{'s' * (step.size != 1)}"
        note = f"cut {len(judge.steps)}: {bindings} {verdict}; smallest so far {least}"
        progress.step(count - least, note)

    judge = make_judge(on_step=heard)
    fn, count = judge.builds.fn, len(judge.cuts)
    progress = parts.progress(f"minimize {fn}", count, "bindings cut away")
    result = Minimized(parts.name, fn, judge.fault, count, values=judge.values.described)
    try:
        everything = judge.cuts.closed(range(count))
        if not judge.shows(everything):
            result.summary = _no_fault(judge, fn)
        else:
            kept = smallest(count, judge.shows, judge.cuts.closed)
            _found(result, judge, kept)
    finally:
        progress.close()
    result.steps, result.seconds = judge.steps, time.perf_counter() - started
    return result


def _found(result: Minimized, judge: Judge, kept: frozenset[int]) -> None:
    cut = judge.cuts.cut(kept)
    result.cut, result.script = cut, cut.function.script()
    result.detail = next(
        (s.detail for s in reversed(judge.steps) if s.shows and s.size == cut.size), ""
    )
    result.inputs = [judge.values.of(s) for s in cut.entering]
    result.module_ir = judge.module(cut)
    result.repro = repro_of(judge, result)


def _no_fault(judge: Judge, fn: str) -> str:
    fault = judge.fault
    if fault.kind == NUMBERS:
        return (
            f"{fn} gives the numbers of {fault.reference} (every value it returns, and every "
            f"binding's, within rtol={judge.rtol}, atol={judge.atol}): no fault to minimize"
        )
    return (
        f"{fn} shows the fault ({fault}) but a function of all its bindings does not "
        f"({judge.steps[-1].detail or 'it builds and runs'}), so it cannot be cut"
    )


def _given_reference(values: ReferenceValues, cuts: DataflowCut, fn: str, reference, args):
    """A reference given as a callable or as `fn`'s outputs: its outputs become the values of
    the bindings `fn` returns; how the result says it (None: not given)."""
    if reference is None:
        return None
    if callable(reference):
        with torch.no_grad():
            given = reference(*args)
        described = f"{getattr(reference, '__name__', type(reference).__name__)}(*args)"
    else:
        given, described = reference, "the expected outputs given"
    leaves = [to_torch(v) for _, v in flat_outputs(given)]
    returned = _returned(cuts)
    if len(leaves) != len(returned):
        raise CallError(
            f"minimize: the reference gives {len(leaves)} output(s), `{fn}` returns "
            f"{len(returned)}",
            function=fn,
        )
    for index, value in zip(returned, leaves, strict=True):
        if index is not None:
            values.bindings[index] = value.detach().cpu().numpy()
    return described


def _returned(cuts: DataflowCut) -> list[int | None]:
    """The bindings `fn` returns, flat, in order (None for a value no binding makes)."""

    def flat(expr) -> list[int | None]:
        if isinstance(expr, relax.Tuple):
            return [i for item in expr.fields for i in flat(item)]
        return [cuts.producer(expr) if isinstance(expr, relax.Var) else None]

    return flat(cuts.func.body.body)


def _heard_runs(heard: list[str]) -> tuple[PassRun, ...]:
    """The passes a build that did not finish ran, from the stages it reported ("pipeline pass
    FuseOps", "tir pass tirx.VectorizeLoop")."""
    stages = [text.split(" pass ", 1) for text in heard if " pass " in text]
    seen: Counter = Counter()
    runs = []
    for i, (phase, name) in enumerate(stages):
        runs.append(PassRun(i, name, seen[name], 0, phase, True))
        seen[name] += 1
    return tuple(r for r in runs if not is_container(r.name))


def _bound(runs: tuple[PassRun, ...], cuts: DataflowCut) -> int:
    """How many runs of one pass a build of a cut can ask for: a pass that runs once per kernel
    runs at most once per binding (each a kernel, nothing fused), and a few more."""
    counts = Counter(r.name for r in runs)
    kernels = max(1, counts.get("tirx.MakePackedAPI", 1))
    per_kernel = max(-(-c // kernels) for c in counts.values()) if counts else 1
    return per_kernel * (len(cuts) + 2) + max(counts.values(), default=1)
