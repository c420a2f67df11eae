"""What TVM raises while it lowers a Relax function, whatever its Python type, reaches the user as
a `CompileError` naming the function, the binding and its cell line, with TVM's own words.

Two shapes known only when the function runs, as apache/tvm#20192 has them: a reshape by
`R.tensor_to_shape` then an add (VM codegen cannot emit the add: TVM's `InternalError`), and a
reshape by the shape of another tensor (`R.shape_of`: the reshape's legalization asserts, a
bare `AssertionError`). Before, the package's own describer of the binding raised a
`TypeError` ("relax.ShapeType does not support subscript") and TVM's words were lost.
"""

from __future__ import annotations

import pytest
import torch

from tvm_pyfunc_nb import CallError, CompileError

SHAPES_KNOWN_WHEN_IT_RUNS = """
@R.function
def by_tensor(x: R.Tensor((2, 3), "float32"), shp: R.Tensor((2,), "int64")):
    lv = R.tensor_to_shape(shp)
    y = R.reshape(x, lv)
    z = R.add(y, y)
    return z

@R.function
def like(x: R.Tensor((2, 3), "float32"), s: R.Tensor((3, 2), "float32")):
    lv = R.shape_of(s)
    y = R.reshape(x, lv)
    z = R.add(y, y)
    return z

@R.function
def fine(x: R.Tensor((2, 3), "float32")):
    y = R.add(x, x)
    return y
"""
X = torch.ones(2, 3)


# tvm.compile's own pipeline, whose failures these are (the fused default builds `by_tensor`)
@pytest.fixture(params=["", "--isolate"])
def demo(shell, request):
    shell.cell("demo", SHAPES_KNOWN_WHEN_IT_RUNS, options=f"--pipeline default {request.param}")
    return shell.ns["demo"]


def test_a_binding_vm_codegen_cannot_emit_is_named_with_tvms_words(demo):
    with pytest.raises(CompileError) as raised:
        demo.by_tensor(X, torch.tensor([3, 2]))
    error = raised.value
    assert (error.function, error.line) == ("by_tensor", 7)  # the cell line of `z = R.add`
    assert "`z = R.add(y, y)` (float32[shape lv, 2 dims]" in str(error)
    assert "CodeGenVM cannot emit this Relax operator directly" in str(error)
    assert torch.equal(demo.fine(X), 2 * X)  # the others compile and run


def test_a_legalization_that_asserts_is_named_with_the_condition_tvm_checked(demo):
    with pytest.raises(CompileError) as raised:
        demo.like(X, torch.ones(3, 2))
    error = raised.value
    assert (error.function, error.line) == ("like", 13)  # `y = R.reshape(x, lv)`
    assert "`y = R.reshape(x, lv)` (float32[2, 3] -> float32[3, 2])" in str(error)
    assert "TVM's check `isinstance(tgt_shape, ShapeExpr)` failed (in reshape_call_te, " in str(
        error
    )
    assert "tvm/relax/transform/legalize_ops/manipulate.py" in str(error)


def test_bisect_says_what_tvm_says(shell):
    shell.cell("demo", SHAPES_KNOWN_WHEN_IT_RUNS, options="--pipeline default")
    demo = shell.ns["demo"]
    with pytest.raises(CallError, match="`by_tensor` does not build") as raised:
        demo.bisect("by_tensor", X, torch.tensor([3, 2]))
    assert "CodeGenVM cannot emit" in str(raised.value), str(raised.value)
    assert "does not support subscript" not in str(raised.value)


def test_the_failure_is_worked_out_from_the_module_and_what_tvm_raised():
    """`lowering_failure` on its own: legalization run again finds the call whose legalization
    raised, whatever TVM raised at first (here a bare `RuntimeError` as from the worker)."""
    import tvm
    from tvm.script import ir as I
    from tvm.script import relax as R

    from tvm_pyfunc_nb._core.build.failed_bindings import lowering_failure

    @I.ir_module
    class Module:
        @R.function
        def like(x: R.Tensor((2, 3), "float32"), s: R.Tensor((3, 2), "float32")):
            lv = R.shape_of(s)
            y = R.reshape(x, lv)
            return y

    error = lowering_failure(Module, AssertionError(), tvm.target.Target("llvm"))
    assert error.function == "like" and "`y = R.reshape(x, lv)`" in str(error)
    assert "isinstance(tgt_shape, ShapeExpr)" in str(error)

    @I.ir_module
    class Fine:
        @R.function
        def twice(x: R.Tensor((2, 3), "float32")):
            y = R.add(x, x)
            return y

    unknown = lowering_failure(Fine, ValueError("a reason of TVM's"), tvm.target.Target("llvm"))
    assert unknown.function is None  # no binding to blame: TVM's words, as they are
    assert str(unknown) == "Relax lowering failed: a reason of TVM's"
