"""Building: PrimFunc libraries (those a compile needs, together), Relax VMs linked from them.

Upstream `BasePyModule` compiles the whole module twice on every
instantiation. Here every PrimFunc's library is kept by structural hash (in
memory, and on disk through the compile cache), so an edit rebuilds only what
it changed; the kernels one compile needs are built together, in one TVM
build. A Relax VM is made by TVM's own steps (the Relax pipeline, VM codegen,
VM link) with the PrimFuncs it needs linked in as libraries already built;
the last few VMs are kept by structural hash, so going back to an earlier
version of a cell rebuilds nothing.
"""

from __future__ import annotations

import inspect
import re
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from graphlib import CycleError, TopologicalSorter

import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.vm_build import _ffi_api as _vm_ffi
from tvm.relax.vm_build import _vmcodegen

from ..errors import (
    CallError,
    CompileError,
    ScheduleWarning,
    TVMModuleError,
    last_reason,
    native_stderr_silenced,
    native_stderr_without,
    reason_sentence,
)
from .compile_cache import code_target
from .crash_guards import guard, missing_symbols
from .failed_bindings import kernel_binding, unlowered_binding
from .kept_builds import KeptBuilds
from .kernel_sites import KernelSites, Recording, describe_kernel, recording
from .offload import TORCH, check_offload, offload_to_torch
from .options import TARGET_ENV, default_target
from .tables import text_table
from .target_text import check_cpu, target_config
from .tuning.cpu_schedules import schedule_kernels

_UNKNOWN_SCOPE = re.compile(r"unknown storage scope ([\w.:]+)")
_NO_INTRINSIC = re.compile(r"Cannot find intrinsic declaration.*?: \w+\.(\w+)")

AUTO_PIPELINE = "auto"
COMPLETE_PIPELINES = frozenset({"default", "default_build"})  # the others are followed by "default"
TARGET_PIPELINE = "target"
GPU_KINDS = frozenset({"cuda", "rocm", "metal", "vulkan", "opencl", "webgpu"})


@dataclass(frozen=True)
class CompileRecord:
    """One TVM compile: what it built (function names), for which target, and how long it took."""

    kind: str  # "tir": PrimFuncs built; "vm": the Relax VM lowered and linked
    functions: tuple[str, ...]
    target: str
    seconds: float
    when: float

    def __str__(self) -> str:
        return f"{self.kind} {', '.join(self.functions)} ({self.seconds * 1000:.1f} ms)"


@dataclass
class CompileStats:
    """`NAME.stats`: every TVM compile this live module ran, and what a cache served instead.

    `compiles` has one `CompileRecord` per TVM compile; `cache_hits` counts the
    compiles a cache avoided, and `served` says which functions each cache
    served, by name: `served["memory"]` (kept in this kernel) and
    `served["disk"]` (the compile cache shared by kernels), each a `Counter`.
    """

    compiles: list[CompileRecord] = field(default_factory=list)
    served: dict[str, Counter] = field(
        default_factory=lambda: {"memory": Counter(), "disk": Counter()}
    )
    # (artifact, bytes) sent to a remote device
    uploads: list[tuple[str, int]] = field(default_factory=list)
    seconds: float = 0.0  # total compile time, read by calls to tell their own run time apart

    @property
    def cache_hits(self) -> int:
        return sum(sum(counter.values()) for counter in self.served.values())

    def since(self, mark: int) -> list[CompileRecord]:
        """The compiles after position `mark` (a `len(stats.compiles)` taken earlier)."""
        return self.compiles[mark:]

    def served_by(self, where: str, name: str) -> None:
        self.served[where][name] += 1

    def by_function(self) -> dict[str, dict[str, float]]:
        """Per function: compiles, compile seconds, memory and disk cache hits (for the stats
        table).
        """
        table: dict[str, dict[str, float]] = {}

        def row(name: str) -> dict[str, float]:
            return table.setdefault(name, {"compiles": 0, "seconds": 0.0, "memory": 0, "disk": 0})

        for record in self.compiles:
            for name in record.functions:
                row(name)["compiles"] += 1
                row(name)["seconds"] += record.seconds / len(record.functions)
        for where, counter in self.served.items():
            for name, hits in counter.items():
                row(name)[where] += hits
        return table

    def summary(self) -> str:
        return (
            f"{len(self.compiles)} TVM compile{'s' * (len(self.compiles) != 1)} "
            f"({self.seconds:.3f} s); a cache served "
            f"{self.cache_hits} ({sum(self.served['memory'].values())} kept in memory, "
            f"{sum(self.served['disk'].values())} from the compile cache on disk)"
        )

    def rows(self) -> list[tuple[str, int, str, int, int]]:
        """`(function, compiles, compile seconds, served from memory, served from disk)`."""
        return [
            (name, int(r["compiles"]), f"{r['seconds']:.3f} s", int(r["memory"]), int(r["disk"]))
            for name, r in self.by_function().items()
        ]

    def __repr__(self) -> str:
        header = ("function", "compiles", "compile time", "from memory", "from disk")
        return f"{self.summary()}\n{text_table(header, self.rows())}"


