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

from ...errors import native_stderr_silenced

_OFFENDING_OP = re.compile(r"Offending call:\s*R\.([\w.]+)\(")
_INT64 = re.compile(r"T\.int64\((-?\d+)\)")
_CONSTANT = re.compile(r'metadata\["[^"]+"\]\[\d+\]')


def kernel_binding(mod: tvm.IRModule, kernel: str, target, site_of=None) -> tuple[str, str] | None:
    """`(function, description)` of the binding whose legalized form calls PrimFunc `kernel`
    (`site_of(function, binding)` says where it came from, if known)."""
    return _find(mod, target, lambda value: _calls_kernel(value, kernel), site_of)


def unlowered_binding(
    mod: tvm.IRModule, err: BaseException, target, site_of=None
) -> tuple[str, str] | None:
    """`(function, description + why)` of the binding VM codegen could not emit (`err` names its
    op), if legalization left it as an op: why is that its shapes are not known."""
    found = _OFFENDING_OP.search(str(err))
    if found is None:
        return None
    op = f"relax.{found.group(1)}"
    hit = _find(mod, target, lambda value: getattr(value.op, "name", None) == op, site_of)
    if hit is None:
        return None
    function, description = hit
    return function, f"{description}: TVM cannot lower it while a shape is not known"


def _find(mod: tvm.IRModule, target, matches, site_of=None) -> tuple[str, str] | None:
    """The first binding of `mod`'s Relax functions whose legalized value `matches` (TVM's
    warnings about the code legalization writes kept out of the cell's output)."""
    with target, native_stderr_silenced():
        after = tvm.transform.Sequential(
            [
                relax.backend.DispatchSampling(),
                relax.backend.DispatchSortScan(),
                relax.transform.LegalizeOps(),
            ]
        )(mod)
    for gv, func in after.functions_items():
        if not isinstance(func, relax.Function):
            continue
        for binding in _bindings(func):
            if isinstance(binding.value, relax.Call) and matches(binding.value):
                original = {b.var.name: b for b in _bindings(mod[gv.name_hint])}
                source = original.get(binding.var.name, binding)
                site = site_of(gv.name_hint, binding.var.name) if site_of else None
                return gv.name_hint, describe(source) + (f", from {site}" if site else "")
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
    if shape is None:
        return f"{ty.dtype}[shape not known, {ty.ndim} dims]"
    dims = ", ".join(_dim(d) for d in getattr(shape, "values", shape))
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
