"""`NAME.schedule("fn", how)` and `NAME.tune("fn", trials=N)`, whatever kind of function `fn` is.

The one entry point of making a function fast; the live module asks it and
commits what it returns, without looking at the function's kind:

- a PrimFunc is scheduled by DLight or a function of a Schedule, or tuned by
  MetaSchedule (schedules.py, primfunc.py): the result is a new PrimFunc, which becomes a
  contribution of its own, derived from the kernel's, replacing it until the
  kernel's cell runs again;
- a Relax function has no kernels of its own, its pipeline makes them
  (relax_kernels.py): their schedules go into the module's
  `KernelSchedules`, applied after the pipeline every time it compiles, so
  the linked VMs built before must go.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import tvm

from ...errors import CallError, CompileError, ScheduleError, last_reason
from ..live.cells import PRIMFUNC, RELAX, FunctionSource
from ..live.contributions import Contribution, FunctionEntry, next_run
from ..models.importing import typed_global_var
from .primfunc import tuned
from .relax_kernels import tune_function
from .report import TuningReport
from .schedules import by_hand, dlight

if TYPE_CHECKING:
    from ..module_parts import ModuleParts


@dataclass(frozen=True)
class Scheduled:
    """What a schedule or a tuning run changed, for the live module to commit.

    `contribution`: the PrimFunc's new schedule, to apply as any contribution; None: the
    schedules the pipeline's kernels get changed (the linked VMs are out of date).
    `result`: what the user gets back (None: what applying the contribution gives).
    """

    contribution: Contribution | None
    result: Any = None


def schedule(parts: ModuleParts, fn: str, how) -> Scheduled:
    """Function `fn` scheduled `how`: "dlight", or (a PrimFunc) a function of a Schedule."""
    if parts.entry(fn).kind == RELAX:
        return Scheduled(None, dlight_relax(parts, fn, how))
    return Scheduled(schedule_kernel(parts, fn, how))


def tune(parts: ModuleParts, fn: str, trials: int) -> Scheduled:
    """Function `fn` tuned by MetaSchedule in `trials` trials (a Relax function: its kernels)."""
    if parts.entry(fn).kind == RELAX:
        return Scheduled(None, tune_relax(parts, fn, trials))
    contribution, report = tune_kernel(parts, fn, trials)
    return Scheduled(contribution, report)


# -- a PrimFunc: a contribution derived from the kernel's own --------------------------------
def schedule_kernel(parts: ModuleParts, kernel: str, how) -> Contribution:
    """PrimFunc `kernel` scheduled `how` ("dlight" or a function of a Schedule)."""
    entry = parts.entry(kernel, kind=PRIMFUNC, needed_by="schedule")
    if isinstance(how, str) and how == "dlight":
        func, what = dlight(entry.func, kernel, parts.target), repr("dlight")
    elif callable(how):
        func, what = by_hand(entry.func, kernel, how), getattr(how, "__name__", "a function")
    else:
        raise CallError(
            'schedule: how must be "dlight" or a function of a tvm.s_tir.Schedule',
            function=kernel,
        )
    return _replacing(parts, entry, func, f"{parts.name}.schedule({kernel!r}, {what})")


def tune_kernel(parts: ModuleParts, kernel: str, trials: int) -> tuple[Contribution, TuningReport]:
    """PrimFunc `kernel` as MetaSchedule tunes it in `trials` trials."""
    if not isinstance(trials, int) or trials < 1:
        raise CallError("tune: trials must be a positive number", function=kernel)
    refuse_unless_measured_here(parts, kernel)
    original = _original(parts, parts.entry(kernel, kind=PRIMFUNC, needed_by="tune"))
    func, report = tuned(
        original.func,
        kernel,
        parts.schedules.records,
        trials,
        lambda todo: parts.progress(f"tuning {kernel}", todo),
    )
    origin = f"{parts.name}.tune({kernel!r}, trials={trials})"
    return _replacing(parts, original, func, origin), report


def refuse_unless_measured_here(parts: ModuleParts, fn: str) -> None:
    """A `ScheduleError` before MetaSchedule starts, unless the module's code runs on this
    machine's CPU: each candidate is measured here (elsewhere, every trial would fail to run)."""
    build, target = parts.build, parts.options.target
    rpc = f" --rpc {parts.options.rpc}" if parts.options.rpc else ""
    if rpc or build.target.kind.name != "llvm":
        why = f" (this one: --target {target}{rpc})"
    elif build.cannot_run_here:
        why = f"; --target {target} {build.cannot_run_here}"
    else:
        return
    raise ScheduleError(
        "tune measures each candidate on this machine's CPU, so it needs a module for an llvm "
        f"target run here{why}",
        function=fn,
    )