@dataclass(frozen=True)
class Pipeline:
    """The Relax pipeline of a module: its name (part of every cache key) and the pass."""

    name: str
    make: Callable[[], tvm.transform.Pass]


def pipeline_for(name: str | None, target: tvm.target.Target) -> Pipeline:
    """`auto` (what `tvm.compile` picks for the target), `target`, or a `relax.get_pipeline` name"""
    name = name or AUTO_PIPELINE
    is_gpu = "gpu" in target.keys
    if name == AUTO_PIPELINE:
        name = TARGET_PIPELINE if is_gpu else "default"
    if name == TARGET_PIPELINE:
        try:
            relax.get_default_pipeline(target)
        except ValueError as err:
            raise TVMModuleError(f"pipeline `target`: {last_reason(err)}") from None
        return Pipeline(
            f"{TARGET_PIPELINE}:{target.kind.name}", lambda: relax.get_default_pipeline(target)
        )
    known = _named_pipelines()
    if name not in known:
        names = ", ".join([AUTO_PIPELINE, TARGET_PIPELINE, *sorted(known)])
        raise TVMModuleError(f"unknown Relax pipeline `{name}` (known: {names})")
    if name in COMPLETE_PIPELINES:
        return Pipeline(name, lambda: relax.get_pipeline(name))
    # `zero` and other partial pipelines legalize and fuse; `default` lowers the rest for the VM
    return Pipeline(
        name,
        lambda: tvm.transform.Sequential([relax.get_pipeline(name), relax.get_pipeline("default")]),
    )


def _named_pipelines() -> list[str]:
    """`relax.get_pipeline` names that need no arguments (`static_shape_tuning` needs a tuner's)."""
    from tvm.relax.pipeline import PIPELINE_MAP

    def ready(make) -> bool:
        params = inspect.signature(make).parameters.values()
        return all(
            p.default is not inspect.Parameter.empty or p.kind == p.VAR_KEYWORD for p in params
        )

    return [name for name, make in PIPELINE_MAP.items() if ready(make)]


@dataclass(frozen=True, eq=False)
class _Built:
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


