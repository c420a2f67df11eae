"""How MetaSchedule measures here: each candidate built and run in this process (no worker
pools: 8× faster than the popen pool), a callback per measured trial, its logs kept out of the
notebook, and the few seconds it needs to start instead of minutes."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Callable

import numpy as np
import tvm
import tvm_ffi

from ...errors import last_reason
from ..build.tuning_records import WORKLOAD


def import_tensor_intrinsics() -> None:
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
def quiet(ms):
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


def trial_callback(measured: Callable[[int, float | None], None]):
    """A MetaSchedule measure callback that tells `measured(task, seconds)` of each trial
    (seconds None: the candidate failed). Its class is made on first use: MetaSchedule takes
    seconds to import."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    @derived_object
    class Trials(PyMeasureCallback):
        def __init__(self, measured: Callable[[int, float | None], None]):
            super().__init__()
            self.measured = measured

        def apply(self, task_scheduler, task_id, candidates, builder_results, runner_results):
            for result in runner_results:
                seconds = min(float(s) for s in result.run_secs) if result.run_secs else None
                self.measured(int(task_id), seconds)

    return Trials(measured)


def in_process(measured: Callable[[int, float | None], None]) -> dict:
    """The arguments of a MetaSchedule run that build and run each candidate in this process,
    pick candidates at random (no cost model to train), and tell `measured(task, seconds)` of
    each trial."""
    from tvm.s_tir.meta_schedule.measure_callback import MeasureCallback

    return {
        "builder": in_process_builder(),
        "runner": in_process_runner(),
        "cost_model": "random",
        "measure_callbacks": [*MeasureCallback.create("default"), trial_callback(measured)],
    }


def in_process_builder():
    """Builds each candidate with `tirx.build` in this process."""
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


def in_process_runner():
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


def time_of(mod: tvm.IRModule, target: tvm.target.Target) -> float | None:
    """Seconds one run of kernel `mod` (named `main`) takes here, timed as MetaSchedule's trials
    are: the best of its runs on random arguments."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    try:
        lib = tvm.tirx.build(mod, target=target)
        return min(float(s) for s in _run(lib, ArgInfo.from_prim_func(mod[WORKLOAD])))
    except Exception:  # a kernel that does not build or run alone has no time to show
        return None


def _run(lib, args_info) -> list[float]:
    """Seconds of each timed run of `lib`'s kernel here, on arguments shaped `args_info`: floats
    random, integers and booleans zero (see `_fill`)."""
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common, run_evaluator_common

    device = tvm.cpu()
    args = alloc_argument_common(_fill, device, [info.as_json() for info in args_info], 1)
    config = EvaluatorConfig(number=3, repeat=1, min_repeat_ms=20, enable_cpu_cache_flush=False)
    return run_evaluator_common(lib, device, config, args)


def _fill(tensor) -> None:
    """What a candidate is measured on. MetaSchedule fills every argument with random bits, and
    runs candidates in worker processes that may die: an integer argument is usually an index
    (an embedding's token ids, a gather's positions), and a random one reads far outside its
    buffer. Here, in this process, that was a segfault that ended the kernel (tune of a BERT).
    Index 0 is inside every buffer that has an element: integers and booleans are zero."""
    dtype = str(tensor.dtype)
    if dtype.startswith(("int", "uint", "bool")):
        tensor.copyfrom(np.zeros(tuple(tensor.shape), dtype=dtype))
    else:
        tvm.get_global_func("tvm.contrib.random.random_fill_for_measure")(tensor)


_BUILT: dict[str, object] = {}  # artifact path -> library, from the builder to the runner