def _original(parts: ModuleParts, entry: FunctionEntry) -> FunctionEntry:
    """The kernel as its cell (or `add`) made it, before any schedule."""
    contributions = parts.state.contributions
    base = contributions.get(contributions[entry.contribution].derived_from)
    return base.functions[entry.name] if base is not None else entry


def _replacing(parts: ModuleParts, entry: FunctionEntry, func, origin: str) -> Contribution:
    """`func` as kernel `entry.name`: a contribution of its own, derived from the original's."""
    name = entry.name
    base = _original(parts, entry).contribution
    key = ("schedule", name)
    func = func.with_attr("global_symbol", name)
    source = FunctionSource(name, PRIMFUNC, "", 0)
    scheduled = FunctionEntry(source, key, "", typed_global_var(name, func), func, run=next_run())
    return Contribution(key, origin, {name: scheduled}, derived_from=base, reports_rerun=True)


# -- a Relax function: the schedules its pipeline's kernels get --------------------------------
def tune_relax(parts: ModuleParts, fn: str, trials: int) -> TuningReport:
    """The kernels Relax function `fn` runs, tuned together in `trials` trials; the best
    schedules go into the module's kernel schedules (`parts.schedules`)."""
    refuse_unless_measured_here(parts, fn)
    lowered = unscheduled(parts, fn, link_first=True)

    def progress(todo: int):
        return parts.progress(f"tuning {fn}", todo, "trials")

    return tune_function(lowered, fn, parts.schedules, trials, progress)


def dlight_relax(parts: ModuleParts, fn: str, how) -> list[str]:
    """DLight over every kernel of Relax function `fn`, whenever it compiles; the kernels it
    scheduled."""
    if not (isinstance(how, str) and how == "dlight"):
        raise CallError(
            'schedule of a Relax function takes "dlight" (its kernels are the pipeline\'s); '
            "a function of a Schedule applies to a PrimFunc",
            function=fn,
        )
    # not linked first: on a GPU the kernels may not compile before DLight binds them
    scheduled = parts.schedules.dlight_kernels_of(unscheduled(parts, fn, link_first=False), fn)
    if not scheduled:
        raise ScheduleError(
            f"DLight has no schedule for any kernel of it on target "
            f"{parts.target.kind.name} (its kernels are scheduled already, or, on "
            "a CPU, are not GEMV or reductions: try tune)",
            function=fn,
        )
    parts.schedules.dlight.add(fn)
    return scheduled


def unscheduled(parts: ModuleParts, fn: str, *, link_first: bool) -> tvm.IRModule:
    """Relax function `fn` after its pipeline, its kernels as the pipeline made them."""
    parts.entry(fn, kind=RELAX, needed_by="tune" if link_first else "schedule")
    compiler, state = parts.compiler, parts.state
    if link_first:
        compiler.linked_for(state, fn)  # compile errors first, as a call would give them
    try:
        return compiler.build.lower(compiler.vm_module(state, [fn]), scheduled=False)
    except Exception as err:  # TVM raises many types; each means "this does not lower"
        raise CompileError(f"Relax lowering failed: {last_reason(err)}", function=fn) from err
