"""`NAME.minimize("fn", *args)`, and `.minimize()` on a bisect result: `fn` cut to the fewest
bindings whose build still shows the same fault.

In the spirit of the `torch.compile` minifier and Polygraphy's `debug reduce`:
what an upstream report needs is not a model of hundreds of bindings but the
two or three that go wrong. The fault is one of:
- `NUMBERS`: the compiled numbers leave the reference's: an output of the cut
  against the reference run's value of that binding (`compare`'s tolerance,
  with the rounding its op explains), or an argument that the run changed
  while no `call_tir_inplace` of the cut writes into it (a pure function
  leaves its arguments alone);
- `CRASH`: the build crashes with the same signal in the same stage (the
  same pass, codegen, the link);
- `FAILS`: the build raises the same error (TVM's reason, its names and
  numbers aside);
- `PASS` (from a bisect result): the same pass still changes the numbers: the
  cut built with the passes up to it on, against the cut built without it.

A cut (cutting.py) keeps some bindings; the values that enter it are the
reference run's (reference_run.py: the PyTorch model's where `fn` came from
one, else the build with every optional pass off), given as parameters. The
search (shrinking.py) narrows to a window, then delta-debugs inside it. Each
cut is built and run in the build worker, so a crash is a data point and
never the end of the kernel. The passes a build switches off are named, not
counted: "every run of `FuseOps`", so that they stay the same passes in a
cut that builds fewer kernels.

The result (`Minimized`) shows the cut as TVMScript, its size against the
original's and the verdict; `.save("repro.py")` writes it as a file that plain
TVM runs (minimize_repro.py).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import tvm
from tvm import relax

from ...errors import CallError, WorkerCrash, reason_sentence
from ..build.worker.pass_log import PIPELINE, PassRun
from ..build.worker.process import Crash
from ..feature_checks import check_comparison
from ..inspect.comparing import difference, error_cells, flat_outputs, values_summed
from ..live.cells import PYFUNC, RELAX
from ..live.relax_rewrite import py_func_calls, relax_closure, sub_module
from ..module_parts import ModuleParts
from ..run.tensors import to_torch
from ..tables import text_table
from .bisecting import NEEDED, is_container, skip_keys, units, worker_inputs
from .cutting import BINDING, Cut, DataflowCut, module_of, written_in_place
from .isolation import in_worker
from .reference_run import ReferenceValues, reference_values
from .shrinking import smallest

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


# -- builds in the worker ------------------------------------------------------------------


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
    """The builds of one minimization, in the build worker."""

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


def every_run_of(names, bound: int) -> frozenset:
    """The pass keys that switch off every run of the passes `names` (up to `bound` runs each)."""
    return frozenset((name, k) for name in names for k in range(bound))


def relax_passes_off(runs: tuple[PassRun, ...]) -> frozenset:
    """The keys that switch off the optional passes of the Relax pipeline in `runs`: the same
    in any build with that pipeline (each runs once), whatever the module."""
    optional = {p.index for p in units(runs) if p.phase == PIPELINE and p.name not in NEEDED}
    return skip_keys(runs, optional)


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
    phrases = [p.strip(" .,;:") for p in re.split(r"`[^`]*`|[()\[\]\n]", said)]
    plain = [p for p in phrases if p and not re.search(r"\d", p)] or [p for p in phrases if p]
    return max(plain, key=len) if plain else error


# -- judging a cut -------------------------------------------------------------------------


class Judge:
    """Whether a cut of `fn` still shows `fault`: each cut built (once) and judged."""

    def __init__(self, builds: Builds, cuts: DataflowCut, mod, values: ReferenceValues, fault):
        self.builds, self.cuts, self.mod, self.values, self.fault = builds, cuts, mod, values, fault
        self.skip_without: frozenset = frozenset()  # PASS: the pass off (the rest is on)
        self.culprit_key = None  # PASS: the run of the pass (for the IR right before it)
        self.rtol, self.atol = 1e-5, 1e-6
        self.steps: list[Step] = []
        self.seen: dict[frozenset[int], bool] = {}
        self.on_step = lambda step: None

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
        inputs = [self.values.value(s) for s in cut.entering]
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
            None if src is None else self.values.value(src)
            for index in cut.outputs
            for src in self.cuts.leaves(index)
        ]

    def _summed(self, source) -> int:
        """How many values each of the binding `source` names sums (1 for a parameter)."""
        if source is None or source[0] != BINDING:
            return 1
        index = source[1]
        shapes = {self.cuts.names[i]: v.shape for i, v in self.values.bindings.items()}
        shapes |= {p.name: a.shape for p, a in zip(self.cuts.func.params, self.values.arguments)}
        value = self.cuts.bindings[index].value
        return values_summed(value, shapes, tuple(self.values.bindings[index].shape))


def unchanged(cut: Cut, inputs) -> list[np.ndarray | None]:
    """What each argument must be after the run: as it was, unless a `call_tir_inplace` of the
    cut writes into it (None: any value)."""
    written = written_in_place(cut.function)
    params = cut.function.params
    return [None if p in written else a for p, a in zip(params, inputs, strict=True)]


# -- minimize ------------------------------------------------------------------------------


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
    else:
        fault = Fault(NUMBERS, reference=described)
    judge = Judge(builds, cuts, mod, values, fault)
    judge.rtol, judge.atol = rtol, atol
    return _shrunk(parts, judge, started)


def minimize_bisection(result) -> Minimized:
    """The cut of a bisect result's function that the same pass still breaks: its numbers
    change with the pass, or its build crashes there."""
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
    judge = Judge(builds, cuts, mod, values, fault)
    judge.skip_without, judge.culprit_key = skip_without, culprit.key
    judge.rtol, judge.atol = search.rtol, search.atol
    return _shrunk(parts, judge, started)


def _shrunk(parts: ModuleParts, judge: Judge, started: float) -> Minimized:
    """The search, its progress shown, and the result."""
    fn, count = judge.builds.fn, len(judge.cuts)
    progress = parts.progress(f"minimize {fn}", count, "bindings cut away")
    smallest_seen = [count]

    def heard(step: Step) -> None:
        if step.shows:
            smallest_seen[0] = min(smallest_seen[0], step.size)
        verdict = "shows the fault" if step.shows else "does not"
        note = f"cut {len(judge.steps)}: {step.size} bindings {verdict}; smallest {smallest_seen[0]}"
        progress.step(count - smallest_seen[0], note)

    judge.on_step = heard
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
    from .minimize_repro import repro_of

    cut = judge.cuts.cut(kept)
    result.cut, result.script = cut, cut.function.script()
    result.detail = next(
        (s.detail for s in reversed(judge.steps) if s.shows and s.size == cut.size), ""
    )
    result.inputs = [judge.values.value(s) for s in cut.entering]
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
    """The passes a build that did not finish ran, from the stages it reported."""
    names = [text.split(" pass ", 1)[1] for text in heard if " pass " in text]
    seen: Counter = Counter()
    runs = []
    for i, name in enumerate(names):
        runs.append(PassRun(i, name, seen[name], 0, PIPELINE, True))
        seen[name] += 1
    return tuple(r for r in runs if not is_container(r.name))


def _bound(runs: tuple[PassRun, ...], cuts: DataflowCut) -> int:
    """How many runs of one pass a build of a cut can ask for: a pass that runs once per kernel
    runs at most once per binding (each a kernel, nothing fused), and a few more."""
    counts = Counter(r.name for r in runs)
    kernels = max(1, counts.get("tirx.MakePackedAPI", 1))
    per_kernel = max(-(-c // kernels) for c in counts.values()) if counts else 1
    return per_kernel * (len(cuts) + 2) + max(counts.values(), default=1)
