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
  trial budget by weight, each candidate built and run in this process.
  Before and after, each kernel is timed the same way, for the report.

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
from functools import partial
from pathlib import Path

import tvm
import tvm_ffi
from tvm import relax

from ..errors import CompileCacheWarning, ScheduleError, last_reason
from . import trust
from .cpu_schedules import checked_schedule_of, vector_lanes
from .front_end_port import Progress
from .scheduling import (
    RECORD_FILES,
    _import_tensor_intrinsics,
    _in_process_builder,
    _in_process_runner,
    _quiet,
    _tuning_target,
    dlight_rules,
    measured_seconds,
    target_digest,
    tuning_database,
)
from .tables import text_table

WORKLOAD = "main"  # a kernel's name inside its MetaSchedule workload
RECORDS = RECORD_FILES[1]  # the tuning records of a JSONDatabase
SCHEDULED = "tirx.is_scheduled"


def workload(func: tvm.tirx.PrimFunc) -> tvm.IRModule:
    """The kernel as MetaSchedule files it, whatever the pipeline named it."""
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    if func.attrs is not None and "global_symbol" in func.attrs:
        func = func.without_attr("global_symbol")
    return _normalize_mod(func)


def _is_scheduled(func) -> bool:
    return isinstance(func, tvm.tirx.PrimFunc) and bool(
        func.attrs is not None and func.attrs.get(SCHEDULED, False)
    )


def _tunable(func) -> bool:
    return (
        isinstance(func, tvm.tirx.PrimFunc)
        and bool(func.attrs is not None and func.attrs.get("s_tir", False))
        and not _is_scheduled(func)
    )


def _as_kernel(scheduled: tvm.tirx.PrimFunc, name: str) -> tvm.tirx.PrimFunc:
    return scheduled.with_attr("global_symbol", name).with_attr(SCHEDULED, True)


def schedules_dir(
    persistent, module_name: str, target: tvm.target.Target
) -> Callable[..., Path | None] | None:
    """Where module `module_name` keeps the tuning database of its Relax functions' kernels: a
    function that finds its folder in the compile cache `persistent` at each use (None when the
    cache refuses it, `CompileCache.tuning_directory`), or None: no cache, the database stays in
    memory."""
    if persistent is None:
        return None
    folder = f"{module_name}.relax-{target_digest(target)}"
    return partial(persistent.tuning_directory, folder, RECORD_FILES)


