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

from collections.abc import Mapping

import tvm
from tvm import relax

from ...errors import CallError
from ..build.kernel_sites import site_cells
from ..build.offload import PREFIX, torch_calls
from ..live.cells import PRIMFUNC, RELAX
from ..module_parts import ModuleParts
from ..tables import text_table

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


def run_order(linked, fn: str, pyfuncs: Mapping[str, str] | None = None) -> list[str]:
    """What the lowered Relax function `fn` runs, in order: its kernels (each once, as
    `kernels_of`), each of its PyTorch calls with --offload torch (`torch.linear`...), and the
    pyfuncs it calls (`pyfuncs`: the names its call sites are registered under -> the pyfunc)."""
    pyfuncs = pyfuncs or {}
    order: list[str] = []

    def visit(node) -> None:
        if isinstance(node, tvm.ir.GlobalVar) and node.name_hint in linked.kernels:
            if node.name_hint not in order:
                order.append(node.name_hint)
        elif isinstance(node, relax.ExternFunc) and node.global_symbol.startswith(PREFIX):
            order.append(node.global_symbol.removeprefix(PREFIX))
        elif isinstance(node, tvm.ir.StringImm) and node.value in pyfuncs:
            order.append(pyfuncs[node.value])

    relax.analysis.post_order_visit(linked.lowered[fn], visit)
    return order


class KernelList(list):
    """`NAME.kernels("fn")`: the names of what `fn` runs, in order, a list (printed as one);
    shown as a table in a notebook: each kernel, its call sites, the bindings of `fn` it
    computes, and where in the model's code they came from (for a function from `add_torch`)."""

    header = ("kernel", "calls", "bindings", "where")

    def __init__(self, function: str, names: list[str], rows: list[tuple[str, str, str, str]]):
        super().__init__(names)
        self.function = function
        self._rows = rows

    def rows(self) -> list[tuple[str, str, str, str]]:
        """`(kernel, calls, bindings, where)` for each name."""
        return list(self._rows)

    def count_text(self) -> str:
        return f"{len(self)} kernel{'s' * (len(self) != 1)}"

    def table(self) -> str:
        return f"{self.function} runs {self.count_text()}\n" + text_table(self.header, self._rows)

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(self.table() if not cycle else "[...]")


def kernel_list(linked, fn: str, pyfuncs: Mapping[str, str], site_of) -> KernelList:
    """`run_order` as a `KernelList`, each row from the kernel's call sites (`linked.sites`) and
    `site_of(binding)`."""
    names = run_order(linked, fn, pyfuncs)
    by_name = {PREFIX + n: n for n in names} | dict(pyfuncs)
    calls: dict[str, list] = {}
    for callee, call_sites in linked.sites.of(fn).items():
        calls.setdefault(by_name.get(callee, callee), []).extend(call_sites)
    seen: dict[str, int] = {}
    rows = []
    for name in names:
        sites = calls.get(name, [])
        if names.count(name) > 1:  # a PyTorch call or pyfunc, a row per call: its own site
            k = seen[name] = seen.get(name, -1) + 1
            sites = sites[k : k + 1]
        bindings, where = site_cells(sites, site_of)
        rows.append((name, str(len(sites) or ""), bindings, where))
    return KernelList(fn, names, rows)


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

    build.build_kernel_module(name, func, instruments=[Capture()])
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


def kernels(parts: ModuleParts, fn: str) -> KernelList:
    """The kernels (PrimFuncs) Relax function `fn` runs after the module's pipeline,
    in the order it runs them; with --offload torch its PyTorch calls too (`torch.linear`...),
    and the pyfuncs it calls. Shown as a table of kernel, calls, bindings and where."""
    linked = _linked(parts, fn, "kernels")
    origin = parts.torch_origins.get(fn)
    site_of = origin.site if origin is not None else (lambda binding: None)
    return kernel_list(linked, fn, parts.compiler.bridge.names, site_of)


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
