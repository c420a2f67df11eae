"""The build worker: jobs run in a child process, a death there is a report here (signal, stage,
LLVM's last words) and the next job runs in a fresh child, and no child outlives its parent.

One worker for the whole file: the jobs that only die import nothing but the standard library
(a fresh child is ready in a fraction of a second); the TVM jobs share the child that imported
TVM, and the one that kills it with LLVM's fatal error runs last."""

from __future__ import annotations

import _thread
import ctypes
import functools
import gc
import multiprocessing
import os
import shutil
import signal
import textwrap
import threading
import time

import numpy as np
import psutil
import pytest
import tvm
from cells import LLVM_ABORTS_IN_CODEGEN
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from tvm_pyfunc_nb._core.build import trust
from tvm_pyfunc_nb._core.build.build import Build
from tvm_pyfunc_nb._core.build.builder import Recipe
from tvm_pyfunc_nb._core.build.library_files import load_library
from tvm_pyfunc_nb._core.build.pass_contexts import CallerContext
from tvm_pyfunc_nb._core.build.stats import CompileStats
from tvm_pyfunc_nb._core.build.worker.child import error_payload, rebuild_error
from tvm_pyfunc_nb._core.build.worker.jobs import BuildKernels
from tvm_pyfunc_nb._core.build.worker.pass_log import leaves
from tvm_pyfunc_nb._core.build.worker.process import BuildWorker
from tvm_pyfunc_nb._core.faults.isolation import WorkerBuilder
from tvm_pyfunc_nb._core.options import ModuleOptions
from tvm_pyfunc_nb.errors import CompileError, TVMModuleError, WorkerCrash


@pytest.fixture(scope="module")
def worker():
    started = BuildWorker(warm=False)
    yield started
    started.close()


def quick_job():
    return functools.partial(sum, [1, 2, 3])


# -- deaths ------------------------------------------------------------------------------
DEATHS = {
    "segfault": (functools.partial(ctypes.string_at, 0), "SIGSEGV", None),
    "abort": (os.abort, "SIGABRT", None),
    "SIGKILL": (functools.partial(signal.raise_signal, signal.SIGKILL), "SIGKILL", None),
    "exit": (functools.partial(os._exit, 3), None, 3),
}


@pytest.mark.parametrize("death", DEATHS)
def test_a_death_is_reported_and_the_next_job_runs_in_a_fresh_worker(worker, death):
    job, signal_name, exit_code = DEATHS[death]
    assert worker.run(quick_job()) == 6
    before = worker.pid
    with pytest.raises(WorkerCrash) as raised:
        worker.run(job)
    crash = raised.value.crash
    assert (crash.signal, crash.exit_code, crash.timed_out) == (signal_name, exit_code, False)
    assert crash.stage == "job start"
    assert worker.run(quick_job()) == 6
    assert worker.pid != before
    assert not alive(before)


def test_a_segfault_reports_where_python_was(worker):
    with pytest.raises(WorkerCrash, match=r"killed by SIGSEGV \(segmentation fault\)") as raised:
        worker.run(functools.partial(ctypes.string_at, 0))
    assert "Fatal Python error: Segmentation fault" in raised.value.crash.output
    assert "in string_at" in raised.value.crash.output


def test_a_job_past_its_time_is_stopped(worker):
    started = time.monotonic()
    with pytest.raises(WorkerCrash, match="stopped after 1 s, its time limit") as raised:
        worker.run(functools.partial(time.sleep, 60), timeout=1.0)
    assert raised.value.crash.timed_out
    assert time.monotonic() - started < 10
    assert worker.run(quick_job()) == 6


def test_an_interrupted_wait_stops_the_job_and_leaves_a_fresh_worker(worker):
    worker.run(quick_job())
    before = worker.pid
    gc.collect()  # earlier tests' garbage now: a finalizer that runs as Ctrl-C lands swallows it
    threading.Timer(0.5, _thread.interrupt_main).start()
    with pytest.raises(KeyboardInterrupt):
        worker.run(functools.partial(time.sleep, 60))
    assert not alive(before)
    assert worker.run(quick_job()) == 6


