"""`Minimized.save("repro.py")`: the cut, as a file that plain TVM runs.

The file holds the cut as TVMScript (the functions it calls with it, its
weights as base64 `.npz`), the values that enter it (the reference run's) and
what shows the fault (repro_files.py has the parts every repro shares):
- numbers: the cut built with the module's Relax pipeline and run; its
  outputs against the reference's values, and its arguments against their
  values before the run (but those a `call_tir_inplace` of the cut writes);
- a crash: the build, run in a child process, ends with the same signal;
- an error: the build raises one that says what TVM said;
- a pass (from a bisect result): bisect's own repro (bisect_repro.py), of the
  cut's IR right before the pass.
It exits 1 while the fault shows, 0 when it does not, 2 when it cannot run.

Not every build can be written with plain TVM: a pipeline the notebook made
(its passes are the notebook's code: bisect finds the pass, and
`.minimize()` of that result writes the IR it made), `--offload torch`. Then
`save` says why. The file builds with `tvm.compile`, so what this package
adds to a build (its CPU schedules, the crash guards) is not in it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..build.offload import NONE
from ..build.pipelines import (
    AUTO_PIPELINE,
    EXACT_PIPELINES,
    FUSED_PIPELINE,
    TARGET_PIPELINE,
    own_kernels_opaque,
    pipeline_for,
)
from ..build.worker.pass_log import PIPELINE
from .bisect_repro import repro_of as bisect_repro_of
from .cut_judging import unchanged
from .repro_files import TOOLS, Repro, head, npz, script

_BODY = """

consts = _constants({weights!r})  # the weights of the IR below

# `{function}` cut to the {size} binding(s) that still show the fault
{module_text}
INPUTS = _load({inputs!r})  # the values entering the cut: the reference run's
TARGET = tvm.target.Target({target!r})
FUNCTION = {function!r}
RTOL, ATOL = {rtol!r}, {atol!r}
PIPELINE = {pipeline}
{tools}
"""

_NUMBERS = """
# What each array `run` returns must be (one missing: any value): the reference's outputs, then
# the arguments as they were (a pure function leaves them alone)
EXPECTED = _load({expected!r})


def main():
    got = run(Reduced, PIPELINE)
    agree = same([EXPECTED.get(f"e{{i}}") for i in range(len(got))], got, names_of(len(got)))
    print(f"{{FUNCTION}} " + ("gives" if agree else "LEAVES") + " the reference's numbers")
    return NO_FAULT if agree else FAULT


if __name__ == "__main__":
    sys.exit(main())
"""

_CRASH = """
SIGNAL = {signal!r}  # what ended the build


def main():
    crash = crash_in_child("--build")
    print(f"the build of {{FUNCTION}} " + (f"CRASHES: killed by {{crash}}" if crash else "runs"))
    return FAULT if crash == SIGNAL else NO_FAULT


if __name__ == "__main__":
    if sys.argv[1:] == ["--build"]:
        run(Reduced, PIPELINE)
        sys.exit(NO_FAULT)
    sys.exit(main())
"""

_FAILS = """
ERROR = {error!r}  # what TVM says


def main():
    try:
        run(Reduced, PIPELINE)
    except Exception as err:  # TVM raises many types; another error is this file's failure
        if ERROR not in str(err):
            raise
        print(f"the build of {{FUNCTION}} FAILS: {{ERROR}}")
        return FAULT
    print(f"the build of {{FUNCTION}} runs")
    return NO_FAULT


if __name__ == "__main__":
    sys.exit(main())
