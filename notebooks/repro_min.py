"""AddBecomesSubtract changes the numbers of `main`

Found by tvm_pyfunc_nb 0.1.0's bisect; needs only apache-tvm 0.27.0.post1 and numpy.
`python {this file}` builds `main` from the IR right before AddBecomesSubtract, without the
pass and with it, runs both on the same inputs and compares them.
Exit status: 1 while the fault shows (the numbers differ), 0 when it does not, 2 when this file itself
cannot run (it says why).
"""

from __future__ import annotations

import sys

FAULT, NO_FAULT, REPRO_FAILED = 1, 0, 2


def _repro_failed(kind, value, traceback_):
    """Whatever goes wrong before the fault is shown or not: status 2, never the fault's 1."""
    import os
    import traceback

    traceback.print_exception(kind, value, traceback_)
    print(f"REPRO FAILED: this file could not run ({kind.__name__}), so it says nothing "
          "about the fault", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(REPRO_FAILED)


sys.excepthook = _repro_failed

import base64  # noqa: E402 (after the hook: a missing package is the repro's failure too)
import io  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import types  # noqa: E402

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relax  # noqa: E402


def _load(text):
    with np.load(io.BytesIO(base64.b64decode(text))) as data:
        return {key: data[key] for key in data.files}


def _constants(text):
    return types.SimpleNamespace(
        **{k: relax.const(tvm.runtime.tensor(a)) for k, a in _load(text).items()}
    )


consts = _constants('UEsDBC0AAAAAAAAAIQA5emjx//////////8LABQAbWFpbl9jMC5ucHkBABAAoAAAAAAAAACgAAAAAAAAAJNOVU1QWQEAdgB7J2Rlc2NyJzogJzxmNCcsICdmb3J0cmFuX29yZGVyJzogRmFsc2UsICdzaGFwZSc6ICg4LCksIH0gICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAKxb9GPkPINr3PK108qsWnPa6ZYD5O0K0+bX+LvhytBL5QSwECLQMtAAAAAAAAACEAOXpo8aAAAACgAAAACwAAAAAAAAAAAAAAgAEAAAAAbWFpbl9jMC5ucHlQSwUGAAAAAAEAAQA5AAAA3QAAAAAA')  # the weights of the IR below

# The IR right before AddBecomesSubtract
from tvm.script import ir as I
from tvm.script import relax as R

@I.ir_module
class Before:
    I.module_attrs({"base_py_module": True})
    @R.function
    def main(lv1: R.Tensor((4, 8), dtype="float32")) -> R.Tensor((4, 8), dtype="float32"):
        with R.dataflow():
            lv2: R.Tensor((4, 8), dtype="float32") = R.add(consts.main_c0, lv1)
            R.output(lv2)
        return lv2
INPUTS = _load('UEsDBC0AAAAAAAAAIQBGu9In//////////8GABQAYTAubnB5AQAQAAABAAAAAAAAAAEAAAAAAACTTlVNUFkBAHYAeydkZXNjcic6ICc8ZjQnLCAnZm9ydHJhbl9vcmRlcic6IEZhbHNlLCAnc2hhcGUnOiAoNCwgOCksIH0gICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgCvlWYr7MP3U/qshBv2/Ssj909JS/JbQ5P5qZJr+GFqO+N0plv8H1cr+qtE6+ORoOvtV8q76llQe/EhZPP1V5JT3lVJQ//9biPU8yiD+IHXY+DMREP4PvqD26zei+a2FOvQhvqb7qC64+2/JUv9kxlD8gRQg/N/lLP/tzajw6mme8UEsBAi0DLQAAAAAAAAAhAEa70icAAQAAAAEAAAYAAAAAAAAAAAAAAIABAAAAAGEwLm5weVBLBQYAAAAAAQABADQAAAA4AQAAAAA=')
TARGET = tvm.target.Target('{"kind":"llvm","tag":"","keys":["cpu"],"mcpu":"rocketlake"}')
FUNCTION = 'main'
RTOL, ATOL = 1e-05, 1e-06
CRASHES = False  # the fault is a crash of the build with the pass

# The pass
# AddBecomesSubtract is not TVM's (the notebook's own): written as the IR it returned
after_consts = _constants('UEsDBC0AAAAAAAAAIQA5emjx//////////8LABQAbWFpbl9jMC5ucHkBABAAoAAAAAAAAACgAAAAAAAAAJNOVU1QWQEAdgB7J2Rlc2NyJzogJzxmNCcsICdmb3J0cmFuX29yZGVyJzogRmFsc2UsICdzaGFwZSc6ICg4LCksIH0gICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAKxb9GPkPINr3PK108qsWnPa6ZYD5O0K0+bX+LvhytBL5QSwECLQMtAAAAAAAAACEAOXpo8aAAAACgAAAACwAAAAAAAAAAAAAAgAEAAAAAbWFpbl9jMC5ucHlQSwUGAAAAAAEAAQA5AAAA3QAAAAAA')
from tvm.script import ir as I
from tvm.script import relax as R

@I.ir_module
class After:
    I.module_attrs({"base_py_module": True})
    @R.function
    def main(lv1: R.Tensor((4, 8), dtype="float32")) -> R.Tensor((4, 8), dtype="float32"):
        with R.dataflow():
            lv2: R.Tensor((4, 8), dtype="float32") = R.subtract(after_consts.main_c0, lv1)
            R.output(lv2)
        return lv2

PASS = tvm.transform.module_pass(lambda mod, ctx: After, opt_level=0, name='AddBecomesSubtract')

# The rest of the build: the passes it needs to run (the optional ones stay off)
FINISH = tvm.transform.Sequential([relax.transform.NormalizeGlobalVar(), relax.transform.NormalizeGlobalVar(), relax.transform.LegalizeOps(), relax.transform.RewriteDataflowReshape(), relax.transform.ToNonDataflow(), relax.transform.RemovePurityChecking(), relax.transform.CallTIRRewrite(), relax.transform.StaticPlanBlockMemory(), relax.transform.RewriteCUDAGraph(), relax.transform.LowerAllocTensor(), relax.transform.KillAfterLastUse(), relax.transform.LowerRuntimeBuiltin(), relax.transform.ComputePrimValue(), relax.transform.NormalizeGlobalVar(), relax.transform.VMShapeLower(), relax.transform.AttachGlobalSymbol()])


def _flat(out):
    """Every array of an output: a tensor, a tuple of them, nested, a shape or a number."""
    if hasattr(out, "numpy"):
        return [out.numpy()]
    if isinstance(out, (bool, int, float)):
        return [np.asarray(out)]
    return [array for item in out for array in _flat(item)]


def run(mod, pipeline):
    """`mod` built with `pipeline` and run on INPUTS: its outputs (flat), then its arguments as
    the run left them."""
    executable = tvm.compile(mod, target=TARGET, relax_pipeline=pipeline)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    args = [tvm.runtime.tensor(INPUTS[f"a{i}"]) for i in range(len(INPUTS))]
    return _flat(vm[FUNCTION](*args)) + [a.numpy() for a in args]


def same(expected, actual, names):
    """Whether each array of `actual` agrees with `expected`'s (None: any value), printing the
    largest errors of each; `names` say what each one is."""
    agree = len(expected) == len(actual)
    if not agree:
        print(f"{len(expected)} arrays expected, {len(actual)} given")
    for name, a, b in zip(names, expected, actual):
        if a is None:
            continue
        if a.shape != b.shape:
            print(f"{name}: shape {list(b.shape)}, not {list(a.shape)} MISMATCH")
            agree = False
            continue
        close = bool(np.allclose(b, a, rtol=RTOL, atol=ATOL, equal_nan=True))
        agree = agree and close
        if a.size:
            gap = np.abs(a.astype("float64") - b.astype("float64"))
            rel = gap / np.maximum(np.abs(b.astype("float64")), ATOL)
            worst = "> 1" if rel.max() > 1 else f"{rel.max():.2g}"  # over the smallest values
            print(f"{name}: max abs error {gap.max():.3g}, max rel error {worst}"
                  f"{'' if close else ' MISMATCH'}")
    return agree


def names_of(count):
    """What each array `run` returns is: its outputs, then its arguments after the run."""
    outputs = count - len(INPUTS)
    return [f"output {i}" for i in range(outputs)] + [
        f"argument {i} after the run" for i in range(len(INPUTS))
    ]


def crash_in_child(flag):
    """The signal that ended this file run with `flag` in a child process (a crash ends that
    process, not this one), or None if it ended well."""
    done = subprocess.run([sys.executable, __file__, flag], capture_output=True, text=True)
    if done.returncode < 0:
        return signal.Signals(-done.returncode).name
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise RuntimeError(f"the child run ({flag}) failed (status {done.returncode})")
    return None


def with_pass():
    with TARGET:
        after = PASS(Before)
    return run(after, FINISH)


def main():
    without = run(Before, FINISH)
    if CRASHES:
        crash = crash_in_child("--with-pass")
        print("AddBecomesSubtract " + (f"CRASHES the build: killed by {crash}" if crash else "builds"))
        return FAULT if crash else NO_FAULT
    agree = same(without, with_pass(), names_of(len(without)))
    print("AddBecomesSubtract " + ("keeps the numbers" if agree else "CHANGES the numbers"))
    return NO_FAULT if agree else FAULT


if __name__ == "__main__":
    if sys.argv[1:] == ["--with-pass"]:
        with_pass()
        sys.exit(NO_FAULT)
    sys.exit(main())
