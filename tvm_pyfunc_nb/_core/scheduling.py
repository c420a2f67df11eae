"""Making a kernel fast in place: `NAME.schedule("k", how)` and `NAME.tune("k", trials=N)`.

- `how="dlight"` applies TVM's DLight default schedules for the module's
  target (thread bindings and shared memory on a GPU; on a CPU DLight only
  knows GEMV and reductions).
- `how=function` calls `function(sch)` with a `tvm.s_tir.Schedule` of the
  kernel (its only function is `main`, so `sch.get_sblock("C")` finds block C)
  for the user to apply primitives: split, reorder, vectorize, parallel...
- `tune` runs MetaSchedule: builds and runs each candidate in this process
  (no worker pools), reports every measured trial to a progress reporter, and
  keeps its database in a directory of its own (in the compile cache, else one
  of this process alone), so running it again with the trials already measured
  applies the best one without tuning again.

The result is a new PrimFunc; tuning.py makes it a contribution of its own
that replaces the kernel until the kernel's cell runs again.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tvm
import tvm_ffi

from ..errors import ScheduleError, last_reason
from . import trust
from .compile_cache import code_target
from .front_end_port import Progress

# the kernel's name inside the schedule, so that block lookups need no func_name
SCHEDULED_NAME = "main"
# what a MetaSchedule JSON database reads back from its directory
RECORD_FILES = ("database_workload.json", "database_tuning_record.json")


def dlight(func: tvm.tirx.PrimFunc, name: str, target: tvm.target.Target) -> tvm.tirx.PrimFunc:
    """`func` with DLight's default schedule rules for `target` applied."""
    from tvm.s_tir import dlight as dl

    _needs_blocks(func, name)
    mod = tvm.IRModule({SCHEDULED_NAME: func})  # DLight changes the module it is given: a copy
    try:
        with target:
            scheduled = dl.ApplyDefaultSchedule(*dlight_rules(target))(mod)[SCHEDULED_NAME]
    except Exception as err:
        raise ScheduleError(f"DLight failed: {last_reason(err)}", function=name) from err
    if tvm_ffi.structural_equal(scheduled, func):
        raise ScheduleError(
            f"DLight has no schedule for this kernel on target {target.kind.name} (its CPU rules "
            "cover GEMV and reductions only); schedule it with a function of your own",
            function=name,
        )
    return scheduled


def dlight_rules(target: tvm.target.Target) -> list:
    """DLight's default rules for `target`: GPU rules bind threads; CPU rules know GEMV and
    reductions only."""
    from tvm.s_tir import dlight as dl

    if "gpu" in target.keys:
        return [
            dl.gpu.Matmul(),
            dl.gpu.GEMV(),
            dl.gpu.Reduction(),
            dl.gpu.GeneralReduction(),
            dl.gpu.Fallback(),
        ]
    return [dl.cpu.GEMV(), dl.cpu.Reduction()]


def by_hand(func: tvm.tirx.PrimFunc, name: str, how: Callable) -> tvm.tirx.PrimFunc:
    """`func` after `how(sch)` applied primitives to `sch`, a `tvm.s_tir.Schedule` of it."""
    _needs_blocks(func, name)
    sch = tvm.s_tir.Schedule(tvm.IRModule({SCHEDULED_NAME: func}))
    try:
        how(sch)
    except Exception as err:  # TVM's ScheduleError, or the user's own mistake
        raise ScheduleError(f"{_where(err, how)}{last_reason(err)}", function=name) from err
    return sch.mod[SCHEDULED_NAME]


def _needs_blocks(func: tvm.tirx.PrimFunc, name: str) -> None:
    if not func.attrs.get("s_tir", False):
        raise ScheduleError(
            "has no blocks to schedule: write it with `@T.prim_func(s_tir=True)` and `T.sblock`",
            function=name,
        )


def _where(err: BaseException, how: Callable) -> str:
    """`in tile, line 4: ` for the deepest frame of the user's schedule function, if any."""
    code = getattr(how, "__code__", None)
    frames = [
        f
        for f in traceback.extract_tb(err.__traceback__)
        if code and f.filename == code.co_filename
    ]
    return f"in {how.__name__}, line {frames[-1].lineno}: " if frames else ""


@dataclass(frozen=True)
class TuningReport:
    """What a tuning run did: trials measured now and before, the best time, where it keeps them
    (`work_dir`: a machine's path, which the one-line summary leaves out)."""

    kernel: str
    trials_run: int
    trials_kept: int
    best_seconds: float | None
    work_dir: str

    def __repr__(self) -> str:
        best = f"{self.best_seconds * 1e3:.3f} ms" if self.best_seconds else "none"
        return (
            f"tuned {self.kernel}: {self.trials_run} trials measured now, {self.trials_kept} "
            f"in its database (`.work_dir` says where); best {best}"
        )


