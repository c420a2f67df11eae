"""What a build worker does, job by job: the one job set of `--isolate` and `bisect`.

Each job is a frozen dataclass that crosses to the worker pickled; its `run(log)`
runs there, in the caller's `PassContext` (`CallerContext`), and calls the
same function a build calls in this process (builder.py, build.py), so a
build in the worker is the same build, elsewhere. Its stages reach the
parent as it enters them, so a crash names its stage. Across the boundary:
- IR as `tvm.ir.save_json` text (structurally equal after `load_json`, in
  milliseconds even with a model's weights); a target as its JSON form;
- tensors as numpy arrays;
- a PyTorch model as its `ExportedProgram`, saved with `torch.export.save`;
- libraries as `.so` files written with `library_files.write_library` into the
  worker's private directory; the parent loads them (`load_library`, which
  keeps their bytes, so that they can be written again) and deletes the file;
- a Relax pipeline by its name when TVM registers it; one registered in this
  process (`relax.register_pipeline`, a notebook's own) by value, with
  cloudpickle: its function and what it refers to. Checked on 0.27: a pass
  made inside the pipeline function (`tvm.transform.module_pass(f, ...)`, or a
  function decorated there), and a class decorated with `@module_pass` at the
  notebook's top level, both arrive and run. A *function* decorated with
  `@module_pass` at top level does not: the pass object is pickled without
  its Python function, and running it in the worker fails with TVM's
  "bad_function_call". Make such a pass inside the pipeline function.

The jobs (the parent's side is faults/isolation.py, `WorkerBuilder`):
- `Lower`: the Relax pipeline, every pass a stage (`pipeline_here`);
- `BuildKernels`: one `tirx.build`, then codegen and the link of its library
  (`build_here`);
- `LinkStandalone`: VM codegen and link with every kernel built anew into
  one library, written (`standalone_here`);
- `Translate`: `add_torch`'s translation by TVM's importer;
- `BuildAndRun`: `bisect`'s build with passes switched off (`lower_and_link`),
  run on the inputs.

Nothing is kept between jobs but each module's resolved `Recipe`: the caches
stay the parent's.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from ...options import ModuleOptions, device_of
from ..build import Build, lower_and_link
from ..builder import Recipe, build_here, pipeline_here, standalone_here
from ..library_files import write_library
from ..pass_contexts import CallerContext
from ..stats import CompileStats
from .child import StageLog
from .pass_log import PIPELINE, PassKey, PassRun, logged_passes

TIR_BUILD = "the TIR build"  # its passes; then "codegen" (LLVM's machine code), then "link"


# -- pipelines ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Pipelines:
    """Relax pipelines registered in the parent that TVM does not register itself, by value."""

    makers: tuple[tuple[str, bytes], ...] = ()

    @classmethod
    def of(cls, options: ModuleOptions) -> Pipelines:
        """The pipeline `options` names, by value, if this process registered it itself."""
        from tvm.relax.pipeline import PIPELINE_MAP

        maker = PIPELINE_MAP.get(options.pipeline)
        if maker is None or maker.__module__.startswith("tvm."):
            return cls()
        import cloudpickle

        return cls(((options.pipeline, cloudpickle.dumps(maker)),))

    def register(self) -> None:
        """Register, in the worker, the pipelines it does not have."""
        from tvm.relax.pipeline import PIPELINE_MAP

        for name, maker in self.makers:
            if name not in PIPELINE_MAP:
                import cloudpickle

                relax.register_pipeline(name)(cloudpickle.loads(maker))


def _recipe(options: ModuleOptions, pipelines: Pipelines) -> Recipe:
    """The worker's `Recipe` for `options`, resolved once (its target and pipeline)."""
    pipelines.register()
    if options not in _RECIPES:
        _RECIPES[options] = Recipe.of(options)
    return _RECIPES[options]


_RECIPES: dict[ModuleOptions, Recipe] = {}


def _written(lib: tvm.runtime.Module, output: str, log: StageLog) -> None:
    write_library(lib, output, on_step=log.stage)
    os.chmod(output, 0o600)  # whatever the umask: the parent loads only a private file


# -- the jobs ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Lower:
    """Relax functions through the module's pipeline: the IR after it, and the bindings each
    kernel computes."""

    options: ModuleOptions
    context: CallerContext
    module: str
    names: tuple[str, ...]
    offload: str
    pipelines: Pipelines = field(default_factory=Pipelines)

    def describe(self) -> str:
        return f"lowering {', '.join(self.names)}"

    def run(self, log: StageLog) -> tuple[str, object]:
        recipe = _recipe(self.options, self.pipelines)
        mod = tvm.ir.load_json(self.module)
        with (
            self.context.entered(),
            logged_passes(log) as passes,
            passes.in_phase(PIPELINE, self.describe()),
        ):
            lowered, recorded = pipeline_here(mod, recipe, self.offload)
        return tvm.ir.save_json(lowered), recorded.sites()


