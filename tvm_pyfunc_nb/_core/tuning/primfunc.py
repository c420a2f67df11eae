"""Tuning one PrimFunc: `NAME.tune("k", trials=N)` runs MetaSchedule on it.

Each candidate is built and run in this process (measuring.py), every measured
trial goes to a progress reporter, and the records go to the module's tuning
records (build/tuning_records.py), so running it again with the trials already measured
applies the best one without tuning again. The result is a new PrimFunc;
entry.py makes it a contribution of its own that replaces the kernel until the
kernel's cell runs again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import tvm

from ...errors import ScheduleError, last_reason
from ..build import trust
from ..build.tuning_records import WORKLOAD, TuningRecords, kept_trials, tuning_target
from ..feature_checks import warn_unless_kept
from ..front_end_port import Progress
from .measuring import import_tensor_intrinsics, in_process, quiet, time_of
from .report import KernelRow, TuningReport, milliseconds


def tuned(
    func: tvm.tirx.PrimFunc,
    name: str,
    records: TuningRecords,
    trials: int,
    progress: Callable[[int], Progress],
) -> tuple[tvm.tirx.PrimFunc, TuningReport]:
    """The best schedule MetaSchedule finds for `func` in `trials` trials, counting kept ones."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    start = time.perf_counter()
    folder = records.kernel_folder(name, func)
    try:
        database, where = records.database(folder, create=True)
    except Exception as err:  # a record cut short by a full disk (TVM's RuntimeError), OSError
        where = records.directory(folder, create=False)
        raise ScheduleError(
            f"its tuning records in {where} cannot be read ({last_reason(err)}); delete "
            "them to tune it again",
            function=name,
        ) from err
    import_tensor_intrinsics()
    mod = _normalize_mod(func)  # the workload as MetaSchedule files it (`main`, noalias)
    target = tuning_target(records.target)
    kept = kept_trials(database, mod)
    todo = max(0, trials - kept)
    if todo:
        reporter = _Trials(progress(todo))
        with quiet(ms):
            try:
                database = ms.tune_tir(
                    func,
                    target,
                    where if where != "in memory" else str(trust.temporary_directory()),
                    todo,
                    num_trials_per_iter=min(8, todo),
                    database=database,
                    seed=0,
                    num_tuning_cores=os.cpu_count() or 1,
                    **in_process(reporter.measured),
                )
            except Exception as err:
                raise ScheduleError(
                    f"MetaSchedule failed: {last_reason(err)}", function=name
                ) from err
            finally:
                reporter.progress.close()
    warn_unless_kept(name, where, database, [mod])
    schedule = ms.tir_integration.compile_tir(database, func, target)
    if schedule is None:
        raise ScheduleError("MetaSchedule measured no working schedule", function=name)
    record = database.get_top_k(database.commit_workload(mod), 1)
    best = min(float(s) for s in record[0].run_secs) if record and record[0].run_secs else None
    now = kept_trials(database, mod)
    row = KernelRow(name, 1, now, time_of(tvm.IRModule({WORKLOAD: func}), target), best)
    report = TuningReport(name, todo, now, time.perf_counter() - start, (row,), where)
    return schedule.mod[WORKLOAD], report


class _Trials:
    """Each measured trial as a step of `progress`: how many so far, and the best time."""

    def __init__(self, progress: Progress):
        self.progress, self.done, self.best = progress, 0, None

    def measured(self, task: int, seconds: float | None) -> None:
        self.done += 1
        if seconds is not None:
            self.best = seconds if self.best is None else min(self.best, seconds)
        note = f"best {milliseconds(self.best)}" if self.best else "no working candidate yet"
        self.progress.step(self.done, note)
