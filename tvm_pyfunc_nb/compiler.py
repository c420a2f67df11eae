"""Incremental compilation: PrimFuncs one by one, the Relax VM linked from them.

Upstream `BasePyModule` compiles the whole module twice on every
instantiation. Here every PrimFunc is built on its own and kept by
structural hash and target, so an edit rebuilds only what it changed. The
Relax VM is produced by TVM's own steps (Relax pipeline, VM codegen, VM link)
with the PrimFuncs it needs linked in as already-built libraries rather than
built again.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.vm_build import _ffi_api as _vm_ffi
from tvm.relax.vm_build import _vmcodegen

from .crash_guards import guard_bounds, guard_division, missing_symbols
from .errors import CompileError, last_reason

MAX_KEPT_LIBRARIES = 256
# Versions kept of one function: an edit loop keeps the last few, not all it went through (~1 MB each).
MAX_KEPT_VERSIONS = 4


@dataclass(frozen=True)
class CompileRecord:
    """One TVM compile: what it built (function names), for which target, and how long it took."""

    kind: str  # "tir": one PrimFunc built; "vm": the Relax VM lowered and linked
    functions: tuple[str, ...]
    target: str
    seconds: float
    when: float

    def __str__(self) -> str:
        return f"{self.kind} {', '.join(self.functions)} ({self.seconds * 1000:.1f} ms)"


@dataclass
class CompileStats:
    """`NAME.stats`: every TVM compile this live module ran, and how many a cache avoided."""

    compiles: list[CompileRecord] = field(default_factory=list)
    cache_hits: int = 0

    def since(self, mark: int) -> list[CompileRecord]:
        """The compiles after position `mark` (a `len(stats.compiles)` taken earlier)."""
        return self.compiles[mark:]

    def __repr__(self) -> str:
        seconds = sum(c.seconds for c in self.compiles)
        return f"CompileStats({len(self.compiles)} compiles, {seconds:.3f} s, {self.cache_hits} cache hits)"


class Compiler:
    """Builds PrimFuncs and Relax VMs for one target, remembering what it built."""

    def __init__(self, target: str, stats: CompileStats, persistent=None):
        self.target = tvm.target.Target(target)
        self.target_key = str(self.target)
        self.target_name = target
        self.stats = stats
        self.persistent = persistent
        # `on_compile(kind, names)`: a context manager around each TVM build (views show long ones)
        self.on_compile: Callable[[str, tuple[str, ...]], AbstractContextManager] | None = None
        self._libs: OrderedDict[int, list[tuple[tvm.tirx.PrimFunc, object]]] = OrderedDict()
        self._versions: dict[str, list[int]] = {}  # name -> keys of its kept libraries, oldest first

    def clear(self) -> None:
        """Forget every compiled library this compiler keeps in memory."""
        self._libs.clear()
        self._versions.clear()

    # -- PrimFuncs -----------------------------------------------------------------
    def prim_func(self, name: str, func: tvm.tirx.PrimFunc, *, use_cache: bool = True):
        """The compiled library of one PrimFunc (built now unless a cache has it)."""
        key = tvm_ffi.structural_hash(func)
        if use_cache:
            for known, lib in self._libs.get(key, ()):
                if tvm_ffi.structural_equal(known, func):
                    self._libs.move_to_end(key)
                    self._note_version(name, key)
                    self.stats.cache_hits += not isinstance(lib, CompileError)
                    return _raise_if_failed(lib, name)
            lib = self.persistent.load(name, func, self.target_key) if self.persistent else None
            if lib is not None:
                self.stats.cache_hits += 1
                self._remember(name, key, func, lib)
                return lib
        with self._compiling("tir", (name,)):
            lib = self._build_prim_func(name, func)
        self._remember(name, key, func, lib)
        if self.persistent and not isinstance(lib, CompileError):
            self.persistent.store(name, func, self.target_key, lib)
        return _raise_if_failed(lib, name)

    def _build_prim_func(self, name: str, func: tvm.tirx.PrimFunc):
        missing = missing_symbols(func) if self.target.kind.name == "llvm" else []
        if missing:  # LLVM's JIT would hand back an address that segfaults when called
            return CompileError(
                f"does not compile for target {self.target_name}: calls external symbol(s) "
                f"{', '.join(missing)}, which this process does not provide", function=name,
            )
        start = time.perf_counter()
        try:
            guarded = guard_bounds(guard_division(func, name), name)
            mod = tvm.IRModule({tvm.ir.GlobalVar(name): guarded.with_attr("global_symbol", name)})
            lib = tvm.tirx.build(mod, target=self.target)
            lib.get_function(name)  # JIT now, so the time is counted here and not at the first call
        except Exception as err:  # TVM raises many error types; each means "this PrimFunc does not compile"
            return CompileError(
                f"does not compile for target {self.target_name}: {last_reason(err)}", function=name
            )
        finally:
            self._record("tir", (name,), start)
        return lib

    def _remember(self, name: str, key: int, func, lib) -> None:
        self._libs.setdefault(key, []).append((func, lib))
        self._libs.move_to_end(key)
        self._note_version(name, key)
        while len(self._libs) > MAX_KEPT_LIBRARIES:
            self._libs.popitem(last=False)

    def _note_version(self, name: str, key: int) -> None:
        """`key` is the latest version of `name`; versions older than the last few are released."""
        versions = self._versions.setdefault(name, [])
        if key in versions:
            versions.remove(key)
        versions.append(key)
        while len(versions) > MAX_KEPT_VERSIONS:
            self._libs.pop(versions.pop(0), None)

    # -- Relax VM ------------------------------------------------------------------
    def relax_vm(self, mod: tvm.IRModule, device, *, use_cache: bool = True):
        """Lower and link the Relax functions of `mod` (with the PrimFuncs they call) into a VM."""
        start = time.perf_counter()
        names = tuple(gv.name_hint for gv, f in mod.functions_items() if isinstance(f, relax.Function))
        try:
            with self.target, self._compiling("vm", names):
                lowered = relax.get_pipeline("default")(mod)
            builder = relax.ExecBuilder()
            leftover = _vmcodegen(builder, lowered)
        except Exception as err:
            self._record("vm", names, start)
            raise CompileError(f"Relax lowering failed: {last_reason(err)}") from err
        build_start = time.perf_counter()
        libs = [self.prim_func(gv.name_hint, f, use_cache=use_cache) for gv, f in _prim_funcs(leftover)]
        start += time.perf_counter() - build_start  # PrimFunc builds are recorded on their own
        try:
            exe = _vm_ffi.VMLink(builder, self.target, None, libs, {})
            vm = relax.VirtualMachine(exe, device)
        except Exception as err:
            raise CompileError(f"Relax VM link failed: {last_reason(err)}") from err
        finally:
            self._record("vm", names, start)
        return vm

    def _compiling(self, kind: str, names: tuple[str, ...]) -> AbstractContextManager:
        return self.on_compile(kind, names) if self.on_compile else nullcontext()

    def _record(self, kind: str, names: Iterable[str], start: float) -> None:
        seconds = time.perf_counter() - start
        self.stats.compiles.append(CompileRecord(kind, tuple(names), self.target_name, seconds, time.time()))


def _prim_funcs(mod: tvm.IRModule):
    return [(gv, f) for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]


def _raise_if_failed(lib, name: str):
    if isinstance(lib, CompileError):
        raise CompileError(lib.detail, function=name)
    return lib



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
    return tvm.IRModule({gv: f for gv, f in mod.functions_items() if gv.name_hint in keep}, attrs=mod.attrs)