def tuned(
    func: tvm.tirx.PrimFunc,
    name: str,
    target: tvm.target.Target,
    trials: int,
    work_dir: str,
    progress: Callable[[int], Progress],
) -> tuple[tvm.tirx.PrimFunc, TuningReport]:
    """The best schedule MetaSchedule finds for `func` in `trials` trials, counting kept ones."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    try:
        database = tuning_database(work_dir)
    except Exception as err:  # a record cut short by a full disk (TVM's RuntimeError), OSError
        raise ScheduleError(
            f"its tuning records in {work_dir} cannot be read ({last_reason(err)}); delete "
            "them to tune it again",
            function=name,
        ) from err
    _import_tensor_intrinsics()
    mod = _normalize_mod(func)  # the workload as MetaSchedule files it (`main`, noalias)
    tuning_target = _tuning_target(target)
    kept = _kept_trials(database, mod)
    todo = max(0, trials - kept)
    if todo:
        reporter = progress(todo)
        measured = _measured_callback_class()(reporter)
        with _quiet(ms):
            try:
                database = ms.tune_tir(
                    func,
                    tuning_target,
                    work_dir,
                    todo,
                    num_trials_per_iter=min(8, todo),
                    builder=_in_process_builder(),
                    runner=_in_process_runner(),
                    database=database,
                    cost_model="random",
                    seed=0,
                    num_tuning_cores=os.cpu_count() or 1,
                    measure_callbacks=[
                        *ms.measure_callback.MeasureCallback.create("default"),
                        measured,
                    ],
                )
            except Exception as err:
                raise ScheduleError(
                    f"MetaSchedule failed: {last_reason(err)}", function=name
                ) from err
            finally:
                reporter.close()
    schedule = ms.tir_integration.compile_tir(database, func, tuning_target)
    if schedule is None:
        raise ScheduleError("MetaSchedule measured no working schedule", function=name)
    record = database.get_top_k(database.commit_workload(mod), 1)
    best = min(float(s) for s in record[0].run_secs) if record and record[0].run_secs else None
    report = TuningReport(name, todo, _kept_trials(database, mod), best, work_dir)
    return schedule.mod[SCHEDULED_NAME], report


def work_dir_for(persistent, name: str, func: tvm.tirx.PrimFunc, target: tvm.target.Target) -> str:
    """Where the tuning records of `func` live: in the compile cache `persistent` when it may be
    read (`CompileCache.tuning_directory` says why not), else in a directory of this process
    alone; never in a predictable shared path, where anyone could plant a record."""
    key = tvm_ffi.structural_hash(tvm.IRModule({SCHEDULED_NAME: func})) & 0xFFFFFFFFFFFF
    folder = f"{name}-{key:012x}-{target_digest(target)}"
    if persistent is not None:
        directory = persistent.tuning_directory(folder, RECORD_FILES, create=True)
        if directory is not None:
            return str(directory)
    directory = trust.temporary_directory() / "tuning" / folder
    trust.make_private(directory)
    return str(directory)


def target_digest(target: tvm.target.Target) -> str:
    """Part of the name of a tuning database's folder: a schedule tuned for one CPU (its vector
    width, its tensor intrinsics) is not one for another."""
    return hashlib.sha256(code_target(target).encode()).hexdigest()[:12]


def tuning_database(work_dir: str):
    """The MetaSchedule database kept in `work_dir`, its files made private first: MetaSchedule
    would make them with the umask's mode, which may let the group write them (umask 002), and
    then they would not be trusted."""
    from tvm.s_tir import meta_schedule as ms

    for name in RECORD_FILES:
        trust.write_private(Path(work_dir) / name, b"")
    return ms.database.JSONDatabase(work_dir=work_dir)


def _kept_trials(database, mod: tvm.IRModule) -> int:
    if not database.has_workload(mod):
        return 0
    return len(database.get_top_k(database.commit_workload(mod), 1 << 20))


def _tuning_target(target: tvm.target.Target) -> tvm.target.Target:
    """MetaSchedule needs the number of cores of a CPU target."""
    config = dict(target.export())
    if target.kind.name == "llvm" and "num-cores" not in config:
        config["num-cores"] = os.cpu_count() or 1
    return tvm.target.Target(config)


def _import_tensor_intrinsics() -> None:
    """Import TVM's tensor intrinsics, as MetaSchedule's first tuning task does, in seconds
    rather than minutes.

    Each of their ~500 PrimFuncs is parsed under `@T.prim_func`, which calls `inspect.stack()`.
    For every frame whose file no module has (`<frozen importlib._bootstrap>`, `<ast>`, and the
    caller's own: a notebook cell, code that xdist or execnet runs from a string) that scans all
    loaded modules for one with that file, thousands once torch is loaded: 5 minutes on a busy
    2-core machine, 50 s with the import machinery's answers in `inspect`'s own file-to-module
    cache, 18 s in a pytest-xdist worker, 5 s with the caller's answers there too (no module:
    a name that is not in sys.modules, as a scan finds none)."""
    import inspect
    import sys

    if "tvm.s_tir.tensor_intrin" in sys.modules:
        return
    for name in ("importlib._bootstrap", "importlib._bootstrap_external"):
        inspect.modulesbyfile.setdefault(f"<frozen {name}>", name)
    inspect.modulesbyfile.setdefault("<ast>", "")  # sys.modules has no "": no module, as a scan
    callers = set()  # the stack's files of no module, answered only while the import runs
    frame = sys._getframe()
    while frame is not None:
        file = frame.f_code.co_filename
        if file not in inspect.modulesbyfile and inspect.getmodule(frame, file) is None:
            callers.add(file)
        frame = frame.f_back
    inspect.modulesbyfile.update(dict.fromkeys(callers, ""))
    try:
        import tvm.s_tir.tensor_intrin  # noqa: F401
    finally:
        for file in callers:
            inspect.modulesbyfile.pop(file, None)


@contextlib.contextmanager
def _quiet(ms):
    """MetaSchedule's per-iteration tables go to its log files, not to the notebook.

    In a notebook MetaSchedule would draw them as tables of its own (with pandas, which this
    package does not need): for the tuning run it is told it is not in one.
    """
    logger = logging.getLogger(ms.__name__)
    level = logger.level
    logger.setLevel(logging.WARNING)
    # MetaSchedule configures its loggers by their handlers' names, and fails on a handler
    # without one (something else may have added it): those sit out the tuning run
    unnamed = [h for h in logger.handlers if h.get_name() is None]
    for handler in unnamed:
        logger.removeHandler(handler)
    in_notebook = tvm_ffi.get_global_func("s_tir.meta_schedule.using_ipython")
    tvm_ffi.register_global_func("s_tir.meta_schedule.using_ipython", lambda: False, override=True)
    try:
        yield
    finally:
        logger.setLevel(level)
        for handler in unnamed:
            logger.addHandler(handler)
        tvm_ffi.register_global_func(
            "s_tir.meta_schedule.using_ipython", in_notebook, override=True
        )


def _measured_callback_class():
    """Made on first use: MetaSchedule takes seconds to import."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    @derived_object
    class Measured(PyMeasureCallback):
        """Reports each measured trial: how many so far, and the best time."""

        def __init__(self, progress: Progress):
            super().__init__()
            self.progress, self.done, self.best = progress, 0, None

        def apply(self, task_scheduler, task_id, candidates, builder_results, runner_results):
            for runner_result in runner_results:
                self.done += 1
                if runner_result.run_secs:
                    seconds = min(float(s) for s in runner_result.run_secs)
                    self.best = seconds if self.best is None else min(self.best, seconds)
                note = f"best {self.best * 1e3:.3f} ms" if self.best else "no working candidate yet"
                self.progress.step(self.done, note)

    return Measured