class Build:
    """Builds PrimFuncs and Relax VMs for one target and pipeline, keeping what it built.

    `checked` puts the crash guards (bounds and division asserts) into CPU
    kernels; `offload="torch"` sends the heavy Relax ops to PyTorch (offload.py);
    `on_compile(kind, names)` is a context manager around each TVM build, which
    views use to show long compiles.
    """

    def __init__(self, options, stats: CompileStats, persistent=None, module_name: str = "NAME"):
        target, local = options.target, not options.rpc
        self.target = _target(target, local)
        self.offload = check_offload(options.offload, self.target, remote=not local)
        self.target_name = target
        self.module_name = module_name
        self.local = local  # False: the libraries run on another machine (RPC), never here
        self.stats = stats
        self.pipeline = pipeline_for(options.pipeline, self.target)
        self.checked = checked = options.checked
        # code for a remote device is never kept on disk: a library loaded from a file cannot be
        # exported again to be uploaded, and loading it here would run another machine's code
        self.persistent = persistent if local else None
        self.is_gpu = self.target.kind.name in GPU_KINDS
        # kernels that run in this process, on its CPU: JIT-compiled by LLVM when built
        self._runs_here = local and self.target.kind.name == "llvm"
        self._foreign = _foreign_architecture(self.target) if self._runs_here else None
        # everything that makes two builds of one function differ, beyond the function itself
        checks = "checked" if checked else "unchecked"
        self.key = (
            f"{code_target(self.target)} | pipeline {self.pipeline.name} | {checks} | "
            f"offload {self.offload}"
        )
        self.on_compile: Callable[[str, tuple[str, ...]], AbstractContextManager] | None = None
        # schedules for the pipeline's kernels (tuned, DLight), applied to its output
        self.after_pipeline: Callable[[tvm.IRModule], tvm.IRModule] | None = None
        self.kept = KeptBuilds()  # what it built, in memory
        # where a binding came from in the user's code (`site_of(function, binding)`), for what
        # a compile says about a kernel: a model's module and source line
        self.site_of: Callable[[str, str], object] | None = None
        self._noticed: set[str] = set()  # kernels whose schedule fallback was said already
        # False: the pipeline's kernels keep TVM's default schedule (a reference build's)
        self.scheduled = True

    # -- PrimFuncs -----------------------------------------------------------------
    def kernels(
        self,
        funcs: dict[str, tvm.tirx.PrimFunc],
        *,
        wanted: Iterable[str] | None = None,
        use_cache: bool = True,
    ) -> dict[str, object]:
        """The libraries of the `wanted` PrimFuncs of `funcs` (all by default), by name, a
        `CompileError` in place of one that does not compile.

        When one of them has to be built, every function of `funcs` that no cache has is
        built with it, in one `tirx.build` (one LLVM module and one link instead of one
        each); if that fails, one by one, so that a kernel that does not compile never
        hides the others."""
        if wanted is not None:
            wanted = set(wanted)
        wanted = [n for n in funcs if wanted is None or n in wanted]
        built = self._kernels(funcs, wanted, use_cache)
        return {name: built[name].lib for name in wanted}

    def _kernels(self, funcs: dict, wanted: Iterable[str], use_cache: bool) -> dict[str, _Built]:
        found: dict[str, _Built] = {}
        stale: dict[str, tvm.tirx.PrimFunc] = {}

        def look_up(names, counted: bool) -> None:
            for name in names:
                built = self._kept(name, funcs[name], counted=counted)
                if built is None and use_cache and self.persistent:
                    built = self._from_disk(name, funcs[name])
                if built is None:
                    stale[name] = funcs[name]
                else:
                    found[name] = built

        look_up(wanted, counted=True)
        if not stale:
            return found
        look_up([n for n in funcs if n not in found and n not in stale], counted=False)
        together = {n: f for n, f in stale.items() if self._batchable(n, f)}
        if len(together) > 1:
            found.update(self._build_together(together))
        for name, func in stale.items():
            if name not in found:
                found[name] = self._build_one(name, func)
        return found

    def _kept(self, name: str, func, *, counted: bool) -> _Built | None:
        built = self.kept.kernel(name, func)
        if built is not None and counted and not isinstance(built.lib, CompileError):
            self.stats.served_by("memory", name)
        return built

    def _from_disk(self, name: str, func) -> _Built | None:
        loaded = self.persistent.load(name, func, self.key)
        if loaded is None:
            return None
        self.stats.served_by("disk", name)
        built = _Built(*loaded)
        self.kept.keep_kernel(name, func, built)
        return built

    def _build_one(self, name: str, func) -> _Built:
        with self._compiling("tir", (name,)):
            built = _Built(self._build_kernel(name, func), frozenset({name}))
        self.kept.keep_kernel(name, func, built)
        if self.persistent and not isinstance(built.lib, CompileError):
            self.persistent.store({name: func}, self.key, built.lib)
        return built

    def _batchable(self, name: str, func) -> bool:
        """Whether `func` may go into a build with others: not one refused before building
        (`_build_kernel` says why, for that function alone)."""
        if self.is_gpu:
            return _binds_threads(func)
        return self._refusal(name, func) is None

    def _refusal(self, name: str, func) -> CompileError | None:
        """Why `func` must not be built to run here, if it must not."""
        missing = missing_symbols(func) if self._runs_here else []
        if missing:  # LLVM's JIT would hand back an address that segfaults when called
            return CompileError(
                f"does not compile for target {self.target_name}: calls external symbol(s) "
                f"{', '.join(missing)}, which this process does not provide",
                function=name,
                about=tuple(missing),
            )
        if self._foreign:
            return CompileError(
                f"{self.cannot_run_here}: run it there with --rpc HOST:PORT; "
                f"`{self.module_name}.source('{name}', 'asm')` shows the code",
                function=name,
            )
        return None

    @property
    def cannot_run_here(self) -> str | None:
        """Why code built for this target, meant to run here, cannot (None if it can, or if it
        runs elsewhere): it is for another architecture."""
        if self._foreign is None:
            return None
        return (
            f"compiles for {self._foreign}, which this machine ({_host_architecture()}) cannot run"
        )

    def _build_together(self, funcs: dict[str, tvm.tirx.PrimFunc]) -> dict[str, _Built]:
        """`funcs` in one `tirx.build`, one library holding them all; {} if that fails."""
        names = tuple(sorted(funcs))  # the order of an IRModule's functions varies by process
        start = time.perf_counter()
        try:
            with self._compiling("tir", names):
                lib = self.tirx_build(funcs)
                if self._runs_here:
                    for name in names:  # JIT now, so the time is counted here
                        lib.get_function(name)
        except Exception:  # TVM raises many types: the functions are built one by one instead
            self.stats.seconds += time.perf_counter() - start
            return {}
        self._record("tir", names, start)
        built = _Built(lib, frozenset(names))
        for name, func in funcs.items():
            self.kept.keep_kernel(name, func, built)
        if self.persistent:
            self.persistent.store(funcs, self.key, lib)
        return {name: built for name in names}

    def _build_kernel(self, name: str, func: tvm.tirx.PrimFunc):
        refusal = self._refusal(name, func)
        if refusal is not None:
            return refusal
        start = time.perf_counter()
        try:
            lib = self.build_kernel_module(name, func)
            if self._runs_here:  # JIT now, so the time is counted here and not at the first call
                lib.get_function(name)
        except CompileError as err:
            return err
        except Exception as err:  # TVM raises many types; each means "this does not compile"
            return _compile_failure(err, name, func, self.target_name, self.is_gpu)
        finally:
            self._record("tir", (name,), start)
        return lib

    def build_kernel_module(self, name: str, func: tvm.tirx.PrimFunc):
        """`tirx.build` of one PrimFunc as this build makes it (guards in if checked, on CPU)."""
        if self.is_gpu and not _binds_threads(func):
            advice = _unbound_advice(name, func, self.target_name, self.module_name)
            raise CompileError(advice, function=name)
        return self.tirx_build({name: func})

    def tirx_build(self, funcs: dict[str, tvm.tirx.PrimFunc]):
        """One `tirx.build` of `funcs` (`{name: func}`), as this build makes them (TVM's warnings
        about the code, e.g. on `pow`, kept out of the cell's output as in `lower`)."""
        mod = tvm.IRModule({tvm.ir.GlobalVar(n): self._as_built(n, f) for n, f in funcs.items()})
        with native_stderr_silenced():
            return tvm.tirx.build(mod, target=self.target)

    def _as_built(self, name: str, func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
        """`func` as this build compiles it: named `name`, guards in if checked (CPU)."""
        if self.checked and self.target.kind.name == "llvm":
            func = guard(func, name)
        return func.with_attr("global_symbol", name)

    # -- Relax VMs -----------------------------------------------------------------
    def link(self, mod: tvm.IRModule, *, use_cache: bool = True) -> Linked:
        """`mod` (Relax functions, the PrimFuncs they call) lowered and linked, unless kept."""
        names = tuple(
            gv.name_hint for gv, f in mod.functions_items() if isinstance(f, relax.Function)
        )
        key = tvm_ffi.structural_hash(mod)
        linked = self.kept.vm(key, mod) if use_cache else None
        if linked is not None:
            for name in names:
                self.stats.served_by("memory", name)
            return linked
        linked = self._link(mod, names, use_cache)
        self.kept.keep_vm(key, linked)
        return linked

    def lower(
        self, mod: tvm.IRModule, *, offload: str | None = None, scheduled: bool = True
    ) -> tvm.IRModule:
        """`mod` after this module's Relax pipeline, for the target: its heavy ops sent to
        PyTorch first with --offload torch; then, with `scheduled`, the schedules
        `after_pipeline` gives its kernels (tuned, DLight), and for the matmul and convolution
        kernels left the CPU schedule (cpu_schedules.py; the module's own PrimFuncs are left as
        written). TVM's warnings about the code its legalization writes (`take` in fast
        mode, `pow` with a large exponent: every imported transformer has both) say nothing a
        user can act on, and would land in the cell's output at each compile: they are kept
        out of it."""
        return self._lowered(mod, offload=offload, scheduled=scheduled)[0]

    def _lowered(
        self, mod: tvm.IRModule, *, offload: str | None = None, scheduled: bool = True
    ) -> tuple[tvm.IRModule, Recording]:
        """`lower`, and what the pipeline showed of the kernels it made (`Linked.sites`)."""
        with self.target, native_stderr_silenced(), recording() as recorded:
            offloaded = offload_to_torch(mod) if (offload or self.offload) == TORCH else mod
            lowered = self.pipeline.make()(offloaded)
        if not scheduled:
            return lowered, recorded
        if self.after_pipeline is not None:
            lowered = self.after_pipeline(lowered)
        own = {gv.name_hint for gv, _ in _prim_funcs(mod)}
        lowered, failed = schedule_kernels(lowered, self.target, keep=own)
        for kernel, why in failed.items():
            if kernel not in self._noticed:
                self._noticed.add(kernel)
                what = describe_kernel(recorded.sites(), kernel, self.site_of)
                warnings.warn(
                    f"{what} keeps TVM's default schedule: the CPU schedule for its kind failed "
                    f"on it ({why})",
                    ScheduleWarning,
                    stacklevel=2,
                )
        return lowered, recorded

    def _link(self, mod: tvm.IRModule, names: tuple[str, ...], use_cache: bool) -> Linked:
        start = time.perf_counter()
        try:
            with self._compiling("vm", names):
                lowered, recorded = self._lowered(mod, scheduled=self.scheduled)
            builder = relax.ExecBuilder()
            leftover = _vmcodegen(builder, lowered)
        except Exception as err:
            self._record("vm", names, start)
            found = unlowered_binding(mod, err, self.target, self.site_of)
            if found is None:
                raise CompileError(f"Relax lowering failed: {reason_sentence(err)}") from err
            raise CompileError(f"{found[1]} ({reason_sentence(err)})", function=found[0]) from err
        build_start = time.perf_counter()
        called = dict((gv.name_hint, f) for gv, f in called_prim_funcs(lowered, leftover))
        self._refuse_unbound_pipeline_kernels(mod, names, called)
        built = self._kernels(called, set(called), use_cache)
        for name, kernel in built.items():
            if isinstance(kernel.lib, CompileError):
                raise self._kernel_failure(mod, name, kernel.lib, recorded.sites())
        libraries = _link_order(built)
        if libraries is None:  # kept libraries disagree on a kernel both hold: build them anew
            built = self._build_together(called) or {
                n: self._build_one(n, f) for n, f in called.items()
            }
            libraries = _link_order(built) or [b.lib for b in built.values()]
        kernels = {name: kernel.lib for name, kernel in built.items()}
        start += time.perf_counter() - build_start  # PrimFunc builds are recorded on their own
        attrs = dict(lowered.attrs) if lowered.attrs else {}
        try:
            exe = _vm_ffi.VMLink(
                builder,
                self.target,
                None,
                [*libraries, *attrs.get("external_mods", [])],
                dict(attrs.get("const_name_to_constant", {})),
            )
        except Exception as err:
            raise CompileError(f"Relax VM link failed: {last_reason(err)}") from err
        finally:
            self._record("vm", names, start)
        return Linked(mod, lowered, exe, kernels, recorded)

    def _refuse_unbound_pipeline_kernels(self, mod: tvm.IRModule, names, called: dict) -> None:
        """On a GPU, kernels the pipeline made without thread bindings: the advice names the
        Relax function to schedule (its kernels are not the user's to name)."""
        if not self.is_gpu:
            return
        own = {gv.name_hint for gv in mod.get_global_vars()}
        unbound = sorted(n for n, f in called.items() if n not in own and not _binds_threads(f))
        if unbound:
            raise CompileError(
                f"pipeline `{self.pipeline.name}` leaves kernel(s) {', '.join(unbound)} without "
                f"GPU thread bindings, so they cannot run on target {self.target_name}; schedule "
                f'them with {self.module_name}.schedule("{names[0]}", "dlight") or use '
                "--pipeline target"
            )

    def _kernel_failure(
        self, mod: tvm.IRModule, kernel: str, failed: CompileError, sites: KernelSites
    ) -> CompileError:
        """A kernel does not compile: one of `mod`'s own is named; one the pipeline made is named
        with the Relax bindings it computes, as the user's text shows them, and where they came
        from (a model's module and source line)."""
        own = any(gv.name_hint == kernel for gv in mod.get_global_vars())
        calls = [] if own else sites.kernel_of(kernel)
        found = None if own else kernel_binding(mod, kernel, self.target, self.site_of)
        if calls and (found is None or len(calls[0][1]) > 1):  # a fused kernel
            what = describe_kernel(sites, kernel, self.site_of)
            error = CompileError(f"{what} {failed.detail}", function=calls[0][0])
        elif found is not None:
            what = f"{found[1]} (kernel `{kernel}`)"
            error = CompileError(f"{what} {failed.detail}", function=found[0])
        else:
            error = CompileError(failed.detail, function=kernel, about=failed.about)
        error.__cause__ = failed.__cause__
        return error

    # -- records -------------------------------------------------------------------
    def _compiling(self, kind: str, names: tuple[str, ...]) -> AbstractContextManager:
        return self.on_compile(kind, names) if self.on_compile else nullcontext()

    def _record(self, kind: str, names: Iterable[str], start: float) -> None:
        seconds = time.perf_counter() - start
        self.stats.seconds += seconds
        self.stats.compiles.append(
            CompileRecord(kind, tuple(names), self.target_name, seconds, time.time())
        )


# What TVM says when it makes a CUDA target without an `arch` and finds no GPU to ask (it takes
# sm_50). Code for a CUDA target cannot run on such a machine anyway, while its source can be
# read there; on a machine with a GPU, TVM asks the GPU and says nothing.
NO_CUDA_VERSION = "Unable to detect CUDA version"


def _compile_failure(err: Exception, name: str, func, target_name: str, is_gpu: bool):
    """The `CompileError` of kernel `name`, which TVM failed to build with `err` (kept as its
    cause, not raised here: %tb shows TVM's own story later)."""
    reason, about = reason_sentence(err), _named_in(err)
    tags = () if is_gpu else _thread_tags(func)
    if tags:  # TVM says only "not implemented"
        reason = f"binds GPU thread {', '.join(tags)}, a CPU target has no GPU threads"
        about = tags
    failed = CompileError(
        f"does not compile for target {target_name}: {reason}", function=name, about=about
    )
    failed.__cause__ = err
    return failed


def _unbound_advice(name: str, func, target_name: str, module_name: str) -> str:
    """Why a kernel without thread bindings cannot run on a GPU, and what to do that works."""
    why = f"has no GPU thread bindings, so it cannot run on target {target_name}; "
    if func.attrs.get("s_tir", False):
        return why + f'schedule it first, e.g. {module_name}.schedule("{name}", "dlight")'
    return why + (
        "write it with @T.prim_func(s_tir=True) and T.sblock (blocks are what schedules "
        f'work on), then schedule it, e.g. {module_name}.schedule("{name}", "dlight")'
    )


def _target(target: str, local: bool = True) -> tvm.target.Target:
    """A TVM target from its name (`llvm`, `cuda`), its JSON form or the string form of TVM
    before 0.27 (`llvm -mcpu=haswell`, target_text.py); `"mcpu": "native"` is
    this machine's CPU, which LLVM itself does not accept. TVM's warning that it cannot
    detect the CUDA version (no GPU here) is kept out of the cell's output.

    Plain `llvm` for a module that runs here is this machine's CPU too: LLVM's own default is
    a generic x86-64 (SSE2, no FMA), which left a default MLP at 0.05x PyTorch eager. Code
    meant for any x86-64 machine says `"mcpu": "x86-64"` in the target."""
    try:
        config = target_config(target)
        if local and config == "llvm":
            config = {"kind": "llvm", "mcpu": "native"}
        if isinstance(config, dict) and config.get("mcpu") == "native":
            config = {**config, "mcpu": str(tvm.target.codegen.llvm_get_system_cpu())}
        check_cpu(config)
        with native_stderr_without(NO_CUDA_VERSION):
            return tvm.target.Target(config)
    except Exception as err:  # TVM raises ValueError, TypeError or its own errors for a bad target
        from_env = target == default_target() != "llvm"
        where = f" (the default, from ${TARGET_ENV})" if from_env else ""
        raise TVMModuleError(
            f"target `{target}`{where} is not a TVM target: {last_reason(err)}"
        ) from None


def _prim_funcs(mod: tvm.IRModule):
    return [(gv, f) for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]


def _host_architecture() -> str:
    return tvm.target.codegen.llvm_get_system_triple().split("-")[0]


def _foreign_architecture(target: tvm.target.Target) -> str | None:
    """The architecture of an LLVM `target` whose code cannot load here (None if it can)."""
    triple = str(target.attrs.get("mtriple", "") or "")
    arch = triple.split("-")[0]
    return arch if arch and arch != _host_architecture() else None


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
        ((gv, f) for gv, f in _prim_funcs(leftover) if gv.name_hint in called),
        key=lambda item: item[0].name_hint,
    )