# -- what the build applies after the pipeline ------------------------------------------------
class KernelSchedules:
    """The schedules a live module applies to the kernels its pipeline makes.

    `place(create=...)` finds the folder of the MetaSchedule database (`schedules_dir`; None:
    kept in memory); `directory` is where the database is, once open; `dlight` names the Relax
    functions whose remaining kernels DLight schedules.
    """

    def __init__(self, place: Callable[..., Path | None] | None, target: tvm.target.Target):
        self.place = place
        self.directory: Path | None = None
        self.target = target
        self.dlight: set[str] = set()
        self._database = None

    def database(self, *, create: bool = False):
        """The tuning database, read from disk once, from a folder that passed the trust test
        then (asked again at each call until there is one); None if nothing was ever tuned."""
        if self._database is None:
            from tvm.s_tir import meta_schedule as ms

            directory = self.place(create=create) if self.place else None
            if directory is not None and (create or (directory / RECORDS).exists()):
                try:
                    self._database = tuning_database(str(directory))
                    self.directory = directory
                except Exception as err:  # a record cut short by a full disk; an OSError
                    self.place = None  # this module keeps its schedules in memory from now on
                    warnings.warn(
                        f"compile cache: the tuning records in {directory} cannot be read "
                        f"({last_reason(err)}); kernels compile with their default schedules "
                        "and tuning results stay in memory",
                        CompileCacheWarning,
                        stacklevel=2,
                    )
            if self._database is None and create:
                self._database = ms.database.MemoryDatabase()
        return self._database

    def dlight_kernels_of(self, lowered: tvm.IRModule, fn: str) -> list[str]:
        """The kernels of `fn` in `lowered` that DLight would schedule."""
        called = _called(lowered, [fn])
        todo = {
            gv: f for gv, f in lowered.functions_items() if gv.name_hint in called and _tunable(f)
        }
        return sorted(gv.name_hint for gv in dlight_kernels(todo, self.target))

    def apply(self, lowered: tvm.IRModule) -> tvm.IRModule:
        """`lowered` (the pipeline's output) with tuned and DLight schedules in its kernels."""
        updates = {}
        database = self.database()
        if database is not None:
            target = _tuning_target(self.target)
            for gv, func in lowered.functions_items():
                if _tunable(func):
                    mod = workload(func)
                    sch = database.query_schedule(mod, target, WORKLOAD)
                    if sch is not None and not tvm_ffi.structural_equal(sch.mod, mod):
                        updates[gv] = _as_kernel(sch.mod[WORKLOAD], gv.name_hint)
        if self.dlight:
            called = _called(lowered, self.dlight)
            todo = {
                gv: f
                for gv, f in lowered.functions_items()
                if gv.name_hint in called and gv not in updates and _tunable(f)
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


def dlight_kernels(kernels: dict, target: tvm.target.Target) -> dict:
    """The kernels of `kernels` (`{GlobalVar: PrimFunc}`) that DLight schedules, scheduled."""
    from tvm.s_tir import dlight as dl

    if not kernels:
        return {}
    mod = tvm.IRModule(dict(kernels))  # DLight changes the module it is given: a copy
    with target:
        scheduled = dl.ApplyDefaultSchedule(*dlight_rules(target))(mod)
    return {
        gv: _as_kernel(scheduled[gv.name_hint], gv.name_hint)
        for gv in kernels
        if _is_scheduled(scheduled[gv.name_hint])
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
        if not _tunable(func):
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


# -- tuning ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelRow:
    """One kernel of a tuned function: runs per call, trials kept, its time before and after."""

    kernel: str
    calls: int
    trials: int
    before: float | None
    after: float | None

    def cells(self) -> tuple[str, ...]:
        speedup = f"{self.before / self.after:.1f}×" if self.before and self.after else ""
        before, after = _ms(self.before), _ms(self.after)
        return (self.kernel, str(self.calls), str(self.trials), before, after, speedup)


@dataclass(frozen=True)
class FunctionTuningReport:
    """What `NAME.tune("fn", trials=N)` did for a Relax function: a row per kernel."""

    function: str
    trials_run: int
    trials_kept: int
    seconds: float
    rows: tuple[KernelRow, ...]
    where: str

    HEADER = ("kernel", "calls", "trials", "time before", "time after", "speedup")

    def total(self, which: str) -> float | None:
        """The kernels' time per call of the function (each kernel times its calls)."""
        times = [(getattr(r, which), r.calls) for r in self.rows]
        if not times or any(t is None for t, _ in times):
            return None
        return sum(t * calls for t, calls in times)

    def summary(self) -> str:
        before, after = self.total("before"), self.total("after")
        change = f"; kernels per call {_ms(before)} → {_ms(after)}" if before and after else ""
        return (
            f"tuned {self.function}: {len(self.rows)} kernels, {self.trials_run} trials "
            f"measured now in {self.seconds:.1f} s, {self.trials_kept} in its database "
            f"({'in memory' if self.where == 'in memory' else '`.where` says where'}){change}"
        )

    def table_rows(self) -> list[tuple[str, ...]]:
        return [row.cells() for row in self.rows]

    def __repr__(self) -> str:
        return f"{self.summary()}\n{text_table(self.HEADER, self.table_rows())}"

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))


def tune_function(
    lowered: tvm.IRModule,
    fn: str,
    schedules: KernelSchedules,
    trials: int,
    progress: Callable[[int], Progress],
) -> FunctionTuningReport:
    """Tune the kernels of `fn` (in `lowered`, the pipeline's output without any schedule)
    together, in `trials` trials counting those its database already has."""
    start = time.perf_counter()
    tasks = kernel_tasks(lowered, fn)
    if not tasks:
        raise ScheduleError("its kernels have nothing MetaSchedule can tune", function=fn)
    target = _tuning_target(schedules.target)
    database = schedules.database(create=True)
    defaults = [default_schedule(task.workload, target) for task in tasks]
    kept = sum(
        _kept_trials(database, task.workload, d) for task, d in zip(tasks, defaults, strict=True)
    )
    todo = max(0, trials - kept)
    reporter = _KernelProgress(tasks, progress(todo) if todo else Progress(), todo)
    try:
        reporter.note("timing each kernel's default schedule")
        before = [_time_of(sch.mod, target) for sch in defaults]
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
    rows = []
    for task, default, seconds in zip(tasks, defaults, before, strict=True):
        sch = database.query_schedule(task.workload, target, WORKLOAD)
        after = _time_of(sch.mod, target) if sch is not None else None
        kept_trials = _kept_trials(database, task.workload, default)
        rows.append(KernelRow(task.name, task.calls, kept_trials, seconds, after))
    kept_now = sum(row.trials for row in rows)
    return FunctionTuningReport(
        fn,
        kept_now - kept,
        kept_now,
        time.perf_counter() - start,
        tuple(rows),
        str(schedules.directory or "in memory"),
    )


