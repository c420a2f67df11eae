"""Making a Relax function fast: `NAME.tune("fn", trials=N)` and `NAME.schedule("fn", "dlight")`.

A Relax function has no kernels of its own: the module's pipeline makes them
(what `NAME.kernels("fn")` lists). So a schedule for them cannot be a new
contribution, as a PrimFunc's is; it is applied to the pipeline's output
instead, every time the function compiles:

- `KernelSchedules` holds what a live module applies after its pipeline: a
  MetaSchedule database (kernels found in it by structural hash get their best
  schedule) and the Relax functions whose kernels DLight schedules. The
  database lives in the compile cache's folder, so a new kernel process (or
  a new module of the same name) uses the tuned schedules at its first compile;
  it is read only if no one else could have written it (trust.py), and without
  a compile cache, or with one refused, it lives in memory, for this module only.
- `tune_function` tunes the kernels of one function together: one MetaSchedule
  task per distinct kernel (deduplicated by structural hash, weighted by how
  often the function calls it), TVM's gradient task scheduler sharing the
  trial budget by weight, each candidate built and run here or on the remote
  device (measuring.py). Without a budget, the kernels that take most of the
  function's time get a few rounds each. Then `tune` only improves: each
  kernel's best candidate and the schedule it had are timed in turns, the
  same way, and the faster one is what it runs from then on (the choice kept
  beside the records; the report says which kernels kept their schedule).

A kernel is keyed by its structure, never by its name: the pipeline's names
(`matmul1`) change when other ops change, and an edit that changes a kernel
makes it miss the database (it falls back to the default schedule) unless the
database has its new structure too.
"""

from __future__ import annotations

import os
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tvm
import tvm_ffi
from tvm import relax

from ...errors import CompileCacheWarning, ScheduleError, last_reason
from ..build import trust
from ..build.cpu_schedules import checked_schedule_of, vector_unit
from ..front_end_port import Progress
from .measuring import Measurer, import_tensor_intrinsics, quiet, tuning_target
from .records import (
    IN_MEMORY,
    Choice,
    TuningRecords,
    kept_trials,
    read_choices,
    workload_key,
    write_choices,
)
from .report import KEPT, NOT_TUNED, TUNED, KernelRow, TuningReport, milliseconds
from .schedules import WORKLOAD, as_kernel, dlight_kernels, tunable


def workload(func: tvm.tirx.PrimFunc) -> tvm.IRModule:
    """The kernel as MetaSchedule files it, whatever the pipeline named it."""
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    if func.attrs is not None and "global_symbol" in func.attrs:
        func = func.without_attr("global_symbol")
    return _normalize_mod(func)


# -- what the build applies after the pipeline ------------------------------------------------
class KernelSchedules:
    """The schedules a live module applies to the kernels its pipeline makes, and its tuning
    records (`records`, records.py: PrimFuncs tuned alone keep theirs there too).

    `directory` is where the Relax kernels' database is, once open; `dlight` names the Relax
    functions whose remaining kernels DLight schedules. `tune`'s choices say, per kernel, whether
    its best record is faster than the schedule it had (else it keeps that one), and are kept
    beside the records.
    """

    def __init__(self, records: TuningRecords):
        self.records = records
        self.target = records.target
        self.directory: Path | None = None
        self.dlight: set[str] = set()
        self._database = None
        self._on_disk = True  # until its records cannot be read
        self._choices: dict[str, Choice] = {}

    def database(self, *, create: bool = False):
        """The tuning database, read from disk once, from a folder that passed the trust test
        then (asked again at each call until there is one); None if nothing was ever tuned."""
        if self._database is None:
            folder = self.records.module_folder
            try:
                if self._on_disk:
                    self._database, where = self.records.database(folder, create=create)
                else:
                    self._database, where = self.records.in_memory(folder, create=create)
                if self._database is not None and where != IN_MEMORY:
                    self._choices = read_choices(Path(where))
            except Exception as err:  # a record cut short by a full disk; an OSError
                self._on_disk = False  # this module keeps its schedules in memory from now on
                where = self.records.directory(folder, create=False)
                warnings.warn(
                    f"compile cache: the tuning records in {where} cannot be read "
                    f"({last_reason(err)}); kernels compile with their default schedules "
                    "and tuning results stay in memory",
                    CompileCacheWarning,
                    stacklevel=2,
                )
                self._database, where = self.records.in_memory(folder, create=create)
                self._choices = {}
            if self._database is not None and where != IN_MEMORY:
                self.directory = Path(where)
        return self._database

    def uses_tuned(self, mod: tvm.IRModule) -> bool:
        """Whether kernel `mod` runs its best record (else the schedule it had: `tune` found
        no faster one)."""
        choice = self._choices.get(workload_key(mod))
        return choice is None or choice.tuned

    def choice(self, mod: tvm.IRModule) -> Choice | None:
        return self._choices.get(workload_key(mod))

    def choose(self, mod: tvm.IRModule, tuned: bool, before, after) -> Choice:
        choice = self._choices[workload_key(mod)] = Choice(tuned, before, after)
        return choice

    def save_choices(self) -> None:
        """The choices beside the records on disk (in memory, they are kept as they are)."""
        if self.directory is not None and self._on_disk:
            write_choices(self.directory, self._choices)

    def dlight_kernels_of(self, lowered: tvm.IRModule, fn: str) -> list[str]:
        """The kernels of `fn` in `lowered` that DLight would schedule."""
        called = _called(lowered, [fn])
        todo = {
            gv: f for gv, f in lowered.functions_items() if gv.name_hint in called and tunable(f)
        }
        return sorted(gv.name_hint for gv in dlight_kernels(todo, self.target))

    def apply(self, lowered: tvm.IRModule) -> tvm.IRModule:
        """`lowered` (the pipeline's output) with tuned and DLight schedules in its kernels."""
        updates = {}
        database = self.database()
        if database is not None:
            target = tuning_target(self.target)
            for gv, func in lowered.functions_items():
                if tunable(func):
                    mod = workload(func)
                    if not self.uses_tuned(mod):
                        continue
                    sch = database.query_schedule(mod, target, WORKLOAD)
                    if sch is not None and not tvm_ffi.structural_equal(sch.mod, mod):
                        updates[gv] = as_kernel(sch.mod[WORKLOAD], gv.name_hint)
        if self.dlight:
            called = _called(lowered, self.dlight)
            todo = {
                gv: f
                for gv, f in lowered.functions_items()
                if gv.name_hint in called and gv not in updates and tunable(f)
            }
            updates.update(dlight_kernels(todo, self.target))
        if not updates:
            return lowered
        mod = lowered.clone()
        for gv, func in updates.items():
            mod.update_func(gv, func)
        return mod


def _called(lowered: tvm.IRModule, functions) -> set[str]:
    """The names of the functions that Relax functions `functions` of `lowered` call."""
    present = {gv.name_hint for gv in lowered.get_global_vars()}
    return {
        gv.name_hint
        for fn in functions
        if fn in present
        for gv in relax.analysis.all_global_vars(lowered[fn])
    }


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
        sch, _ = checked_schedule_of(mod, vector_unit(target))
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


def kernel_schedules(
    persistent, module_name: str, target: tvm.target.Target, *, remote: bool = False
) -> KernelSchedules:
    """What module `module_name` applies to its pipeline's kernels, with its tuning records in
    the compile cache `persistent` (None: in memory), apart for a remote device's (`remote`)."""
    return KernelSchedules(TuningRecords(persistent, module_name, target, remote=remote))
