"""Making a Relax function fast: `NAME.tune("fn", trials=N)` and `NAME.schedule("fn", "dlight")`.

A Relax function has no kernels of its own: the module's pipeline makes them
(what `NAME.kernels("fn")` lists). So a schedule for them cannot be a new
contribution, as a PrimFunc's is; it goes into the module's `KernelSchedules`
(build/kernel_schedules.py), which its build applies to the pipeline's output
every time the function compiles.

`tune_function` tunes the kernels of one function together: one MetaSchedule
task per distinct kernel (deduplicated by structural hash, weighted by how
often the function calls it), TVM's gradient task scheduler sharing the
trial budget by weight, each candidate built and run here or on the remote
device (measuring.py). Without a budget, the kernels that take most of the
function's time get a few rounds each. Then `tune` only improves: each
kernel's best candidate and the schedule it had are timed in turns, the same
way, and the faster one is what it runs from then on (the choice kept beside
the records: `KernelSchedules.choose`; the report says which kernels kept
their schedule).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import relax

from ...errors import ScheduleError, last_reason
from ..build import trust
from ..build.cpu_schedules import checked_schedule_of
from ..build.kernel_schedules import KernelSchedules, tunable, workload
from ..build.tuning_records import IN_MEMORY, WORKLOAD, kept_trials
from ..feature_checks import warn_unless_kept
from ..front_end_port import Progress
from .measuring import Measurer, import_tensor_intrinsics, quiet
from .report import KEPT, NOT_TUNED, TUNED, KernelRow, TuningReport, milliseconds


# -- the kernels of one function ---------------------------------------------------------------
@dataclass(frozen=True)
class KernelTask:
    """One distinct kernel of a function: its names there, its workload, how often it runs."""

    names: tuple[str, ...]
    workload: tvm.IRModule
    calls: int

    @property
    def name(self) -> str:
        others = len(self.names) - 1
        return f"{self.names[0]} (+{others} alike)" if others else self.names[0]


def kernel_tasks(lowered: tvm.IRModule, fn: str) -> list[KernelTask]:
    """The kernels lowered Relax function `fn` calls, one task per structure, in call order."""
    calls: Counter = Counter()

    def visit(node) -> None:
        if isinstance(node.op, tvm.ir.GlobalVar):
            calls[node.op.name_hint] += 1

    tvm_ffi.structural_walk(lowered[fn].body, [((relax.Call,), visit)])
    present = {gv.name_hint for gv in lowered.get_global_vars()}
    tasks: dict[int, list] = {}
    for name, count in calls.items():
        func = lowered[name] if name in present else None
        if not tunable(func):
            continue
        mod = workload(func)
        key = tvm_ffi.structural_hash(mod)
        for known in tasks.setdefault(key, []):
            if tvm_ffi.structural_equal(known[1], mod):
                known[0].append(name)
                known[2] += count
                break
        else:
            tasks[key].append([[name], mod, count])
    return [
        KernelTask(tuple(names), mod, count)
        for group in tasks.values()
        for names, mod, count in group
    ]


# The default budget (`tune("main")` without `trials`): the kernels that take most of the function's
# time, each given a few rounds of candidates. On this project's 2-core machine a trial costs
# about 0.1-0.3 s here (build and run), so the bench models' default tune ends within two minutes.
SHARE_TUNED = 0.85  # the costliest kernels that together take this share of the function's time
MAX_TUNED = 6  # at most this many of them
TRIALS_PER_KERNEL = 24


def tune_function(
    lowered: tvm.IRModule,
    fn: str,
    schedules: KernelSchedules,
    trials: int | None,
    progress: Callable[[int], Progress],
    measurer: Measurer,
    *,
    scheduled: bool = True,
) -> TuningReport:
    """Tune the kernels of `fn` (in `lowered`, the pipeline's output without any schedule)
    together, in `trials` trials counting those its database already has (None: the default
    budget, on the kernels that take most of its time), each kernel then keeping the faster of
    the schedule it had (the CPU schedule, or none with `scheduled` off: `--pipeline default`)
    and the best candidate, both measured by `measurer`, in turns."""
    start = time.perf_counter()
    tasks = kernel_tasks(lowered, fn)
    if not tasks:
        raise ScheduleError("its kernels have nothing MetaSchedule can tune", function=fn)
    database = schedules.database(create=True)
    defaults = [default_schedule(task.workload, measurer.target, scheduled) for task in tasks]
    reporter = _KernelProgress(tasks, progress)
    todo = 0
    try:
        reporter.note(f"timing each kernel's schedule ({measurer.where})")
        before = measurer.times([sch.mod for sch in defaults])
        chosen = _worth_tuning(tasks, before) if trials is None else list(range(len(tasks)))
        budget = TRIALS_PER_KERNEL * len(chosen) if trials is None else trials
        had = [kept_trials(database, task.workload) for task in tasks]
        todo = max(0, budget - sum(had[i] for i in chosen))
        if todo:
            reporter.start(todo)
            reporter.note("starting MetaSchedule (its first use in a process takes a while)")
            _tune_tasks([tasks[i] for i in chosen], database, todo, schedules, reporter, measurer)
        reporter.note("each kernel's best candidate against its schedule")
        rows = [
            _keep_the_faster(
                tasks[i], defaults[i], before[i], database, schedules, measurer, had[i]
            )
            for i in range(len(tasks))
        ]
        schedules.save_choices()
        reporter.finish(rows)
    except Exception as err:  # MetaSchedule and TVM raise many types
        raise ScheduleError(f"MetaSchedule failed: {last_reason(err)}", function=fn) from err
    finally:
        reporter.close()
    warn_unless_kept(fn, schedules.directory, database, [task.workload for task in tasks])
    return TuningReport(
        fn,
        todo,
        sum(row.trials for row in rows),
        time.perf_counter() - start,
        tuple(rows),
        str(schedules.directory or IN_MEMORY),
        measurer.where,
    )


def _worth_tuning(tasks: list[KernelTask], before: list[float | None]) -> list[int]:
    """The kernels the default budget goes to: the costliest (time × calls), up to those that
    take `SHARE_TUNED` of the function's time, at most `MAX_TUNED`."""
    cost = [(s or 0.0) * t.calls for t, s in zip(tasks, before, strict=True)]
    total = sum(cost) or 1.0
    chosen: list[int] = []
    covered = 0.0
    for i in sorted(range(len(tasks)), key=lambda i: -cost[i]):
        if covered >= SHARE_TUNED * total or len(chosen) == MAX_TUNED:
            break
        chosen.append(i)
        covered += cost[i]
    return sorted(chosen)


def _keep_the_faster(
    task: KernelTask, default, seconds, database, schedules: KernelSchedules, measurer, had: int
) -> KernelRow:
    """The kernel's row: its best candidate measured against the schedule it had, in turns; the
    faster one is what the kernel runs from now on (the choice is kept beside the records, with
    both times). A kernel with no new trial since its choice keeps it: nothing is measured."""
    trials = kept_trials(database, task.workload)
    best = database.query_schedule(task.workload, measurer.target, WORKLOAD) if trials else None
    if best is None:
        return KernelRow(task.name, task.calls, 0, seconds, seconds, NOT_TUNED)
    choice = schedules.choice(task.workload)
    if choice is None or trials != had:
        before, found = measurer.times([default.mod, best.mod])
        tuned = found is not None and (before is None or found < before)
        choice = schedules.choose(task.workload, tuned, before, found if tuned else before)
    kind = TUNED if choice.tuned else KEPT
    return KernelRow(task.name, task.calls, trials, choice.before, choice.after, kind)


def _tune_tasks(tasks, database, todo: int, schedules, reporter, measurer: Measurer) -> None:
    """MetaSchedule over `tasks` together: `todo` trials, TVM's gradient scheduler sharing them
    by weight after a first round for each kernel."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.relax_integration import extracted_tasks_to_tune_contexts

    import_tensor_intrinsics()
    work_dir = str(schedules.directory or trust.temporary_directory())  # MetaSchedule's logs
    target = measurer.target
    extracted = [
        ms.ExtractedTask(t.names[0], t.workload, target, [t.workload], t.calls) for t in tasks
    ]
    reporter.tuning(tasks)
    with quiet(ms):
        contexts, weights = extracted_tasks_to_tune_contexts(
            extracted, work_dir, strategy=_search(), num_threads=os.cpu_count() or 1, seed=0
        )
        ms.tune_tasks(
            tasks=contexts,
            task_weights=weights,
            work_dir=work_dir,
            max_trials_global=todo,
            num_trials_per_iter=_per_iteration(todo, len(tasks), measurer.parallel),
            database=database,
            task_scheduler="gradient",
            **measurer.meta_schedule_args(reporter.measured),
        )


def _per_iteration(todo: int, tasks: int, devices: int = 1) -> int:
    """Trials per round: each kernel gets one round first, the gradient scheduler the rest (at
    least one trial for each device that measures them)."""
    return max(devices, min(16, todo // (2 * tasks)))


def _search():
    """Evolutionary search from a population small enough for a few dozen trials per kernel."""
    from tvm.s_tir.meta_schedule.search_strategy import EvolutionarySearch

    return EvolutionarySearch(population_size=64, init_min_unmeasured=16, genetic_num_iters=2)


def default_schedule(
    mod: tvm.IRModule, target: tvm.target.Target, scheduled: bool = True
) -> tvm.s_tir.Schedule:
    """Kernel `mod` as a module compiles it untuned: a matmul, a convolution or an element-wise
    kernel with the CPU schedule written once for them (cpu_schedules.py); anything else, a
    kernel that schedule fails on, and every kernel of `--pipeline default` (`scheduled` off)
    as the pipeline made it (an empty trace)."""
    if scheduled and target.kind.name == "llvm":
        sch, _ = checked_schedule_of(mod, target)
        if sch is not None:
            return sch
    return tvm.s_tir.Schedule(mod)


class _KernelProgress:
    """The trials of every kernel, reported as one line: which kernel, how far, the best so far;
    and at the end, the function's kernels per call before and after."""

    def __init__(self, tasks: list[KernelTask], progress: Callable[[int], Progress]):
        self.tasks, self.make = tasks, progress
        self.progress = Progress()  # no bar until there are trials to measure
        self.done = 0
        self.tuned: list[KernelTask] = []
        self.best: dict[int, float] = {}

    def start(self, total: int) -> None:
        self.progress = self.make(total)

    def tuning(self, tasks: list[KernelTask]) -> None:
        """The kernels MetaSchedule's task ids count."""
        self.tuned = tasks

    def note(self, what: str) -> None:
        """What is happening before the first trial, and after the last."""
        self.progress.step(self.done, what)

    def measured(self, task: int, seconds: float | None) -> None:
        self.done += 1
        if seconds is not None and seconds < self.best.get(task, float("inf")):
            self.best[task] = seconds
        shown = milliseconds(self.best[task]) if task in self.best else "—"
        name = self.tuned[task].name if task < len(self.tuned) else "?"
        note = f"kernel {task + 1} of {len(self.tuned)}: {name}, best {shown}"
        self.progress.step(self.done, note)

    def finish(self, rows: list[KernelRow]) -> None:
        """The last word: per call of the function, what its kernels take now and took."""
        kept = sum(1 for row in rows if row.schedule == KEPT)
        note = f"{len(rows)} kernel{'s' * (len(rows) != 1)}"
        if all(r.before is not None and r.after is not None for r in rows):
            before = sum(r.before * r.calls for r in rows)
            after = sum(r.after * r.calls for r in rows)
            note += f" · {milliseconds(after)} per call (was {milliseconds(before)})"
        if kept:
            note += f" · {kept} kept their schedule"
        self.progress.step(self.done, note)

    def close(self) -> None:
        self.progress.close()
