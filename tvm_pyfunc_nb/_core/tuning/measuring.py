"""Where and how MetaSchedule's candidates are measured, and every time `tune` reports.

A `Measurer` builds and runs kernels either in this process (no worker pools: 8× faster than
the popen pool) or, for a module with `--rpc`, on the remote device through MetaSchedule's RPC
runner: each candidate is built here for the remote target, exported (with the module's cross
compiler), uploaded and timed there; through a tracker, on every server registered under the
key at once. The trials, the time of each kernel before tuning and the final choice between
the schedule a kernel had and the best one found are all measured by the same builder and
runner, so that they compare. MetaSchedule's logs are kept out of the notebook, and the few
seconds it needs to start are not minutes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tvm
import tvm_ffi

from ...errors import last_reason
from ..build.library_files import write_library
from ..build.tuning_records import WORKLOAD, tuning_target
from ..run.thread_pool import match_torch_threads

# Each time `tune` reports or compares is the best of this many runs, taken in turns when
# two schedules of one kernel are compared (a busy moment of the machine falls on both)
ROUNDS = 3


@dataclass
class Measurer:
    """Builds and runs kernels for MetaSchedule and for `tune`'s own comparisons: `builder` and
    `runner` are MetaSchedule's kinds; `where` says where the runs happen, `parallel` on how
    many devices at once."""

    target: tvm.target.Target
    builder: object
    runner: object
    where: str
    parallel: int = 1

    def meta_schedule_args(self, measured: Callable[[int, float | None], None]) -> dict:
        """The arguments of a MetaSchedule run that measures with this measurer, picks
        candidates at random (no cost model to train), and tells `measured(task, seconds)` of
        each trial."""
        from tvm.s_tir.meta_schedule.measure_callback import MeasureCallback

        return {
            "builder": self.builder,
            "runner": self.runner,
            "cost_model": "random",
            "measure_callbacks": [*MeasureCallback.create("default"), trial_callback(measured)],
        }

    def times(self, mods: list[tvm.IRModule], rounds: int = ROUNDS) -> list[float | None]:
        """Seconds one run of each kernel (a module of one function, `main`) takes, the best of
        `rounds` runs taken in turns; None for one that does not build or run."""
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo
        from tvm.s_tir.meta_schedule.builder import BuilderInput
        from tvm.s_tir.meta_schedule.runner import RunnerInput

        match_torch_threads()
        built = self.builder.build([BuilderInput(mod, self.target) for mod in mods])
        kind = str(tvm.runtime.device(self.target.get_target_device_type(), 0)).split(":")[0]
        inputs = [
            RunnerInput(b.artifact_path, kind, ArgInfo.from_prim_func(m[WORKLOAD]))
            if b.error_msg is None
            else None
            for b, m in zip(built, mods, strict=True)
        ]
        best: list[float | None] = [None] * len(mods)
        try:
            for _ in range(rounds):
                for i, runner_input in enumerate(inputs):
                    if runner_input is None:
                        continue
                    (result,) = [f.result() for f in self.runner.run([runner_input])]
                    if result.error_msg is None and result.run_secs:
                        seconds = min(float(s) for s in result.run_secs)
                        best[i] = seconds if best[i] is None else min(best[i], seconds)
        finally:
            for b in built:
                if b.artifact_path is not None:
                    forget_artifact(b.artifact_path)
        return best


def local_measurer(target: tvm.target.Target) -> Measurer:
    """Candidates built and run in this process, on TVM's pool as wide as PyTorch's."""
    return Measurer(tuning_target(target), in_process_builder(), in_process_runner(), "here")


def remote_measurer(address: str, target: tvm.target.Target, options) -> Measurer:
    """Candidates built here for the remote `target`, exported with the module's cross compiler
    and timed on the device `address` names (`HOST:PORT`, or `tracker=HOST:PORT/KEY`: on every
    server under the key, in parallel) by MetaSchedule's RPC runner."""
    from tvm.s_tir.meta_schedule.runner import RPCConfig, RPCRunner

    from ..run.remote import Address

    where = Address.parse(address)
    timeout = max(1, int(options.rpc_timeout))
    # a knock first: TVM's tracker client retries a refused port for a minute, in a thread that
    # outlives the timeout MetaSchedule gives it
    socket.create_connection((where.host, where.port), timeout=timeout).close()
    if where.key is None:  # one server: MetaSchedule's runner asks a tracker; this connects
        config = RPCConfig(where.host, where.port, DIRECT, session_timeout_sec=timeout)
        servers, create = 1, direct_session
    else:
        config = RPCConfig(where.host, where.port, where.key, session_timeout_sec=timeout)
        servers, create = max(1, config.count_num_servers()), None
    runner = RPCRunner(
        config,
        evaluator_config(),
        f_create_session=create,
        f_alloc_argument=remote_arguments,
        max_workers=servers,
    )
    builder = in_process_builder(export=options.cross_compiler or "")
    count = f" ({servers} servers)" if servers > 1 else ""
    # MetaSchedule sizes parallel loops by the target's cores; unless it says, this machine's
    return Measurer(tuning_target(target), builder, runner, f"remote {address}{count}", servers)