"""


def repro_of(judge, result) -> Repro:
    """The repro of `result` (a `Minimized` with a cut), from the `judge` that found it."""
    fault = result.fault
    if fault.kind == "pass":
        return _pass_repro(judge, result)
    options = judge.builds.parts.options
    pipeline = pipeline_text(options.pipeline)
    if pipeline is None and fault.culprit:
        return _missing(f"{fault.culprit} is not TVM's and crashed: a repro would need its code")
    if pipeline is None:
        return _missing(
            f"the module's Relax pipeline `{options.pipeline}` is the notebook's own: its passes "
            "cannot be written in the file (bisect finds the pass, and .minimize() of its result "
            "writes the IR the pass made)"
        )
    if options.offload != NONE:
        return _missing(f"with --offload {options.offload} the build calls PyTorch")
    module_ir = result.module_ir
    if pipeline_for(options.pipeline, judge.builds.parts.target).name == FUSED_PIPELINE:
        module_ir = own_kernels_opaque(module_ir)  # what `fused` does first, as a mark in the IR
    mod_text, weights = script("Reduced", module_ir, "consts.")
    body = _BODY.format(
        weights=npz(weights),
        function=result.function,
        size=result.size,
        module_text=mod_text,
        inputs=npz({f"a{i}": a for i, a in enumerate(result.inputs)}),
        target=str(judge.builds.parts.target),
        rtol=judge.rtol,
        atol=judge.atol,
        pipeline=pipeline,
        tools=TOOLS,
    )
    if fault.kind == "numbers":
        body += _NUMBERS.format(expected=npz(_expected(judge, result)))
    elif fault.kind == "crash":
        body += _CRASH.format(signal=fault.signal)
    else:
        body += _FAILS.format(error=fault.error)
    title = f"`{result.function}` in {result.size} binding(s): {fault}"
    about = (
        f"`python {{this file}}` builds `{result.function}` cut to the bindings that show the "
        "fault (with\nthe module's Relax pipeline) and runs it on the values the reference "
        "run gave them."
    )
    return Repro(head(title, "minimize", about, str(fault)) + body, feature="minimize")


def pipeline_text(name: str | None) -> str | None:
    """The Relax pipeline `name` (a module's option) as the file makes it; None for a pipeline
    TVM does not register itself."""
    from tvm.relax.pipeline import PIPELINE_MAP

    name = name or AUTO_PIPELINE
    if name in (AUTO_PIPELINE, FUSED_PIPELINE, TARGET_PIPELINE):
        # TVM's own pipeline for the target (on a CPU, `fused` without this package's batch-norm
        # folding and HWIO convolution weights, which change no op's numbers but their rounding)
        return "relax.get_default_pipeline(TARGET)"
    maker = PIPELINE_MAP.get(name)
    if maker is None or not maker.__module__.startswith("tvm."):
        return None
    if name in EXACT_PIPELINES:
        return f"relax.get_pipeline({name!r})"
    then = 'relax.get_pipeline("default")'
    return f"tvm.transform.Sequential([relax.get_pipeline({name!r}), {then}])"


def _expected(judge, result) -> dict:
    """`EXPECTED`: the reference's value of each output, then each argument's value before the
    run (none for one the cut writes into on purpose)."""
    cut = result.cut
    arrays = [*judge.expected(cut), *unchanged(cut, result.inputs)]
    return {f"e{i}": a for i, a in enumerate(arrays) if a is not None}


@dataclass(frozen=True)
class _Search:
    """What bisect's repro writer reads of a search (bisect_repro.repro_of)."""

    parts: object
    fn: str
    runs: tuple
    inputs: list
    rtol: float
    atol: float


@dataclass(frozen=True)
class _Found:
    """What bisect's repro writer reads of a result: the pass, how it fails, and the passes of
    the rest of the build to write (all: the cut is judged with every other pass on)."""

    culprit: object
    outcome: str
    needed: tuple


def _pass_repro(judge, result) -> Repro:
    """Bisect's repro of the pass, from the cut's IR right before it (a build of the cut that
    keeps it)."""
    culprit_name = result.fault.culprit
    key = judge.culprit_key
    ran = judge.builds.run(result.module_ir, result.inputs, snapshots=frozenset({key}))
    runs = [r for r in ran.passes if r.key == key]
    if not runs:
        return _missing(f"the cut's build did not run {culprit_name}")
    before, after = ran.snapshots.get(key, ("", ""))
    search = _Search(
        judge.builds.parts, result.function, ran.passes, result.inputs, judge.rtol, judge.atol
    )
    outcome = "crashed" if result.fault.kind == "crash" else "differs"
    names = tuple({r.name for r in ran.passes if r.phase == PIPELINE})
    repro = bisect_repro_of(search, _Found(runs[0], outcome, names), before, after)
    return Repro(repro.text, repro.missing, feature="minimize")


def _missing(why: str) -> Repro:
    return Repro(missing=why, feature="minimize")
