"""`--isolate`: a live module's imports and compiles run in the build worker, so that a crash
inside TVM (a segfault, an abort, LLVM's fatal error) is an error here, not the end of the
kernel. The same build, elsewhere: `WorkerBuilder` is the module's `Builder` (build/builder.py),
chosen when the module is made, and each of its steps has the worker run the function the
build runs here (build/worker/jobs.py), in the caller's `PassContext`.

What runs there, and what comes back:
- the Relax pipeline (the offload to PyTorch included), every pass logged: the IR
  after it, as JSON, and the bindings each kernel computes (`KernelSites`); the
  schedules, VM codegen and the link of the bytecode stay here (no machine code);
- every `tirx.build`, through LLVM's code generation and the C compiler's link: the
  library as a file (`library_files.write_library`), loaded here with
  `load_library`, whose bytes the compile cache then stores as they are;
- what `export_library` writes: the VM codegen and the link too, with every kernel
  built anew into one library (a library loaded from a file cannot be linked into
  one that is written), loaded here and written as it is;
- `add_torch`'s translation by TVM's importer, on the `ExportedProgram` (sent with
  `torch.export.save`), exactly as `importing.translate` runs it here: once it
  survives there, this process translates the same program (the importer's
  environment, FX node to Relax var, cannot travel), and an error of the importer is
  raised here as without --isolate;
- `bisect`'s builds, with passes switched off (whatever the module's builder: a crash
  there is a result).

The worker is the process's one (`shared_worker`), started when an isolated module is
made and kept warm; a job sends only what it builds (an edit of one PrimFunc sends that
one). A death there is a `CompileError` (or `ModelImportError`) that names the function,
the stage (a pipeline pass, a TIR pass, codegen, link, import) and the signal, and
suggests `bisect`; the next job finds a fresh worker, the module is as it was, and nothing
remembers the death as the function's fault (the next call builds again). Still built
here: a kernel's code to read (`source`, `lowered`: built here once the worker survived
building it) and MetaSchedule's tuning candidates.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator

import numpy as np
import torch
import tvm

from ...errors import CompileError, ModelImportError, TVMModuleError, WorkerCrash
from ..build.builder import Builder, Recipe
from ..build.kernel_sites import Recording
from ..build.library_files import load_library
from ..build.linking import relax_names
from ..build.pass_contexts import CallerContext, CannotTravel
from ..build.worker.jobs import (
    BuildAndRun,
    BuildKernels,
    LinkStandalone,
    Lower,
    Pipelines,
    RunReport,
    Translate,
)
from ..build.worker.pass_log import PassKey
from ..build.worker.process import DEFAULT_TIMEOUT, BuildWorker, shared_worker
from ..options import ModuleOptions

WHERE = "the build worker (--isolate)"


class WorkerBuilder(Builder):
    """A module's builds in the build worker, and a crash there as the module's error."""

    elsewhere = True

    def __init__(self, module_name: str, worker: BuildWorker | None = None):
        self.module_name = module_name
        self.worker = worker or shared_worker()

    @classmethod
    def isolating(cls, options: ModuleOptions, module_name: str) -> WorkerBuilder:
        """The builder of a module made with `--isolate`."""
        if options.rpc:
            raise TVMModuleError(
                "--isolate builds for this machine; with --rpc the code is built here "
                "(drop one of the two)"
            )
        return cls(module_name)

    def warm(self) -> None:
        """Start the worker now, so that it is warm by the time the first compile asks."""
        self.worker.start()

    def lower(self, mod: tvm.IRModule, recipe: Recipe, offload: str):
        names = relax_names(mod)
        with self._crashes_as_errors(names):
            job = Lower(
                recipe.options,
                CallerContext.current(WHERE),
                tvm.ir.save_json(mod),
                names,
                offload,
                Pipelines.of(recipe.options),
            )
            lowered, sites = self.worker.run(job)
        return tvm.ir.load_json(lowered), Recording(None, sites)

    def tirx_build(self, mod: tvm.IRModule, target: tvm.target.Target):
        names = tuple(gv.name_hint for gv in mod.get_global_vars())
        output = self.worker.new_file(".so")
        try:
            with self._crashes_as_errors(names):
                context = CallerContext.current(WHERE)
                job = BuildKernels(
                    dict(target.export()), context, tvm.ir.save_json(mod), names, str(output)
                )
                self.worker.run(job)
            return load_library(self.worker.trusted_file(output))
        finally:
            output.unlink(missing_ok=True)

    def link_standalone(self, lowered, kernels: dict, recipe: Recipe):
        output = self.worker.new_file(".so")
        try:
            with self._crashes_as_errors(tuple(kernels)):
                job = LinkStandalone(
                    recipe.options,
                    CallerContext.current(WHERE),
                    tvm.ir.save_json(lowered) if lowered is not None else "",
                    tvm.ir.save_json(tvm.IRModule(dict(kernels))),
                    str(output),
                    Pipelines.of(recipe.options),
                )
                names = self.worker.run(job)
            return load_library(self.worker.trusted_file(output)), names
        finally:
            output.unlink(missing_ok=True)

    def translate_first(self, exported, name: str, model_name: str, custom_convert_map) -> None:
        """`importing.translate` of `exported` in the worker; a crash there is a
        `ModelImportError`. What the importer raises is left to this process's own
        translation, which raises it again, as without --isolate."""
        job = Translate(_saved(exported), name, model_name, _by_value(custom_convert_map))
        try:
            self.worker.run(job)
        except WorkerCrash as crash:
            what = f"{model_name} (add_torch)"
            raise ModelImportError(self._crashed(crash, (name,), what), function=name) from crash
        except Exception:  # translated again here, which raises it as itself
            return

    def build_and_run(
        self,
        options: ModuleOptions,
        mod: tvm.IRModule,
        function: str,
        inputs: list[np.ndarray],
        *,
        skip: frozenset[PassKey] = frozenset(),
        snapshots: frozenset[PassKey] = frozenset(),
        timeout: float | None = DEFAULT_TIMEOUT,
        on_stage=None,
        job_type: type[BuildAndRun] = BuildAndRun,
    ) -> RunReport:
        """Build `function` of `mod` with the passes in `skip` off and run it on `inputs`
        (`bisect`; `job_type` says how, for a PrimFunc): a crash raises `WorkerCrash`, which
        bisect counts as the fault."""
        job = job_type(
            options,
            CallerContext.current(WHERE),
            tvm.ir.save_json(mod),
            function,
            tuple(np.asarray(a) for a in inputs),
            frozenset(skip),
            frozenset(snapshots),
            Pipelines.of(options),
        )
        return self.worker.run(job, timeout=timeout, on_stage=on_stage)

    @contextlib.contextmanager
    def _crashes_as_errors(self, names: tuple[str, ...]) -> Iterator[None]:
        """A worker's death, or a PassContext that cannot go there, as the `CompileError` of
        the functions `names` (its cause says it is not theirs: nothing keeps it)."""
        function = names[0] if len(names) == 1 else None
        try:
            yield
        except WorkerCrash as crash:
            raise CompileError(self._crashed(crash, names), function=function) from crash
        except CannotTravel as refusal:
            raise CompileError(refusal.detail, function=function) from refusal

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


def in_worker(builder: Builder, module_name: str) -> WorkerBuilder:
    """`builder` if it builds in the worker, else a worker builder (`bisect` builds there
    whatever the module's builder is: a crash is one of its results)."""
    return builder if isinstance(builder, WorkerBuilder) else WorkerBuilder(module_name)


def _saved(exported) -> bytes:
    """`torch.export.save` of `exported`. The import keeps copies of the weights, as plain
    tensors (its state dict must not share memory with the model); torch.export wants the
    parameters as `nn.Parameter`s, so they are saved as such (sharing those copies)."""
    state = exported.state_dict
    copies = dict(state)
    try:
        for key in exported.graph_signature.parameters:
            if not isinstance(state[key], torch.nn.Parameter):
                state[key] = torch.nn.Parameter(state[key], requires_grad=False)
        saved = io.BytesIO()
        torch.export.save(exported, saved)
        return saved.getvalue()
    finally:
        state.update(copies)


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
