"""Which Relax binding a kernel's run-time check stopped in, for the `CallError` it raises.

A crash guard's assert names its kernel ("index out of bounds in `take`"),
and one kernel the Relax pipeline made may serve several bindings (two
lookups of one shape share one `take`). Legalizing the linked Relax
functions again and matching the kernel structurally finds the bindings whose
op became it, as the function's text shows them (`lv2 = R.take(...)`). This
runs only when a check stopped a call; a kernel that fused several ops (a
fusing pipeline) matches none and keeps its own name.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import tvm
import tvm_ffi
from tvm import relax

from ...errors import CallError, TVMModuleError, native_stderr_silenced
from ..live.editing import ConstantTable, describe

_STOPPED = re.compile(r"stopped while running: (.*) in `([^`]+)`")
_METADATA = re.compile(r'metadata\["ir\.GenericConst"\]\[(\d+)\]')


def name_the_binding(
    error: TVMModuleError,
    mod: tvm.IRModule,
    lowered: tvm.IRModule,
    fn: str,
    consts: ConstantTable,
    prefix: str,
) -> TVMModuleError:
    """`error`, raised calling Relax function `fn` of `mod` (`lowered` after the pipeline),
    naming the binding and op whose kernel's check stopped the call, if it was one. A weight
    is written as edit text writes it, `<prefix><name in consts>`."""
    stopped = _STOPPED.search(error.detail)
    if stopped is None or stopped.group(2) not in lowered:
        return error
    what, kernel = stopped.groups()
    names = {consts[name]: name for name in consts}

    def constant_text(constant) -> str:
        name = names.get(constant)
        return f"{prefix}{name}" if name else f"<constant {describe(constant)}>"

    found = [binding_text(b, constant_text) for b in bindings_of(mod, fn, lowered[kernel])]
    if not found:
        return error
    where = f"its kernel `{kernel}`" if len(found) == 1 else f"kernel `{kernel}`, which they share"
    return CallError(f"stopped while running {' or '.join(found)}: {what} in {where}", function=fn)


def bindings_of(mod: tvm.IRModule, fn: str, kernel: tvm.tirx.PrimFunc) -> list:
    """The bindings of Relax function `fn` whose op legalizes to `kernel`, in order."""
    kernel = kernel.without_attr("global_symbol")
    with native_stderr_silenced():  # TVM's warnings about the code it writes ("fast mode")
        legal = relax.transform.LegalizeOps()(mod)
    names = {
        binding.var.name
        for block in legal[fn].body.blocks
        for binding in block.bindings
        if isinstance(binding.value, relax.Call)
        and binding.value.args
        and isinstance(binding.value.args[0], tvm.ir.GlobalVar)
        and isinstance(legal[binding.value.args[0]], tvm.tirx.PrimFunc)
        and tvm_ffi.structural_equal(legal[binding.value.args[0]], kernel)
    }
    return [b for block in mod[fn].body.blocks for b in block.bindings if b.var.name in names]


def binding_text(binding, constant_text: Callable[[object], str]) -> str:
    """`lv2 = R.take(w, lv1, axis=0, mode="fast")`, each tensor constant as `constant_text` says
    (TVM prints it as metadata)."""
    constants: list = []

    def visit(expr) -> None:
        if isinstance(expr, tvm.ir.GenericConst) and not any(c.same_as(expr) for c in constants):
            constants.append(expr)

    relax.analysis.post_order_visit(binding.value, visit)
    metadata = [c for c in constants if "metadata" in str(c)]
    printed = str(binding.value).splitlines()[0]  # then a line about omitted metadata
    value = _METADATA.sub(lambda m: constant_text(metadata[int(m.group(1))]), printed)
    return f"{binding.var.name} = {value}"
