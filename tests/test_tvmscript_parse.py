"""One cell's functions parsed against the rest of the module, without a shell: `cls.f` finds a
function of another cell, and a parse error names the function and the cell line."""

from __future__ import annotations

import pytest
from cells import ADD_TIR, MAIN_RELAX
from tvm import relax, tirx
from tvm.relax.base_py_module import BasePyModule
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from tvm_pyfunc_nb import TVMScriptError
from tvm_pyfunc_nb._core.live.cells import split_cell
from tvm_pyfunc_nb._core.live.tvmscript_parse import parse_fragment

NAMESPACE = {"T": T, "R": R, "I": I, "BasePyModule": BasePyModule}
CALLS_ADD = """
@R.function
def twice(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    cls = demo
    return R.call_tir(cls.add_tir, (x, x), out_ty=R.Tensor((4,), "float32"))
"""


def parsed(text: str, others=None, first_line: int = 2) -> dict:
    fragment = split_cell(text, first_line=first_line)
    return parse_fragment(fragment, "demo", others or {}, NAMESPACE, {})


def test_a_cell_of_functions_parses_and_another_cells_function_is_found_by_cls():
    first = parsed(ADD_TIR + MAIN_RELAX)
    assert set(first) == {"add_tir", "main_relax"}
    gvar, add = first["add_tir"]
    assert gvar.name_hint == "add_tir" and isinstance(add, tirx.PrimFunc)
    second = parsed(CALLS_ADD, others={"add_tir": add})
    (name,) = second
    twice = second[name][1]
    assert isinstance(twice, relax.Function)
    called = {gv.name_hint for gv in relax.analysis.all_global_vars(twice)}
    assert called == {"add_tir"}


def test_a_parse_error_names_the_function_and_the_line_of_the_cell():
    broken = CALLS_ADD.replace("cls.add_tir", "cls.no_such_kernel")
    with pytest.raises(TVMScriptError) as caught:
        parsed(ADD_TIR + broken, first_line=10)
    error = caught.value
    assert error.function == "twice", error
    # the cell's first line is 10; `return` is the 5th line of `twice`, after ADD_TIR's lines
    assert error.line == 10 + ADD_TIR.count("\n") + 4, (error.line, str(error))
    assert "no_such_kernel" in str(error)


def test_a_cell_of_pyfuncs_alone_parses_nothing():
    assert parsed("\n@I.pyfunc\ndef scale(self, x):\n    return x * 10\n") == {}
