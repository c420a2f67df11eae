"""Making a Relax function fast: `NAME.tune("fn", trials=N)` and `NAME.schedule("fn", "dlight")`.

A Relax function has no kernels of its own: the module's pipeline makes them
(what `NAME.kernels("fn")` lists). So a schedule for them cannot be a new
contribution, as a PrimFunc's is; it goes into the module's `KernelSchedules`
(build/kernel_schedules.py), which its build applies to the pipeline's output
every time the function compiles.

`tune_function` tunes the kernels of one function together: one MetaSchedule
task per distinct kernel (deduplicated by structural hash, weighted by how
often the function calls it), TVM's gradient task scheduler sharing the
trial budget by weight, each candidate built and run in this process. Before
and after, each kernel is timed the same way, for the report.
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
from ..build.tuning_records import IN_MEMORY, WORKLOAD, kept_trials, tuning_target
from ..feature_checks import warn_unless_kept
from ..front_end_port import Progress
from .measuring import import_tensor_intrinsics, in_process, quiet, time_of
from .report import KernelRow, TuningReport, milliseconds


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


def tune_function(
    lowered: tvm.IRModule,
    fn: str,
    schedules: KernelSchedules,
    trials: int,
    progress: Callable[[int], Progress],
) -> TuningReport:
    """Tune the kernels of `fn` (in `lowered`, the pipeline's output without any schedule)
    together, in `trials` trials counting those its database already has."""
    start = time.perf_counter()
    tasks = kernel_tasks(lowered, fn)
    if not tasks:
        raise ScheduleError("its kernels have nothing MetaSchedule can tune", function=fn)
    target = tuning_target(schedules.target)
    database = schedules.database(create=True)
    defaults = [default_schedule(task.workload, target) for task in tasks]
    kept = sum(
        kept_trials(database, task.workload, d) for task, d in zip(tasks, defaults, strict=True)
    )
    todo = max(0, trials - kept)
    reporter = _KernelProgress(tasks, progress(todo) if todo else Progress(), todo)
    try:
        reporter.note("timing each kernel's default schedule")
        before = [time_of(sch.mod, target) for sch in defaults]
        reporter.before = before
        for task, sch, seconds in zip(tasks, defaults, before, strict=True):
            _keep_default(database, task.workload, sch, target, seconds)
        if todo:
            reporter.note("starting MetaSchedule (its first use in a process takes a while)")
            _tune_tasks(tasks, database, target, todo, schedules.directory, reporter)
    except Exception as err:
        raise ScheduleError(f"MetaSchedule failed: {last_reason(err)}", function=fn) from err
    finally:
        reporter.close()
    warn_unless_kept(fn, schedules.directory, database, [task.workload for task in tasks])
    rows = []
    for task, default, seconds in zip(tasks, defaults, before, strict=True):
        sch = database.query_schedule(task.workload, target, WORKLOAD)
        after = time_of(sch.mod, target) if sch is not None else None
        trials_kept = kept_trials(database, task.workload, default)
        rows.append(KernelRow(task.name, task.calls, trials_kept, seconds, after))
    kept_now = sum(row.trials for row in rows)
    return TuningReport(
        fn,
        kept_now - kept,
        kept_now,
        time.perf_counter() - start,
        tuple(rows),
        str(schedules.directory or IN_MEMORY),
    )


def _tune_tasks(tasks, database, target, todo: int, directory, reporter) -> None:
    """MetaSchedule over `tasks` together: `todo` trials, TVM's gradient scheduler sharing them
    by weight after a first round for each kernel."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.relax_integration import extracted_tasks_to_tune_contexts

    import_tensor_intrinsics()
    work_dir = str(directory or trust.temporary_directory())  # MetaSchedule's logs
    extracted = [
        ms.ExtractedTask(t.names[0], t.workload, target, [t.workload], t.calls) for t in tasks
    ]
    with quiet(ms):
        contexts, weights = extracted_tasks_to_tune_contexts(
            extracted, work_dir, strategy=_search(), num_threads=os.cpu_count() or 1, seed=0
        )
        ms.tune_tasks(
            tasks=contexts,
            task_weights=weights,
            work_dir=work_dir,
            max_trials_global=todo,
            num_trials_per_iter=_per_iteration(todo, len(tasks)),
            database=database,
            task_scheduler="gradient",
            **in_process(reporter.measured),
        )


def _per_iteration(todo: int, tasks: int) -> int:
    """Trials per round: each kernel gets one round first, the gradient scheduler the rest."""
    return max(1, min(16, todo // (2 * tasks)))


def _search():
    """Evolutionary search from a population small enough for a few dozen trials per kernel."""
    from tvm.s_tir.meta_schedule.search_strategy import EvolutionarySearch

    return EvolutionarySearch(population_size=64, init_min_unmeasured=16, genetic_num_iters=2)


def default_schedule(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.s_tir.Schedule:
    """Kernel `mod` as a module compiles it untuned: a matmul, a convolution or an element-wise
    kernel with the CPU schedule written once for them (cpu_schedules.py), anything else (and a
    kernel that schedule fails on) as the pipeline made it (an empty trace)."""
    if target.kind.name == "llvm":
        sch, _ = checked_schedule_of(mod, target)
        if sch is not None:
            return sch
    return tvm.s_tir.Schedule(mod)


def _keep_default(database, mod: tvm.IRModule, sch, target, seconds: float | None) -> None:
    """Record the kernel's default schedule `sch` with its time, so that the best record is
    never a tuned schedule slower than what the module ran before it was tuned."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord

    if seconds is None:
        return
    if database.has_workload(mod):
        records = database.get_top_k(database.commit_workload(mod), 1 << 20)
        if any(str(record.trace) == str(sch.trace) for record in records):
            return
    record = TuningRecord(
        sch.trace,
        database.commit_workload(mod),
        run_secs=[seconds],
        target=target,
        args_info=ArgInfo.from_prim_func(mod[WORKLOAD]),
    )
    database.commit_tuning_record(record)


class _KernelProgress:
    """The trials of every kernel, reported as one line: which kernel, how far, the best so far."""

    def __init__(self, tasks: list[KernelTask], progress: Progress, total: int):
        self.tasks, self.progress, self.total = tasks, progress, total
        self.done = 0
        self.trials = [0] * len(tasks)
        self.best: list[float | None] = [None] * len(tasks)
        self.before: list[float | None] = [None] * len(tasks)

    def note(self, what: str) -> None:
        """What is happening before the first trial."""
        self.progress.step(0, what)

    def measured(self, task: int, seconds: float | None) -> None:
        self.done += 1
        self.trials[task] += 1
        if seconds is not None and (self.best[task] is None or seconds < self.best[task]):
            self.best[task] = seconds
        best = self.best[task]
        name = self.tasks[task].name
        shown = milliseconds(best) if best else "—"
        note = f"kernel {task + 1} of {len(self.tasks)}: {name}, best {shown}"
        self.progress.step(self.done, note)

    def close(self) -> None:
        tuned = sum(1 for b in self.best if b is not None)
        note = f"{tuned} of {len(self.tasks)} kernels"
        after, was = self._per_call(self.best), self._per_call(self.before)
        if after is not None:
            note += f" · best {milliseconds(after)} per call"
            if was is not None:
                note += f" (was {milliseconds(was)})"
        self.progress.step(self.done, note)
        self.progress.close()

    def _per_call(self, seconds: list[float | None]) -> float | None:
        """The kernels' time per call of the function, if every kernel has one."""
        if any(s is None for s in seconds):
            return None
        return sum(s * t.calls for s, t in zip(seconds, self.tasks, strict=True))