DIRECT = "direct"  # the tracker key MetaSchedule's RPC config needs, for a server without one


def direct_session(config):
    """An RPC session with the server at the config's address itself (no tracker)."""
    from tvm import rpc

    return rpc.connect(
        config.tracker_host, config.tracker_port, session_timeout=config.session_timeout_sec
    )


def remote_arguments(session, device, args_info, repeat: int) -> list:
    """A candidate's arguments on the remote device, filled as `_fill` fills them here."""
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common

    random_fill = session.get_function("tvm.contrib.random.random_fill_for_measure")
    return alloc_argument_common(_filler(random_fill), device, args_info, repeat)


def evaluator_config():
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig

    return EvaluatorConfig(number=3, repeat=1, min_repeat_ms=20, enable_cpu_cache_flush=False)


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
            for built in builder_results:
                if built.artifact_path is not None:
                    forget_artifact(built.artifact_path)
            for result in runner_results:
                seconds = min(float(s) for s in result.run_secs) if result.run_secs else None
                self.measured(int(task_id), seconds)

    return Trials(measured)


def in_process_builder(export: str | None = None):
    """Builds each candidate with `tirx.build` in this process; with `export` (a C compiler, ""
    for this machine's), writes it to a file for an RPC runner to upload."""
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
                    path = os.path.join(tempfile.mkdtemp(prefix="tvm-pyfunc-nb-tune-"), "lib.so")
                    if export is None:
                        _BUILT[path] = lib
                    else:
                        write_library(lib, path, compiler=export or None)
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
                    lib = _BUILT[str(runner_input.artifact_path)]
                    futures.append(LocalRunnerFuture(res=_run(lib, runner_input.args_info)))
                except Exception as err:  # a candidate that fails to run is a failed trial
                    futures.append(LocalRunnerFuture(error_message=last_reason(err)))
            return futures

    return InProcessRunner()


def forget_artifact(path: str) -> None:
    """A built candidate is measured: its library goes (in memory, or its file's folder)."""
    if _BUILT.pop(str(path), None) is None:
        shutil.rmtree(os.path.dirname(str(path)), ignore_errors=True)


def _run(lib, args_info) -> list[float]:
    """Seconds of each timed run of `lib`'s kernel here, on arguments shaped `args_info`: floats
    random, integers and booleans zero (see `_fill`)."""
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common, run_evaluator_common

    match_torch_threads()
    device = tvm.cpu()
    random_fill = tvm.get_global_func("tvm.contrib.random.random_fill_for_measure")
    infos = [info.as_json() for info in args_info]
    args = alloc_argument_common(_filler(random_fill), device, infos, 1)
    return run_evaluator_common(lib, device, evaluator_config(), args)


def _filler(random_fill):
    """What a candidate is measured on. MetaSchedule fills every argument with random bits, and
    runs candidates in worker processes that may die: an integer argument is usually an index
    (an embedding's token ids, a gather's positions), and a random one reads far outside its
    buffer. Here, in this process, that was a segfault that ended the kernel (tune of a BERT).
    Index 0 is inside every buffer that has an element: integers and booleans are zero."""

    def fill(tensor) -> None:
        dtype = str(tensor.dtype)
        if dtype.startswith(("int", "uint", "bool")):
            tensor.copyfrom(np.zeros(tuple(tensor.shape), dtype=dtype))
        else:
            random_fill(tensor)

    return fill


_BUILT: dict[str, object] = {}  # artifact path -> library, from the builder to the runner
