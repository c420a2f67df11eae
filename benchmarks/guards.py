"""What the crash guards cost: kernels whose bounds TVM cannot prove, in a default module (guards
in) and in an `--unchecked` one, timed by `NAME.time` (TVM's `time_evaluator`) in the same run.

Two kernels over 1M float32 elements: a gather `B[i] = A[idx[i]]` (the index is data: each read
is checked), and a copy loop over `m` into a buffer of size `n` (`m` and `n` are unrelated
sizes: each access is checked). Then three whose inner loop is vectorized, where a check cannot
stay (TVM would make its condition a vector): a shifted copy `B[i] = A[i + off]` written with
`T.vectorized` (its check is made once per vector, before it), an embedding lookup `R.take`
(4096 rows of 256, the row index checked once per row, the copy vectorized by the CPU schedule),
and an `R.gather_elements` over 1024 × 1024 (each lane's index is data: its loop runs serially
when checked). The two modules are timed in alternation, so that a busy moment falls on both.
"""

from __future__ import annotations

import json
import statistics
import sys

import torch
from harness import module_cell, notebook_shell

ELEMENTS = 1 << 20
KERNELS = """
@T.prim_func
def gather(a: T.handle, idx: T.handle, b: T.handle):
    n = T.int64()
    m = T.int64()
    A = T.match_buffer(a, (n,), "float32")
    I = T.match_buffer(idx, (m,), "int64")
    B = T.match_buffer(b, (m,), "float32")
    for i in range(m):
        B[i] = A[I[i]]

@T.prim_func
def copy(a: T.handle, b: T.handle):
    n = T.int64()
    m = T.int64()
    A = T.match_buffer(a, (n,), "float32")
    B = T.match_buffer(b, (m,), "float32")
    for i in range(m):
        B[i] = A[i]

@T.prim_func
def shift(a: T.handle, b: T.handle, off: T.int64):
    n = T.int64()
    m = T.int64()
    A = T.match_buffer(a, (n,), "float32")
    B = T.match_buffer(b, (m, 16), "float32")
    for i in range(m):
        for j in T.vectorized(16):
            B[i, j] = A[i * 16 + j + off]

@R.function
def embed(w: R.Tensor((4096, 256), "float32"), idx: R.Tensor((4096,), "int64")):
    return R.take(w, idx, axis=0, mode="fast")

@R.function
def pick(x: R.Tensor((1024, 1024), "float32"), idx: R.Tensor((1024, 1024), "int64")):
    return R.gather_elements(x, idx, axis=1)
"""
VECTORIZED = ("shift", "embed", "pick")


def measure(number: int, rounds: int, target: str = "llvm") -> dict:
    """Medians of each kernel's time, checked and unchecked, compiled for `target` (a JSON target
    without spaces: IPython's magic line keeps quotes)."""
    torch.manual_seed(0)
    shell = notebook_shell()
    module_cell(shell, "checked", "kernels", KERNELS, f"--target {target}")
    module_cell(shell, "unchecked", "kernels", KERNELS, f"--target {target} --unchecked")
    modules = {"checked": shell.ns["checked"], "unchecked": shell.ns["unchecked"]}
    a = torch.randn(ELEMENTS)
    w, x = torch.randn(4096, 256), torch.randn(1024, 1024)
    args = {
        "gather": (a, torch.randperm(ELEMENTS), torch.empty(ELEMENTS)),
        "copy": (a, torch.empty(ELEMENTS)),
        "shift": (a, torch.empty(ELEMENTS // 16 - 1, 16), 16),
        "embed": (w, torch.randint(0, 4096, (4096,))),
        "pick": (x, torch.randint(0, 1024, (1024, 1024))),
    }
    expected = {
        "gather": a[args["gather"][1]],
        "copy": a,
        "shift": a[16:].reshape(-1, 16),
        "embed": w[args["embed"][1]],
        "pick": torch.gather(x, 1, args["pick"][1]),
    }
    for kernel, kernel_args in args.items():
        for live in modules.values():
            if kernel in ("embed", "pick"):  # Relax: returns its result
                assert torch.equal(getattr(live, kernel)(*kernel_args), expected[kernel])
                continue
            output = kernel_args[1 if kernel == "shift" else -1]
            output.zero_()
            getattr(live, kernel)(*kernel_args)
            assert torch.equal(output, expected[kernel]), kernel
    shell.flush_cache()  # the compile cache's background exports must not run during timing
    samples: dict[str, list[float]] = {}
    notes: dict[str, str] = {}
    for _ in range(rounds):
        for kernel, kernel_args in args.items():
            for which, live in modules.items():
                timing = live.time(kernel, *kernel_args, number=number, repeat=3)
                samples.setdefault(f"{kernel} {which}", []).extend(timing.function.samples)
                notes[f"{kernel} {which}"] = timing.note
    figures = {key: statistics.median(values) for key, values in samples.items()}
    # `time` says when a kernel carries the guards: the checked ones must, the others not
    figures["guarded"] = {key: bool(note) for key, note in notes.items()}
    return figures


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:4])))