# -- errors of a job ---------------------------------------------------------------------
def test_an_exception_of_a_job_is_raised_here_as_itself_with_the_workers_traceback(worker):
    with pytest.raises(ValueError, match="invalid literal") as raised:
        worker.run(functools.partial(int, "x"))
    assert "raised in the build worker" in str(raised.value.__cause__)
    before = worker.pid
    with pytest.raises(TypeError, match="cannot pickle"):
        worker.run(threading.Lock)  # a result that cannot come back
    assert worker.run(quick_job()) == 6
    assert worker.pid == before  # the same worker goes on


def test_errors_travel_with_their_class_and_attributes():
    """The package's errors and TVM's take other arguments than `args`: plain pickling loses
    them."""
    ours = CompileError("does not compile", function="k", line=3, about=("shared",))
    back = rebuild_error(error_payload(ours))
    assert type(back) is CompileError
    assert (back.function, back.line, back.about, str(back)) == ("k", 3, ("shared",), str(ours))
    try:
        tvm.ir.load_json("not json")
    except Exception as err:
        theirs = err
    back = rebuild_error(error_payload(theirs))
    assert type(back) is type(theirs) and str(back) == str(theirs)


# -- a parent that dies ---------------------------------------------------------------------
def busy_parent(report) -> None:
    """A parent (forked from this test process, so it imports nothing) whose worker is in the
    middle of a job when the parent is killed."""
    worker = BuildWorker(warm=False)
    worker.run(quick_job())
    busy = threading.Thread(target=worker.run, args=(functools.partial(time.sleep, 600),))
    busy.start()
    report.send(worker.pid)
    busy.join()


def test_a_worker_dies_with_its_parent_killed_in_the_middle_of_a_job():
    receive, report = multiprocessing.get_context("fork").Pipe(duplex=False)
    parent = multiprocessing.get_context("fork").Process(target=busy_parent, args=(report,))
    parent.start()
    child = None
    try:
        assert receive.poll(60), "the parent did not start its worker"
        child = receive.recv()
        time.sleep(0.5)  # the job has started: the worker is busy, not reading its channel
        assert alive(child)
        parent.kill()
        parent.join()
        deadline = time.monotonic() + 10
        while alive(child):
            assert time.monotonic() < deadline, "the worker outlived its parent"
            time.sleep(0.05)
    finally:
        parent.kill()
        parent.join()
        if child is not None and alive(child):  # the defect: never leave it behind
            os.kill(child, signal.SIGKILL)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_close_ends_the_worker_and_removes_its_folder():
    worker = BuildWorker(warm=False)
    worker.run(quick_job())
    pid, folder = worker.pid, worker.directory
    worker.close()
    assert not folder.exists()
    assert not alive(pid)
    with pytest.raises(RuntimeError, match="closed"):
        worker.run(quick_job())


def test_a_file_of_the_worker_that_others_could_have_changed_is_not_loaded(worker):
    path = worker.new_file(".so")
    path.write_bytes(b"")
    try:
        path.chmod(0o600)
        assert worker.trusted_file(path) == path
        path.chmod(0o662)
        with pytest.raises(TVMModuleError, match=r"not private, not loaded: .* writable by"):
            worker.trusted_file(path)
    finally:
        path.unlink()


