"""What a build worker does, job by job, and the calls a parent makes to have it done.

Each job is a frozen dataclass that crosses to the worker pickled; its `run(log)`
runs there, with every pass logged (`pass_log.py`), so a crash names its stage.
Across the boundary:
- IR as `tvm.ir.save_json` text (structurally equal after `load_json`, in
  milliseconds even with a model's weights);
- tensors as numpy arrays;
- a PyTorch model as its `ExportedProgram`, saved with `torch.export.save`;
- libraries as `.so` files written with `library_files.write_library` into the
  worker's private directory, and a Relax VM's bytecode as the executable's own
  file; the parent loads them and deletes the file.
- a Relax pipeline by its name when TVM registers it; one registered in this
  process (`relax.register_pipeline`, a notebook's own) by value, with
  cloudpickle: its function and what it refers to. Checked on 0.27: a pass
  made inside the pipeline function (`tvm.transform.module_pass(f, ...)`, or a
  function decorated there), and a class decorated with `@module_pass` at the
  notebook's top level, both arrive and run. A *function* decorated with
  `@module_pass` at top level does not: the pass object is pickled without
  its Python function, and running it in the worker fails with TVM's
  "bad_function_call". Make such a pass inside the pipeline function.

Every job builds as the module's `Build` does (target, pipeline, crash guards,
offload), from the module's `ModuleOptions`, with nothing kept between jobs:
the caches stay the parent's.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.vm_build import _vmcodegen

from ..build import Build
from ..stats import CompileStats
from ..library_files import load_library, write_library
from ...options import ModuleOptions, device_of
from .child import StageLog
from .pass_log import PIPELINE, TIR, PassKey, PassRun, logged_passes
from .process import DEFAULT_TIMEOUT, BuildWorker

StageHook = Callable[[str], None]  # hears each stage a job enters (progress, a status line)

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


def _build(options: ModuleOptions, pipelines: Pipelines) -> Build:
    """The worker's `Build` for `options`, made once (its target, pipeline and checks): a job
    that lowers or builds uses no memory of an earlier one (`Build.link` does: `BuildAndRun`
    makes its own)."""
    pipelines.register()
    if options not in _BUILDS:
        _BUILDS[options] = Build(options, CompileStats())
    return _BUILDS[options]


_BUILDS: dict[ModuleOptions, Build] = {}


# -- PrimFuncs -------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildKernels:
    """PrimFuncs built into one library, as `Build.tirx_build` builds them (named, crash
    guards in when checked), written to `output`."""

    options: ModuleOptions
    module: str  # an IRModule of the PrimFuncs, as JSON
    names: tuple[str, ...]
    output: str

    def describe(self) -> str:
        return f"building {', '.join(self.names)}"

    def run(self, log: StageLog) -> None:
        funcs = {gv.name_hint: f for gv, f in tvm.ir.load_json(self.module).functions_items()}
        build = _build(self.options, Pipelines())
        with logged_passes(log) as passes, passes.in_phase(TIR, self.describe()):
            lib = build.tirx_build(funcs)
        write_library(lib, self.output, on_step=log.stage)
        os.chmod(self.output, 0o600)  # whatever the umask: the parent loads only a private file


def build_kernels(
    worker: BuildWorker,
    options: ModuleOptions,
    funcs: dict[str, tvm.tirx.PrimFunc],
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    on_stage: StageHook | None = None,
) -> tvm.runtime.Module:
    """`Build.tirx_build(funcs)` in the worker: the library of `funcs` (`{name: func}`), loaded
    here; it can be written again (`write_library`) as the compile cache does. For code that
    runs here: a library for a remote device (`--rpc`) could not be loaded to hand it back."""
    if options.rpc:
        raise NotImplementedError("the build worker builds for this machine, not for --rpc")
    output = worker.new_file(".so")
    module = tvm.ir.save_json(tvm.IRModule(dict(funcs.items())))
    try:
        job = BuildKernels(options, module, tuple(funcs), str(output))
        worker.run(job, timeout=timeout, on_stage=on_stage)
        return load_library(worker.trusted_file(output))
    finally:
        output.unlink(missing_ok=True)


# -- Relax functions ---------------------------------------------------------------------


@dataclass(frozen=True)
class Lower:
    """Relax functions through the module's pipeline (`Build.lower`) and VM codegen: the IR
    after the pipeline, what VM codegen leaves (the PrimFuncs to build), and the VM's
    bytecode and constants, written to `output`."""

    options: ModuleOptions
    module: str
    names: tuple[str, ...]  # its Relax functions
    output: str
    pipelines: Pipelines = field(default_factory=Pipelines)

    def describe(self) -> str:
        return f"lowering {', '.join(self.names)}"

    def run(self, log: StageLog) -> tuple[str, str]:
        mod = tvm.ir.load_json(self.module)
        build = _build(self.options, self.pipelines)
        with logged_passes(log) as passes:
            with passes.in_phase(PIPELINE, self.describe()):
                lowered = build.lower(mod)
            log.stage("vm codegen")
            builder = relax.ExecBuilder()
            leftover = _vmcodegen(builder, lowered)
        attrs = dict(lowered.attrs) if lowered.attrs else {}
        if attrs.get("external_mods") or attrs.get("const_name_to_constant"):
            raise NotImplementedError(
                "the pipeline made external modules (BYOC), which the worker cannot send back"
            )
        log.stage("write executable")
        builder.get().mod.write_to_file(self.output)
        os.chmod(self.output, 0o600)
        return tvm.ir.save_json(lowered), tvm.ir.save_json(leftover)


@dataclass(frozen=True)
class Lowered:
    """What `lower` brings back: the IR after the pipeline, the PrimFuncs VM codegen left (to
    build, e.g. with `build_kernels`), and the VM executable without them (`link_executable`
    adds them)."""

    lowered: tvm.IRModule
    leftover: tvm.IRModule
    executable: tvm.runtime.Module


def lower(
    worker: BuildWorker,
    options: ModuleOptions,
    mod: tvm.IRModule,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    on_stage: StageHook | None = None,
) -> Lowered:
    """`Build.lower` and VM codegen of `mod` in the worker."""
    output = worker.new_file(".vmexec")
    names = tuple(gv.name_hint for gv, f in mod.functions_items() if isinstance(f, relax.Function))
    job = Lower(options, tvm.ir.save_json(mod), names, str(output), Pipelines.of(options))
    try:
        lowered, leftover = worker.run(job, timeout=timeout, on_stage=on_stage)
        load = tvm.get_global_func("relax.ExecutableLoadFromFile")
        executable = load(str(worker.trusted_file(output)))
    finally:
        output.unlink(missing_ok=True)
    return Lowered(tvm.ir.load_json(lowered), tvm.ir.load_json(leftover), executable)


def link_executable(
    executable: tvm.runtime.Module, libraries: list[tvm.runtime.Module]
) -> relax.VMExecutable:
    """A VM executable that runs: `executable` (from `lower`) with the kernel libraries it calls
    imported, as `relax.VMLink` links them (without constants to load: `Lower` refuses those).
    A VM takes each kernel from the first library that has it."""
    for library in libraries:
        executable.import_module(library)
    return relax.VMExecutable(executable)


# -- bisect: build with passes off, run ---------------------------------------------------


@dataclass(frozen=True)
class RunReport:
    """A build with some passes off, run once: its outputs, every pass it ran or skipped, and
    the IR before and after each pass asked for (JSON)."""

    outputs: list[np.ndarray]
    passes: tuple[PassRun, ...]
    snapshots: dict[PassKey, tuple[str, str]]


@dataclass(frozen=True)
class BuildAndRun:
    """`function` of `module` lowered, built and linked as the module's `Build` does it, with
    the passes in `skip` switched off, then run on `inputs` (on the module's device)."""

    options: ModuleOptions
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
        build = Build(self.options, CompileStats())  # nothing kept from another run
        with logged_passes(log, self.skip, self.snapshots) as passes:
            build.on_compile = passes.compiling
            linked = build.link(mod, use_cache=False)
        log.stage("run")
        device = device_of(self.options.device)
        vm = linked.vm(device)
        out = vm[self.function](*[tvm.runtime.tensor(a, device) for a in self.inputs])
        return RunReport(_flat_numpy(out), tuple(passes.runs), passes.snapshots)


def build_and_run(
    worker: BuildWorker,
    options: ModuleOptions,
    mod: tvm.IRModule,
    function: str,
    inputs: list[np.ndarray],
    *,
    skip: frozenset[PassKey] = frozenset(),
    snapshots: frozenset[PassKey] = frozenset(),
    timeout: float | None = DEFAULT_TIMEOUT,
    on_stage: StageHook | None = None,
) -> RunReport:
    """Build `function` of `mod` with the passes in `skip` off and run it on `inputs`, in the
    worker (a crash raises `WorkerCrash`: bisect counts it as the fault)."""
    job = BuildAndRun(
        options,
        tvm.ir.save_json(mod),
        function,
        tuple(np.asarray(a) for a in inputs),
        frozenset(skip),
        frozenset(snapshots),
        Pipelines.of(options),
    )
    return worker.run(job, timeout=timeout, on_stage=on_stage)


def _flat_numpy(value) -> list[np.ndarray]:
    if isinstance(value, (tvm_ffi.Array, tuple, list)):
        return [a for item in value for a in _flat_numpy(item)]
    return [value.numpy()]


# -- PyTorch models ----------------------------------------------------------------------


@dataclass(frozen=True)
class ImportTorch:
    """An `ExportedProgram` (saved with `torch.export.save`, decomposed as TVM's importer
    wants it) translated by TVM's `ExportedProgramImporter`, as `importing.import_torch` calls
    it: the module, `main` before its weights were bound, and where each FX node's value is
    (its binding's position in `main`)."""

    program: bytes

    def describe(self) -> str:
        return "importing a PyTorch model"

    def run(self, log: StageLog) -> tuple[str, str, dict[str, int]]:
        import torch
        from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

        from ...models.dynamic_shapes import bounded_slices

        log.stage("import")
        exported = torch.export.load(io.BytesIO(self.program))
        importer = ExportedProgramImporter()
        mod = importer.from_exported_program(exported, False, True, False, bounded_slices(exported))
        before = importer.block_builder.get()["main"]
        position = {b.var: i for i, b in enumerate(_bindings(mod["main"]))}
        env = {
            node.name: position[value]
            for node, value in importer.env.items()
            if isinstance(value, relax.Var) and value in position
        }
        return tvm.ir.save_json(mod), tvm.ir.save_json(before), env


@dataclass(frozen=True)
class Imported:
    """What `import_torch` brings back: the importer's module, `main` before its weights were
    bound, and its environment (FX node -> Relax var), as `importing.import_torch` uses them."""

    mod: tvm.IRModule
    before_binding_params: relax.Function
    env: dict  # torch.fx.Node -> relax.Var, in FX order


def import_torch(
    worker: BuildWorker,
    exported,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    on_stage: StageHook | None = None,
) -> Imported:
    """TVM's translation of `exported` (an `ExportedProgram`, decomposed) in the worker."""
    import torch

    saved = io.BytesIO()
    torch.export.save(exported, saved)
    job = ImportTorch(saved.getvalue())
    module, before, env = worker.run(job, timeout=timeout, on_stage=on_stage)
    mod = tvm.ir.load_json(module)
    bindings = _bindings(mod["main"])
    nodes = {node.name: node for node in exported.graph.nodes}
    return Imported(
        mod,
        tvm.ir.load_json(before),
        {nodes[name]: bindings[i].var for name, i in env.items()},
    )


def _bindings(func: relax.Function) -> list:
    return [b for block in func.body.blocks for b in block.bindings]