@dataclass(frozen=True)
class BuildKernels:
    """PrimFuncs (as the parent's build makes them: named, guards in) built into one
    library, written to `output`."""

    target: dict
    context: CallerContext
    module: str
    names: tuple[str, ...]
    output: str

    def describe(self) -> str:
        return f"building {', '.join(self.names)}"

    def run(self, log: StageLog) -> None:
        """Stages: the TIR build, codegen, link. Not each TIR pass: telling the parent of each
        (80 for one kernel) added a fifth to every build; `bisect` names the pass."""
        log.stage(TIR_BUILD)
        with self.context.entered():
            lib = build_here(tvm.ir.load_json(self.module), tvm.target.Target(self.target))
        _written(lib, self.output, log)


@dataclass(frozen=True)
class LinkStandalone:
    """A lowered module ("" for none) and PrimFuncs linked into one executable a file can hold,
    written to `output`; returns the kernels' names."""

    options: ModuleOptions
    context: CallerContext
    lowered: str
    kernels: str
    output: str
    pipelines: Pipelines = field(default_factory=Pipelines)

    def describe(self) -> str:
        return "linking a library"

    def run(self, log: StageLog) -> list[str]:
        recipe = _recipe(self.options, self.pipelines)
        lowered = tvm.ir.load_json(self.lowered) if self.lowered else None
        kernels = {gv.name_hint: f for gv, f in tvm.ir.load_json(self.kernels).functions_items()}
        log.stage(TIR_BUILD)
        with self.context.entered():
            exe, names = standalone_here(lowered, kernels, recipe)
        _written(exe, self.output, log)
        return names


@dataclass(frozen=True)
class Translate:
    """`add_torch`'s translation of an `ExportedProgram` (saved with `torch.export.save`) by
    TVM's importer, as `importing.translate` runs it."""

    program: bytes
    name: str
    model_name: str
    converters: bytes | None  # the user's converters, by value (cloudpickle)

    def describe(self) -> str:
        return f"importing {self.model_name}"

    def run(self, log: StageLog) -> None:
        import torch

        from ...models.importing import translate

        log.stage("import")
        exported = torch.export.load(io.BytesIO(self.program))
        converters = None
        if self.converters is not None:
            import cloudpickle

            converters = cloudpickle.loads(self.converters)
        translate(exported, self.name, self.model_name, converters)


@dataclass(frozen=True)
class RunReport:
    """A build with some passes off, run once: its outputs, every pass it ran or skipped, and
    the IR before and after each pass asked for (JSON)."""

    outputs: list[np.ndarray]
    passes: tuple[PassRun, ...]
    snapshots: dict[PassKey, tuple[str, str]]
    inputs: list[np.ndarray] = field(default_factory=list)  # after the run: what it wrote into


@dataclass(frozen=True)
class BuildAndRun:
    """`function` of `module` lowered, built and linked as the module's `Build` does it, with
    the passes in `skip` switched off, then run on `inputs` (on the module's device)."""

    options: ModuleOptions
    context: CallerContext
    module: str
    function: str
    inputs: tuple[np.ndarray, ...]
    skip: frozenset[PassKey] = frozenset()
    snapshots: frozenset[PassKey] = frozenset()
    pipelines: Pipelines = field(default_factory=Pipelines)

    def describe(self) -> str:
        off = f", {len(self.skip)} pass(es) off" if self.skip else ""
        return f"building and running {self.function}{off}"

    def run(self, log: StageLog) -> RunReport:
        mod = tvm.ir.load_json(self.module)
        self.pipelines.register()
        with self.context.entered(), logged_passes(log, self.skip, self.snapshots) as passes:
            build = Build(self.options, CompileStats(), compiling=passes.compiling)
            linked = lower_and_link(mod, build, use_cache=False)  # nothing kept from another run
        log.stage("run")
        device = device_of(self.options.device)
        vm = linked.vm(device)
        arguments = [tvm.runtime.tensor(a, device) for a in self.inputs]
        out = vm[self.function](*arguments)
        after = [a.numpy() for a in arguments]
        return RunReport(_flat_numpy(out), tuple(passes.runs), passes.snapshots, after)


def _flat_numpy(value) -> list[np.ndarray]:
    if isinstance(value, (tvm_ffi.Array, tuple, list)):
        return [a for item in value for a in _flat_numpy(item)]
    return [value.numpy()]