def test_a_folder_removed_is_made_again_and_no_write_follows_a_symlink(worker, tmp_path):
    """A tmp cleaner removes the worker's folder; someone makes the path again, with the old
    log's name a symlink to a file of theirs. Jobs go on (a crash is still reported with the
    worker's last words) and that file is left as it was."""
    worker.run(quick_job())
    folder = worker.directory
    shutil.rmtree(folder)
    path = worker.new_file(".so")  # where a job writes: checked, made again
    assert path.parent.is_dir() and not path.exists()
    folder.mkdir(mode=0o700, exist_ok=True)
    theirs = tmp_path / "theirs.txt"
    theirs.write_text("keep me")
    (folder / "stderr.log").symlink_to(theirs)
    with pytest.raises(WorkerCrash) as raised:
        worker.run(functools.partial(ctypes.string_at, 0))
    assert "Fatal Python error: Segmentation fault" in raised.value.crash.output
    assert worker.run(quick_job()) == 6
    assert theirs.read_text() == "keep me"


def test_a_forked_child_that_exits_leaves_its_parents_worker_alone(worker):
    """A forked child inherits the parent's `atexit` (the worker's `close`, the temporary
    folder's removal): run there, they must not end the parent's worker or remove its folder."""
    worker.run(quick_job())
    parent, pid, folder = os.getpid(), worker.pid, worker.directory
    child = os.fork()
    if child == 0:  # what the child's exit runs
        try:
            worker.close()
            trust._remove_temporary(parent)
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    assert folder.is_dir() and trust.temporary_directory() in folder.parents
    assert alive(pid) and worker.run(quick_job()) == 6 and worker.pid == pid


# -- TVM jobs (the child imports TVM once, for all of them) ---------------------------------
@I.ir_module
class AddThenSoftmax:
    @T.prim_func
    def add_exp(a: T.handle, b: T.handle, c: T.handle):
        n = T.int64()
        A = T.match_buffer(a, (n,), "float32")
        B = T.match_buffer(b, (n,), "float32")
        C = T.match_buffer(c, (n,), "float32")
        for i in T.parallel(n):
            C[i] = T.exp(A[i]) + B[i]

    @R.function
    def main(x: R.Tensor((16,), "float32"), y: R.Tensor((16,), "float32")):
        cls = AddThenSoftmax
        z = R.call_tir(cls.add_exp, (x, y), out_ty=R.Tensor((16,), "float32"))
        w = R.add(z, y)
        return R.nn.softmax(w)


X = np.linspace(-1, 1, 16, dtype="float32")
Y = np.linspace(0, 2, 16, dtype="float32")
OPTIONS = ModuleOptions()