def _binds_threads(func: tvm.tirx.PrimFunc) -> bool:
    """Whether `func` launches GPU threads (a `thread_extent` attribute or a thread-bound loop)."""
    return bool(_thread_tags(func))


def _thread_tags(func: tvm.tirx.PrimFunc) -> tuple[str, ...]:
    """The GPU threads `func` binds (`threadIdx.x`...), in the order they appear."""
    found: list[str] = []

    def visit(node) -> None:
        if isinstance(node, tvm.tirx.AttrStmt) and node.attr_key == "thread_extent":
            found.append(str(node.node.thread_tag))
        elif isinstance(node, tvm.tirx.For) and node.kind == tvm.tirx.ForKind.THREAD_BINDING:
            found.append(str(node.thread_binding.thread_tag))

    tvm_ffi.structural_walk(func.body, [((tvm.tirx.AttrStmt, tvm.tirx.For), visit)])
    return tuple(dict.fromkeys(found))


def _named_in(err: Exception) -> tuple[str, ...]:
    """What TVM's error names in the function: storage scopes it does not know, intrinsics
    (`exp`) it has no declaration of."""
    text = str(err)
    return tuple(dict.fromkeys(_UNKNOWN_SCOPE.findall(text) + _NO_INTRINSIC.findall(text)))


def _link_order(built: dict[str, _Built]) -> list | None:
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
