"""Making it fast: the tutorial's 256×256 matmul naive, scheduled by hand and tuned, and a small MLP
under three Relax pipelines, each against PyTorch on the same tensors in the same run; the MLP
also against `torch.compile` (inductor), what a user would pick instead of this package.

Every module is compiled for this machine's CPU (`{"kind": "llvm", "mcpu": "native"}`), as
PyTorch picks its kernels for the CPU at run time. Ours is timed by `NAME.time(...)` (TVM's
`time_evaluator`), PyTorch by the wall-clock loop of the same shape that `against=` runs, in a
few rounds of both; both write into preallocated outputs where they can (`torch.matmul(a, b,
out=c)`). Every compile's background export to the cache is waited for before timing.
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from harness import module_cell, notebook_shell

from tvm_pyfunc_nb._core.inspect.timing import wall_clock_samples
from tvm_pyfunc_nb.testing import parts_of

# No spaces: IPython's magic-line splitter keeps quotes, so the README's quoted form
# `--target '{"kind": "llvm", "mcpu": "native"}'` reaches TVM with its quotes and is refused.
NATIVE = '{"kind":"llvm","mcpu":"native"}'
TARGET = f"--target {NATIVE}"
N = 256

MATMUL = """
@T.prim_func(s_tir=True)
def matmul(A: T.Buffer((256, 256), "float32"), B: T.Buffer((256, 256), "float32"),
           C: T.Buffer((256, 256), "float32")):
    for i, j, k in T.grid(256, 256, 256):
        with T.sblock("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
"""

BATCH, SIZES = 32, (256, 512, 512, 10)
MLP = """
@R.function
def mlp(
    x: R.Tensor((32, 256), "float32"),
    w1: R.Tensor((256, 512), "float32"),
    b1: R.Tensor((512,), "float32"),
    w2: R.Tensor((512, 512), "float32"),
    b2: R.Tensor((512,), "float32"),
    w3: R.Tensor((512, 10), "float32"),
    b3: R.Tensor((10,), "float32"),
) -> R.Tensor((32, 10), "float32"):
    with R.dataflow():
        h1 = R.nn.relu(R.add(R.matmul(x, w1), b1))
        h2 = R.nn.relu(R.add(R.matmul(h1, w2), b2))
        y = R.add(R.matmul(h2, w3), b3)
        R.output(y)
    return y
"""
PIPELINES = ("default", "zero", "target")


def tile(sch) -> None:
    """The tutorial's hand schedule: 32×128 tiles in parallel, k split by 8, 16-wide vectors, each
    tile accumulated in a buffer of its own and zeroed once."""
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    i_tile, i_in = sch.split(i, [None, 32])
    j_tile, j_in = sch.split(j, [None, 128])
    k_out, k_in = sch.split(k, [None, 8])
    j_vectors, j_lane = sch.split(j_in, [None, 16])
    sch.reorder(i_tile, j_tile, k_out, i_in, k_in, j_vectors, j_lane)
    tiles = sch.fuse(i_tile, j_tile)
    sch.parallel(tiles)
    sch.vectorize(j_lane)
    acc = sch.cache_write(block, 0, "global")
    sch.reverse_compute_at(acc, tiles)
    sch.vectorize(sch.split(sch.get_loops(acc)[-1], [None, 16])[1])
    init = sch.decompose_reduction(block, k_out)
    sch.vectorize(sch.split(sch.get_loops(init)[-1], [None, 16])[1])


def torch_matmul(a, b, c):
    """The reference: PyTorch's matmul writing into `c`, as the kernel does."""
    torch.matmul(a, b, out=c)


def torch_mlp(x, w1, b1, w2, b2, w3, b3):
    """The same MLP in PyTorch eager (weights as Relax takes them, (in, out): `F.linear` of the
    transposed view, which BLAS reads without a copy)."""
    h1 = F.relu(F.linear(x, w1.T, b1))
    h2 = F.relu(F.linear(h1, w2.T, b2))
    return F.linear(h2, w3.T, b3)


def compare(live, fn: str, args: tuple, reference, number: int, repeat: int, rounds: int) -> dict:
    """`live.time(fn, *args, against=reference)` `rounds` times (so that ours and PyTorch alternate
    and a busy moment falls on both): the medians of all samples of each."""
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(rounds):
        timing = live.time(fn, *args, number=number, repeat=repeat, against=reference)
        ours += timing.function.samples
        theirs += timing.against.samples
    return {"ours": statistics.median(ours), "torch": statistics.median(theirs)}


def inductor(reference, args: tuple, number: int, repeat: int, rounds: int) -> dict:
    """`torch.compile(reference)` (inductor, its default backend: what a user would pick instead
    of this package), timed by the same wall-clock loop as PyTorch eager, under
    `torch.inference_mode()`: its median, and how long its first call (the compile) took."""
    compiled = torch.compile(reference)
    with torch.inference_mode():
        start = time.perf_counter()
        compiled(*args)
        compile_seconds = time.perf_counter() - start
        samples = []
        for _ in range(rounds):
            samples += wall_clock_samples(compiled, args, number, repeat)
    return {"median": statistics.median(samples), "compile_seconds": compile_seconds}


def measure(number: int, repeat: int, rounds: int, trials: int) -> dict:
    torch.manual_seed(0)
    shell = notebook_shell()
    module_cell(shell, "mm", "matmul", MATMUL, TARGET)
    mm = shell.ns["mm"]
    a, b, c = torch.randn(N, N), torch.randn(N, N), torch.empty(N, N)
    expected = a @ b
    for _ in range(20):  # PyTorch's first calls start its thread pool: not a matmul's cost
        torch_matmul(a, b, c)

    def timed_matmul() -> dict:
        c.zero_()
        mm.matmul(a, b, c)
        assert torch.allclose(c, expected, atol=1e-3), "matmul is wrong"
        shell.flush_cache()  # the compile cache's background export must not run during timing
        return compare(mm, "matmul", (a, b, c), torch_matmul, number, repeat, rounds)

    out: dict = {
        "target": str(parts_of(mm).target),
        "torch_threads": torch.get_num_threads(),
    }
    out["naive"] = timed_matmul()
    mm.schedule("matmul", tile)
    out["scheduled"] = timed_matmul()
    start = time.perf_counter()
    report = mm.tune("matmul", trials=trials)
    out["tune_seconds"] = time.perf_counter() - start
    out["tune_trials"] = report.trials_run
    out["tuned"] = timed_matmul()

    x = torch.randn(BATCH, SIZES[0])
    params = []
    for fan_in, fan_out in itertools.pairwise(SIZES):
        params += [torch.randn(fan_in, fan_out) / fan_in**0.5, torch.randn(fan_out)]
    reference = torch_mlp(x, *params)
    for pipeline in PIPELINES:
        name = f"mlp_{pipeline}"
        module_cell(shell, name, "mlp", MLP, f"{TARGET} --pipeline {pipeline}")
        live = shell.ns[name]
        assert torch.allclose(live.mlp(x, *params), reference, atol=1e-4), pipeline
        shell.flush_cache()
        figures = compare(live, "mlp", (x, *params), torch_mlp, number, repeat, rounds)
        out[f"mlp_{pipeline}"] = {**figures, "kernels": live.kernels("mlp")}
    out["mlp_torch_compile"] = inductor(torch_mlp, (x, *params), number, repeat, rounds)
    return out


if __name__ == "__main__":
    print(json.dumps(measure(*map(int, sys.argv[1:5]))))
