"""A function as cell text that parses back to it, without a shell: its weights named in the
module's constant table and written `NAME.consts.<name>`, so the text parses back to the same
function, the very same weights in it."""

from __future__ import annotations

import numpy as np
import pytest
import tvm_ffi
from tvm.relax.base_py_module import BasePyModule
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from tvm_pyfunc_nb import CallError
from tvm_pyfunc_nb._core.live.cells import split_cell
from tvm_pyfunc_nb._core.live.editing import (
    ConstantTable,
    function_text,
    name_constants,
    tensor_constants,
)
from tvm_pyfunc_nb._core.live.tvmscript_parse import parse_fragment

WEIGHT = np.arange(4, dtype="float32")
BIAS = np.ones(4, dtype="float32")


@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        y = R.multiply(x, R.const(WEIGHT))
        return R.add(y, R.const(BIAS))

    @R.function
    def scaled(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        return R.multiply(x, R.const(2.0, "float32"))  # a scalar TVM prints inline


def test_each_tensor_constant_gets_a_name_a_preferred_one_first():
    table = ConstantTable()
    weight, bias = tensor_constants(Module["main"])
    assert np.array_equal(bias.value.numpy(), BIAS) and tensor_constants(Module["scaled"]) == []
    name_constants(Module, table, {weight: "fc_weight"})
    assert list(table) == ["fc_weight", "main_c1"] and len(table) == 2
    assert table.fc_weight.same_as(weight)
    assert np.array_equal(table.numpy("main_c1"), BIAS)
    assert repr(table) == "fc_weight: float32[4]\nmain_c1: float32[4]"
    with pytest.raises(CallError, match=r"no constant named `w` \(known: fc_weight, main_c1\)"):
        table["w"]
    # a constant no function uses any more leaves the table
    name_constants(Module.__class__({"scaled": Module["scaled"]}), table, {})
    assert len(table) == 0 and repr(table) == "no constants"


def test_function_text_parses_back_to_the_same_function_with_the_same_weights():
    table = ConstantTable()
    text = function_text("demo", Module, "main", table, {})
    assert "demo.consts.main_c0" in text and "metadata" not in text, text
    namespace = {"T": T, "R": R, "I": I, "BasePyModule": BasePyModule}
    parsed = parse_fragment(split_cell(text), "demo", {}, namespace, {}, table)
    _, again = parsed["main"]
    assert tvm_ffi.structural_equal(again, Module["main"])
    weights = [table[name] for name in table]
    assert all(c.same_as(w) for c, w in zip(tensor_constants(again), weights, strict=True))
