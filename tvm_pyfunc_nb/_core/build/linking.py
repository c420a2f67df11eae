"""Linking: Relax functions lowered by VM codegen and the kernels' libraries, made one executable.

`vm_codegen` is the one VM codegen of the package and `link_vm` its one
link: the VM of a call, the library `export_library` writes, and what the
remote runner uploads all come from them. The kernel libraries a link
takes were built one by one or in batches (kernel_builds.py); `link_order`
orders them so that each kernel comes from the library meant for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from graphlib import CycleError, TopologicalSorter

import tvm
from tvm import relax
from tvm.relax.vm_build import _ffi_api as _vm_ffi
from tvm.relax.vm_build import _vmcodegen

from ...errors import CallError, last_reason
from .kernel_sites import KernelSites, Recording


@dataclass(frozen=True, eq=False)
class Built:
    """A kernel's library (or why it does not compile) and every kernel that library holds."""

    lib: object
    members: frozenset[str]


@dataclass(eq=False)
class Linked:
    """Relax functions lowered and linked: the pipeline's output, the executable, its kernels."""

    mod: tvm.IRModule  # what was linked (its structural hash keys it)
    lowered: tvm.IRModule  # after the Relax pipeline
    executable: object  # relax.VMExecutable's module, linked with the kernels' libraries
    kernels: dict[str, object]  # PrimFunc name -> its library
    recorded: Recording | None = None  # what the pipeline did, for `sites`
    _vm: relax.VirtualMachine | None = None

    @property
    def sites(self) -> KernelSites:
        """The bindings each kernel computes, by Relax function (kernel_sites.py)."""
        return self.recorded.sites() if self.recorded is not None else KernelSites()

    def vm(self, device) -> relax.VirtualMachine:
        """The executable loaded on `device` (once): a `CallError` if it cannot run there."""
        if self._vm is None:
            try:
                self._vm = relax.VirtualMachine(self.executable, device)
            except Exception as err:
                raise CallError(f"cannot run on {device}: {last_reason(err)}") from err
        return self._vm

    def instrumented_vm(self, device, hook) -> relax.VirtualMachine:
        """A VM of its own for the executable, `hook` its instrument (`profile`, kernel
        `compare`): the module's own VM, which calls use, is never instrumented."""
        vm = relax.VirtualMachine(self.executable, device)
        vm.set_instrument(hook)
        return vm


def vm_codegen(lowered: tvm.IRModule) -> tuple[relax.ExecBuilder, dict[str, tvm.tirx.PrimFunc]]:
    """VM codegen of `lowered` (a module after the Relax pipeline): the builder holding its Relax
    functions' bytecode, and the PrimFuncs they call, by name (what the link needs built)."""
    builder = relax.ExecBuilder()
    leftover = _vmcodegen(builder, lowered)
    return builder, {gv.name_hint: f for gv, f in called_prim_funcs(lowered, leftover)}


def link_vm(
    builder: relax.ExecBuilder,
    target: tvm.target.Target,
    libraries: list,
    lowered: tvm.IRModule,
) -> tvm.runtime.Module:
    """The VM executable of `builder` (VM codegen of `lowered`) with `libraries` imported, and
    the external modules and constants the pipeline left in `lowered`'s attributes. A VM takes
    each kernel from the first library that has it (`link_order`)."""
    attrs = dict(lowered.attrs) if lowered is not None and lowered.attrs else {}
    return _vm_ffi.VMLink(
        builder,
        target,
        None,
        [*libraries, *attrs.get("external_mods", [])],
        dict(attrs.get("const_name_to_constant", {})),
    )


def relax_names(mod: tvm.IRModule) -> tuple[str, ...]:
    """The names of the Relax functions of `mod`."""
    return tuple(gv.name_hint for gv, f in mod.functions_items() if isinstance(f, relax.Function))


def prim_funcs(mod: tvm.IRModule):
    return [(gv, f) for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]


def called_prim_funcs(lowered: tvm.IRModule, leftover: tvm.IRModule):
    """The PrimFuncs of `leftover` (what VM codegen left of `lowered`) that its Relax functions
    call. Legalization makes kernels that later passes replace with VM builtins (a reshape
    becomes a view): those are never called, so they are not built."""
    called = {
        gv.name_hint
        for _, f in lowered.functions_items()
        if isinstance(f, relax.Function)
        for gv in relax.analysis.all_global_vars(f)
    }
    return sorted(
        ((gv, f) for gv, f in prim_funcs(leftover) if gv.name_hint in called),
        key=lambda item: item[0].name_hint,
    )


def link_order(built: dict[str, Built]) -> list | None:
    """The libraries of `built` in an order a VM links them right, or None if there is none.

    A library built with others holds every kernel of its batch, and a VM takes each kernel
    from the first library that has it: the library meant for a kernel must come before any
    other that holds an older version of it."""
    libraries = {id(b.lib): b for b in built.values()}
    order = TopologicalSorter({key: set() for key in libraries})
    for name, meant in built.items():
        for key, other in libraries.items():
            if other.lib is not meant.lib and name in other.members:
                order.add(key, id(meant.lib))
    try:
        return [libraries[key].lib for key in order.static_order()]
    except CycleError:
        return None
