"""`NAME.bisect("fn", *args)`: the first pass of the build that changes fn's numbers, or crashes.

In the spirit of LLVM's `-opt-bisect-limit`. One build of `fn` (its Relax
function and everything it calls) in the build worker lists every pass the
build runs: the module's Relax pipeline, and the TIR build of its kernels
(build/worker/pass_log.py). Of those, the *optional* ones are numbered 1..n
in the order they run; the build with passes 1..k on (and the rest off) is
run on the same inputs, in the worker, and compared with the reference, with
`compare`'s own tolerance (`comparing.difference`). A binary search finds the
first k whose build differs or crashes: pass k is at fault. A crash is a
result: the worker dies, the kernel does not.

Which passes are needed, and stay on in every build:
- those named in `NEEDED`: what turns the module into something that can be
  built and run at all. Legalization (`LegalizeOps`, the dispatch of sorting
  and sampling), the lowering to the VM (`ToNonDataflow`, `CallTIRRewrite`,
  `LowerAllocTensor`, `VMShapeLower`...), the lowering of TIR blocks and
  buffers, and of kernels to functions the VM calls (`MakePackedAPI`,
  `LowerTVMBuiltin`, `LowerIntrin`...), and the legalization of dtypes the
  CPU lacks (bfloat16, float8). Each is a translation from one level to the
  next, not an optimization: none can be left out;
- any other pass whose absence breaks the build: when the build with every
  optional pass off does not build, the first pass whose presence makes it
  build is found (by the same binary search) and counts as needed;
- a pass that runs others (a `Sequential`, a pipeline) is not a pass of its
  own: its passes are. Passes a pass runs inside itself (`FuseTIR`'s steps)
  go with it.

During the search a build can fail because a pass that was on needs one that
is off (`FuseOps` without `FuseTIR`): the next pass is switched on with it,
and if the fault shows only with both, the result names the later one and
lists those that do not build without it (`with_passes`).

The reference: the PyTorch model when `fn` came from `add_torch` (what it
returns on `args`), else the build with every optional pass off. Given
explicitly, it is a callable (a model: called on `args`) or `fn`'s expected
outputs (a tensor or a list of them).

A pass of your own joins the search like TVM's: put it in a Relax pipeline
and make the module with that pipeline. A pipeline registered with
`relax.register_pipeline` is followed by TVM's `default` one, so it can be
just the pass (make the pass *inside* the pipeline function, so that it
reaches the worker; see build/worker/jobs.py):

    @relax.register_pipeline("with_my_pass")
    def with_my_pass():
        @tvm.transform.module_pass(opt_level=0, name="MyPass")
        def my_pass(mod, ctx):
            return ...  # the module, rewritten
        return my_pass

    %%tvmmodule NAME --pipeline with_my_pass

The result (`Bisection`) names the pass, shows `fn` before and after it as a
diff of TVMScript, the verdict with its numbers and every build it tried;
`.save("repro.py")` writes a standalone file (bisect_repro.py).
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

from ...errors import CallError, WorkerCrash, reason_sentence
from ..build.worker.pass_log import CODEGEN, PassKey, PassRun
from ..build.worker.process import Crash
from ..feature_checks import check_comparison
from ..inspect.comparing import Difference, error_cells, output_differences
from ..module_parts import ModuleParts
from ..run.tensors import own_copies, to_torch
from ..tables import text_table
from .isolation import in_worker
from .primfunc_runs import BuildKernelAndRun
from .worker_builds import NEEDED, ir_changes, is_container, skip_keys, units, worker_inputs

SAME, DIFFERS, CRASHED, NO_BUILD = "same", "differs", "crashed", "does not build"
MAX_NEEDED_SEARCHES = 4  # passes found needed by a failing build before bisect gives up
NEIGHBOURS = 3  # passes tried on either side of a probe that does not build


@dataclass(frozen=True)
class Tried:
    """One build of the search: passes 1..`on` on, what came of it."""

    on: int
    last: str  # the last pass on ("" for none)
    outcome: str  # SAME, DIFFERS, CRASHED or NO_BUILD
    detail: str = ""  # the error, the crash, max abs error

    def row(self) -> tuple[str, str, str, str]:
        return (str(self.on), self.last or "(none)", self.outcome, self.detail)


@dataclass
class Bisection:
    """The result of `NAME.bisect`: the first pass that changes the numbers or crashes."""

    module: str
    function: str
    reference: str  # what the builds were compared with
    passes: list[PassRun]  # the optional passes, in order (pass k is passes[k - 1])
    needed: list[str]  # the names of the passes that stayed on
    tried: list[Tried]
    culprit: PassRun | None  # None: no pass is at fault
    position: int = 0  # its number, 1..n
    with_passes: list[PassRun] = field(default_factory=list)  # passes that need it to build
    outcome: str = SAME  # of the build with the culprit on (no culprit: with every pass off)
    differences: list[Difference] = field(default_factory=list)
    crash: Crash | None = None
    changed: list[str] = field(default_factory=list)  # functions the pass changed
    diff: str = ""  # unified diff of those functions' TVMScript
    seconds: float = 0.0
    summary: str = ""  # why there is no culprit, when there is none
    repro: Any = None  # what .save writes (bisect_repro.Repro)
    search: Any = field(default=None, repr=False)  # its builds, for `minimize` (minimizing.py)

    @property
    def found(self) -> bool:
        return self.culprit is not None

    def verdict(self) -> str:
        if self.culprit is None:
            return self.summary
        where = f"pass {self.position} of {len(self.passes)}, {self.culprit.phase}"
        what = f"{self.function}: {self.culprit.name} ({where})"
        if self.with_passes:
            what += f", with {', '.join(p.name for p in self.with_passes)} (no build without it)"
        if self.outcome == CRASHED:
            return f"{what} crashes the build: the worker {self.crash.cause} in {self.crash.stage}"
        return f"{what} changes the numbers: {error_text(self.differences)}"

    def rows(self) -> list[tuple[str, str, str, str]]:
        return [t.row() for t in self.tried]

    def searched(self) -> str:
        """What the search compared with and how far it went, as every view says it."""
        passes, builds = len(self.passes), len(self.tried)
        return (
            f"compared with {self.reference}; {passes} optional pass{'es' * (passes != 1)}, "
            f"{builds} build{'s' * (builds != 1)}"
        )

    def __repr__(self) -> str:
        lines = [
            f"bisect {self.function}: {self.verdict()}",
            f"{self.searched()} in {self.seconds:.1f} s",
            text_table(("on", "last pass on", "outcome", ""), self.rows()),
        ]
        if self.diff:
            lines += ["", f"{', '.join(self.changed)} before and after {self.culprit.name}:"]
            lines.append(self.diff)
        return "\n".join(lines)

    def minimize(self):
        """The fewest bindings of the function that the same pass still breaks (minimizing.py)."""
        from .minimizing import minimize_bisection

        return minimize_bisection(self)

    def save(self, path: str) -> str:
        """Write a standalone Python file (plain TVM, numpy) that shows the fault when run:
        the IR before the pass, the inputs, the pass applied; it exits non-zero (or
        crashes) while the fault is there."""
        if self.repro is None:
            raise CallError(f"bisect found no pass at fault in `{self.function}`: nothing to save")
        return self.repro.write(path)


def error_text(differences: list[Difference]) -> str:
    """The worst output's errors, as `compare` writes them (no digits that only rounding
    made)."""
    worst = max(differences, key=lambda d: d.max_abs)
    if worst.note:
        return worst.note
    max_abs, max_rel = error_cells(worst)
    return f"max abs error {max_abs}, max rel error {max_rel}"


# -- the search ---------------------------------------------------------------------------


@dataclass
class _Probe:
    outcome: str
    outputs: list[np.ndarray] | None = None
    differences: list[Difference] = field(default_factory=list)
    crash: Crash | None = None
    error: str = ""
    runs: tuple[PassRun, ...] = ()
    snapshots: dict = field(default_factory=dict)


class _Search:
    """The builds of one bisection, in the worker, against one reference."""

    def __init__(self, parts: ModuleParts, fn: str, mod, inputs, expected, rtol, atol):
        self.parts, self.fn, self.mod, self.inputs = parts, fn, mod, inputs
        # a PrimFunc is built alone and called on the arguments (its outputs: what it writes)
        self.kernel = isinstance(mod[fn], tvm.tirx.PrimFunc)
        self.expected, self.rtol, self.atol = expected, rtol, atol
        self.builder = in_worker(parts.build.builder, parts.name)
        self.runs: tuple[PassRun, ...] = ()
        self.passes: list[PassRun] = []
        self.tried: list[Tried] = []
        self.probes: dict[int, _Probe] = {}

    def build(self, skip=frozenset(), snapshots=frozenset(), heard=None) -> _Probe:
        run = self.builder.build_and_run
        if self.kernel:  # built alone, and called on the arguments
            run = partial(run, job_type=BuildKernelAndRun)
        try:
            report = run(
                self.parts.options, self.mod, self.fn, self.inputs,
                skip=skip, snapshots=snapshots, on_stage=heard,
            )  # fmt: skip
        except WorkerCrash as err:
            return _Probe(CRASHED, crash=err.crash)
        except Exception as err:  # TVM raises many types: each means "this does not build"
            return _Probe(NO_BUILD, error=reason_sentence(err))
        probe = _Probe(SAME, report.outputs, runs=report.passes, snapshots=report.snapshots)
        return self.judge(probe)

    def judge(self, probe: _Probe) -> _Probe:
        """`probe` against the reference (none yet: left as it is)."""
        if self.expected is not None and probe.outputs is not None:
            mine = [torch.from_numpy(a) for a in probe.outputs]
            _, probe.differences = output_differences(mine, self.expected, self.rtol, self.atol)
            probe.outcome = SAME if all(d.passed for d in probe.differences) else DIFFERS
        return probe

    def off(self, k: int) -> frozenset[PassKey]:
        """The keys that switch off the optional passes after the first `k`."""
        return skip_keys(self.runs, {p.index for p in self.passes[k:]})

    def probe(self, k: int) -> _Probe:
        """The build with passes 1..k on (once), keeping the IR around pass k (before and
        after) and pass k + 1 (the IR it would be given): when the search ends between two
        builds, the one it ends on has the pass at fault's IR, and no build is run again."""
        if k not in self.probes:
            around = {p.key for p in self.passes[max(k - 1, 0) : k + 1]}
            probe = self.build(self.off(k), frozenset(around))
            self.probes[k] = probe
            last = self.passes[k - 1].name if k else ""
            self.tried.append(Tried(k, last, probe.outcome, _detail(probe)))
        return self.probes[k]

    def snapshot(self, k: int, key: PassKey) -> tuple[str, str]:
        """The IR before and after pass `key` in the build with passes 1..k on ("" where there
        is none: the pass was off, or the build crashed), built again if it was not kept."""
        kept = self.probes.get(k)
        if kept is None or key not in kept.snapshots:
            kept = self.build(self.off(k), frozenset({key}))
        return kept.snapshots.get(key, ("", ""))


