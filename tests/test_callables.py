"""What `NAME.fn` runs, made from a module's entries without a shell: a name and signature of
its own, compiled code called torch in and torch out, a packed function called destination-
passing style, and a pyfunc's error naming it and its line."""

from __future__ import annotations

import inspect

import pytest
import torch
import tvm
from cells import ADD_TIR
from tvm.script import relax as R

from tvm_pyfunc_nb import CallError, LiveModule, PyFuncError
from tvm_pyfunc_nb._core.run.callables import (
    LazyCallable,
    call_dps_packed,
    pyfunc_callable,
    run_compiled,
    signature_of,
)
from tvm_pyfunc_nb.testing import parts_of

FAILING = """
@I.pyfunc
def halve(self, x):
    y = x / 2
    return y.no_such_method()
"""


@pytest.fixture(scope="module")
def parts():
    live = LiveModule("demo")
    live.run_cell(ADD_TIR + FAILING)
    return parts_of(live)


def test_a_function_shows_its_own_parameters_and_resolves_at_its_first_call(parts):
    add, halve = parts.entry("add_tir"), parts.entry("halve")
    assert list(signature_of(add).parameters) == ["A", "B", "C"]  # its buffers
    assert list(signature_of(halve).parameters) == ["x"]  # without `self`
    lazy = LazyCallable(parts.calls, "demo", add)
    assert repr(lazy) == f"<{add.kind} demo.add_tir>" and lazy.__name__ == "add_tir"
    assert inspect.signature(lazy) == signature_of(add)
    x, out = torch.arange(4, dtype=torch.float32), torch.empty(4)
    lazy(x, x, out)
    assert torch.equal(out, x + x)


def test_compiled_code_runs_torch_in_and_a_wrong_call_is_a_call_error(parts):
    add = parts.entry("add_tir")
    kernel = tvm.tirx.build(add.func, target="llvm")
    x, out = torch.arange(4, dtype=torch.float32), torch.empty(4)
    run_compiled(add, kernel, (x, x, out), device=tvm.cpu())
    assert torch.equal(out, 2 * x)
    with pytest.raises(CallError) as caught:
        run_compiled(add, kernel, (x, x), device=tvm.cpu())
    assert caught.value.function == "add_tir"


def test_a_packed_function_gets_its_outputs_allocated_and_a_missing_one_is_named():
    def doubled(x, out):
        torch.from_dlpack(out).copy_(torch.from_dlpack(x) * 2)

    tvm.register_global_func("tvmnb_test_callables_doubled", doubled, override=True)
    x = torch.arange(4, dtype=torch.float32)
    out = call_dps_packed(
        "tvmnb_test_callables_doubled", [x], R.Tensor((4,), "float32"), None, tvm.cpu()
    )
    assert torch.equal(torch.from_dlpack(out), 2 * x)
    with pytest.raises(CallError, match="no global packed function has this name") as caught:
        call_dps_packed("tvmnb_no_such_packed", [x], R.Tensor((4,), "float32"), None, tvm.cpu())
    assert caught.value.function == "tvmnb_no_such_packed"


def test_a_pyfunc_that_raises_names_itself_and_its_line_and_its_call_is_recorded(parts):
    halve = parts.entry("halve")
    call = pyfunc_callable(parts.calls, halve, parts.runner.calling.pyfunc_self)
    assert call.__name__ == "halve"
    with pytest.raises(PyFuncError) as caught:
        call(torch.ones(2))
    error = caught.value
    assert error.function == "halve" and error.line == halve.line + 3, (error.line, halve.line)
    assert "no_such_method" in str(error)
