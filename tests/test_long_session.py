"""A long editing session: 150 edit / re-run / call cycles on a module of TIR, Relax and pyfuncs.

What a session leaves behind must stay bounded: the process's memory, the
`R.call_py_func` registry, the Relax VMs and compiled libraries alive, the
views on screen. Every cycle edits one cell (a new constant, so TVM really
compiles), calls everything and checks the numbers; every tenth cycle also
runs a broken edit and a bad call, which must change nothing.
"""

from __future__ import annotations

import gc

import ipywidgets
import psutil
import pytest
import torch
from cells import elementwise_kernel, kernel_then_pyfunc
from tvm import relax

from tvm_pyfunc_nb import CallError, TVMScriptError

MAX_KEPT_VERSIONS = 4  # versions of one kernel a module keeps compiled
MAX_KEPT_VMS = 4  # Relax VMs a module keeps (so that a revert rebuilds nothing)

pytestmark = pytest.mark.slow

CYCLES = 150
MEASURED = 100  # growth is measured over the last MEASURED cycles (the first ones warm caches up)
# measured: ~14 MB over 200 cycles, most of it IPython keeping each cell's output view in `Out`
MAX_GROWTH_MB = 15

KERNEL = elementwise_kernel("add_k", "A[i] + B[i] * T.float32({k})")
PYFUNCS = """
@I.pyfunc
def post(self, x):
    return x + {k}

@I.pyfunc
def main(self, x, y):
    z = self.call_tir(self.add_k, [x, y], out_ty=R.Tensor((x.shape[0],), "float32"))
    return self.post(z)
"""
GRAPH = kernel_then_pyfunc(
    "pipe", "session", "add_k", "post", then='return R.multiply(w, R.const({k}, "float32"))'
)
CELLS = {"kernel": KERNEL, "pyfuncs": PYFUNCS, "graph": GRAPH}
BROKEN = """
@R.function
def broken(x: R.Tensor((4,), "float32")):
    return R.no_such_op(x)
"""
X = torch.arange(8, dtype=torch.float32)
Y = torch.ones(8)


def rss_mb() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2**20


def live_vms() -> int:
    return sum(isinstance(o, relax.VirtualMachine) for o in gc.get_objects())


def test_150_edit_run_call_cycles_stay_bounded(shell):
    shell.ns.update(X=X, Y=Y)
    gc.collect()
    others = live_vms()  # VMs of the process's other modules (earlier tests'), not this one's
    k = {"kernel": 1, "pyfuncs": 2, "graph": 3}
    for cell_id, body in CELLS.items():
        shell.cell("session", body.format(k=k[cell_id]), cell_id=cell_id)
    rss, open_widgets = {}, {}
    for cycle in range(1, CYCLES + 1):
        edited = list(CELLS)[cycle % 3]
        k[edited] = cycle + 3
        shell.cell("session", CELLS[edited].format(k=k[edited]), cell_id=edited)
        session = shell.ns["session"]
        expected = X + Y * k["kernel"] + k["pyfuncs"]
        assert torch.equal(session.main(X, Y), expected)
        assert torch.equal(session.pipe(X, Y), expected * k["graph"])
        if cycle % 10 == 0:
            broken = CELLS[edited].format(k=k[edited]) + BROKEN
            shell.cell("session", broken, cell_id=edited, expect_error=TVMScriptError)
            shell.run("session.pipe(X[:3], Y)", expect_error=CallError)
            assert torch.equal(session.pipe(X, Y), expected * k["graph"])
        if cycle % 50 == 0 or cycle == CYCLES - MEASURED:
            rss[cycle] = rss_mb()
            open_widgets[cycle] = len(ipywidgets.Widget.widgets)
            kept = session.kept
            assert kept["registered_pyfunc_sites"] == 1  # the one R.call_py_func site of `pipe`
            assert kept["vms"] <= MAX_KEPT_VMS and live_vms() - others <= MAX_KEPT_VMS + 1
            assert kept["kernels"] <= 8 * MAX_KEPT_VERSIONS
    figures = ", ".join(f"{cycle}: {mb:.1f}" for cycle, mb in sorted(rss.items()))
    growth = rss[CYCLES] - rss[CYCLES - MEASURED]
    print(
        f"\nRSS in MB after cycle {figures}; "
        f"growth over the last {MEASURED} cycles: {growth:.1f} MB"
    )
    assert growth < MAX_GROWTH_MB, figures
    # replaced views are closed
    assert open_widgets[CYCLES] == open_widgets[CYCLES - MEASURED], open_widgets
