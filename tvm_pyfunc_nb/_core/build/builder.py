"""Where a build's heavy steps run, chosen once, when a module is made: here, or elsewhere.

A `Build` (build.py) is given its `Builder` when it is made and keeps it, as a
live module keeps its runner. `Builder` runs the steps in this process;
`WorkerBuilder` (faults/isolation.py) has the build worker run these same
functions (`--isolate`), where a crash of TVM is an error and not the end of
the kernel. The steps:

- `lower`: the Relax pipeline (with --offload torch, the heavy ops sent to
  PyTorch first): the lowered module, and what the pipeline showed of the
  kernels it made (kernel_sites.py);
- `tirx_build`: one `tirx.build` of PrimFuncs as a build compiles them
  (`Recipe.as_built`: named, crash guards in);
- `link_standalone`: VM codegen of a lowered module, linked with its kernels
  built anew into one library: what a file can hold (`export_library`);
- `translate_first`: an import's translation, tried where a crash is survived
  (here nothing: this process's own translation is the import).

A `Recipe` is what a build makes, whoever builds it: the module's options
(what crosses to the worker, which resolves them again) and, resolved, the
target and the Relax pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import relax

from ...errors import TVMModuleError, last_reason, native_stderr_silenced, native_stderr_without
from ..options import TARGET_ENV, ModuleOptions, default_target
from .crash_guards import guard
from .kernel_sites import Recording, recording
from .linking import link_vm, vm_codegen
from .offload import TORCH, offload_to_torch
from .pipelines import Pipeline, pipeline_for
from .target_text import check_cpu, target_config


@dataclass(frozen=True)
class Recipe:
    """What a build makes: for `options`, code for `target` through `pipeline`."""

    options: ModuleOptions
    target: tvm.target.Target
    pipeline: Pipeline

    @classmethod
    def of(cls, options: ModuleOptions, *, local: bool = True) -> Recipe:
        """`options` resolved: the target (`local`: code that runs on this machine) and the
        pipeline for it."""
        target = resolved_target(options.target, local)
        return cls(options, target, pipeline_for(options.pipeline, target))

    def as_built(self, funcs: dict[str, tvm.tirx.PrimFunc]) -> tvm.IRModule:
        """`funcs` (`{name: func}`) as a build compiles them: named, guards in if checked (CPU)."""
        checked = self.options.checked and self.target.kind.name == "llvm"

        def built(name: str, func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
            return (guard(func, name) if checked else func).with_attr("global_symbol", name)

        return tvm.IRModule({tvm.ir.GlobalVar(n): built(n, f) for n, f in funcs.items()})


class Builder:
    """Runs a build's heavy steps in this process."""

    elsewhere = False  # True: the steps run in another process

    def lower(
        self, mod: tvm.IRModule, recipe: Recipe, offload: str
    ) -> tuple[tvm.IRModule, Recording]:
        """`mod` through `recipe`'s Relax pipeline, and what it showed of the kernels it made
        (`.sites()`)."""
        return pipeline_here(mod, recipe, offload)

    def tirx_build(self, mod: tvm.IRModule, target: tvm.target.Target) -> tvm.runtime.Module:
        """One `tirx.build` of `mod`, a module of PrimFuncs as `Recipe.as_built` makes them."""
        return build_here(mod, target)

    def link_standalone(
        self, lowered: tvm.IRModule | None, kernels: dict[str, tvm.tirx.PrimFunc], recipe: Recipe
    ) -> tuple[tvm.runtime.Module, list[str]]:
        """`lowered` (None: no Relax function) linked with `kernels` and the kernels it calls,
        all built together, into one executable a file can hold; and the kernels' names."""
        return standalone_here(lowered, kernels, recipe)

    def translate_first(self, exported, name: str, model_name: str, custom_convert_map) -> None:
        """Nothing: this process's own translation is the import."""

    def warm(self) -> None:
        """Get ready for the first build (nothing to do here)."""


HERE = Builder()


def pipeline_here(
    mod: tvm.IRModule, recipe: Recipe, offload: str
) -> tuple[tvm.IRModule, Recording]:
    """`mod` through `recipe`'s Relax pipeline in this process (its heavy ops sent to PyTorch
    first with --offload torch), and what the pipeline showed of the kernels it made."""
    with recipe.target, native_stderr_silenced(), recording() as recorded:
        offloaded = offload_to_torch(mod) if offload == TORCH else mod
        return recipe.pipeline.make()(offloaded), recorded


def build_here(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.runtime.Module:
    """`tirx.build` in this process (TVM's warnings about the code, e.g. on `pow`, kept out of
    the cell's output)."""
    with native_stderr_silenced():
        return tvm.tirx.build(mod, target=target)


def standalone_here(
    lowered: tvm.IRModule | None, kernels: dict[str, tvm.tirx.PrimFunc], recipe: Recipe
) -> tuple[tvm.runtime.Module, list[str]]:
    """`Builder.link_standalone` in this process. The kernels are built again, together: a
    library loaded from a file (the compile cache's, the build worker's) cannot be linked into
    one that is written."""
    builder, called = relax.ExecBuilder(), {}
    if lowered is not None:
        builder, called = vm_codegen(lowered)
    functions = {**called, **{n: f for n, f in kernels.items() if n not in called}}
    libs = [build_here(recipe.as_built(functions), recipe.target)] if functions else []
    return link_vm(builder, recipe.target, libs, lowered), list(functions)


# What TVM says when it makes a CUDA target without an `arch` and finds no GPU to ask (it takes
# sm_50). Code for a CUDA target cannot run on such a machine anyway, while its source can be
# read there; on a machine with a GPU, TVM asks the GPU and says nothing.
NO_CUDA_VERSION = "Unable to detect CUDA version"


def resolved_target(target: str, local: bool = True) -> tvm.target.Target:
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
