"""`compare(..., by="kernel")` and `trace(..., stop_at="nonfinite")` (SPEC: "Finding the fault"):
the first fused kernel that diverges, named with its bindings and lines, and the first binding
that makes nan or inf from finite inputs.

The fault is planted where only the compiled, fused module has it: a custom Relax pipeline
(registered by name, as a user would) whose last pass makes the fused kernel holding a `log`
compute `log(x - 1)` instead of `log(x + 1)`. Op by op, the traced copy is fused otherwise and
sees nothing; kernel by kernel, the fused kernel diverges with NaN. One module-scoped fixture.
"""

from __future__ import annotations

import os

import pytest
import torch
import tvm
from tvm import relax
from tvm.relax.pipeline import PIPELINE_MAP

from tvm_pyfunc_nb import CallError, LiveModule
from tvm_pyfunc_nb._core.inspect.kernel_compare import PLAIN
from tvm_pyfunc_nb._views import render

HERE = os.path.basename(__file__)
pytestmark = pytest.mark.usefixtures("frozen_heap")
WRONG = "test_wrong_log"  # the custom pipelines' names
NEGATED = "test_negated_log"


class SoftPlusOne(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.log(torch.relu(self.fc(x)) + 1.0)


class LogOfNegative(torch.nn.Module):
    """Finite until `torch.log` meets the values `shifted` made negative."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        shifted = h - 10.0
        logged = torch.log(shifted)
        return torch.relu(logged) + h


CELL = """
@R.function
def soft(x: R.Tensor((2, 4), "float32")) -> R.Tensor((2, 4), "float32"):
    with R.dataflow():
        y = R.nn.relu(x)
        z = R.add(y, R.const(1.0, "float32"))
        w = R.log(z)
        R.output(w)
    return w
"""


def rewriting_log_kernels(name: str, old: str, new: str):
    """A pass that makes every kernel with a log compute otherwise: `old` text becomes `new`
    (a fault a hand-written pass could make)."""

    @tvm.transform.module_pass(opt_level=0, name=name)
    def rewrite(mod, ctx):
        functions = {}
        for gv, func in mod.functions_items():
            if isinstance(func, tvm.tirx.PrimFunc) and "log" in gv.name_hint:
                text = func.script().replace(old, new)
                func = tvm.script.from_source(text).with_attrs(func.attrs)
            functions[gv] = func
        return tvm.IRModule(functions, attrs=mod.attrs)

    return lambda: tvm.transform.Sequential([relax.get_pipeline("zero"), rewrite])


@pytest.fixture(scope="module")
def modules():
    PIPELINE_MAP[WRONG] = rewriting_log_kernels(
        "LogOfXMinusOne", "T.float32(1.0)", "T.float32(-1.0)"
    )
    PIPELINE_MAP[NEGATED] = rewriting_log_kernels(
        "LogOfMinusX", "T.log(", "T.log(T.float32(-1.0) * "
    )
    torch.manual_seed(0)
    soft, x = SoftPlusOne().eval(), torch.randn(3, 8)
    wrong = LiveModule("wrong", pipeline=WRONG)
    wrong.add_torch(soft, (x,))
    cell = LiveModule("cell", pipeline=WRONG)
    cell.run_cell(CELL)
    negated = LiveModule("negated", pipeline=NEGATED)
    negated.add_torch(soft, (x,))
    right = LiveModule("right", pipeline="target")
    right.add_torch(soft, (x,))
    nan = LogOfNegative().eval()
    plain = LiveModule("plain")
    plain.add_torch(nan, (x,))
    yield {
        "wrong": (wrong, soft),
        "negated": negated,
        "right": right,
        "cell": cell,
        "nan": (plain, nan),
        "x": x,
    }
    PIPELINE_MAP.pop(WRONG, None)
    PIPELINE_MAP.pop(NEGATED, None)
    for live in (wrong, negated, right, cell, plain):
        live.close()


def test_the_first_fused_kernel_that_diverges_is_named_with_its_bindings_and_line(modules):
    wrong, model = modules["wrong"]
    x = modules["x"]
    assert wrong.compare("main", model, x).first_divergence is None  # op by op: invisible
    found = wrong.compare("main", model, x, by="kernel")
    first = found.first_divergence
    assert "log" in first.kernel and len(first.bindings) >= 4  # matmul, add, relu, add, log
    assert "NaN where PyTorch has numbers" in first.diff.note
    verdict = found.verdict()
    assert verdict.startswith(f"first divergence: kernel `{first.kernel}` (bindings ")
    assert f"{HERE}:" in verdict and "torch.log(torch.relu(self.fc(x)) + 1.0)" in verdict
    # the NaN's origin: the kernel that made it from finite inputs
    assert found.nonfinite is not None and found.nonfinite.op == f"kernel {first.kernel}"
    assert "from finite inputs (input 1 in [" in verdict
    text = repr(found)
    assert text.startswith("compare main by kernel: first divergence")
    assert "launches compared with PyTorch" in text
    assert render.kernel_comparison_html(found).count("<tr") >= 3


def test_without_a_pytorch_model_the_reference_is_the_build_with_optional_passes_off(modules):
    cell = modules["cell"]
    x = torch.randn(2, 4)
    found = cell.compare("soft", lambda v: torch.log(torch.relu(v) + 1.0), x, by="kernel")
    assert found.reference_of_bindings == PLAIN
    first = found.first_divergence
    assert first is not None and "log" in first.kernel and first.binding == "w"
    assert f"launches compared with {PLAIN}" in repr(found)


def test_a_right_module_passes_kernel_by_kernel(modules):
    right, (_, model) = modules["right"], modules["wrong"]
    found = right.compare("main", model, modules["x"], by="kernel")
    assert found.first_divergence is None and found.passed
    assert found.verdict().endswith("and the dtype's rounding, kernel by kernel")
    assert [c.kernel for c in found.checks] == list(right.kernels("main"))
    assert all(c.diff is not None and c.diff.passed for c in found.checks)


REBOUND = """
@R.function
def head(x: R.Tensor((4, 3), "float32"), w: R.Tensor((3, 2), "float32")):
    h = R.matmul(x, w)
    h = R.add(h, R.const(0.5, "float32"))
    h = R.nn.relu(h)
    return R.sum(h, axis=[1])
"""


def test_a_name_bound_again_is_each_binding_by_the_name_trace_gives_it():
    """`h = ...; h = ...`: three bindings named `h`, which trace, the script and the kernels'
    sites call `h`, `h_1`, `h_2`; each launch is compared with its own binding's value."""
    live = LiveModule("rebound", pipeline="zero")
    live.run_cell(REBOUND)
    x, w = torch.randn(4, 3), torch.randn(3, 2)
    try:
        found = live.compare("head", lambda a, b: torch.relu(a @ b + 0.5).sum(1), x, w, by="kernel")
        assert found.first_divergence is None, repr(found)
        assert [c.binding for c in found.checks if c.diff is not None] == ["h", "h_1", "h_2", "gv3"]
        assert [c.bindings for c in found.checks if c.diff is not None][1] == ("h_1",)
    finally:
        live.close()


def test_trace_stops_at_the_first_value_made_non_finite_from_finite_inputs(modules):
    plain, _ = modules["nan"]
    x = modules["x"]
    traced = plain.trace("main", x, stop_at="nonfinite")
    stopped = traced.stopped
    assert (stopped.op, list(traced)[-1]) == ("log", stopped.binding)
    assert stopped.what.endswith("nan") and len(stopped.inputs) == 1
    name, span = stopped.inputs[0]
    low, high = (float(v) for v in span.strip("[]").split(", "))
    assert low <= high < 0 and bool((traced[name] < 0).all())
    assert f"{HERE}:" in str(stopped) and "torch.log(shifted)" in str(stopped)
    assert repr(traced).startswith("trace of main: ")
    assert "stopped at the first non-finite value: `" in repr(traced).splitlines()[0]
    assert len(traced) < len(plain.trace("main", x))
    clean = modules["right"].trace("main", x, stop_at="nonfinite")
    assert clean.stopped is None and "no binding makes nan or inf" in clean.title()


def test_bad_values_of_by_and_stop_at_are_clear_errors(modules):
    wrong, model = modules["wrong"]
    x = modules["x"]
    with pytest.raises(CallError, match="by must be one of 'binding', 'kernel', not 'nonsense'"):
        wrong.compare("main", model, x, by="nonsense")
    with pytest.raises(CallError, match="stop_at must be one of 'nonfinite' or None"):
        wrong.trace("main", x, stop_at="nonsense")
    with pytest.raises(CallError, match="takes 1 argument"):
        wrong.compare("main", model, by="kernel")
    assert wrong.main(x).shape == (3, 8)  # the module still works


def test_op_by_op_a_nan_divergence_names_the_binding_that_made_it_from_finite_inputs(modules):
    negated, (_, model), x = modules["negated"], modules["wrong"], modules["x"]
    found = negated.compare("main", model, x)  # log(-v): NaN wherever PyTorch's log has a number
    first = found.first_divergence
    assert first.op == "log" and "NaN where PyTorch has numbers" in first.diff.note
    assert found.nonfinite is not None and found.nonfinite.binding == first.binding
    span = found.nonfinite.inputs[0][1]
    assert float(span.strip("[]").split(", ")[0]) >= 1.0  # relu(...) + 1: finite, at least 1
    assert "; the first non-finite value: `" in found.verdict()
    assert f"{HERE}:" in found.verdict()
