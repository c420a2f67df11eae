"""The build worker against building in this process: what isolation costs per build.

A worker starts (light: answering a job that needs only Python; cold: answering a build, TVM,
PyTorch and the package imported first), answers a trivial job when ready, builds one edited
PrimFunc (a new constant each time, as an edit), and lowers and links a small Relax function.
Each in-process figure is the package's own `Build` doing the same (crash guards in); the two
sides alternate. Also: writing a kernel library with `library_files.write_library` against
TVM's `export_library`.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import tvm
from tvm import relax
from workload import primfunc

from tvm_pyfunc_nb import LiveModule
from tvm_pyfunc_nb._core.build.build import Build
from tvm_pyfunc_nb._core.build.builder import Recipe
from tvm_pyfunc_nb._core.build.library_files import write_library
from tvm_pyfunc_nb._core.build.linking import vm_codegen
from tvm_pyfunc_nb._core.build.stats import CompileStats
from tvm_pyfunc_nb._core.build.worker.process import BuildWorker
from tvm_pyfunc_nb._core.faults.isolation import WorkerBuilder
from tvm_pyfunc_nb._core.options import ModuleOptions

OPTIONS = ModuleOptions()
RECIPE = Recipe.of(OPTIONS)
RELAX = """
@R.function
def mlp(x: R.Tensor((8, 64), "float32"), w: R.Tensor((64, 32), "float32"),
        b: R.Tensor((32,), "float32")) -> R.Tensor((8, 32), "float32"):
    h = R.matmul(x, w)
    h = R.add(h, b)
    h = R.nn.relu(h)
    return R.nn.softmax(h)
"""


def kernel(constant: float):
    live = LiveModule("bench")
    live.run_cell(primfunc(0, constant))
    return live.ir_mod["k0"]


def build_kernels(worker: BuildWorker, funcs: dict):
    """`funcs` built in `worker`, as a module with --isolate builds them (crash guards in)."""
    return WorkerBuilder("bench", worker).tirx_build(RECIPE.as_built(funcs), RECIPE.target)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def starts(repeats: int) -> dict:
    light, cold = [], []
    for _ in range(repeats):
        worker = BuildWorker(warm=False)
        light.append(timed(lambda w=worker: w.run(functools.partial(sum, [1]))))
        worker.close()
    for i in range(max(1, repeats // 4)):
        worker = BuildWorker(warm=True)
        cold.append(timed(lambda w=worker, i=i: build_kernels(w, {"k0": kernel(i)})))
        worker.close()
    return {"light": statistics.median(light), "cold": statistics.median(cold)}


def edits(worker: BuildWorker, repeats: int) -> dict:
    """One PrimFunc, a new constant each time: built and JIT-compiled here, or built in the
    worker and its library loaded here."""
    build = Build(OPTIONS, CompileStats())
    here, there = [], []
    for i in range(repeats):
        ours, theirs = kernel(100.0 + i), kernel(200.0 + i)
        here.append(timed(lambda f=ours: build.tirx_build({"k0": f}).get_function("k0")))
        there.append(timed(lambda f=theirs: build_kernels(worker, {"k0": f}).get_function("k0")))
    return {"here": statistics.median(here), "worker": statistics.median(there)}


def isolated_edits(repeats: int) -> dict:
    """`--isolate`'s cost per compile, as a user meets it: an edit of one PrimFunc (a cell run
    with a new constant) and a call of it, in a module without and with --isolate (the
    process's shared worker, warm), alternating. No compile cache on either side."""
    modules = {"here": LiveModule("here"), "isolated": LiveModule("isolated", isolate=True)}
    args = [torch.ones(1024), torch.ones(1024), torch.zeros(1024)]
    for live in modules.values():  # ready: LLVM's first use paid, the worker started
        live.run_cell(primfunc(0, -1.0))
        live.k0(*args)
    times: dict[str, list[float]] = {name: [] for name in modules}
    for i in range(repeats):
        for name, live in modules.items():

            def edit_and_call(live=live, constant=1000.0 + i):
                live.run_cell(primfunc(0, constant))
                live.k0(*args)

            times[name].append(timed(edit_and_call))
    return {name: statistics.median(seconds) for name, seconds in times.items()}


def links(worker: BuildWorker, repeats: int) -> dict:
    """A Relax function lowered through the pipeline and linked with its kernels: by `Build`
    here (nothing kept), or by a `Build` whose builder is the worker (lowered and built there,
    linked here, as with --isolate)."""
    live = LiveModule("bench")
    live.run_cell(RELAX)
    mod = live.ir_mod
    args = [np.ones((8, 64), "float32"), np.ones((64, 32), "float32"), np.ones(32, "float32")]

    builder = WorkerBuilder("bench", worker)

    def in_worker():
        build = Build(OPTIONS, CompileStats(), builder=builder)
        return build.link(mod, use_cache=False).executable

    here, there, runs = [], [], []
    for _ in range(repeats):
        here.append(timed(lambda: Build(OPTIONS, CompileStats()).link(mod, use_cache=False)))
        there.append(timed(in_worker))
        runs.append(timed(lambda: builder.build_and_run(OPTIONS, mod, "mlp", args)))
    vm = relax.VirtualMachine(in_worker(), tvm.cpu())
    expected = relax.VirtualMachine(Build(OPTIONS, CompileStats()).link(mod).executable, tvm.cpu())
    inputs = [tvm.runtime.tensor(a) for a in args]
    assert np.allclose(vm["mlp"](*inputs).numpy(), expected["mlp"](*inputs).numpy())
    return {
        "here": statistics.median(here),
        "worker": statistics.median(there),
        "build_and_run": statistics.median(runs),
        "kernels": len(vm_codegen(Build(OPTIONS, CompileStats()).lower(mod))[1]),
    }


def writes(repeats: int) -> dict:
    """A kernel library written to a file: our path against TVM's `export_library`."""
    build = Build(OPTIONS, CompileStats())
    folder = Path(tempfile.mkdtemp())
    ours, theirs = [], []
    for i in range(repeats):
        lib = build.tirx_build({"k0": kernel(300.0 + i)})
        ours.append(timed(lambda lib=lib: write_library(lib, folder / "ours.so")))
        lib = build.tirx_build({"k0": kernel(400.0 + i)})
        theirs.append(timed(lambda lib=lib: lib.export_library(str(folder / "theirs.so"))))
    return {"ours": statistics.median(ours), "export_library": statistics.median(theirs)}


def measure(repeats: int) -> dict:
    figures = {"start": starts(repeats)}
    worker = BuildWorker(warm=True)
    build_kernels(worker, {"k0": kernel(-1.0)})  # ready, and LLVM's first use paid
    Build(OPTIONS, CompileStats()).tirx_build({"k0": kernel(-2.0)}).get_function("k0")
    figures["round_trip"] = statistics.median(
        timed(lambda: worker.run(functools.partial(sum, [1]))) for _ in range(50)
    )
    figures["edit"] = edits(worker, repeats)
    figures["isolate"] = isolated_edits(repeats)
    figures["link"] = links(worker, max(3, repeats // 2))
    figures["write"] = writes(repeats)
    worker.close()
    return figures


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]))))
