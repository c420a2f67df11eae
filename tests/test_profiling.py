"""`NAME.profile("fn", *args)` (SPEC: "Finding the fault"): a row per kernel launched, TIR
kernels, PyTorch calls and pyfuncs, the VM's own work apart, slowest first, each with the
bindings and PyTorch ops fused into it and where they came from.

Two small modules made once (a cell with a kernel and a pyfunc; a PyTorch model imported with
--offload torch); real compiles, real runs. Times themselves are never asserted: only what
holds on any CPU under any load.
"""

from __future__ import annotations

import inspect
import os

import pytest
import torch
from test_bringing_in import MLP

from tvm_pyfunc_nb import CallError, LiveModule, UnknownFunctionError
from tvm_pyfunc_nb._core.build.offload import PREFIX
from tvm_pyfunc_nb._views import render

MODEL_FILE = os.path.basename(inspect.getsourcefile(MLP))  # where the model's lines are
pytestmark = pytest.mark.usefixtures("frozen_heap")

CELL = """
@T.prim_func
def add_one(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
    for i in range(4):
        b[i] = a[i] + T.float32(1)

@I.pyfunc
def doubled(x):
    return x * 2

@R.function
def f(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    cls = m
    y = R.call_tir(cls.add_one, (x,), out_ty=R.Tensor((4,), "float32"))
    z = R.call_py_func("doubled", y, out_ty=R.Tensor((4,), "float32"))
    return R.add(z, z)
"""


@pytest.fixture(scope="module")
def modules():
    cell = LiveModule("m")
    cell.run_cell(CELL)
    torch.manual_seed(0)
    model, x = MLP().eval(), torch.randn(4, 8)  # test_bringing_in's: 8 -> 16 -> 4
    offloaded = LiveModule("net", offload="torch")
    offloaded.add_torch(model, (x,))
    yield cell, offloaded, x, model
    cell.close()
    offloaded.close()


def test_a_row_per_kernel_and_pyfunc_the_vm_apart_slowest_first(modules):
    cell = modules[0]
    x = torch.ones(4)
    found = cell.profile("f", x, number=2, repeat=2)
    kinds = {r.kernel: r.kind for r in found.rows}
    assert kinds == {
        "add_one": "kernel",
        "add": "kernel",
        "doubled": "pyfunc",
        "VM builtins and dispatch": "VM",
    }
    assert [r.total for r in found.rows] == sorted((r.total for r in found.rows), reverse=True)
    assert found.total == pytest.approx(sum(r.total for r in found.rows))
    assert sum(r.share for r in found.rows) == pytest.approx(1.0)
    assert found.time > 0 and found.total >= found.time * 0.999  # the VM row is the rest
    row = next(r for r in found.rows if r.kernel == "add_one")
    assert (row.calls, row.bindings) == (1, ("y",)) and row.mean == row.total
    assert next(r for r in found.rows if r.kind == "pyfunc").bindings == ("z",)
    assert [r.kernel for r in found.kernels] == [r.kernel for r in found.rows if r.kind != "VM"]
    assert torch.equal(cell.f(x), torch.full((4,), 8.0))  # the module's own VM is untouched


def test_pytorch_calls_are_rows_with_the_ops_and_lines_fused_into_them(modules):
    _, offloaded, x, _ = modules
    found = offloaded.profile("main", x, number=2, repeat=2)
    linear = next(r for r in found.rows if r.kernel == "torch.linear")
    assert (linear.kind, linear.calls) == ("PyTorch call", 2)
    assert "addmm" in linear.ops and linear.where.startswith(f"fc1 · {MODEL_FILE}:")
    # both linear layers' bindings (it was `lv2 (+1 site)`), and fc1's line with its code
    sites = offloaded._parts.compiler.linked_for(offloaded._parts.state, "main").sites
    fused = [b for site in sites.of("main")[PREFIX + "torch.linear"] for b in site]
    assert linear.bindings == tuple(fused) == ("lv2", "gv")
    assert "lv2, gv" in repr(found)
    assert ": return self.fc2(torch.relu(self.fc1(x)))" in linear.where
    relu = next(r for r in found.rows if "relu" in r.kernel)
    assert relu.kind == "kernel" and "relu" in relu.ops
    text = repr(found)
    assert text.startswith("profile of main: ")
    assert text.splitlines()[1].split()[:5] == ["kernel", "kind", "calls", "total", "mean"]
    assert text.splitlines()[1].rstrip().endswith("where")
    html = render.profile_html(found)
    assert html.count("<tr>") == len(found.rows) + 1 and "width:" in html


def test_bad_inputs_are_the_packages_errors_and_the_module_keeps_working(modules):
    cell = modules[0]
    x = torch.ones(4)
    with pytest.raises(UnknownFunctionError, match="nope"):
        cell.profile("nope", x)
    with pytest.raises(CallError, match="takes 1 argument"):
        cell.profile("f")
    with pytest.raises(CallError, match=r"expects float32\[4\]"):
        cell.profile("f", torch.ones(3))
    with pytest.raises(CallError, match="needs a Relax function"):
        cell.profile("add_one", x, x)
    with pytest.raises(CallError, match="at least 1"):
        cell.profile("f", x, repeat=0)
    assert torch.equal(cell.f(x), torch.full((4,), 8.0))


def test_compare_by_kernel_checks_pytorch_calls_and_pyfuncs_like_kernels(modules):
    cell, offloaded, x, model = modules
    found = offloaded.compare("main", model, x, by="kernel")
    assert found.first_divergence is None and found.passed
    linear = [c for c in found.checks if c.kernel == "torch.linear"]
    assert [c.binding for c in linear] == ["lv2", "gv"]  # `gv = lv6`: fc2's, folded into it
    assert all(c.diff is not None and c.diff.passed for c in found.checks)
    ones = torch.ones(4)
    found = cell.compare("f", lambda v: (v + 1) * 4, ones, by="kernel")
    assert [(c.kernel, c.binding) for c in found.checks] == [
        ("add_one", "y"),
        ("doubled", "z"),
        ("add", "gv2"),
    ]
    assert found.first_divergence is None and "optional pass off" in repr(found)