def _detail(probe: _Probe) -> str:
    if probe.outcome == CRASHED:
        return f"{probe.crash.signal or probe.crash.cause} in {probe.crash.stage}"
    if probe.outcome == NO_BUILD:
        return probe.error.splitlines()[0][:120] if probe.error else ""
    if probe.outcome == DIFFERS:
        return error_text(probe.differences)
    return ""


def _list_passes(search: _Search) -> _Probe:
    """The build with every pass on: its outcome, and every pass it runs. A build that crashes
    says no more than the stages it reached: it is listed again with the pass it crashed in
    (or, crashing after every pass, all the optional passes it reached) switched off."""
    heard: list[str] = []
    full = _heard_build(search, heard, frozenset())
    listing = full
    for _ in range(3):
        if listing.outcome != CRASHED:
            break
        skip = _crash_skips(heard, listing.crash.stage)
        listing = _heard_build(search, heard, skip)
        if listing.outcome == CRASHED and " pass " not in listing.crash.stage:
            return listing  # outside any pass, with the optional ones off: no runs listed
    if listing.outcome in (CRASHED, NO_BUILD):
        raise CallError(
            f"bisect: `{search.fn}` does not build with TVM's passes on, so its passes could not "
            f"be listed: {listing.crash or listing.error}",
            function=search.fn,
        )
    search.runs = listing.runs
    full.runs = full.runs or listing.runs
    return full


