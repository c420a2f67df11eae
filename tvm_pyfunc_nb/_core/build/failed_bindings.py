"""Which binding of the user's Relax text a compile failure comes from.

TVM reports a failed kernel by the name legalization gave it (`equal`,
`cumsum`) and a Relax op it could not lower by the names the pipeline gave
its operands (`R.add(alloc7, lv16)`); neither is in the text the user reads
(`edit_text`, `script()`, the cell). Running the legalizing steps of the
default pipeline again on the module that failed finds the binding whose
legalized form calls that kernel, or that stayed an op, and it is named as
the user's text shows it: `lv43 = R.equal(lv41, lv42)`, with its operands'
dtypes and shapes, and, for a function imported from PyTorch, where it came from (its module
and source line).
"""

from __future__ import annotations

import re

import tvm
from tvm import relax

from ...errors import CompileError, native_stderr_silenced, reason_sentence

_OFFENDING_OP = re.compile(r"Offending call:\s*R\.([\w.]+)\(")
_INT64 = re.compile(r"T\.int64\((-?\d+)\)")
_CONSTANT = re.compile(r'metadata\["[^"]+"\]\[\d+\]')


def kernel_binding(mod: tvm.IRModule, kernel: str, target, site_of=None) -> tuple[str, str] | None:
    """`(function, description)` of the binding whose legalized form calls PrimFunc `kernel`
    (`site_of(function, binding)` says where it came from, if known)."""
    after, _ = _legalized(mod, target)
    hit = _find(mod, after, lambda value: _calls_kernel(value, kernel), site_of)
    return hit[:2] if hit else None


def lowering_failure(mod: tvm.IRModule, err: BaseException, target, site_of=None) -> CompileError:
    """The package's error for a Relax lowering of `mod` that raised `err`, whatever its type:
    the binding at fault as the user's text shows it, with its line, and TVM's own words.

    The binding is the one whose legalization raised (found by running legalization again,
    each op's legalization watched), else the one VM codegen could not emit (`err` names its
    op) because legalization left it an op: its shapes are not known."""
    reason = reason_sentence(err)
    after, failed = _legalized(mod, target)
    hit = None
    if failed is not None:
        call, raised = failed
        hit = _find(mod, mod, lambda value: _same_call(value, call), site_of)
        if reason == type(err).__name__:  # it came without its traceback (from the worker)
            reason = reason_sentence(raised)
    elif after is not None and (offending := _OFFENDING_OP.search(str(err))) is not None:
        op = f"relax.{offending.group(1)}"
        hit = _find(mod, after, lambda value: getattr(value.op, "name", None) == op, site_of)
        if hit is not None:
            reason = f"TVM cannot lower it while a shape is not known; TVM says: {reason}"
    if hit is None:
        return CompileError(f"Relax lowering failed: {reason}")
    function, description, line = hit
    return CompileError(f"{description} ({reason})", function=function, line=line)


def _legalized(mod: tvm.IRModule, target) -> tuple[tvm.IRModule | None, tuple | None]:
    """`mod` after the legalizing steps of the default pipeline, or the call whose
    legalization raised and what it raised (`(None, (call, error))`; `(None, None)` when
    another step raised). TVM's warnings about the code legalization writes are kept out of
    the cell's output."""
    failed: list[relax.Call] = []

    def watched(name: str):
        legalize = tvm.ir.Op.get(name).get_attr("FLegalize")

        def watching(bb, call):
            try:
                return legalize(bb, call)
            except Exception:
                failed.append(call)
                raise

        return watching

    ops = {n for n in _op_names(mod) if tvm.ir.Op.get(n).get_attr("FLegalize") is not None}
    steps = [
        relax.backend.DispatchSampling(),
        relax.backend.DispatchSortScan(),
        relax.transform.LegalizeOps({name: watched(name) for name in ops}),
    ]
    try:
        with target, native_stderr_silenced():
            return tvm.transform.Sequential(steps)(mod), None
    except Exception as err:  # TVM raises many types: what matters is which call, if any
        return None, ((failed[0], err) if failed else None)


def _op_names(mod: tvm.IRModule) -> set[str]:
    names: set[str] = set()

    def visit(expr) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            names.add(expr.op.name)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return names


def _same_call(value: relax.Call, call: relax.Call) -> bool:
    """`value` is `call` as the user's text holds it: the same op on operands of the same
    names (legalization hands a copy of the call to the op's legalization)."""
    return value.op.same_as(call.op) and [str(a) for a in value.args] == [str(a) for a in call.args]


def _find(mod: tvm.IRModule, after: tvm.IRModule | None, matches, site_of=None):
    """`(function, description, line)` of the first binding of `after`'s Relax functions (`mod`
    legalized) whose value `matches`, named as it stands in `mod`; its line is the span TVM
    kept (a cell line for a cell's function), else None."""
    if after is None:
        return None
    for gv, func in after.functions_items():
        if not isinstance(func, relax.Function):
            continue
        for binding in _bindings(func):
            if isinstance(binding.value, relax.Call) and matches(binding.value):
                original = {b.var.name: b for b in _bindings(mod[gv.name_hint])}
                source = original.get(binding.var.name, binding)
                site = site_of(gv.name_hint, binding.var.name) if site_of else None
                span = source.value.span
                line = span.line if span is not None and span.line > 0 else None
                text = describe(source) + (f", from {site}" if site else "")
                return gv.name_hint, text, line
    return None


def describe(binding) -> str:
    """`lv43 = R.equal(lv41, lv42)` (bool[1, 8], bool[1, 8] -> bool[1, 8])."""
    value = binding.value
    text = " ".join(line for line in str(value).splitlines() if not line.startswith("#"))
    text = _CONSTANT.sub("const", text)
    operands = ", ".join(_type(arg) for arg in getattr(value, "args", ()) if _type(arg))
    return f"`{binding.var.name} = {text}` ({operands} -> {_type(binding.var)})"


def _type(expr) -> str:
    ty = getattr(expr, "ty", None)
    if not isinstance(ty, relax.TensorType):
        return ""
    shape = getattr(ty, "shape", None)
    if not isinstance(shape, relax.ShapeExpr):  # none, or a var a run gives a value (`lv`)
        known = f"shape {shape}" if shape is not None else "shape not known"
        return f"{ty.dtype}[{known}, {ty.ndim} dims]"
    dims = ", ".join(_dim(d) for d in shape.values)
    return f"{ty.dtype}[{dims}]"


def _dim(dim) -> str:
    return _INT64.sub(r"\1", str(dim))


def _calls_kernel(value: relax.Call, kernel: str) -> bool:
    target = value.args[0] if value.args else None
    return getattr(value.op, "name", "") == "relax.call_tir" and (
        getattr(target, "name_hint", None) == kernel
    )


def _bindings(func: relax.Function) -> list:
    return [b for block in func.body.blocks for b in block.bindings]
