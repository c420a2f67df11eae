"""Shared fixtures: a real IPython shell with the extension loaded, and cell helpers."""

from __future__ import annotations

import gc
import os
import shutil
import signal
import tempfile

import pytest
from IPython.testing.globalipapp import start_ipython

from tvm_pyfunc_nb import testing
from tvm_pyfunc_nb._core.run.interrupts import python_sigint
from tvm_pyfunc_nb.testing import NotebookShell


def pytest_configure(config):
    """Kernels and notebooks started by the tests get a throwaway compile cache, never the user's
    own.
    """
    os.environ["TVM_PYFUNC_NB_CACHE_DIR"] = tempfile.mkdtemp(prefix="tvm-pyfunc-nb-cache-")
    # A run started in the background by a shell without job control (`make test &`) inherits
    # SIGINT ignored, and Python then leaves it so: Ctrl-C as a terminal gives it, for the tests
    # that send it (xdist's workers inherit the disposition too).
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# How long each of the longest scopes took (seconds, in a `make test` run on two busy cores).
# Under `--dist loadscope` a worker runs a whole scope (a file, a class, a notebook) and takes the
# next in collection order when it is nearly done (the Makefile keeps xdist from reordering the
# scopes by their number of tests, which put long scopes of few tests last): the longest go first,
# so that the short ones fill in at the end and no worker idles while the other finishes a long
# one. A new slow file belongs here.
SECONDS = {
    "tests/test_binder.py": 105,
    "tests/test_remote.py": 180,  # remote tuning: a tracker and two servers
    "tests/test_real_models.py::TestHalfTheZoo": 85,
    "tests/test_real_models.py::TestTheOtherHalf": 64,
    "tests/test_real_models.py::TestMoreFamilies": 40,
    "tests/test_making_fast.py": 61,
    "notebooks/08_make_it_fast.ipynb": 55,
    "tests/test_long_session.py": 28,
    "tests/test_real_models.py::TestOnAnAVX2CPU": 22,
    "tests/test_compile_cache.py": 51,
    "tests/test_first_hour.py": 43,
    "tests/test_isolate.py": 80,
    "tests/test_offload.py": 31,
    "tests/test_conv_schedule.py": 30,
    "notebooks/09_another_machine.ipynb": 31,
    "tests/test_as_torch_runs.py": 30,
    "tests/test_op_corpus.py": 70,
    "tests/test_model_errors_and_compare.py": 30,
    "tests/test_kernel.py": 30,
    "tests/test_live_module.py": 25,
    "tests/browser/test_notebook7.py": 24,
    "tests/browser/test_graph.py": 75,
    "tests/test_graph.py": 35,
    "tests/browser/test_jupyterlab.py": 23,
    "tests/test_bisect.py": 45,
    "tests/test_minimize.py": 115,
    "tests/test_report.py": 35,
    "tests/browser/test_report.py": 25,
    "notebooks/11_finding_the_pass_that_broke_it.ipynb": 40,
    "notebooks/00_tour.ipynb": 35,
    "notebooks/10_a_hugging_face_model.ipynb": 22,
    "notebooks/10_a_hugging_face_model.ipynb[x86-64-v3]": 22,
    "notebooks/12_inside_the_compiled_model.ipynb": 22,
    "notebooks/12_inside_the_compiled_model.ipynb[x86-64-v3]": 22,
    "tests/test_build_worker.py": 20,
    "tests/test_verdicts.py": 25,
    "tests/test_bringing_in.py": 18,
    "tests/test_tune_relax.py": 45,
    "tests/test_fuzz.py": 7,
    "tests/test_interrupts.py": 40,
    "tests/test_hints.py": 40,
    "tests/test_foreign_cpu.py": 32,
    "tests/test_lowering_failures.py": 25,
    "tests/test_user_files.py": 22,
}


def pytest_collection_modifyitems(config, items):
    """The longest scopes first (a stable sort: the rest keep their order)."""
    items.sort(key=lambda item: -SECONDS.get(item.nodeid.rsplit("::", 1)[0], 0))


def pytest_unconfigure(config):
    shutil.rmtree(os.environ.pop("TVM_PYFUNC_NB_CACHE_DIR", ""), ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _cores_stay_free():
    """No test leaves this process's main thread on fewer cores than it started with: every thread
    and process it started afterwards would share them (TVM pins a thread that asks for its pool's
    size to one core: `timing.tvm_threads` puts it back; before, a `make test` ran 500 of its 745 s
    on one core of two, and PyTorch's two threads on one core ran a tiny ResNet 150 times slower).
    """
    if not hasattr(os, "sched_getaffinity"):
        yield
        return
    cores = os.sched_getaffinity(0)
    yield
    assert os.sched_getaffinity(0) == cores, f"a test left this process on cores {cores}"


@pytest.fixture(scope="module")
def pipelines():
    """Pipelines of one pass at fault each (`add_becomes_subtract`, `aborts` of
    tvm_pyfunc_nb.testing), registered as a notebook would register its own, for one file."""
    from tvm import relax
    from tvm.relax.pipeline import PIPELINE_MAP

    for make in (testing.add_becomes_subtract, testing.aborts):
        relax.register_pipeline(make.__name__)(make)
    yield
    for name in ("add_becomes_subtract", "aborts"):
        PIPELINE_MAP.pop(name)


@pytest.fixture(autouse=True)
def _ctrl_c_stays_pythons():
    """No test leaves SIGINT to another handler than the one it found (a later test that sends
    Ctrl-C would wait in vain, and fail far from the cause), and each starts with SIGINT as
    Python installs it: TVM's Z3 prover gives Python's handler back with `SA_RESTART` (a wait
    in a system call then resumes after Ctrl-C), and a test may run TVM outside the package's
    builds and cells, which put it back themselves (`_core/run/interrupts.py`)."""
    python_sigint()
    handler = signal.getsignal(signal.SIGINT)
    yield
    assert signal.getsignal(signal.SIGINT) is handler, "a test left SIGINT to another handler"


# Tests import their helpers from the package or from modules of their own, never from
# `conftest`: notebooks/conftest.py is a `conftest` too, and which of the two that name finds
# depends on the order of collection.


@pytest.fixture(scope="session")
def _ipython():
    # No persistent compile cache here: each test compiles what it uses (test_compile_cache opts in)
    return NotebookShell(start_ipython(), cache_dir="").ip


@pytest.fixture(scope="module")
def frozen_heap():
    """Freeze what is alive before a file's tests (torch, TVM, transformers): the `%reset -f`
    after each test then collects only what the test made (seconds less per test of models)."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture
def shell(_ipython):
    """A real IPython shell with `tvm_pyfunc_nb` loaded; live modules are dropped afterwards."""
    shell = NotebookShell(_ipython, cache_dir=None)
    yield shell
    if "tvmmodule" in _ipython.magics_manager.magics["cell"]:
        shell.drop_all()
    _ipython.run_line_magic("reset", "-f")


@pytest.fixture
def cached_shell(shell, tmp_path):
    """The shell with a compile cache of the test's own (`tmp_path / "cache"`; the tuning
    databases live there too), and none again afterwards."""
    shell.run(f"%config TVMModuleMagics.cache_dir = {str(tmp_path / 'cache')!r}")
    yield shell
    shell.run("%config TVMModuleMagics.cache_dir = ''")