def _heard_build(search: _Search, heard: list[str], skip: frozenset) -> _Probe:
    heard.clear()
    return search.build(skip, heard=heard.append)


def _crash_skips(heard: list[str], stage: str) -> frozenset[PassKey]:
    """The passes to switch off after a crash in `stage`, from the stages heard before it."""
    ran = [text.split(" pass ", 1)[1] for text in heard if " pass " in text]
    keys, seen = [], Counter()
    for name in ran:
        keys.append((name, seen[name]))
        seen[name] += 1
    if " pass " in stage:
        return frozenset(keys[-1:])
    return frozenset(k for k in keys if not is_container(k[0]) and k[0] not in NEEDED)


def bisect(
    parts: ModuleParts,
    fn: str,
    args: tuple,
    reference=None,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    on_step: Callable[[int, str], None] | None = None,
) -> Bisection:
    """The first optional pass of `fn`'s build whose build differs from `reference` or
    crashes (see the module's docstring)."""
    started = time.perf_counter()
    check_comparison("bisect", fn, reference, args, rtol, atol, values=True)
    mod, inputs = worker_inputs(parts, fn, args)
    expected, described = _reference(parts, fn, args, reference)
    search = _Search(parts, fn, mod, inputs, expected, rtol, atol)
    full = _list_passes(search)
    if not search.runs:  # it crashes outside any pass, every optional pass it reached off
        search.tried.append(Tried(0, "", CRASHED, _detail(full)))
        return _crashes_anyway(parts, search, described, full, [], started)
    search.passes = [p for p in units(search.runs) if p.name not in NEEDED]
    n = len(search.passes)
    progress = parts.progress(f"bisect {fn}", n, "passes on")
    step = on_step or progress.step  # (k, what): the build with passes 1..k on is next
    try:
        _check_reference_shape(search, full, fn)
        needed = _bottom(search, step)
        bottom = search.probes[0]
        if bottom.outcome == CRASHED:
            return _crashes_anyway(parts, search, described, bottom, needed, started)
        if expected is None:  # the build with every optional pass off is the reference
            search.expected = [torch.from_numpy(a) for a in bottom.outputs]
            full = search.judge(full)
        search.probes[n] = full
        search.tried.append(
            Tried(n, search.passes[-1].name if n else "", full.outcome, _detail(full))
        )
        result = Bisection(parts.name, fn, described, search.passes, needed, search.tried, None)
        result.search = search
        if bottom.outcome != SAME and expected is not None:
            result.outcome, result.differences = bottom.outcome, bottom.differences
            result.summary = (
                f"{fn} differs from {described} already with every optional pass off "
                f"({_detail(bottom)}): the fault is in the import or in a needed pass"
            )
        elif full.outcome == SAME:
            result.summary = f"{fn} gives the reference's numbers with every pass on"
        else:
            _search(search, result, step)
    finally:
        progress.close()
    result.seconds = time.perf_counter() - started
    return result


