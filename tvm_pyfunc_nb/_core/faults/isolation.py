"""`--isolate`: a live module's imports and compiles run in the build worker, so that a crash
inside TVM (a segfault, an abort, LLVM's fatal error) is an error here, not the end of the
kernel.

What runs there, and what comes back (build/worker/ has the machinery):
- the Relax pipeline (the offload to PyTorch included), every pass logged: the IR
  after it, as JSON, and the bindings each kernel computes (`KernelSites`); the
  schedules, VM codegen and the link of the bytecode stay here (no machine code);
- every `tirx.build`, through LLVM's code generation and the C compiler's link: the
  library as a file (`library_files.write_library`), loaded here with
  `load_library`, whose bytes the compile cache then stores as they are;
- `add_torch`'s translation by TVM's importer, on the `ExportedProgram` (sent with
  `torch.export.save`), exactly as `importing.translate` runs it here: once it
  survives there, this process translates the same program (the importer's
  environment, FX node to Relax var, cannot travel), and an error of the importer is
  raised here as without --isolate.

The worker is the process's one (`shared_worker`), started when an isolated module is
made and kept warm; a job sends only what it builds (an edit of one PrimFunc sends that
one). A death there is a `CompileError` (or `ModelImportError`) that names the function,
the stage (a pipeline pass, a TIR pass, codegen, link, import) and the signal, and
suggests `bisect`; the next job finds a fresh worker, and the module is as it was.
Still built here: what `export_library` writes (a library must be built in the process
that writes it), a kernel's code to read (`source`, `lowered`: built here once the worker
survived building it) and MetaSchedule's tuning candidates.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field

import tvm

from ...errors import CompileError, ModelImportError, TVMModuleError, WorkerCrash
from ..build.build import Build, pipeline_here
from ..build.kernel_builds import build_here
from ..build.kernel_sites import KernelSites
from ..build.library_files import load_library, write_library
from ..build.linking import relax_names
from ..build.stats import CompileStats
from ..build.worker import BuildWorker, shared_worker
from ..build.worker.child import StageLog
from ..build.worker.jobs import Pipelines
from ..build.worker.pass_log import PIPELINE, logged_passes
from ..options import ModuleOptions


def isolate(build: Build, options: ModuleOptions, worker: BuildWorker | None = None) -> Isolation:
    """Have `build` run its Relax pipeline and every `tirx.build` in the build worker."""
    if not build.local:
        raise TVMModuleError(
            "--isolate builds for this machine; with --rpc the code is built here "
            "(drop one of the two)"
        )
    isolation = Isolation(options, build.module_name, worker or shared_worker())
    build.run_pipeline = isolation.pipeline
    build.kernel_builds.builder = isolation.tirx_build
    isolation.worker.start()  # warm by the time the first compile asks
    return isolation


class Isolation:
    """The calls of one isolated module into the worker, and a crash there as its error."""

    def __init__(self, options: ModuleOptions, module_name: str, worker: BuildWorker):
        self.options = options
        self.module_name = module_name
        self.worker = worker
        self.pipelines = Pipelines.of(options)

    def pipeline(self, build: Build, mod: tvm.IRModule, offload: str):
        """`pipeline_here` in the worker: the lowered module, and what it showed of the
        kernels."""
        names = relax_names(mod)
        job = PipelineJob(self.options, tvm.ir.save_json(mod), names, offload, self.pipelines)
        try:
            lowered, sites = self.worker.run(job)
        except WorkerCrash as crash:
            function = names[0] if len(names) == 1 else None
            raise CompileError(self._crashed(crash, names), function=function) from crash
        return tvm.ir.load_json(lowered), Sites(sites)

    def tirx_build(self, mod: tvm.IRModule, target: tvm.target.Target):
        """`build_here(mod, target)` in the worker, through codegen and link: the library,
        loaded here."""
        names = tuple(gv.name_hint for gv in mod.get_global_vars())
        output = self.worker.new_file(".so")
        job = TirBuildJob(self.options, tvm.ir.save_json(mod), names, str(output))
        try:
            self.worker.run(job)
            return load_library(self.worker.trusted_file(output))
        except WorkerCrash as crash:
            function = names[0] if len(names) == 1 else None
            raise CompileError(self._crashed(crash, names), function=function) from crash
        finally:
            output.unlink(missing_ok=True)

    def translate_first(self, exported, name: str, model_name: str, custom_convert_map) -> None:
        """`importing.translate` of `exported` in the worker; a crash there is a
        `ModelImportError`. What the importer raises is left to this process's own
        translation, which raises it again, as without --isolate."""
        import torch

        saved = io.BytesIO()
        torch.export.save(exported, saved)
        job = TranslateJob(saved.getvalue(), name, model_name, _by_value(custom_convert_map))
        try:
            self.worker.run(job)
        except WorkerCrash as crash:
            what = f"{model_name} (add_torch)"
            raise ModelImportError(self._crashed(crash, (name,), what), function=name) from crash
        except Exception:  # translated again here, which raises it as itself
            return

    def _crashed(self, error: WorkerCrash, names: tuple[str, ...], what: str | None = None) -> str:
        """What a crash says: what TVM was doing, at which stage, how the worker died, its last
        words, and that the module is as it was; for a compile, that `bisect` finds the pass."""
        crash = error.crash
        said = _last_words(crash.output)
        text = (
            f"TVM crashed in {crash.stage} of {what or ', '.join(names)}: the build worker "
            f"{crash.cause}" + (f", saying {said!r}" if said else "") + "; the module is as it "
            "was and keeps working"
        )
        if what is not None:  # an import: no pass of a pipeline to find
            return text
        fn = names[0] if len(names) == 1 else "FUNCTION"
        return text + f'. {self.module_name}.bisect("{fn}", *args) finds the pass at fault'


@dataclass(frozen=True)
class Sites:
    """What the pipeline in the worker showed of its kernels, as `kernel_sites.Recording`
    gives it."""

    found: KernelSites

    def sites(self) -> KernelSites:
        return self.found


def _last_words(output: str) -> str:
    """The line of the worker's last words that says what went wrong (LLVM's `LLVM ERROR:`,
    a fatal Python error), else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if "ERROR" in line or line.startswith("Fatal Python error"):
            return line[:200]
    return lines[-1][:200] if lines else ""


