"""What TVM made of a function: `NAME.lowered("fn")` and `NAME.source("fn")`, computed on demand.

- A Relax function after the module's pipeline is the linked module's Relax
  side, as the build lowered it (fusion, legalized kernels, VM lowering).
- A PrimFunc after TIR lowering is the IR just before TVM wraps it for calls
  (`tirx.MakePackedAPI`): flattened loops, vector and parallel loops,
  buffers as pointers; the crash guards' asserts show here when they apply.
- Generated code is what the kernels' libraries hold: LLVM IR or assembly on
  a CPU target, CUDA source on a CUDA target.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..errors import CallError
from .cells import PRIMFUNC, RELAX
from .module_parts import ModuleParts
from .offload import PREFIX, torch_calls

CPU_FORMATS = {"ll": "ll", "llvm": "ll", "asm": "asm", "s": "asm"}


def lowered_relax(linked, fn: str) -> str:
    """Relax function `fn` after the pipeline, with the kernels it calls, as TVMScript (headed by
    the PyTorch calls it makes, with --offload torch)."""
    lowered, kernels = linked.lowered, set(kernels_of(linked, fn))
    keep = {gv: f for gv, f in lowered.functions_items() if gv.name_hint in kernels | {fn}}
    text = tvm.IRModule(keep, attrs=lowered.attrs).script(extra_config={"script.use_pep695": False})
    calls = torch_calls(lowered[fn])
    if not calls:
        return text
    return (
        f"# --offload torch: {len(calls)} PyTorch calls ({', '.join(dict.fromkeys(calls))}), "
        f'each R.call_packed("{PREFIX}torch....")\n{text}'
    )


def run_order(linked, fn: str) -> list[str]:
    """What the lowered Relax function `fn` runs, in order: its kernels (each once, as
    `kernels_of`) and, with --offload torch, each of its PyTorch calls (`torch.linear`...)."""
    if not torch_calls(linked.lowered[fn]):
        return kernels_of(linked, fn)
    order: list[str] = []

    def visit(node) -> None:
        if isinstance(node, tvm.ir.GlobalVar) and node.name_hint in linked.kernels:
            if node.name_hint not in order:
                order.append(node.name_hint)
        elif isinstance(node, relax.ExternFunc) and node.global_symbol.startswith(PREFIX):
            order.append(node.global_symbol.removeprefix(PREFIX))

    relax.analysis.post_order_visit(linked.lowered[fn], visit)
    return order


def kernels_of(linked, fn: str) -> list[str]:
    """The kernels (PrimFuncs) the lowered Relax function `fn` calls, in the order it calls them."""
    called = [gv.name_hint for gv in relax.analysis.all_global_vars(linked.lowered[fn])]
    return [name for name in dict.fromkeys(called) if name in linked.kernels]


def lowered_prim_func(build, name: str, func: tvm.tirx.PrimFunc) -> str:
    """PrimFunc `name` after TIR lowering (as built, guards included), before `MakePackedAPI`."""
    captured: list[tvm.IRModule] = []

    @tvm.ir.instrument.pass_instrument
    class Capture:
        def run_before_pass(self, mod, info):
            if info.name == "tirx.MakePackedAPI" and not captured:
                captured.append(mod)

    with tvm.transform.PassContext(instruments=[Capture()]):
        build.build_kernel_module(name, func)
    if not captured:
        raise CallError(f"TIR lowering of `{name}` did not reach MakePackedAPI", function=name)
    return captured[0].script(extra_config={"script.use_pep695": False})


def generated_source(lib, name: str, target: tvm.target.Target, fmt: str | None) -> str:
    """The code in a kernel's library: CUDA source (GPU), LLVM IR or assembly (`fmt`, CPU)."""
    if target.kind.name == "llvm":
        fmt = CPU_FORMATS.get(fmt or "ll")
        if fmt is None:
            raise CallError(f"source format must be one of {', '.join(CPU_FORMATS)}", function=name)
        return lib.inspect_source(fmt)
    devices = [m for m in lib.imports if m.kind != "llvm"]
    if not devices:
        raise CallError(f"the library of `{name}` holds no {target.kind.name} code", function=name)
    return "\n".join(m.inspect_source() for m in devices)


def lowered(parts: ModuleParts, fn: str) -> str:
    """`fn` as TVM lowered it: a Relax function after the module's pipeline (with the
    kernels it calls), a PrimFunc after TIR lowering."""
    entry = parts.entry(fn)
    if entry.kind == PRIMFUNC:
        return lowered_prim_func(parts.build, fn, entry.func)
    return lowered_relax(_linked(parts, fn, "lowered"), fn)


def kernels(parts: ModuleParts, fn: str) -> list[str]:
    """The kernels (PrimFuncs) Relax function `fn` runs after the module's pipeline,
    in the order it runs them; with --offload torch its PyTorch calls too (`torch.linear`...)."""
    return run_order(_linked(parts, fn, "kernels"), fn)


def source(parts: ModuleParts, fn: str, fmt: str | None) -> str:
    """The code TVM generated for `fn`; for a Relax function, every kernel's."""
    entry = parts.entry(fn)
    build = parts.build
    target = build.target
    # built again here: a library the compile cache loaded from disk holds no source
    if entry.kind == PRIMFUNC:
        return generated_source(build.build_kernel_module(fn, entry.func), fn, target, fmt)
    linked = _linked(parts, fn, "source")
    comment = ";" if target.kind.name == "llvm" and fmt in (None, "ll", "llvm") else "//"
    return "\n".join(
        f"{comment} kernel {k}\n"
        + generated_source(build.build_kernel_module(k, linked.lowered[k]), k, target, fmt)
        for k in kernels_of(linked, fn)
    )


def _linked(parts: ModuleParts, fn: str, needed_by: str):
    parts.entry(fn, kind=RELAX, needed_by=needed_by)
    return parts.compiler.linked_for(parts.state, fn)