def _crashes_anyway(
    parts: ModuleParts, search: _Search, described: str, probe: _Probe, needed, started: float
) -> Bisection:
    """The result when the build crashes also with every optional pass off: no pass is at
    fault, and it says where the build crashes (LLVM's code generation, a needed pass)."""
    crash = probe.crash
    where = "in LLVM's code generation" if crash.stage == CODEGEN else f"in {crash.stage}"
    result = Bisection(parts.name, search.fn, described, search.passes, needed, search.tried, None)
    result.outcome, result.crash = CRASHED, crash
    result.summary = (
        f"{search.fn}'s build crashes {where} also with every optional pass off, so no "
        f"optional pass is at fault: the worker {crash.cause}"
    )
    result.seconds = time.perf_counter() - started
    return result


def _reference(parts: ModuleParts, fn: str, args: tuple, reference) -> tuple[Any, str]:
    """What the builds are compared with (None: the build with every optional pass off), and
    how the result says it. For a PrimFunc, the values of all its arguments after the call: a
    callable reference is called on copies of them and writes its outputs into them, as the
    PrimFunc does."""
    if reference is None:
        origin = parts.torch_origins.get(fn)
        if origin is None:
            return None, "the build with every optional pass off"
        reference = origin.model
        described = f"the PyTorch model {type(reference).__name__}"
    elif callable(reference):
        described = f"{getattr(reference, '__name__', type(reference).__name__)}(*args)"
    else:
        return [to_torch(r) for r in _flat(reference)], "the expected outputs given"
    if isinstance(parts.entry(fn).func, tvm.tirx.PrimFunc):  # it writes into the arguments
        written = [to_torch(a).clone() for a in args]
        with torch.no_grad():
            reference(*written)
        return written, described
    with torch.no_grad():
        return reference(*own_copies(args)), described


def _flat(value) -> list:
    if isinstance(value, (tuple, list)):
        return [v for item in value for v in _flat(item)]
    return [value]


