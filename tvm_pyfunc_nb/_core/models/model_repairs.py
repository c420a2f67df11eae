"""Repairs of what TVM's PyTorch importer gets wrong, made when a model is added.

Each repair rewrites one known defect of TVM 0.27's importer in a Relax
function and gives a notice line naming the binding it changed:

- A `cumsum` or `cumprod` of a bool tensor stays bool, where PyTorch gives
  int64; `R.equal` on bools then does not compile for llvm (the causal mask
  of GPT-2 and Llama). The scan gets `dtype="int64"`, as in PyTorch.
- `x[:, -1]` becomes `R.take(x, R.const(-1), mode="fast")`, and "fast" does
  not count a negative index from the end: it reads outside the tensor
  (LSTM, GRU: wrong numbers). A take with a negative constant index gets
  `mode="wrap"`, which does, once each index is checked to be in range.
- A product of two bool tensors (a mask times a mask: what `torch.isfinite` and
  `torch.logaddexp` decompose into) does not compile for llvm ("Check failed:
  t.MatchesCode(kDLFloat)"). It becomes `R.logical_and`, which is the same.
- `R.not_equal` of floats says a NaN equals everything (LLVM's ordered `one`),
  where PyTorch, like IEEE 754, says it equals nothing: `x != x` finds no NaN.
  It becomes `R.logical_not(R.equal(...))`, which says so, and `x != x` becomes
  `R.isnan(x)` (fused into one kernel, TVM's simplifier takes `x == x` for True).

What no repair covers fails loudly: a constant index out of range raises
here, a bad index at run time stops the kernel's bounds guard (`CallError`).
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ...errors import ModelImportError
from ..live.editing import describe
from ..run.guard_sites import binding_text

_FLOATS = ("float", "bfloat")
_SCANS = {"relax.cumsum": relax.op.cumsum, "relax.cumprod": relax.op.cumprod}


def repair_imported(func: relax.Function, name: str) -> tuple[relax.Function, list[str]]:
    """`func` (Relax function `name`) with the importer's known defects repaired, and a notice
    line for each repair; `func` itself when there is nothing to repair."""
    repairer = _Repairer(name)
    repaired = repairer.visit_expr(func)
    if repairer.refusal is not None:  # raised here: TVM would wrap it, raised in the mutator
        raise repairer.refusal
    if not repairer.notes:
        return func, []
    return repaired, repairer.notes


@mutator
class _Repairer(PyExprMutator):
    def __init__(self, function: str):
        super().__init__()
        self.function = function
        self.binding: relax.VarBinding | None = None  # the binding being visited
        self.notes: list[str] = []
        self.refusal: ModelImportError | None = None  # what no repair covers

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        self.binding = binding
        super().visit_var_binding_(binding)

    def visit_call_(self, op: relax.Call) -> relax.Expr:
        call = super().visit_call_(op)
        op = call.op.name if isinstance(call.op, tvm.ir.Op) else None
        if op in _SCANS:
            return self._scan(call, op)
        if op == "relax.take":
            return self._take(call)
        if op == "relax.not_equal" and all(str(_dtype(a)).startswith(_FLOATS) for a in call.args):
            if call.args[0].same_as(call.args[1]):  # `x != x`: fused, `x == x` folds to True
                self._note(
                    "a float R.not_equal(x, x) is False at a NaN (PyTorch: True); now R.isnan(x)"
                )
                return relax.op.isnan(call.args[0])
            self._note(
                "a float R.not_equal is False at a NaN (PyTorch: True); now "
                "R.logical_not(R.equal(...)), which is True there"
            )
            # the comparison a binding of its own: the binding keeps the node's value
            equal = relax.op.equal(*call.args)
            named = f"{self.binding.var.name}_equal"
            return relax.op.logical_not(self.builder_.emit(equal, name_hint=named))
        if op == "relax.multiply" and all(_dtype(a) == "bool" for a in call.args):
            self._note("a product of bools does not compile for llvm; now R.logical_and")
            return relax.op.logical_and(*call.args)
        return call

    def _scan(self, call: relax.Call, op: str) -> relax.Call:
        data = call.args[0]
        if _dtype(data) != "bool" or _dtype(call) != "bool":
            return call
        self._note(
            f"a {op[len('relax.') :]} of bools stays bool in TVM's import (PyTorch gives int64, "
            'and R.equal on bools does not compile); now dtype="int64"'
        )
        return _SCANS[op](data, call.attrs.axis, "int64", call.attrs.exclusive)

    def _take(self, call: relax.Call) -> relax.Call:
        data, indices = call.args
        if call.attrs.mode != "fast" or not isinstance(indices, tvm.ir.GenericConst):
            return call
        values = indices.value.numpy()
        if not (values < 0).any():
            return call
        axis = int(call.attrs.axis) if call.attrs.axis is not None else None
        size = _axis_size(data, axis)
        outside = values[(values < -size) | (values >= size)] if size is not None else []
        if len(outside):
            self.refusal = self.refusal or ModelImportError(
                f"{self._binding_text()}: index {outside[0]} is out of range for an axis of "
                f"size {size}",
                function=self.function,
            )
            return call
        self._note(
            'mode="fast" reads a negative index outside the tensor (PyTorch counts it from the '
            'end); now mode="wrap", which does too'
        )
        return relax.op.take(data, indices, axis, "wrap")

    def _note(self, what: str) -> None:
        self.notes.append(f"repaired {self.function}: {self._binding_text()}: {what}")

    def _binding_text(self) -> str:
        """The binding as the function's text shows it: `lv3 = R.take(lv2, R.const(-1, ...))`."""
        return binding_text(self.binding, lambda constant: f"<constant {describe(constant)}>")


def _dtype(expr: relax.Expr) -> str | None:
    ty = expr.ty
    return str(ty.dtype) if isinstance(ty, relax.TensorType) else None


def _axis_size(data: relax.Expr, axis: int | None) -> int | None:
    """The size of `axis` of `data` (all its elements when None), if known before running."""
    shape = data.ty.shape if isinstance(data.ty, relax.TensorType) else None
    if not isinstance(shape, relax.ShapeExpr):
        return None
    dims = list(shape.values) if axis is None else [shape.values[axis]]
    if not all(isinstance(d, tvm.tirx.IntImm) for d in dims):
        return None
    size = 1
    for d in dims:
        size *= int(d.value)
    return size