@pytest.fixture(scope="module")
def expected() -> np.ndarray:
    vm = relax.VirtualMachine(tvm.compile(AddThenSoftmax, target="llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(X), tvm.runtime.tensor(Y)).numpy()


def test_kernels_built_in_the_worker_load_here_and_each_stage_is_heard(worker):
    heard = []
    recipe = Recipe.of(OPTIONS)
    kernel = recipe.as_built({"add_exp": AddThenSoftmax["add_exp"]})
    output = worker.new_file(".so")
    target = dict(recipe.target.export())
    job = BuildKernels(target, CallerContext(), tvm.ir.save_json(kernel), ("add_exp",), str(output))
    worker.run(job, on_stage=heard.append)
    lib = load_library(worker.trusted_file(output))
    output.unlink()
    out = tvm.runtime.tensor(np.zeros(16, dtype="float32"))
    lib["add_exp"](tvm.runtime.tensor(X), tvm.runtime.tensor(Y), out)
    np.testing.assert_allclose(out.numpy(), np.exp(X) + Y, rtol=1e-6)
    assert heard == ["the TIR build", "codegen", "link"]
    assert list(worker.directory.glob("job-*")) == []  # the library was loaded, then deleted


def test_a_relax_function_lowered_and_built_there_links_here_as_compiled_here(worker, expected):
    """The build a module with --isolate makes: the pipeline and every kernel in the worker,
    the schedules, VM codegen and link here."""
    build = Build(OPTIONS, CompileStats(), builder=WorkerBuilder("m", worker))
    linked = build.link(AddThenSoftmax)
    vm = relax.VirtualMachine(linked.executable, tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(X), tvm.runtime.tensor(Y)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert any("softmax" in kernel for kernel in linked.kernels)
    assert linked.sites.of("main")  # what each kernel computes came back from the worker


CRAFTED = "add_becomes_subtract"  # a pipeline of the test's own, as a notebook would register it
PIPELINE_SOURCE = textwrap.dedent(
    """
    def add_becomes_subtract():
        import tvm

        @tvm.transform.module_pass(opt_level=0, name="AddBecomesSubtract")
        def swap(mod, ctx):
            return tvm.script.from_source(mod.script().replace("R.add(", "R.subtract("))

        return swap
    """
)


@pytest.fixture(scope="module")
def crafted_pipeline():
    """A pipeline defined as in a notebook (in `__main__`): it reaches the worker by value."""
    from tvm.relax.pipeline import PIPELINE_MAP

    namespace = {"__name__": "__main__"}
    exec(PIPELINE_SOURCE, namespace)
    relax.register_pipeline(CRAFTED)(namespace[CRAFTED])
    yield ModuleOptions(pipeline=CRAFTED)
    PIPELINE_MAP.pop(CRAFTED)


def test_a_build_with_a_pass_off_runs_there_and_names_every_pass(
    worker, expected, crafted_pipeline
):
    builder = WorkerBuilder("m", worker)
    broken = builder.build_and_run(crafted_pipeline, AddThenSoftmax, "main", [X, Y])
    assert not np.allclose(broken.outputs[0], expected)  # the crafted pass changed the numbers
    names = [run.name for run in broken.passes]
    assert "AddBecomesSubtract" in names and "tirx.VectorizeLoop" in names
    assert {run.phase for run in broken.passes} == {"pipeline", "tir"}
    fixed = builder.build_and_run(
        crafted_pipeline,
        AddThenSoftmax,
        "main",
        [X, Y],
        skip=frozenset({("AddBecomesSubtract", 0)}),
        snapshots=frozenset({("LegalizeOps", 0)}),
    )
    np.testing.assert_allclose(fixed.outputs[0], expected, rtol=1e-6)
    assert [run.ran for run in fixed.passes if run.name == "AddBecomesSubtract"] == [False]
    before, after = (tvm.ir.load_json(text) for text in fixed.snapshots[("LegalizeOps", 0)])
    assert "R.nn.softmax" in before.script() and "R.nn.softmax" not in after.script()
    assert {run.name for run in leaves(fixed.passes)} >= {"LegalizeOps", "tirx.VectorizeLoop"}
    assert "sequential" not in {run.name for run in leaves(fixed.passes)}


def test_llvm_fatal_error_while_generating_code_is_a_crash_in_stage_codegen(worker):
    """TVM 0.27 has LLVM abort the process on an x86 intrinsic the target CPU lacks: AVX2's
    `pmadd.wd` in a kernel built for plain x86-64 ("Do not know how to split the result of this
    operator!"). Built in this process, it would end it (and a notebook's kernel)."""
    pmadd = tvm.script.from_source(LLVM_ABORTS_IN_CODEGEN, extra_vars={"T": T})
    generic = Recipe.of(ModuleOptions(target='{"kind": "llvm", "mcpu": "x86-64"}'))
    builder = WorkerBuilder("m", worker)
    with pytest.raises(CompileError) as raised:
        builder.tirx_build(generic.as_built({"pmadd": pmadd}), generic.target)
    assert isinstance(raised.value.__cause__, WorkerCrash)
    crash = raised.value.__cause__.crash
    assert (crash.signal, crash.stage) == ("SIGABRT", "codegen")
    assert "LLVM ERROR: Do not know how to split the result of this operator!" in crash.output
    assert str(raised.value.__cause__).startswith(
        "the build worker was killed by SIGABRT (aborted) during codegen (building pmadd)"
    )
    assert raised.value.function == "pmadd" and 'm.bisect("pmadd", *args)' in str(raised.value)
    assert worker.run(quick_job()) == 6
