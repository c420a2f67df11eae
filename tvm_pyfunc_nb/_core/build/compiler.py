"""The compiler of one live module: what is compiled, and compiling what a call needs.

It owns the compile state: the `Build` (kernel libraries and linked Relax
VMs, kept by structural hash), which module version was compiled last, the
linked VM of the current version (and which Relax functions failed to
compile in it), and the `PyFuncBridge` through which compiled Relax code
calls pyfuncs. A version of the module is a `ModuleState`: the assembly
makes a new one for every change, so "is this compiled?" is one identity
test, and nothing else keeps a version of what is compiled.
"""

from __future__ import annotations

import tvm

from ...errors import CompileError
from ..live.assembly import ModuleState
from ..live.cells import PRIMFUNC, PYFUNC, RELAX
from ..live.contributions import FunctionEntry
from ..live.fault_lines import string_line, tir_call_line
from ..live.relax_rewrite import relax_closure, sub_module
from ..run.compiled_module import CompiledPyModule
from ..run.trampolines import PyFuncBridge
from .build import Build
from .kernel_builds import the_kernels_own
from .linking import Linked
from .stats import CompileRecord


class Compiler:
    """Compiles versions of one module with one `Build`, and knows which version is compiled."""

    def __init__(self, build: Build, bridge: PyFuncBridge):
        self.build = build
        self.bridge = bridge
        self.compiled: ModuleState | None = None  # the version last compiled
        # the linked VM of one version, and the Relax functions that failed to compile in it
        self._linked: tuple[ModuleState, Linked | None, dict[str, CompileError]] | None = None

    def is_stale(self, state: ModuleState) -> bool:
        """Whether `state` changed since the last compile (the next call compiles that)."""
        return self.compiled is not state

    def compile(self, state: ModuleState, *, use_cache: bool = True) -> list[CompileRecord]:
        """Build every PrimFunc and the VM of `state`, and mark it compiled; the first failure
        raises after all were tried."""
        mark = len(self.build.stats.compiles)
        kernels = self._kernels(state, None, use_cache)
        errors = [
            placed(lib, state.entries[name])
            for name, lib in kernels.items()
            if isinstance(lib, CompileError)
        ]
        if any(e.kind == RELAX for e in state.entries.values()):
            errors += self.linked(state, use_cache=use_cache)[1].values()
        self.compiled = state
        if errors:
            raise errors[0]
        return self.build.stats.since(mark)

    def check(self, state: ModuleState) -> list[CompileRecord]:
        """Compile `state` before it becomes the module (`--eager`); if it does not compile,
        raise, and what was compiled before stays the compiled version."""
        before = self.compiled
        try:
            return self.compile(state)
        except CompileError:
            self.compiled = before
            raise

    def recompile(self, state: ModuleState) -> list[CompileRecord]:
        """Compile `state` again, bypassing every cache."""
        self.clear()
        return self.compile(state, use_cache=False)

    def forget_linked(self) -> None:
        """Forget the linked VMs (their kernels are scheduled otherwise now); kernels stay."""
        self.build.kept.forget_vms()
        self._linked = None
        self.compiled = None

    def kept(self) -> dict[str, int]:
        """What is held on to: kernel versions, Relax VMs, `R.call_py_func` registry names."""
        return {**self.build.kept.counts(), "registered_pyfunc_sites": len(self.bridge.names)}

    def close(self) -> None:
        """Let go of everything compiled and of the `R.call_py_func` registry names."""
        self.bridge.close()
        self.clear()

    def clear(self) -> None:
        """Forget everything compiled (kept in memory)."""
        self.build.kept.clear()
        self._linked = None
        self.compiled = None

    # -- what a call needs ---------------------------------------------------------------
    def kernel(self, state: ModuleState, entry: FunctionEntry, use_cache: bool = True):
        """The library of PrimFunc `entry`. The module's other PrimFuncs that no cache has are
        built with it, in one build: they are likely called next (a notebook run top to bottom
        then builds its kernels once, not once each)."""
        lib = self._kernels(state, {entry.name}, use_cache)[entry.name]
        if self.compiled is not state and self._nothing_left(state):
            self.compiled = state
        if isinstance(lib, CompileError):
            raise placed(lib, entry)
        return lib

    def _nothing_left(self, state: ModuleState) -> bool:
        """Whether the next call of any function of `state` would compile nothing: each PrimFunc
        built (kept in memory) and, where there are Relax functions, their VM linked."""
        entries = state.entries.values()
        linked = self._linked is not None and self._linked[0] is state
        if any(e.kind == RELAX for e in entries) and not linked:
            return False
        kept = self.build.cache.kernel
        return all(
            kept(e.name, e.func, counted=False, disk=False) is not None
            for e in entries
            if e.kind == PRIMFUNC
        )

    def relax_function(self, state: ModuleState, name: str) -> Linked:
        """The linked VM that holds Relax function `name` of `state`, which a call compiles now;
        raises why `name` does not compile."""
        linked, failures = self.linked(state)
        self.compiled = state
        if name in failures:
            raise failures[name]
        return linked

    def linked_for(self, state: ModuleState, name: str) -> Linked:
        """The linked VM of `state`; raises why Relax function `name` does not compile."""
        linked, failures = self.linked(state)
        if name in failures:
            raise failures[name]
        return linked

    def linked(self, state: ModuleState, use_cache: bool = True):
        """The linked Relax functions of `state`, and those that failed to compile (kept for the
        version last asked, unless a failure says nothing of the functions: a build worker's
        death)."""
        if self._linked is not None and self._linked[0] is state:
            return self._linked[1], self._linked[2]
        relax_names = [n for n, e in state.entries.items() if e.kind == RELAX]
        try:
            linked = self.build.link(self.vm_module(state, relax_names), use_cache=use_cache)
            failures = {}
        except CompileError as err:
            linked, failures = self._isolating(state, relax_names, use_cache, err)
        if all(the_kernels_own(f) for f in failures.values()):  # else: the next call builds again
            self._linked = (state, linked, failures)
        return linked, failures

    def module(self, state: ModuleState, device) -> CompiledPyModule:
        """`state` compiled, as TVM's own `BasePyModule`."""
        self.compile(state)
        tir = {n: self.kernel(state, e)[n] for n, e in state.entries.items() if e.kind == PRIMFUNC}
        linked = self.linked(state)[0]
        vm = linked.vm(device) if linked is not None else None
        pyfuncs = {n: e.pyfunc for n, e in state.entries.items() if e.kind == PYFUNC}
        return CompiledPyModule(state.ir_mod, device, self.build.target, tir, vm, pyfuncs)

    def vm_module(self, state: ModuleState, relax_names) -> tvm.IRModule:
        """What a VM is built of: Relax functions, the PrimFuncs they call, pyfunc calls bridged."""
        names = relax_closure(relax_names, state.ir_mod)
        kept = [n for n in names if state.entries[n].kind != PYFUNC]
        return self.bridge.vm_module(sub_module(state.ir_mod, kept))

    def _kernels(self, state: ModuleState, wanted: set[str] | None, use_cache: bool) -> dict:
        funcs = {n: e.func for n, e in state.entries.items() if e.kind == PRIMFUNC}
        return self.build.kernels(funcs, wanted=wanted, use_cache=use_cache)

    def _isolating(
        self, state: ModuleState, relax_names: list[str], use_cache: bool, failed: CompileError
    ):
        """A Relax function failed to compile (`failed`): find which, and link the VM from the
        others (with one Relax function, it is that one: not compiled again)."""
        failures: dict[str, CompileError] = {}
        entries = state.entries
        for name in relax_names:
            try:
                if len(relax_names) == 1:
                    raise failed
                self.build.link(self.vm_module(state, [name]), use_cache=use_cache)
            except CompileError as err:  # `name` itself, or a PrimFunc it calls (then that one)
                culprit = err.function if err.function in entries else name
                detail = err.detail if culprit == name else f"{err.detail} (needed by `{name}`)"
                failures[name] = placed(err, entries[culprit], detail)
                failures[name].__cause__ = err.__cause__ or err  # TVM's own error, for %tb
        good = [n for n in relax_names if n not in failures]
        good = [n for n in good if not (relax_closure([n], state.ir_mod) & set(failures))]
        for name in set(relax_names) - set(good) - set(failures):
            culprit = sorted(relax_closure([name], state.ir_mod) & set(failures))[0]
            failures[name] = CompileError(
                f"calls `{culprit}`, which does not compile: {failures[culprit].detail}",
                function=name,
            )
            failures[name].__cause__ = failures[culprit].__cause__
        linked = self.build.link(self.vm_module(state, good), use_cache=use_cache) if good else None
        return linked, failures


def placed(err: CompileError, entry: FunctionEntry, detail: str | None = None) -> CompileError:
    """`err` (a kernel that does not compile) naming the function and the cell line at fault:
    where what the failure names stands, else the function's first line."""
    line = None
    if entry.line:
        line = err.line or string_line(entry.source, err.about) or entry.line
        if line == entry.line and entry.kind == PRIMFUNC:
            line = tir_call_line(entry.func, err.about) or line
    error = CompileError(detail or err.detail, function=entry.name, line=line, about=err.about)
    error.__cause__ = err.__cause__
    return error