def _in_process_builder():
    """Builds each candidate with `tirx.build` in this process (8× faster than the popen pool)."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder

    @derived_object
    class InProcessBuilder(PyBuilder):
        def build(self, build_inputs):
            results = []
            for build_input in build_inputs:
                try:
                    lib = tvm.tirx.build(build_input.mod, target=build_input.target)
                    # the default callbacks delete the artifact's directory after the run
                    path = os.path.join(tempfile.mkdtemp(prefix="tvm-pyfunc-nb-tune-"), "lib")
                    _BUILT[path] = lib
                    results.append(BuilderResult(path, None))
                except Exception as err:  # a candidate that does not build is a failed trial
                    results.append(BuilderResult(None, last_reason(err)))
            return results

    return InProcessBuilder()


def _in_process_runner():
    """Runs each built candidate with TVM's own evaluator in this process."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import PyRunner
    from tvm.s_tir.meta_schedule.runner.local_runner import LocalRunnerFuture

    @derived_object
    class InProcessRunner(PyRunner):
        def run(self, runner_inputs):
            futures = []
            for runner_input in runner_inputs:
                try:
                    lib = _BUILT.pop(str(runner_input.artifact_path))
                    futures.append(LocalRunnerFuture(res=_run(lib, runner_input.args_info)))
                except Exception as err:  # a candidate that fails to run is a failed trial
                    futures.append(LocalRunnerFuture(error_message=last_reason(err)))
            return futures

    return InProcessRunner()


def measured_seconds(lib, args_info) -> float:
    """The best of a kernel library's runs on random arguments, as a tuning trial measures it."""
    return min(float(s) for s in _run(lib, args_info))


def _run(lib, args_info) -> list[float]:
    """Seconds of each timed run of `lib`'s kernel here, on random arguments shaped `args_info`."""
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common, run_evaluator_common

    device = tvm.cpu()
    fill = tvm.get_global_func("tvm.contrib.random.random_fill_for_measure", True)
    args = alloc_argument_common(fill, device, [info.as_json() for info in args_info], 1)
    config = EvaluatorConfig(number=3, repeat=1, min_repeat_ms=20, enable_cpu_cache_flush=False)
    return run_evaluator_common(lib, device, config, args)


_BUILT: dict[str, object] = {}  # artifact path -> library, from the builder to the runner
