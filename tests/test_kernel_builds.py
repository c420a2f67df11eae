"""`kernel_builds` and `build_cache`: stale kernels built together, a kernel that is refused or
fails built alone without hiding the others, and what was built served again from memory.

Direct: a `Build` for this CPU, no IPython, no disk cache.
"""

from __future__ import annotations

import pytest
from test_kept_builds import kernel
from tvm.script import tirx as T

from tvm_pyfunc_nb._core.build.build import Build
from tvm_pyfunc_nb._core.build.stats import CompileStats
from tvm_pyfunc_nb._core.options import ModuleOptions
from tvm_pyfunc_nb.errors import CompileError


@T.prim_func
def calls_out(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        B[i] = T.call_extern("float32", "no_such_symbol_here", A[i])


@pytest.fixture
def build() -> Build:
    return Build(ModuleOptions(), CompileStats())


def test_stale_kernels_are_built_together_and_then_served_from_memory(build):
    funcs = {"one": kernel(1), "two": kernel(2)}
    built = build.kernel_builds.libraries(funcs, ["one"], use_cache=True)
    assert built["one"] is built["two"] and built["one"].members == {"one", "two"}
    assert [(c.kind, c.functions) for c in build.stats.compiles] == [("tir", ("one", "two"))]
    libs = build.kernels(funcs)
    assert libs["one"] is libs["two"] is built["one"].lib
    assert dict(build.stats.served["memory"]) == {"one": 1, "two": 1}
    assert len(build.stats.compiles) == 1


def test_a_refused_kernel_is_an_error_of_its_own_and_hides_no_other(build):
    libs = build.kernels({"good": kernel(3), "bad": calls_out})
    assert isinstance(libs["bad"], CompileError) and libs["bad"].function == "bad"
    assert "no_such_symbol_here" in libs["bad"].about
    assert not isinstance(libs["good"], CompileError)
    assert [c.functions for c in build.stats.compiles] == [("good",)]  # refused: never built


def test_a_kernel_to_read_is_built_here_and_not_kept(build):
    lib = build.build_kernel_module("three", kernel(3))
    assert "three" in lib.inspect_source("ll")
    assert build.kept.counts()["kernels"] == 0 and build.stats.compiles == []


def test_a_kernel_built_here_is_a_module_that_runs_it():
    import numpy as np
    import tvm

    from tvm_pyfunc_nb._core.build.builder import build_here

    lib = build_here(tvm.IRModule({"main": kernel(3)}), tvm.target.Target("llvm"))
    a, b = tvm.runtime.tensor(np.arange(4, dtype="float32")), tvm.runtime.empty((4,), "float32")
    lib["main"](a, b)
    assert b.numpy().tolist() == [3.0, 4.0, 5.0, 6.0]


def test_an_isolated_build_says_what_the_worker_said_last_and_refuses_rpc():
    from tvm_pyfunc_nb._core.faults.isolation import WorkerBuilder, _last_words
    from tvm_pyfunc_nb.errors import TVMModuleError

    said = "compiling...\nLLVM ERROR: Do not know how to split the result\nStack dump:\n0. x"
    assert _last_words(said) == "LLVM ERROR: Do not know how to split the result"
    assert _last_words("one\nlast line\n") == "last line" and _last_words("") == ""
    with pytest.raises(TVMModuleError, match="--isolate builds for this machine"):
        WorkerBuilder.isolating(ModuleOptions(isolate=True, rpc="127.0.0.1:9"), "remote")


def test_a_build_that_could_not_run_where_it_runs_says_nothing_of_the_kernel_and_is_not_kept():
    """With --isolate the caller's PassContext goes to the worker; an instrument cannot, so the
    build is refused: an error of the build, not of the kernel, which builds once it can."""
    import tvm

    from tvm_pyfunc_nb._core.build.kernel_builds import the_kernels_own
    from tvm_pyfunc_nb._core.build.worker.process import BuildWorker
    from tvm_pyfunc_nb._core.faults.isolation import WorkerBuilder

    worker = BuildWorker(warm=False)
    build = Build(ModuleOptions(), CompileStats(), builder=WorkerBuilder("m", worker))
    with tvm.transform.PassContext(instruments=[tvm.ir.instrument.PassTimingInstrument()]):
        refused = build.kernels({"three": kernel(3)})["three"]
    assert isinstance(refused, CompileError) and not the_kernels_own(refused)
    assert "instruments (PassTimingInstrument)" in str(refused) and refused.function == "three"
    assert build.kept.counts()["kernels"] == 0 and worker.pid is None  # kept nothing, ran nothing
    worker.close()