def _by_value(custom_convert_map: dict | None) -> bytes | None:
    """The user's converters, with what they refer to (cloudpickle: they are the notebook's)."""
    if not custom_convert_map:
        return None
    import cloudpickle

    return cloudpickle.dumps(custom_convert_map)


# -- what the worker does ------------------------------------------------------------------
TIR_BUILD = "the TIR build"  # its passes; then "codegen" (LLVM's machine code), then "link"
_BUILDS: dict[ModuleOptions, Build] = {}


def _worker_build(options: ModuleOptions, pipelines: Pipelines) -> Build:
    """The worker's `Build` for `options` (target, pipeline, offload), made once."""
    pipelines.register()
    if options not in _BUILDS:
        _BUILDS[options] = Build(options, CompileStats())
    return _BUILDS[options]


@dataclass(frozen=True)
class PipelineJob:
    options: ModuleOptions
    module: str
    names: tuple[str, ...]
    offload: str
    pipelines: Pipelines = field(default_factory=Pipelines)

    def describe(self) -> str:
        return f"lowering {', '.join(self.names)}"

    def run(self, log: StageLog) -> tuple[str, KernelSites]:
        build = _worker_build(self.options, self.pipelines)
        mod = tvm.ir.load_json(self.module)
        with logged_passes(log) as passes, passes.in_phase(PIPELINE, self.describe()):
            lowered, recorded = pipeline_here(build, mod, self.offload)
        return tvm.ir.save_json(lowered), recorded.sites()


@dataclass(frozen=True)
class TirBuildJob:
    options: ModuleOptions
    module: str  # the PrimFuncs as the parent's build makes them (named, guards in)
    names: tuple[str, ...]
    output: str

    def describe(self) -> str:
        return f"building {', '.join(self.names)}"

    def run(self, log: StageLog) -> None:
        """Stages: the TIR build, codegen, link. Not each TIR pass: telling the parent of each
        (80 for one kernel) added a fifth to every build; `bisect` names the pass."""
        target = _worker_build(self.options, Pipelines()).target
        log.stage(TIR_BUILD)
        lib = build_here(tvm.ir.load_json(self.module), target)
        write_library(lib, self.output, on_step=log.stage)
        os.chmod(self.output, 0o600)  # whatever the umask: the parent loads only a private file


@dataclass(frozen=True)
class TranslateJob:
    program: bytes  # torch.export.save of the decomposed ExportedProgram
    name: str
    model_name: str
    converters: bytes | None

    def describe(self) -> str:
        return f"importing {self.model_name}"

    def run(self, log: StageLog) -> None:
        import torch

        from ..models.importing import translate

        log.stage("import")
        exported = torch.export.load(io.BytesIO(self.program))
        converters = None
        if self.converters is not None:
            import cloudpickle

            converters = cloudpickle.loads(self.converters)
        translate(exported, self.name, self.model_name, converters)
