"""Small Relax rewrites and queries that cell-by-cell assembly and compiling need.

- `rebind_global_vars`: functions parsed in different cells refer to each
  other through different `GlobalVar` objects; a module is only well formed
  when every reference is the very object that keys the callee.
- `rename_py_func_calls`: `R.call_py_func("f", ...)` looks "f" up in one
  process-global registry, so the compiled copy of a module calls a name of
  its own for every call site instead.
- `rename_dps_packed_calls`: `R.call_dps_packed("f", ...)` goes through a
  forwarder of the module's own, so a function registered again later is the
  one that runs.
- `relax_closure` and `sub_module`: the functions a Relax function needs, and
  the module of just those.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import tvm
from tvm import relax
from tvm.ir import GlobalVar
from tvm.relax.expr_functor import PyExprMutator, mutator

_CALL_PY_FUNC = tvm.ir.Op.get("relax.call_py_func")
_CALL_DPS_PACKED = tvm.ir.Op.get("relax.call_dps_packed")


def referenced_global_vars(func: relax.Function) -> list[GlobalVar]:
    """Every `GlobalVar` that `func` refers to: the functions it calls or passes to `call_tir`."""
    return list(relax.analysis.all_global_vars(func))


def py_func_calls(func: relax.Function) -> list[tuple[str, object]]:
    """`(pyfunc name, out_ty)` for every `R.call_py_func` in `func`, in order."""
    found: list[tuple[str, object]] = []

    def visit(expr):
        if isinstance(expr, relax.Call) and expr.op.same_as(_CALL_PY_FUNC):
            found.append((expr.args[0].value, list(expr.ty_args)))

    relax.analysis.post_order_visit(func.body, visit)
    return found


def dps_packed_calls(func: relax.Function) -> list[str]:
    """The packed function names `func` calls with `R.call_dps_packed("name", ...)`, in order."""
    found: list[str] = []

    def visit(expr):
        if (
            isinstance(expr, relax.Call)
            and expr.op.same_as(_CALL_DPS_PACKED)
            and isinstance(expr.args[0], relax.ExternFunc)
        ):
            found.append(str(expr.args[0].global_symbol))

    relax.analysis.post_order_visit(func.body, visit)
    return found


def rename_dps_packed_calls(func: relax.Function, new_name: Callable[[str], str]) -> relax.Function:
    """`func` with each `R.call_dps_packed("f", ...)` calling `new_name("f")` instead."""
    if not dps_packed_calls(func):
        return func
    return _DpsPackedRenamer(new_name).visit_expr(func)


def rebind_global_vars(func: relax.Function, canonical: Mapping[str, GlobalVar]) -> relax.Function:
    """`func` with every `GlobalVar` reference replaced by `canonical[name]`."""
    stale = [
        gv for gv in referenced_global_vars(func) if not gv.same_as(canonical.get(gv.name_hint, gv))
    ]
    if not stale:
        return func
    return _GlobalVarRebinder(canonical).visit_expr(func)


def rename_py_func_calls(
    func: relax.Function, new_name: Callable[[str, list, list], str]
) -> relax.Function:
    """`func` with each `R.call_py_func("f", x, ..., out_ty=T)` calling `new_name("f", [T], [type of
    x, ...])`.
    """
    if not py_func_calls(func):
        return func
    return _PyFuncCallRenamer(new_name).visit_expr(func)


@mutator
class _GlobalVarRebinder(PyExprMutator):
    def __init__(self, canonical: Mapping[str, GlobalVar]):
        super().__init__()
        self.canonical = canonical

    def visit_global_var_(self, op: GlobalVar):
        return self.canonical.get(op.name_hint, op)


@mutator
class _DpsPackedRenamer(PyExprMutator):
    def __init__(self, new_name: Callable[[str], str]):
        super().__init__()
        self.new_name = new_name

    def visit_call_(self, op: relax.Call):
        call = super().visit_call_(op)
        if not call.op.same_as(_CALL_DPS_PACKED) or not isinstance(call.args[0], relax.ExternFunc):
            return call
        target = relax.ExternFunc(self.new_name(str(call.args[0].global_symbol)))
        return relax.Call(call.op, [target, *call.args[1:]], call.attrs, call.ty_args, call.span)


@mutator
class _PyFuncCallRenamer(PyExprMutator):
    def __init__(self, new_name: Callable[[str, list, list], str]):
        super().__init__()
        self.new_name = new_name

    def visit_call_(self, op: relax.Call):
        call = super().visit_call_(op)
        if not call.op.same_as(_CALL_PY_FUNC):
            return call
        name = self.new_name(
            call.args[0].value, list(call.ty_args), [arg.ty for arg in call.args[1:]]
        )
        args = [tvm.ir.StringImm(name), *call.args[1:]]
        return relax.Call(call.op, args, call.attrs, call.ty_args, call.span)


def relax_closure(names: Iterable[str], mod: tvm.IRModule) -> set[str]:
    """`names` and every function of `mod` they reach through GlobalVar references."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        func = mod[name]
        if isinstance(func, relax.Function):
            todo += [gv.name_hint for gv in relax.analysis.all_global_vars(func)]
    return seen


def sub_module(mod: tvm.IRModule, names: Iterable[str]) -> tvm.IRModule:
    """The functions of `mod` named in `names`, as a module with the same attrs."""
    keep = set(names)
    return tvm.IRModule(
        {gv: f for gv, f in mod.functions_items() if gv.name_hint in keep}, attrs=mod.attrs
    )
