"""Building a live module's code for one target and pipeline: its parts, and the Relax link.

Upstream `BasePyModule` compiles the whole module twice on every
instantiation. Here every PrimFunc's library is kept by structural hash (in
memory, and on disk through the compile cache: reuse.py), so an edit
rebuilds only what it changed; the kernels one compile needs are built
together, in one TVM build (kernel_builds.py). A Relax VM is made by TVM's
own steps (the Relax pipeline, VM codegen, VM link: linking.py) with the
PrimFuncs it needs linked in as libraries already built; the last few VMs
are kept by structural hash, so going back to an earlier version of a cell
rebuilds nothing.

Everything a build depends on is given when it is made, never hung on it
later: where the pipeline and `tirx.build` run (its `Builder`: here, or the
build worker with `--isolate`, builder.py), what it runs around each TVM
build (`compiling`: views show long ones), where a binding came from in the
user's code (`site_of`), and, made here, the schedules the pipeline's
kernels get (`KernelSchedules`: tuned, DLight).

`lower_and_link` is the one path from Relax functions to a linked VM: calls,
`trace`, kernel compare's reference build, `bisect`'s builds (in the worker)
and `export_library` (`standalone`) all take it.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext

import tvm

from ...errors import (
    CompileError,
    ScheduleWarning,
    last_reason,
)
from ..options import ModuleOptions
from ..run.interrupts import giving_sigint_back
from .builder import HERE, Builder, Recipe
from .cpu_schedules import schedule_kernels
from .disk_cache import code_target
from .failed_bindings import kernel_binding, lowering_failure
from .kernel_builds import Compiling, KernelBuilds, binds_threads
from .kernel_schedules import KernelSchedules
from .kernel_sites import KernelSites, Recording, describe_kernel
from .linking import Built, Linked, link_order, link_vm, prim_funcs, relax_names, vm_codegen
from .offload import NONE, check_offload
from .pass_contexts import with_instruments
from .reuse import BuildCache
from .stats import CompileStats
from .tuning_records import TuningRecords


def _no_watch(kind: str, names: tuple[str, ...]) -> AbstractContextManager:
    return nullcontext()


class Build:
    """Builds PrimFuncs and Relax VMs for one target and pipeline, keeping what it built.

    Its parts: `cache` (memory and disk, reuse.py), `kernel_builds` (refusals,
    batches, `tirx.build`: kernel_builds.py), `schedules` (what the pipeline's kernels get
    after it), and `builder`, where the heavy steps run. `checked` puts the crash guards
    (bounds and division asserts) into CPU kernels; `offload="torch"` sends the heavy Relax
    ops to PyTorch (offload.py); `compiling(kind, names)` is a context manager around each
    TVM build. `local` is the runner's word (runner.py): False when the code runs on another
    machine (RPC), never here. `scheduled=False` leaves the pipeline's kernels as TVM makes
    them (a reference build's: `reference`).
    """

    def __init__(
        self,
        options: ModuleOptions,
        stats: CompileStats,
        persistent=None,
        module_name: str = "NAME",
        *,
        local: bool = True,
        builder: Builder = HERE,
        compiling: Compiling = _no_watch,
        site_of: Callable[[str, str], object] | None = None,
        scheduled: bool = True,
    ):
        self.options = options
        self.recipe = recipe = Recipe.of(options, local=local)
        self.target, self.pipeline = recipe.target, recipe.pipeline
        self.offload = check_offload(options.offload, self.target, remote=not local)
        self.target_name = options.target
        self.module_name = module_name
        self.local = local
        self.stats = stats
        self.checked = checked = options.checked
        self.builder = builder
        self.compiling = compiling = giving_sigint_back(compiling)
        # where a binding came from in the user's code (`site_of(function, binding)`), for what
        # a compile says about a kernel: a model's module and source line
        self.site_of = site_of
        self.scheduled = scheduled
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
        # schedules for the pipeline's kernels (tuned, DLight), applied to its output
        self.schedules = KernelSchedules(TuningRecords(persistent, module_name, self.target))
        self.kernel_builds = KernelBuilds(
            recipe,
            module_name,
            local=local,
            cache=self.cache,
            stats=stats,
            compiling=compiling,
            builder=builder,
        )
        self.is_gpu = self.kernel_builds.is_gpu
        self._noticed: set[str] = set()  # kernels whose schedule fallback was said already

    def reference(self) -> Build:
        """A build of this module's functions with every optional pass off: the `default`
        pipeline (legalization and what the VM needs, no fusion), no schedules, no offload, by
        the same builder; nothing kept on disk."""
        options = dataclasses.replace(self.options, pipeline="default", offload=NONE)
        return Build(
            options,
            CompileStats(),
            None,
            self.module_name,
            local=self.local,
            builder=self.builder,
            scheduled=False,
        )

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

    def build_kernel_module(self, name: str, func: tvm.tirx.PrimFunc, instruments=()):
        """One PrimFunc's library to read (its LLVM IR, assembly, lowered TIR), built in this
        process, where `instruments` watch its passes; with a builder elsewhere (--isolate)
        only once that one built it (a crash there is an error, not the end of the kernel)."""
        return self.kernel_builds.build_to_read(name, func, with_instruments(*instruments))

    def tirx_build(self, funcs: dict[str, tvm.tirx.PrimFunc]):
        """One `tirx.build` of `funcs` (`{name: func}`), as this build makes them."""
        return self.kernel_builds.tirx_build(funcs)

    # -- Relax VMs -----------------------------------------------------------------
    def link(self, mod: tvm.IRModule, *, use_cache: bool = True) -> Linked:
        """`mod` (Relax functions, the PrimFuncs they call) lowered and linked, unless kept."""
        linked = self.cache.vm(mod, relax_names(mod)) if use_cache else None
        if linked is None:
            linked = lower_and_link(mod, self, use_cache=use_cache)
            self.cache.keep_vm(linked)
        return linked

    def link_standalone(
        self, mod: tvm.IRModule, kernels: dict[str, tvm.tirx.PrimFunc]
    ) -> tuple[tvm.runtime.Module, list[str]]:
        """The Relax functions of `mod` and the PrimFuncs `kernels` linked into one executable
        that a file can hold (`export_library`), and the kernels' names: `lower_and_link`
        with `standalone`."""
        linked = lower_and_link(mod, self, standalone=kernels)
        return linked.executable, list(linked.kernels)

    def lower(
        self, mod: tvm.IRModule, *, offload: str | None = None, scheduled: bool = True
    ) -> tvm.IRModule:
        """`mod` after this module's Relax pipeline, for the target: its heavy ops sent to
        PyTorch first with --offload torch; then, with `scheduled`, the schedules
        `schedules` gives its kernels (tuned, DLight), and for the matmul and convolution
        kernels left the CPU schedule (cpu_schedules.py; the module's own PrimFuncs are left as
        written). TVM's warnings about the code its legalization writes (`take` in fast
        mode, `pow` with a large exponent: every imported transformer has both) say nothing a
        user can act on, and would land in the cell's output at each compile: they are kept
        out of it."""
        return self.lowered(mod, offload=offload, scheduled=scheduled)[0]

    def lowered(
        self, mod: tvm.IRModule, *, offload: str | None = None, scheduled: bool = True
    ) -> tuple[tvm.IRModule, Recording]:
        """`lower`, and what the pipeline showed of the kernels it made (`Linked.sites`)."""
        lowered, recorded = self.builder.lower(mod, self.recipe, offload or self.offload)
        if not scheduled:
            return lowered, recorded
        lowered = self.schedules.apply(lowered)
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

    def record(self, kind: str, names: Iterable[str], start: float) -> None:
        self.stats.record(kind, names, self.target_name, start)


def lower_and_link(
    mod: tvm.IRModule,
    build: Build,
    *,
    use_cache: bool = True,
    standalone: dict[str, tvm.tirx.PrimFunc] | None = None,
) -> Linked:
    """`mod` (Relax functions and the PrimFuncs they call) through `build`'s pipeline (where
    its builder runs it) and schedules, VM codegen, and the link with its kernels' libraries
    (built where the builder builds, or kept); a failure is a `CompileError` naming the
    binding at fault.

    `standalone` (`{name: PrimFunc}`): an executable a file can hold (`export_library`):
    those kernels in it too, every kernel built anew into one library, and linked where they
    are built (a library loaded from a file cannot be linked into one that is written);
    TVM's own kernels for every op, also with --offload torch (a library cannot carry
    Python)."""
    names = relax_names(mod)
    if standalone is not None:
        lowered, recorded = build.lowered(mod, offload=NONE) if names else (None, None)
        exe, built = build.builder.link_standalone(lowered, standalone, build.recipe)
        return Linked(mod, lowered, exe, dict.fromkeys(built, exe), recorded)
    start = time.perf_counter()
    try:
        with build.compiling("vm", names):
            lowered, recorded = build.lowered(mod, scheduled=build.scheduled)
        builder, called = vm_codegen(lowered)
    except CompileError:  # the build worker's own account of a crash
        build.record("vm", names, start)
        raise
    except Exception as err:
        build.record("vm", names, start)
        raise lowering_failure(mod, err, build.target, build.site_of) from err
    build_start = time.perf_counter()
    _refuse_unbound_pipeline_kernels(build, mod, names, called)
    built = _libraries(build, mod, called, use_cache, recorded.sites())
    start += time.perf_counter() - build_start  # PrimFunc builds are recorded on their own
    try:
        libraries = link_order(built) or [b.lib for b in built.values()]
        exe = link_vm(builder, build.target, libraries, lowered)
    except Exception as err:
        raise CompileError(f"Relax VM link failed: {last_reason(err)}") from err
    finally:
        build.record("vm", names, start)
    return Linked(mod, lowered, exe, {name: b.lib for name, b in built.items()}, recorded)


def _libraries(
    build: Build, mod: tvm.IRModule, called: dict, use_cache: bool, sites: KernelSites
) -> dict[str, Built]:
    """The libraries of the kernels `called`, in an order a link takes; a kernel that does
    not compile raises, named as the user knows it."""
    kernel_builds = build.kernel_builds
    built = kernel_builds.libraries(called, set(called), use_cache)
    for name, kernel in built.items():
        if isinstance(kernel.lib, CompileError):
            raise _kernel_failure(build, mod, name, kernel.lib, sites)
    if link_order(built) is None:  # kept libraries disagree on a kernel both hold: anew
        built = kernel_builds.build_together(called) or {
            n: kernel_builds.build_one(n, f) for n, f in called.items()
        }
    return built


def _refuse_unbound_pipeline_kernels(build: Build, mod: tvm.IRModule, names, called) -> None:
    """On a GPU, kernels the pipeline made without thread bindings: the advice names the
    Relax function to schedule (its kernels are not the user's to name)."""
    if not build.is_gpu:
        return
    own = {gv.name_hint for gv in mod.get_global_vars()}
    unbound = sorted(n for n, f in called.items() if n not in own and not binds_threads(f))
    if unbound:
        raise CompileError(
            f"pipeline `{build.pipeline.name}` leaves kernel(s) {', '.join(unbound)} without "
            f"GPU thread bindings, so they cannot run on target {build.target_name}; schedule "
            f'them with {build.module_name}.schedule("{names[0]}", "dlight") or use '
            "--pipeline target"
        )


def _kernel_failure(
    build: Build, mod: tvm.IRModule, kernel: str, failed: CompileError, sites: KernelSites
) -> CompileError:
    """A kernel does not compile: one of `mod`'s own is named; one the pipeline made is named
    with the Relax bindings it computes, as the user's text shows them, and where they came
    from (a model's module and source line)."""
    own = any(gv.name_hint == kernel for gv in mod.get_global_vars())
    calls = [] if own else sites.kernel_of(kernel)
    found = None if own else kernel_binding(mod, kernel, build.target, build.site_of)
    if calls and (found is None or len(calls[0][1]) > 1):  # a fused kernel
        what = describe_kernel(sites, kernel, build.site_of)
        error = CompileError(f"{what} {failed.detail}", function=calls[0][0])
    elif found is not None:
        what = f"{found[1]} (kernel `{kernel}`)"
        error = CompileError(f"{what} {failed.detail}", function=found[0])
    else:
        error = CompileError(failed.detail, function=kernel, about=failed.about)
    error.__cause__ = failed.__cause__
    return error
