"""Tuning one PrimFunc: `NAME.tune("k", trials=N)` runs MetaSchedule on it.

Each candidate is built and run here or on the remote device (measuring.py), every measured
trial goes to a progress reporter, and the records go to the module's tuning records
(build/tuning_records.py), so running it again with the trials already measured applies the
best one without tuning again. The best candidate is then timed against the kernel as its cell wrote
it, in turns, the same way: the faster one is the result (tune never makes a kernel slower).
The result is a PrimFunc; entry.py makes it a contribution of its own that replaces the kernel
until the kernel's cell runs again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import tvm

from ...errors import ScheduleError, last_reason
from ..build import trust
from ..build.tuning_records import IN_MEMORY, WORKLOAD, TuningRecords, kept_trials
from ..feature_checks import warn_unless_kept
from ..front_end_port import Progress
from .measuring import Measurer, import_tensor_intrinsics, quiet
from .report import KEPT, TUNED, KernelRow, TuningReport, milliseconds

DEFAULT_TRIALS = 32


def tuned(
    func: tvm.tirx.PrimFunc,
    name: str,
    records: TuningRecords,
    trials: int | None,
    progress: Callable[[int], Progress],
    measurer: Measurer,
) -> tuple[tvm.tirx.PrimFunc, TuningReport]:
    """The faster of `func` and the best schedule MetaSchedule finds for it in `trials` trials
    (counting kept ones; None: `DEFAULT_TRIALS`)."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    start = time.perf_counter()
    trials = DEFAULT_TRIALS if trials is None else trials
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
    target = measurer.target
    todo = max(0, trials - kept_trials(database, mod))
    if todo:
        reporter = _Trials(progress(todo))
        with quiet(ms):
            try:
                database = ms.tune_tir(
                    func,
                    target,
                    where if where != IN_MEMORY else str(trust.temporary_directory()),
                    todo,
                    num_trials_per_iter=max(measurer.parallel, min(8, todo)),
                    database=database,
                    seed=0,
                    num_tuning_cores=target.attrs.get("num-cores", 1),
                    **measurer.meta_schedule_args(reporter.measured),
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
    had, found = measurer.times([tvm.IRModule({WORKLOAD: func}), schedule.mod])
    faster = found is not None and (had is None or found < had)
    after, kind = (found, TUNED) if faster else (had, KEPT)
    row = KernelRow(name, 1, kept_trials(database, mod), had, after, kind)
    seconds = time.perf_counter() - start
    report = TuningReport(name, todo, row.trials, seconds, (row,), where, measurer.where)
    return (schedule.mod[WORKLOAD] if faster else func), report


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
