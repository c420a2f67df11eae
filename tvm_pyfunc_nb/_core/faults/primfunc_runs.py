"""bisect's build of a PrimFunc: built as the module builds it, with passes off, and run.

The worker job of `NAME.bisect("kernel", *args)` for a PrimFunc (what
`WorkerBuilder.build_and_run` sends with `job_type=BuildKernelAndRun`):
`tirx.build` of the kernel alone (the module's target, its crash guards when
checked), in the caller's `PassContext`, every TIR pass logged and those asked
switched off (build/worker/pass_log.py), then the kernel called on the
arguments, destination-passing style. What it gives back are all the arguments
after the call: a kernel's outputs are the arguments it writes.
"""

from __future__ import annotations

import tvm

from ..build.build import Build
from ..build.stats import CompileStats
from ..build.worker.jobs import BuildAndRun, RunReport
from ..build.worker.pass_log import TIR, logged_passes
from ..options import device_of


class BuildKernelAndRun(BuildAndRun):
    """PrimFunc `function` of `module` (JSON) built with the passes in `skip` off and called on
    `inputs` (on the module's device)."""

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
