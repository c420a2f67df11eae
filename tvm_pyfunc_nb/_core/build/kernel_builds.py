"""Building PrimFuncs into libraries: what must not be built, batching, one `tirx.build` each.

The kernels one compile needs are built together, in one TVM build (one LLVM
module and one link instead of one each); if that fails, one by one, so that
a kernel that does not compile never hides the others. A kernel is refused
before it is built when its code could not run where it is meant to: it calls
a symbol this process lacks (LLVM's JIT would hand back an address that
segfaults when called), or it is for another architecture. Where the build
happens (here, or in the build worker with `--isolate`) is the `builder`'s
to say (builder.py): `tirx_build` hands it the module.

A kernel that does not compile is kept with its error, so that the error is
not worked out again; a build that could not run where it runs (the build
worker died, the caller's PassContext cannot travel there) says nothing of
the kernel, and is not kept: the next call builds again.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

import tvm
import tvm_ffi

from ...errors import CompileError, WorkerCrash, reason_sentence
from .builder import Builder, Recipe, build_here
from .crash_guards import missing_symbols
from .linking import Built
from .pass_contexts import CannotTravel
from .reuse import BuildCache
from .stats import CompileStats

_UNKNOWN_SCOPE = re.compile(r"unknown storage scope ([\w.:]+)")
_NO_INTRINSIC = re.compile(r"Cannot find intrinsic declaration.*?: \w+\.(\w+)")
GPU_KINDS = frozenset({"cuda", "rocm", "metal", "vulkan", "opencl", "webgpu"})

Compiling = Callable[[str, tuple[str, ...]], AbstractContextManager]


class KernelBuilds:
    """Builds the PrimFuncs of one target: refusals, batches, one by one; `cache` keeps them."""

    def __init__(
        self,
        recipe: Recipe,
        module_name: str,
        *,
        local: bool,
        cache: BuildCache,
        stats: CompileStats,
        compiling: Compiling,
        builder: Builder,
    ):
        self.recipe, self.target = recipe, recipe.target
        self.target_name, self.module_name = recipe.options.target, module_name
        self.cache, self.stats, self.compiling = cache, stats, compiling
        self.builder = builder  # where `tirx.build` runs: here, or in the build worker
        self.is_gpu = self.target.kind.name in GPU_KINDS
        # kernels that run in this process, on its CPU: JIT-compiled by LLVM when built
        self.runs_here = local and self.target.kind.name == "llvm"
        self._foreign = _foreign_architecture(self.target) if self.runs_here else None

    def libraries(self, funcs: dict, wanted: Iterable[str], use_cache: bool) -> dict[str, Built]:
        """The `wanted` kernels of `funcs`, from a cache or built; when one has to be built,
        every function of `funcs` that no cache has is built with it."""
        found: dict[str, Built] = {}
        stale: dict[str, tvm.tirx.PrimFunc] = {}

        def look_up(names, counted: bool) -> None:
            for name in names:
                built = self.cache.kernel(name, funcs[name], counted=counted, disk=use_cache)
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
            found.update(self.build_together(together))
        for name, func in stale.items():
            if name not in found:
                found[name] = self.build_one(name, func)
        return found

    def build_one(self, name: str, func) -> Built:
        with self.compiling("tir", (name,)):
            built = Built(self._build_kernel(name, func), frozenset({name}))
        if not isinstance(built.lib, CompileError) or the_kernels_own(built.lib):
            self.cache.keep_kernels({name: func}, built)
        return built

    def build_together(self, funcs: dict[str, tvm.tirx.PrimFunc]) -> dict[str, Built]:
        """`funcs` in one `tirx.build`, one library holding them all; {} if that fails."""
        names = tuple(sorted(funcs))  # the order of an IRModule's functions varies by process
        start = time.perf_counter()
        try:
            with self.compiling("tir", names):
                lib = self.tirx_build(funcs)
                if self.runs_here:
                    for name in names:  # JIT now, so the time is counted here
                        lib.get_function(name)
        except Exception:  # TVM raises many types: the functions are built one by one instead
            self.stats.seconds += time.perf_counter() - start
            return {}
        self.stats.record("tir", names, self.target_name, start)
        built = Built(lib, frozenset(names))
        self.cache.keep_kernels(funcs, built)
        return {name: built for name in names}

    def _batchable(self, name: str, func) -> bool:
        """Whether `func` may go into a build with others: not one refused before building
        (`_build_kernel` says why, for that function alone)."""
        if self.is_gpu:
            return binds_threads(func)
        return self.refusal(name, func) is None

    def refusal(self, name: str, func) -> CompileError | None:
        """Why `func` must not be built to run here, if it must not."""
        missing = missing_symbols(func) if self.runs_here else []
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

    def _build_kernel(self, name: str, func: tvm.tirx.PrimFunc):
        refusal = self.refusal(name, func)
        if refusal is not None:
            return refusal
        start = time.perf_counter()
        try:
            lib = self._kernel_module(name, func)
            if self.runs_here:  # JIT now, so the time is counted here and not at the first call
                lib.get_function(name)
        except CompileError as err:
            return err
        except Exception as err:  # TVM raises many types; each means "this does not compile"
            return _compile_failure(err, name, func, self.target_name, self.is_gpu)
        finally:
            self.stats.record("tir", (name,), self.target_name, start)
        return lib

    def _kernel_module(self, name: str, func: tvm.tirx.PrimFunc):
        """`tirx.build` of one PrimFunc as this build makes it (guards in if checked, on CPU)."""
        self._check_threads(name, func)
        return self.tirx_build({name: func})

    def build_to_read(self, name: str, func: tvm.tirx.PrimFunc, context) -> tvm.runtime.Module:
        """One PrimFunc's library to read (its LLVM IR, assembly, lowered TIR), built in this
        process in PassContext `context` (whose instruments watch its passes); with a builder
        elsewhere (--isolate) only once that one built it (a crash there is an error, not the
        end of the kernel)."""
        self._check_threads(name, func)
        if self.builder.elsewhere:
            self.tirx_build({name: func})
        with context:
            return build_here(self.recipe.as_built({name: func}), self.target)

    def _check_threads(self, name: str, func: tvm.tirx.PrimFunc) -> None:
        if self.is_gpu and not binds_threads(func):
            advice = _unbound_advice(name, func, self.target_name, self.module_name)
            raise CompileError(advice, function=name)

    def tirx_build(self, funcs: dict[str, tvm.tirx.PrimFunc]):
        """One `tirx.build` of `funcs` (`{name: func}`), as this build makes them."""
        return self.builder.tirx_build(self.recipe.as_built(funcs), self.target)


def the_kernels_own(error: CompileError) -> bool:
    """Whether `error` says something of the kernel (kept, so that it is not worked out again):
    not when the build could not run where it runs (the build worker died; the caller's
    PassContext cannot travel there)."""
    return not isinstance(error.__cause__, (WorkerCrash, CannotTravel))


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


def _host_architecture() -> str:
    return tvm.target.codegen.llvm_get_system_triple().split("-")[0]


def _foreign_architecture(target: tvm.target.Target) -> str | None:
    """The architecture of an LLVM `target` whose code cannot load here (None if it can)."""
    triple = str(target.attrs.get("mtriple", "") or "")
    arch = triple.split("-")[0]
    return arch if arch and arch != _host_architecture() else None


def binds_threads(func: tvm.tirx.PrimFunc) -> bool:
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
