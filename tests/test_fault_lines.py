"""`fault_lines`: the cell line an error is about, found in functions a cell made.

One live module (no shell) parses the cell, so the functions carry the cell lines TVMScript
gives them; the line each finder must return is marked `# <-` in the cell.
"""

from __future__ import annotations

import pytest

from tvm_pyfunc_nb import LiveModule
from tvm_pyfunc_nb._core.live.cells import FunctionSource
from tvm_pyfunc_nb._core.live.fault_lines import (
    call_line,
    calls_py_func,
    refers_to,
    string_line,
    tir_call_line,
)

CELL = """
@T.prim_func
def k(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        B[i] = T.exp(A[i])  # <- exp

@I.pyfunc
def scale(self, x):
    return x * 10

@R.function
def f(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    cls = lines
    y = R.add(x, x)
    z = R.call_tir(cls.k, (y,), out_ty=R.Tensor((4,), "float32"))  # <- k
    w = R.call_py_func("scale", z, out_ty=R.Tensor((4,), "float32"))  # <- scale
    return w
"""


def marked(what: str) -> int:
    """The cell line (the `%%tvmmodule` line is 1) of the line marked `# <- what`."""
    (index,) = [i for i, line in enumerate(CELL.splitlines()) if line.endswith(f"# <- {what}")]
    return index + 2


@pytest.fixture(scope="module")
def lines():
    module = LiveModule("lines")
    module.run_cell(CELL)
    yield module
    module.close()


def test_a_relax_call_is_found_by_what_it_calls_or_passes_on(lines):
    f = lines.entry("f").func
    assert call_line(f, refers_to("k")) == marked("k")  # passed on to call_tir
    assert call_line(f, calls_py_func("scale")) == marked("scale")
    assert call_line(f, refers_to("missing")) is None
    assert call_line(f, calls_py_func("k")) is None  # `k` is called, not as a pyfunc


def test_the_tir_statement_that_calls_an_op_is_found_by_the_ops_name(lines):
    k = lines.entry("k").func
    assert tir_call_line(k, ["exp"]) == marked("exp")  # `T.exp`, which TVM names `tirx.exp`
    assert tir_call_line(k, ["log"]) is None and tir_call_line(k, []) is None


def test_a_string_the_user_wrote_is_found_where_it_stands_in_the_source():
    source = FunctionSource(
        "f", "tir", 'def f():\n    T.alloc_buffer((4,), scope="local")\n    x = "global"\n', 10
    )
    assert string_line(source, ["global", "local"]) == 11  # the first of them, by line
    assert string_line(source, ["shared"]) is None and string_line(source, []) is None
    printed = FunctionSource("f", "tir", 'def f(:\n    "local"\n', 10)  # not Python: no line
    assert string_line(printed, ["local"]) is None