def _check_reference_shape(search: _Search, full: _Probe, fn: str) -> None:
    """A reference that cannot be `fn`'s outputs (their number, their shapes) is a mistake of
    the call, not a fault of a pass."""
    if search.expected is None or full.outputs is None:
        return
    mine = [torch.from_numpy(a) for a in full.outputs]
    _, diffs = output_differences(mine, search.expected, search.rtol, search.atol)
    wrong = [d.note for d in diffs if d.note.startswith(("shape", f"{len(mine)} outputs"))]
    if wrong:
        raise CallError(
            f"bisect: the reference cannot be `{fn}`'s outputs: {wrong[0]} "
            f"(`{fn}`'s against the reference's)",
            function=fn,
        )


def _bottom(search: _Search, step) -> list[str]:
    """Build with every optional pass off; a pass whose absence breaks that build counts as
    needed (the first k from which passes 1..k build). Returns the needed passes' names."""
    for _ in range(MAX_NEEDED_SEARCHES):
        step(0, "every optional pass off")
        bottom = search.probe(0)
        if bottom.outcome != NO_BUILD:
            break
        lo, hi = 0, len(search.passes)  # 1..lo does not build, 1..hi does
        while hi - lo > 1:
            mid = (lo + hi) // 2
            step(mid, f"looking for a needed pass: {search.passes[mid - 1].name}")
            if search.probe(mid).outcome == NO_BUILD:
                lo = mid
            else:
                hi = mid
        search.passes.pop(hi - 1)  # needed: it stays on, and the passes are numbered anew
        search.probes.clear()
    else:
        raise CallError(
            f"bisect: `{search.fn}` does not build with the optional passes off: "
            f"{search.probes[0].error}",
            function=search.fn,
        )
    optional = {p.name for p in search.passes}
    return sorted({r.name for r in units(search.runs)} - optional)


def _search(search: _Search, result: Bisection, step) -> None:
    """Binary search between the last good k and the first bad one; then the IR before and
    after the pass at fault."""
    n = len(search.passes)
    lo, hi = 0, _crashed_in(search, search.probes[n], n) or n
    while hi - lo > 1:
        mid = _buildable(search, lo, hi, step)
        if mid is None:  # nothing between builds: the passes in between need the last one
            result.with_passes = search.passes[lo : hi - 1]
            break
        if search.probes[mid].outcome == SAME:
            lo = mid
        else:
            hi = _crashed_in(search, search.probes[mid], mid) or mid
    step(hi, f"pass {hi} of {n}: {search.passes[hi - 1].name}")
    bad = search.probes[hi]
    result.culprit, result.position, result.outcome = search.passes[hi - 1], hi, bad.outcome
    result.differences, result.crash = bad.differences, bad.crash
    from .bisect_repro import repro_of

    # no pass before it is off: its key is the listing's. Crashed: the IR it was given, from the
    # build without it (a pass off is still shown it)
    k = hi - 1 if bad.outcome == CRASHED else hi
    before, after = search.snapshot(k, result.culprit.key)
    result.changed, result.diff = ir_changes(before, after)
    result.repro = repro_of(search, result, before, after)


def _crashed_in(search: _Search, probe: _Probe, k: int) -> int | None:
    """The number of the pass that build `k` crashed in, if it is one of passes 1..k and its
    name says which: every build with that pass on crashes there too (the passes before it
    are the same), so the search jumps to it instead of restarting the worker on the way."""
    if probe.outcome != CRASHED or " pass " not in probe.crash.stage:
        return None
    name = probe.crash.stage.split(" pass ", 1)[1]
    found = [i + 1 for i, p in enumerate(search.passes[:k]) if p.name == name]
    if len(found) != 1:
        return None
    search.probes.setdefault(found[0], probe)  # what its build would do
    return found[0]


def _buildable(search: _Search, lo: int, hi: int, step) -> int | None:
    """A k strictly between `lo` and `hi`, as near the middle as builds (probed), or None."""
    mid = (lo + hi) // 2
    near = [mid]
    for d in range(1, NEIGHBOURS + 1):
        near += [k for k in (mid + d, mid - d) if lo < k < hi]
    for k in near:
        step(k, f"pass {k} of {len(search.passes)}: {search.passes[k - 1].name}")
        if search.probe(k).outcome != NO_BUILD:
            return k
    return None
