"""What an overlay says of each node of `NAME.graph`: a `Mark`, from what `compare` (by binding
or by kernel), `profile` or `trace` returned.

- a compare: each binding's (or launch's) verdict: `exact`, `≤ rounding`, `pass · error from
  its inputs`, `FAIL 0.52`, or `no reference value`; the first divergence marked `first`;
- a profile: each launch's time per call and its share of the run, on the launch and on the
  bindings fused into it (`heat`, for the colour);
- a trace: whether each binding's value is finite, `3 nan` where it is not; where a trace
  with `stop_at="nonfinite"` stopped marked `first`.

Marks are by binding and by launch (`kernel#k`, the k-th call site of a kernel): graph.py puts
them on whichever nodes it drew. An overlay that names bindings or kernels the function no
longer has was made before the function changed, and is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ...errors import CallError
from .comparing import WITHIN_ROUNDING, Comparison, Difference, short_number
from .kernel_compare import KernelComparison
from .profiling import Profile
from .timing import duration
from .tracing import Trace, nonfinite_count

# What an overlay says of a node, from least to most worth a look: a folded group shows the
# worst of its members.
NOT_COMPARED, FINITE, PASS, TIME, NONFINITE, FAIL = (
    "not compared",
    "finite",
    "pass",
    "time",
    "non-finite",
    "FAIL",
)
SEVERITY = (NOT_COMPARED, FINITE, PASS, TIME, NONFINITE, FAIL)


@dataclass(frozen=True)
class Mark:
    """What an overlay says of one node: a level (`SEVERITY`) and a few words for the node."""

    level: str
    text: str  # `FAIL 0.52`, `≤ rounding`, `3 nan`, `1.20 µs · 34%`
    heat: float = 0.0  # a profile's share of the run, 0..1
    first: bool = False  # the node the overlay names: the first divergence, where a trace stopped

    def worse_than(self, other: Mark | None) -> bool:
        if other is None:
            return True
        mine, theirs = SEVERITY.index(self.level), SEVERITY.index(other.level)
        return (mine, self.first, self.heat) > (theirs, other.first, other.heat)


@dataclass(frozen=True)
class Launch:
    """One call site of the compiled function: a kernel, a PyTorch call or a pyfunc."""

    key: str  # `kernel#k`: the k-th call site of this callee
    callee: str  # what the lowered function calls (kernel_sites' key)
    name: str  # as tables show it: the kernel, `torch.linear`, the pyfunc
    bindings: tuple[str, ...]


def overlay_kind(overlay) -> str:
    """`compare`, `compare by kernel`, `profile` or `trace`: what `overlay` is the result of."""
    if isinstance(overlay, KernelComparison):
        return "compare by kernel"
    if isinstance(overlay, Comparison):
        return "compare"
    if isinstance(overlay, Profile):
        return "profile"
    if isinstance(overlay, Trace):
        return "trace"
    raise CallError(
        "graph: overlay= takes what compare, profile or trace returned (a Comparison, a Profile "
        f"or a Trace), not {type(overlay).__name__}"
    )


def check_overlay(module_name: str, fn: str, overlay) -> None:
    """An overlay of `fn`, of this module, that says something of its nodes."""
    if overlay is None:
        return
    kind = overlay_kind(overlay)
    module = overlay.module or module_name
    if overlay.function != fn or module != module_name:
        raise CallError(
            f"graph: the overlay is a {kind} of `{module}.{overlay.function}`, not of "
            f"`{module_name}.{fn}`",
            function=fn,
        )
    if kind == "compare" and overlay.ops is None:
        raise CallError(
            f"graph: this compare of `{fn}` went output by output only, so it says nothing of "
            f"the nodes ({overlay.why_not_op_by_op})",
            function=fn,
        )


@dataclass
class Marks:
    """What an overlay says: marks by binding and by launch, and the names it has that the
    function does not (made before the function changed)."""

    verdict: str
    bindings: dict[str, Mark] = field(default_factory=dict)
    launches: dict[str, Mark] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)


def _compare_marks(comparison: Comparison, launches) -> Marks:
    first = comparison.first_divergence
    marks = {c.binding: _difference_mark(c.diff, c is first) for c in comparison.ops}
    return Marks(comparison.verdict(), marks)


def _kernel_compare_marks(comparison: KernelComparison, launches) -> Marks:
    """A launch's mark on the launch and on each binding fused into it."""
    first = comparison.first_divergence
    marks = Marks(comparison.verdict())
    seen: dict[str, int] = {}
    for check in comparison.checks:
        k = seen[check.callee] = seen.get(check.callee, -1) + 1
        mark = _difference_mark(check.diff, check is first)
        marks.launches[f"{check.callee}#{k}"] = mark
        marks.bindings.update(dict.fromkeys(check.bindings, mark))
    return marks


def _difference_mark(diff: Difference | None, first: bool) -> Mark:
    """A verdict in a few words. A pass shows no digits: an error within rounding, or one its
    inputs carried, has last bits that differ from one CPU to the next (and a saved notebook's
    picture must not)."""
    if diff is None:
        return Mark(NOT_COMPARED, "no reference value")
    if diff.passed:  # `exact`: an integer's (a float's error of 0 is within its rounding)
        exact = "exact" if diff.max_abs == 0 else "pass · within rtol, atol"
        return Mark(PASS, WITHIN_ROUNDING if diff.within_rounding else exact, first=first)
    note = f" ({diff.note})" if diff.note else ""
    return Mark(FAIL, f"FAIL {short_number(diff.max_abs)}{note}", first=first)


def _profile_marks(profile: Profile, launches: list[Launch]) -> Marks:
    """Each launch's time: its kernel's per call, and its share of the run split over the
    kernel's calls; on the launch and on the bindings fused into it."""
    rows = {row.kernel: row for row in profile.kernels}
    marks = Marks(profile.summary())
    marks.unknown = sorted(set(rows) - {launch.name for launch in launches})
    for launch in launches:
        row = rows.get(launch.name)
        if row is None or not row.calls:
            continue
        share = row.share / row.calls
        mark = Mark(TIME, f"{duration(row.mean)} · {100 * share:.1f}%", heat=share)
        marks.launches[launch.key] = mark
        marks.bindings.update(dict.fromkeys(launch.bindings, mark))
    return marks


def _trace_marks(trace: Trace, launches) -> Marks:
    stopped = trace.stopped.binding if trace.stopped is not None else None
    marks = Marks(trace.title())
    for traced in trace.intermediates:
        value = traced.value
        if not value.dtype.is_floating_point:
            continue
        if bool(value.isfinite().all()):
            marks.bindings[traced.name] = Mark(FINITE, "")
        else:
            text = nonfinite_count(value)
            marks.bindings[traced.name] = Mark(NONFINITE, text, first=traced.name == stopped)
    return marks


_MARKS_OF: dict[str, Callable] = {
    "compare": _compare_marks,
    "compare by kernel": _kernel_compare_marks,
    "profile": _profile_marks,
    "trace": _trace_marks,
}


def marks_of(overlay, launches: list[Launch]) -> Marks:
    """What `overlay` says of each binding and launch (`launches`: the compiled function's)."""
    return _MARKS_OF[overlay_kind(overlay)](overlay, launches)
