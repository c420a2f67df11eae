"""bisect's build of a PrimFunc: built as the module builds it, with passes off, and run.

The worker job of `NAME.bisect("kernel", *args)` for a PrimFunc: `tirx.build`
of the kernel alone (the module's target, its crash guards when checked), in
the caller's `PassContext`, every TIR pass logged and those asked switched off
(build/worker/pass_log.py), then the kernel called on the arguments,
destination-passing style. What it gives back are all the arguments after the
call: a kernel's outputs are the arguments it writes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm

from ..build.build import Build
from ..build.pass_contexts import CallerContext
from ..build.stats import CompileStats
from ..build.worker.jobs import RunReport
from ..build.worker.pass_log import TIR, PassKey, logged_passes
from ..build.worker.process import DEFAULT_TIMEOUT
from ..options import ModuleOptions, device_of
from .isolation import WHERE, WorkerBuilder


@dataclass(frozen=True)
class BuildKernelAndRun:
    """PrimFunc `function` of `module` (JSON) built with the passes in `skip` off and called on
    `inputs` (on the module's device)."""

    options: ModuleOptions
    context: CallerContext
    module: str
    function: str
    inputs: tuple[np.ndarray, ...]
    skip: frozenset[PassKey] = frozenset()
    snapshots: frozenset[PassKey] = frozenset()

    def describe(self) -> str:
        off = f", {len(self.skip)} pass(es) off" if self.skip else ""
        return f"building and running {self.function}{off}"

    def run(self, log) -> RunReport:
        func = tvm.ir.load_json(self.module)[self.function]
        with self.context.entered(), logged_passes(log, self.skip, self.snapshots) as passes:
            build = Build(self.options, CompileStats())  # nothing kept from another run
            with passes.in_phase(TIR, f"building {self.function}"):
                lib = build.tirx_build({self.function: func})
            kernel = lib[self.function]  # LLVM's code generation (the JIT) happens here
        log.stage("run")
        device = device_of(self.options.device)
        arguments = [tvm.runtime.tensor(a, device) for a in self.inputs]
        kernel(*arguments)
        return RunReport([a.numpy() for a in arguments], tuple(passes.runs), passes.snapshots)


def build_kernel_and_run(
    builder: WorkerBuilder,
    options: ModuleOptions,
    mod: tvm.IRModule,
    function: str,
    inputs: list[np.ndarray],
    *,
    skip: frozenset[PassKey] = frozenset(),
    snapshots: frozenset[PassKey] = frozenset(),
    on_stage=None,
) -> RunReport:
    """Build PrimFunc `function` of `mod` with the passes in `skip` off and call it on `inputs`,
    in `builder`'s worker (a crash raises `WorkerCrash`: bisect counts it as the fault)."""
    job = BuildKernelAndRun(
        options,
        CallerContext.current(WHERE),
        tvm.ir.save_json(mod),
        function,
        tuple(np.asarray(a) for a in inputs),
        frozenset(skip),
        frozenset(snapshots),
    )
    return builder.worker.run(job, timeout=DEFAULT_TIMEOUT, on_stage=on_stage)
