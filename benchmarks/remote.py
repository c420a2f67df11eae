"""A remote device on loopback: the same module with `--rpc` (a TVM RPC server on 127.0.0.1, in a
subprocess) and locally, the same small Relax function and PrimFunc called on 5-element tensors.

A remote call copies the arguments to the server, runs there and copies the result back, one
RPC round trip or more each; the per-call difference is the RPC overhead. `NAME.time` runs TVM's
`time_evaluator` on the device itself, so remote and local figures there should be near-equal.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import torch
from cells import ADD_TIR, MAIN_RELAX
from harness import module_cell, notebook_shell, per_call

from tvm_pyfunc_nb.testing import LocalRPC

FUNCTIONS = ADD_TIR + MAIN_RELAX  # the quickstart's kernel and a Relax add


def measure(number: int, rounds: int, time_number: int) -> dict:
    shell = notebook_shell()
    x, y = torch.arange(5, dtype=torch.float32), torch.ones(5)
    out_far, out_near = torch.empty(5), torch.empty(5)
    server = LocalRPC()
    try:
        module_cell(shell, "far", "all", FUNCTIONS, f"--rpc {server.address}")
        module_cell(shell, "near", "all", FUNCTIONS)
        far, near = shell.ns["far"], shell.ns["near"]
        # Package bug: at a kernel's first remote call, the compile cache's background export and
        # the upload's export run `export_library` on the same library at once, which TVM does
        # not survive (double free). Compiling here first and waiting for the cache's exports
        # leaves the upload the only export.
        far.compile()
        shell.flush_cache()
        for live, out in ((far, out_far), (near, out_near)):
            assert torch.equal(live.main_relax(x, y), x + y)
            live.add_tir(x, y, out)
            assert torch.equal(out, x + y)
        shell.flush_cache()  # the compile cache's background exports must not run during timing
        calls = {
            "relax remote": lambda: far.main_relax(x, y),
            "relax local": lambda: near.main_relax(x, y),
            "tir remote": lambda: far.add_tir(x, y, out_far),
            "tir local": lambda: near.add_tir(x, y, out_near),
        }
        figures: dict = per_call(calls, number=number, rounds=rounds)
        for fn, args in (("main_relax", (x, y)), ("add_tir", (x, y, out_far))):
            samples: dict[str, list[float]] = {"remote": [], "local": []}
            for _ in range(rounds):  # alternated, so that a busy moment falls on both
                for where, live in (("remote", far), ("local", near)):
                    timing = live.time(fn, *args, number=time_number, repeat=3)
                    samples[where].extend(timing.function.samples)
            for where, values in samples.items():
                figures[f"time {fn} {where}"] = statistics.median(values)
        figures["uploads"] = [[name, size] for name, size in far.stats.uploads]
        far.close()
    finally:
        server.stop()
    return figures


if __name__ == "__main__":
    print(json.dumps(measure(*map(int, sys.argv[1:4]))))
