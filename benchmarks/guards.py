"""What the crash guards cost: kernels whose bounds TVM cannot prove, in a default module (guards
in) and in an `--unchecked` one, timed by `NAME.time` (TVM's `time_evaluator`) in the same run.

Two kernels over 1M float32 elements: a gather `B[i] = A[idx[i]]` (the index is data: each read
is checked), and a copy loop over `m` into a buffer of size `n` (`m` and `n` are unrelated
sizes: each access is checked). The two modules are timed in alternation, so that a busy moment
falls on both.
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
"""


def measure(number: int, rounds: int) -> dict:
    torch.manual_seed(0)
    shell = notebook_shell()
    module_cell(shell, "checked", "kernels", KERNELS)
    module_cell(shell, "unchecked", "kernels", KERNELS, "--unchecked")
    modules = {"checked": shell.ns["checked"], "unchecked": shell.ns["unchecked"]}
    a = torch.randn(ELEMENTS)
    args = {
        "gather": (a, torch.randperm(ELEMENTS), torch.empty(ELEMENTS)),
        "copy": (a, torch.empty(ELEMENTS)),
    }
    expected = {"gather": a[args["gather"][1]], "copy": a}
    for kernel, kernel_args in args.items():
        for live in modules.values():
            kernel_args[-1].zero_()
            getattr(live, kernel)(*kernel_args)
            assert torch.equal(kernel_args[-1], expected[kernel]), kernel
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
    print(json.dumps(measure(int(sys.argv[1]), int(sys.argv[2]))))