def _tune_tasks(tasks, database, target, todo: int, directory, reporter) -> None:
    """MetaSchedule over `tasks` together: `todo` trials, TVM's gradient scheduler sharing them
    by weight after a first round for each kernel."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.relax_integration import extracted_tasks_to_tune_contexts

    _import_tensor_intrinsics()
    work_dir = str(directory or trust.temporary_directory())  # MetaSchedule's logs
    extracted = [
        ms.ExtractedTask(t.names[0], t.workload, target, [t.workload], t.calls) for t in tasks
    ]
    with _quiet(ms):
        contexts, weights = extracted_tasks_to_tune_contexts(
            extracted, work_dir, strategy=_search(), num_threads=os.cpu_count() or 1, seed=0
        )
        ms.tune_tasks(
            tasks=contexts,
            task_weights=weights,
            work_dir=work_dir,
            max_trials_global=todo,
            num_trials_per_iter=_per_iteration(todo, len(tasks)),
            builder=_in_process_builder(),
            runner=_in_process_runner(),
            database=database,
            cost_model="random",
            measure_callbacks=[
                *ms.measure_callback.MeasureCallback.create("default"),
                _per_kernel_callback_class()(reporter.measured),
            ],
            task_scheduler="gradient",
        )


def _per_iteration(todo: int, tasks: int) -> int:
    """Trials per round: each kernel gets one round first, the gradient scheduler the rest."""
    return max(1, min(16, todo // (2 * tasks)))


def _search():
    """Evolutionary search from a population small enough for a few dozen trials per kernel."""
    from tvm.s_tir.meta_schedule.search_strategy import EvolutionarySearch

    return EvolutionarySearch(population_size=64, init_min_unmeasured=16, genetic_num_iters=2)


def _kept_trials(database, mod: tvm.IRModule, default) -> int:
    """The trials in `database` for kernel `mod` (its default schedule is not a trial)."""
    if not database.has_workload(mod):
        return 0
    records = database.get_top_k(database.commit_workload(mod), 1 << 20)
    default_text = str(default.trace)
    return sum(1 for r in records if len(r.trace.insts) and str(r.trace) != default_text)


def default_schedule(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.s_tir.Schedule:
    """Kernel `mod` as a module compiles it untuned: a matmul, a convolution or an element-wise
    kernel with the CPU schedule written once for them (cpu_schedules.py), anything else (and a
    kernel that schedule fails on) as the pipeline made it (an empty trace)."""
    if target.kind.name == "llvm":
        sch, _ = checked_schedule_of(mod, vector_lanes(target))
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


def _time_of(mod: tvm.IRModule, target: tvm.target.Target) -> float | None:
    """Seconds one run of kernel `mod` takes here, timed as MetaSchedule's trials are."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    try:
        lib = tvm.tirx.build(mod, target=target)
        return measured_seconds(lib, ArgInfo.from_prim_func(mod[WORKLOAD]))
    except Exception:  # a kernel that does not build or run alone has no time to show
        return None


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
        note = f"kernel {task + 1} of {len(self.tasks)}: {name}, best {_ms(best) if best else '—'}"
        self.progress.step(self.done, note)

    def close(self) -> None:
        tuned = sum(1 for b in self.best if b is not None)
        note = f"{tuned} of {len(self.tasks)} kernels"
        after, was = self._per_call(self.best), self._per_call(self.before)
        if after is not None:
            note += f" · best {_ms(after)} per call"
            if was is not None:
                note += f" (was {_ms(was)})"
        self.progress.step(self.done, note)
        self.progress.close()

    def _per_call(self, seconds: list[float | None]) -> float | None:
        """The kernels' time per call of the function, if every kernel has one."""
        if any(s is None for s in seconds):
            return None
        return sum(s * t.calls for s, t in zip(seconds, self.tasks, strict=True))


def _per_kernel_callback_class():
    """Made on first use: MetaSchedule takes seconds to import."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    @derived_object
    class PerKernel(PyMeasureCallback):
        """Tells `measured(task, seconds)` of each trial (seconds None: the candidate failed)."""

        def __init__(self, measured: Callable[[int, float | None], None]):
            super().__init__()
            self.measured = measured

        def apply(self, task_scheduler, task_id, candidates, builder_results, runner_results):
            for result in runner_results:
                seconds = min(float(s) for s in result.run_secs) if result.run_secs else None
                self.measured(int(task_id), seconds)

    return PerKernel


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:.3f} ms"
