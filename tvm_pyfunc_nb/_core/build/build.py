"""Building a live module's code for one target and pipeline: its parts, and the Relax link.

Upstream `BasePyModule` compiles the whole module twice on every
instantiation. Here every PrimFunc's library is kept by structural hash (in
memory, and on disk through the compile cache: reuse.py), so an edit
rebuilds only what it changed; the kernels one compile needs are built
together, in one TVM build (kernel_builds.py). A Relax VM is made by TVM's
own steps (the Relax pipeline, VM codegen, VM link: linking.py) with the
PrimFuncs it needs linked in as libraries already built; the last few VMs
are kept by structural hash, so going back to an earlier version of a cell
rebuilds nothing. Where the pipeline and `tirx.build` run (here, or in the
build worker with `--isolate`: isolation.py) is chosen once, when the module
is made.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext

import tvm
from tvm import relax
from tvm.relax.vm_build import _vmcodegen

from ...errors import (
    CompileError,
    ScheduleWarning,
    TVMModuleError,
    last_reason,
    native_stderr_silenced,
    native_stderr_without,
    reason_sentence,
)
from .reuse import BuildCache
from .disk_cache import code_target
from .stats import CompileStats
from .failed_bindings import kernel_binding, unlowered_binding
from .kernel_builds import KernelBuilds, binds_threads, build_here
from .kernel_sites import KernelSites, Recording, describe_kernel, recording
from .linking import Built, Linked, called_prim_funcs, link_order, link_vm, prim_funcs, relax_names
from .offload import NONE, TORCH, check_offload, offload_to_torch
from ..options import TARGET_ENV, default_target
from .pipelines import pipeline_for
from .target_text import check_cpu, target_config
from .cpu_schedules import schedule_kernels


class Build:
    """Builds PrimFuncs and Relax VMs for one target and pipeline, keeping what it built.

    Its parts: `cache` (memory and disk, reuse.py), `kernel_builds` (refusals,
    batches, `tirx.build`: kernel_builds.py), and the Relax link here (linking.py).
    `checked` puts the crash guards (bounds and division asserts) into CPU
    kernels; `offload="torch"` sends the heavy Relax ops to PyTorch (offload.py);
    `on_compile(kind, names)` is a context manager around each TVM build, which
    views use to show long compiles. `local` is the runner's word (runner.py): False
    when the code runs on another machine (RPC), never here.
    """

    def __init__(
        self,
        options,
        stats: CompileStats,
        persistent=None,
        module_name: str = "NAME",
        *,
        local: bool = True,
    ):
        target = options.target
        self.target = _target(target, local)
        self.offload = check_offload(options.offload, self.target, remote=not local)
        self.target_name = target
        self.module_name = module_name
        self.local = local
        self.stats = stats
        self.pipeline = pipeline_for(options.pipeline, self.target)
        self.checked = checked = options.checked
        # code for a remote device is never kept on disk: a library loaded from a file cannot be
        # exported again to be uploaded, and loading it here would run another machine's code
        self.persistent = persistent if local else None
        # everything that makes two builds of one function differ, beyond the function itself
        checks = "checked" if checked else "unchecked"
        self.key = (
            f"{code_target(self.target)} | pipeline {self.pipeline.name} | {checks} | "
            f"offload {self.offload}"
        )
        self.cache = BuildCache(stats, self.persistent, self.key)
        self.kept = self.cache.kept  # what it built, in memory
        self.kernel_builds = KernelBuilds(
            self.target,
            target,
            module_name,
            checked=checked,
            local=local,
            cache=self.cache,
            stats=stats,
            compiling=self._compiling,
        )
        self.is_gpu = self.kernel_builds.is_gpu
        self.on_compile: Callable[[str, tuple[str, ...]], AbstractContextManager] | None = None
        # schedules for the pipeline's kernels (tuned, DLight), applied to its output
        self.after_pipeline: Callable[[tvm.IRModule], tvm.IRModule] | None = None
        # where the Relax pipeline runs: here, or in the build worker (isolation.py);
        # `run_pipeline(build, mod, offload)` -> (lowered, what it showed of the kernels)
        self.run_pipeline: Callable[..., tuple[tvm.IRModule, Recording]] = pipeline_here
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
        built = self.kernel_builds.libraries(funcs, wanted, use_cache)
        return {name: built[name].lib for name in wanted}

    @property
    def cannot_run_here(self) -> str | None:
        """Why code built for this target, meant to run here, cannot (None if it can, or if it
        runs elsewhere): it is for another architecture."""
        return self.kernel_builds.cannot_run_here

    def build_kernel_module(self, name: str, func: tvm.tirx.PrimFunc):
        """`tirx.build` of one PrimFunc as this build makes it (guards in if checked, on CPU)."""
        return self.kernel_builds.build_kernel_module(name, func)

    def tirx_build(self, funcs: dict[str, tvm.tirx.PrimFunc]):
        """One `tirx.build` of `funcs` (`{name: func}`), as this build makes them."""
        return self.kernel_builds.tirx_build(funcs)

    # -- Relax VMs -----------------------------------------------------------------
    def link(self, mod: tvm.IRModule, *, use_cache: bool = True) -> Linked:
        """`mod` (Relax functions, the PrimFuncs they call) lowered and linked, unless kept."""
        names = relax_names(mod)
        linked = self.cache.vm(mod, names) if use_cache else None
        if linked is None:
            linked = self._link(mod, names, use_cache)
            self.cache.keep_vm(linked)
        return linked

    def link_standalone(
        self, mod: tvm.IRModule, kernels: dict[str, tvm.tirx.PrimFunc]
    ) -> tuple[tvm.runtime.Module, list[str]]:
        """The Relax functions of `mod` and the PrimFuncs `kernels` linked into one executable
        that a file can hold (`export_library`), and the kernels' names. The kernels are built
        again, together, in this process: a library loaded from a file (the compile cache, the
        build worker) cannot be written a second time. It holds TVM's own kernels for every
        op, also with --offload torch: a library cannot carry Python."""
        builder = relax.ExecBuilder()
        functions: dict[str, tvm.tirx.PrimFunc] = {}
        lowered = None
        if relax_names(mod):
            lowered = self.lower(mod, offload=NONE)
            leftover = _vmcodegen(builder, lowered)
            functions = {gv.name_hint: f for gv, f in called_prim_funcs(lowered, leftover)}
        functions.update({name: f for name, f in kernels.items() if name not in functions})
        kernel_builds = self.kernel_builds
        libs = [build_here(kernel_builds.module(functions), self.target)] if functions else []
        return link_vm(builder, self.target, libs, lowered), list(functions)

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
        lowered, recorded = self.run_pipeline(self, mod, offload or self.offload)
        if not scheduled:
            return lowered, recorded
        if self.after_pipeline is not None:
            lowered = self.after_pipeline(lowered)
        own = {gv.name_hint for gv, _ in prim_funcs(mod)}
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
        except CompileError:  # the build worker's own account of a crash
            self._record("vm", names, start)
            raise
        except Exception as err:
            self._record("vm", names, start)
            found = unlowered_binding(mod, err, self.target, self.site_of)
            if found is None:
                raise CompileError(f"Relax lowering failed: {reason_sentence(err)}") from err
            raise CompileError(f"{found[1]} ({reason_sentence(err)})", function=found[0]) from err
        build_start = time.perf_counter()
        called = dict((gv.name_hint, f) for gv, f in called_prim_funcs(lowered, leftover))
        self._refuse_unbound_pipeline_kernels(mod, names, called)
        built = self._libraries(mod, called, use_cache, recorded.sites())
        start += time.perf_counter() - build_start  # PrimFunc builds are recorded on their own
        try:
            libraries = link_order(built) or [b.lib for b in built.values()]
            exe = link_vm(builder, self.target, libraries, lowered)
        except Exception as err:
            raise CompileError(f"Relax VM link failed: {last_reason(err)}") from err
        finally:
            self._record("vm", names, start)
        return Linked(mod, lowered, exe, {name: b.lib for name, b in built.items()}, recorded)

    def _libraries(
        self, mod: tvm.IRModule, called: dict, use_cache: bool, sites: KernelSites
    ) -> dict[str, Built]:
        """The libraries of the kernels `called`, in an order a link takes; a kernel that does
        not compile raises, named as the user knows it."""
        kernel_builds = self.kernel_builds
        built = kernel_builds.libraries(called, set(called), use_cache)
        for name, kernel in built.items():
            if isinstance(kernel.lib, CompileError):
                raise self._kernel_failure(mod, name, kernel.lib, sites)
        if link_order(built) is None:  # kept libraries disagree on a kernel both hold: anew
            built = kernel_builds.build_together(called) or {
                n: kernel_builds.build_one(n, f) for n, f in called.items()
            }
        return built

    def _refuse_unbound_pipeline_kernels(self, mod: tvm.IRModule, names, called: dict) -> None:
        """On a GPU, kernels the pipeline made without thread bindings: the advice names the
        Relax function to schedule (its kernels are not the user's to name)."""
        if not self.is_gpu:
            return
        own = {gv.name_hint for gv in mod.get_global_vars()}
        unbound = sorted(n for n, f in called.items() if n not in own and not binds_threads(f))
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
        self.stats.record(kind, names, self.target_name, start)


def pipeline_here(build: Build, mod: tvm.IRModule, offload: str) -> tuple[tvm.IRModule, Recording]:
    """`mod` through `build`'s Relax pipeline in this process (its heavy ops sent to PyTorch
    first with --offload torch), and what the pipeline showed of the kernels it made."""
    with build.target, native_stderr_silenced(), recording() as recorded:
        offloaded = offload_to_torch(mod) if offload == TORCH else mod
        return build.pipeline.make()(offloaded), recorded


# What TVM says when it makes a CUDA target without an `arch` and finds no GPU to ask (it takes
# sm_50). Code for a CUDA target cannot run on such a machine anyway, while its source can be
# read there; on a machine with a GPU, TVM asks the GPU and says nothing.
NO_CUDA_VERSION = "Unable to detect CUDA version"


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
