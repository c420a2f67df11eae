"""`call_errors`: each way a call goes wrong, as the package's own error, built directly.

No shell and no compile: the builders take what a failed call leaves (the arguments, TVM's
or Python's exception) and must name the function, the parameter and the cell line.
"""

from __future__ import annotations

import threading
import traceback

import pytest
import torch
import tvm

from tvm_pyfunc_nb import CallError, PyFuncError, TVMModuleError, UnknownFunctionError
from tvm_pyfunc_nb._core.live.cells import FunctionSource
from tvm_pyfunc_nb._core.live.contributions import FunctionEntry
from tvm_pyfunc_nb._core.run.arguments import TensorSpec
from tvm_pyfunc_nb._core.run.call_errors import (
    bad_pyfunc_arguments,
    explain_bad_call,
    pending_error,
    pyfunc_error,
    raised_in_pyfunc,
    refused,
    take_pending_error,
    unknown_function,
    wrong_kind,
)

SPECS = [TensorSpec("x", ("n",), "float32"), TensorSpec("y", ("n",), "float32")]
TVM_SAYS = RuntimeError("Check failed: (x.ndim == 1) is false")
# a pyfunc's code as a cell compiles it: its file is the cell's
CELL = "def boom(self, x):\n    return helper(x)\n"
CELL_FILE = "<tvmmodule demo cell 3>"


def test_a_refused_call_names_the_count_the_device_or_the_parameter_at_fault():
    x = torch.ones(3)
    count = explain_bad_call("add", SPECS, (x,), TVM_SAYS)
    assert str(count) == "`add`: takes 2 argument(s) (x, y), got 1"
    device = explain_bad_call("add", SPECS, (x, x), TVM_SAYS, tvm.cuda(0))
    assert "parameter `x` expects float32[n] on cuda:0, got float32[3] on cpu:0" in str(device)
    shape = explain_bad_call("add", SPECS, (x, torch.ones(4)), TVM_SAYS)
    assert "parameter `y` expects float32[n], got float32[4] (n is 3" in str(shape)
    right = explain_bad_call("add", SPECS, (x, x), TVM_SAYS)  # nothing to blame: TVM's reason
    assert str(right) == "`add`: TVM refused the call: Check failed: (x.ndim == 1) is false"
    assert all(e.function == "add" for e in (count, device, shape, right))


def test_a_kernels_own_check_says_it_stopped_and_where_in_the_cell():
    said = RuntimeError("index out of bounds in `gather` at line 5\n  (TVM's stack)")
    stopped = explain_bad_call("gather", None, (), said, cell_lines=True)
    assert (
        str(stopped)
        == "`gather`, cell line 5: stopped while running: index out of bounds in `gather`"
    )
    # a function not from a cell (added from an IRModule) has no cell line to give
    assert explain_bad_call("gather", None, (), said).line is None


def test_wrong_kind_and_unknown_function_say_what_there_is():
    entry = FunctionEntry(FunctionSource("k", "tir", "", 0), "cell", "", None, None)
    assert str(wrong_kind(entry, "relax", "trace")) == (
        "`k`: trace needs a Relax function, but `k` is a tir"
    )
    unknown = unknown_function("demo", {"b": 1, "a": 2}, "c")
    assert isinstance(unknown, UnknownFunctionError) and unknown.function == "c"
    assert "module `demo` has no function `c` (it has: a, b)" in str(unknown)
    assert "(it has: none yet)" in str(unknown_function("demo", {}, "c"))


def cell_pyfunc():
    """`boom` as a cell defines it, calling a helper that raises in this file."""

    def helper(x):
        raise ValueError(f"bad {x}")

    scope = {"helper": helper}
    exec(compile(CELL, CELL_FILE, "exec"), scope)
    return scope["boom"]


def test_a_pyfunc_that_raises_is_a_pyfunc_error_at_its_own_cell_line():
    boom = cell_pyfunc()
    with pytest.raises(ValueError) as caught:
        boom(None, 1)
    error = pyfunc_error("boom", 2, caught.value)
    assert isinstance(error, PyFuncError) and error.__cause__ is caught.value
    assert str(error) == "`boom`, cell line 2: ValueError: bad 1"
    assert pyfunc_error("boom", 2, error) is error  # already the package's: as it is


def test_its_traceback_ends_in_the_pyfuncs_frame_and_keeps_the_rest_in_the_cause():
    boom = cell_pyfunc()

    def handle(x):  # what a pyfunc's callable does: call it, and raise the package's error
        try:
            return boom(None, x)
        except ValueError as err:
            raise raised_in_pyfunc(pyfunc_error("boom", 2, err), err, boom.__code__) from err

    with pytest.raises(PyFuncError) as caught:
        handle(1)
    frames = traceback.extract_tb(caught.value.__traceback__)
    assert frames[-1].filename == CELL_FILE and frames[-1].name == "boom"
    cause = traceback.extract_tb(caught.value.__cause__.__traceback__)
    assert cause[-1].name == "helper"  # the frames below stay in the cause


def test_arguments_python_refuses_are_a_call_error_others_are_the_pyfuncs_own():
    def scale(self, x, factor=2):
        return x * factor

    refused_here = TypeError("scale() takes from 2 to 3 positional arguments but 5 were given")
    wrong = bad_pyfunc_arguments("scale", scale, True, (1, 2, 3, 4), {}, refused_here)
    assert str(wrong).startswith("`scale`: takes (x, factor), got 4 argument(s): too many")
    keyword = bad_pyfunc_arguments("scale", scale, True, (1,), {"k": 3}, refused_here)
    assert "got 1 argument(s) and keywords ['k']" in str(keyword)
    inside = TypeError("unsupported operand type(s)")  # the arguments bind: the body raised it
    assert bad_pyfunc_arguments("scale", scale, True, (1,), {}, inside) is None
    assert bad_pyfunc_arguments("scale", scale, True, (), {}, ValueError()) is None


def test_an_error_that_crossed_tvm_comes_back_as_itself():
    mine = CallError("the inner call failed", function="inner")
    pending_error.error = mine
    rewrapped = RuntimeError(f"TVM: {mine}")  # TVM passes on only the text
    assert take_pending_error(rewrapped) is mine
    assert take_pending_error(rewrapped) is None  # taken once
    pending_error.error = mine  # left by a call that did not cross TVM: stands for nothing
    assert take_pending_error(RuntimeError("something else")) is None

    error = refused("outer", SPECS, (torch.ones(2),), RuntimeError("no"), None)
    assert isinstance(error, TVMModuleError) and error.function == "outer"
    assert isinstance(error.__cause__, RuntimeError)


def test_the_pending_error_is_per_thread():
    pending_error.error = CallError("here", function="f")
    seen = []
    thread = threading.Thread(target=lambda: seen.append(getattr(pending_error, "error", None)))
    thread.start()
    thread.join()
    assert seen == [None]
    pending_error.error = None
