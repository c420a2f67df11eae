"""`arguments`: what a function expects, keywords in parameter order, outputs `call_tir` allocates.

Direct, without a shell: each check that explains a bad call, and each way to say an output's
type, against functions TVMScript parses.
"""

from __future__ import annotations

import pytest
import torch
import tvm
from tvm import relax
from tvm.script import relax as R
from tvm.script import tirx as T

from tvm_pyfunc_nb import CallError
from tvm_pyfunc_nb._core.run.arguments import (
    TensorSpec,
    allocate_outputs,
    function_name,
    keywords_to_positions,
    mismatch,
    out_ty_of,
    output_specs,
    specs_of,
)


@R.function
def scale(x: R.Tensor(("n", 4), "float32"), k: R.Tensor((), "float32")):
    return R.multiply(x, k)


@T.prim_func
def rows(a: T.handle, b: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n, 3), "float32")
    B = T.match_buffer(b, (n, 3), "float32")
    for i, j in T.grid(n, 3):
        B[i, j] = A[i, j]


SPECS = [TensorSpec("x", ("n", 4), "float32"), TensorSpec("k", (), "float32")]


def test_specs_name_each_parameter_its_dims_and_dtype():
    assert specs_of(scale) == SPECS
    assert [str(s) for s in specs_of(rows)] == ["float32[n, 3]", "float32[n, 3]"]
    assert specs_of(lambda x: x) is None  # a pyfunc has no declared types
    assert str(TensorSpec("any", None, None)) == "?[?]"


def test_keywords_go_to_their_parameters_and_mistakes_name_the_parameter():
    x, k = torch.ones(2, 4), torch.tensor(2.0)
    assert keywords_to_positions("scale", SPECS, (), {"k": k, "x": x}) == (x, k)
    assert keywords_to_positions("scale", SPECS, (x,), {"k": k}) == (x, k)
    with pytest.raises(CallError, match="has no parameter `y` \\(parameters: x, k\\)"):
        keywords_to_positions("scale", SPECS, (x,), {"y": k})
    with pytest.raises(CallError, match="`x` both by position and by keyword"):
        keywords_to_positions("scale", SPECS, (x,), {"x": x, "k": k})
    with pytest.raises(CallError, match="missing argument for parameter `k`") as caught:
        keywords_to_positions("scale", SPECS, (x,), {})
    assert caught.value.function == "scale"


def test_a_mismatch_says_what_was_given_and_how_it_differs():
    x = SPECS[0]
    assert mismatch(x, torch.ones(5, 4), {}) is None
    assert mismatch(x, torch.ones(5, 4, dtype=torch.int32), {}) == ("got int32[5, 4] (dtype int32)")
    assert mismatch(x, torch.ones(4), {}) == "got float32[4] (1 dims instead of 2)"
    assert mismatch(x, torch.ones(5, 3), {}) == "got float32[5, 3]"
    assert mismatch(x, 3.0, {}) == "got float"
    # a symbolic size takes its value from the first argument that has it
    assert (
        mismatch(x, torch.ones(2, 4), {"n": 5})
        == "got float32[2, 4] (n is 5 from an earlier argument)"
    )


def test_output_types_in_every_spelling():
    assert output_specs((2, 3)) == [([2, 3], "float32")]
    assert output_specs([(2,), relax.TensorType((4,), "int32")])[1] == ([4], "int32")
    with pytest.raises(CallError, match="has no shape to allocate"):
        output_specs(relax.TensorType(ndim=2, dtype="float32"))
    with pytest.raises(CallError, match=r"out_ty must be R\.Tensor"):
        output_specs("float32")


def test_outputs_take_symbolic_sizes_by_name_then_by_position():
    n = tvm.tirx.Var("n", "int64")
    by_name = allocate_outputs(rows, "rows", [torch.ones(7, 3)], relax.TensorType((n, 3)))
    assert by_name[0].shape == (7, 3) and by_name[0].dtype == torch.float32
    m = tvm.tirx.Var("m", "int64")  # no parameter has `m`: the input of the output's rank says
    (by_position,) = allocate_outputs(None, "f", [torch.ones(6, 2)], relax.TensorType((m, 2)))
    assert by_position.shape == (6, 2)
    (doubled,) = allocate_outputs(rows, "rows", [torch.ones(4, 3)], relax.TensorType((n * 2,)))
    assert doubled.shape == (8,)


def test_outputs_that_cannot_be_sized_are_errors_of_the_call():
    m = tvm.tirx.Var("m", "int64")
    with pytest.raises(CallError, match="cannot tell size `m` \\(axis 0 of output 0\\)"):
        allocate_outputs(None, "f", [torch.ones(2, 2)], relax.TensorType((m,)))
    with pytest.raises(CallError, match="negative size \\[-1\\]") as caught:
        allocate_outputs(None, "f", [], (-1,))
    assert caught.value.function == "f"


def test_out_ty_or_its_older_name_and_a_function_by_name_or_as_itself():
    ty = relax.TensorType((2,), "float32")
    assert out_ty_of(None, ty, "call_tir", "k") is ty and out_ty_of(ty, None, "call_tir", "k") is ty
    with pytest.raises(CallError, match="not both"):
        out_ty_of(ty, ty, "call_tir", "k")
    with pytest.raises(CallError, match="out_ty is missing"):
        out_ty_of(None, None, "call_tir", "k")
    assert function_name("k") == "k" and function_name(tvm.ir.GlobalVar("k")) == "k"
    assert function_name(function_name) == "function_name"  # a Python function
    with pytest.raises(CallError, match="got int"):
        function_name(3)
