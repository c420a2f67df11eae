"""`Bisection.save("repro.py")`: the pass at fault, as a file that plain TVM runs.

The file holds what an upstream report needs and nothing of this package:
- the IR right before the pass, as TVMScript that parses (its weights as
  base64 `.npz`, as `export` writes them);
- the inputs, the same way;
- the pass: TVM's own, made by its name (`relax.transform.FuseOps()`); a pass
  TVM does not have (the user's own) is written as the IR it returned;
- the rest of the build: the needed Relax passes after it (the optional ones
  stay off, as in the build that showed the fault), then `tvm.compile`.
`python repro.py` builds and runs the function from that IR without the pass
and with it (in a child process, when the fault is a crash), prints both
results' largest errors, and exits with status 1 while the fault shows, 0
when it does not, and 2 (saying why) when the file itself cannot run: a
missing package, IR that no longer parses, a build without the pass that
fails. Every output form is compared: a tensor, a tuple, nested.

Reduced: the module holds only the function and what it calls. A fault in a
TIR pass of the kernels' build has no such file yet (its IR comes mid-way
through `tirx.build`): `save` says so.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax

from ..._version import __version__
from ...errors import CallError
from ..build.worker.pass_log import PIPELINE
from ..live.editing import ConstantTable, module_text
from ..user_files import write_whole

_TEMPLATE = '''"""{title}

Found by tvm_pyfunc_nb {version}'s bisect; needs only apache-tvm {tvm_version} and numpy.
`python {{this file}}` builds `{function}` from the IR right before {pass_name}, without the
pass and with it, runs both on the same inputs and compares them. Exit status: 1 while the
fault shows ({fault}), 0 when it does not, 2 when this file itself cannot run (it says why).
"""

from __future__ import annotations

import sys

FAULT, NO_FAULT, REPRO_FAILED = 1, 0, 2
CRASHES = {crashes!r}  # the fault is a crash of the build with the pass


def _repro_failed(kind, value, traceback_):
    """Whatever goes wrong before the fault is shown or not: status 2, never the fault's 1."""
    import os
    import traceback

    traceback.print_exception(kind, value, traceback_)
    print(f"REPRO FAILED: this file could not run ({{kind.__name__}}), so it says nothing "
          "about the fault", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(REPRO_FAILED)


sys.excepthook = _repro_failed

import base64  # noqa: E402 (after the hook: a missing package is the repro's failure too)
import io  # noqa: E402
import subprocess  # noqa: E402
import types  # noqa: E402

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relax  # noqa: E402


def _load(text):
    with np.load(io.BytesIO(base64.b64decode(text))) as data:
        return {{key: data[key] for key in data.files}}


def _constants(text):
    return types.SimpleNamespace(
        **{{k: relax.const(tvm.runtime.tensor(a)) for k, a in _load(text).items()}}
    )


consts = _constants({weights!r})  # the weights of the IR below

# The IR right before {pass_name}
{before}
INPUTS = _load({inputs!r})
TARGET = tvm.target.Target({target!r})
RTOL, ATOL = {rtol!r}, {atol!r}

# The pass
{pass_text}

# The rest of the build: the passes it needs to run (the optional ones stay off)
FINISH = tvm.transform.Sequential([{finish}])


def _flat(out):
    """Every array of an output: a tensor, a tuple of them, nested, a shape or a number."""
    if hasattr(out, "numpy"):
        return [out.numpy()]
    if isinstance(out, (bool, int, float)):
        return [np.asarray(out)]
    return [array for item in out for array in _flat(item)]


def run(mod):
    executable = tvm.compile(mod, target=TARGET, relax_pipeline=FINISH)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    args = [tvm.runtime.tensor(INPUTS[f"a{{i}}"]) for i in range(len(INPUTS))]
    return _flat(vm[{function!r}](*args))


def with_pass():
    with TARGET:
        after = PASS({module})
    return run(after)


def same(without, with_it):
    """Whether the outputs agree, printing each one's largest errors."""
    agree = len(without) == len(with_it)
    if not agree:
        print(f"{{len(without)}} outputs without the pass, {{len(with_it)}} with it")
    for i, (a, b) in enumerate(zip(without, with_it)):
        if a.shape != b.shape:
            print(f"output {{i}}: shape {{list(a.shape)}} without the pass, {{list(b.shape)}} "
                  "with it MISMATCH")
            agree = False
            continue
        close = bool(np.allclose(b, a, rtol=RTOL, atol=ATOL, equal_nan=True))
        agree = agree and close
        if a.size:
            gap = np.abs(a.astype("float64") - b.astype("float64"))
            rel = gap / np.maximum(np.abs(b.astype("float64")), ATOL)
            worst = "> 1" if rel.max() > 1 else f"{{rel.max():.2g}}"  # over the smallest values
            print(f"output {{i}}: max abs error {{gap.max():.3g}}, max rel error {{worst}}"
                  f"{{'' if close else ' MISMATCH'}}")
    return agree


def crash_with_pass():
    """How the build with the pass ended, run in a child process (a crash ends it, not this
    one), if it crashed; None if it did not."""
    done = subprocess.run([sys.executable, __file__, "--with-pass"], capture_output=True,
                          text=True)
    if done.returncode < 0:
        return f"killed by signal {{-done.returncode}}"
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise RuntimeError(f"the build with the pass failed (status {{done.returncode}})")
    return None


def main():
    without = run({module})
    if CRASHES:
        crash = crash_with_pass()
        print("{pass_name} " + (f"CRASHES the build: {{crash}}" if crash else "builds"))
        return FAULT if crash else NO_FAULT
    agree = same(without, with_pass())
    print("{pass_name} " + ("keeps the numbers" if agree else "CHANGES the numbers"))
    return NO_FAULT if agree else FAULT


if __name__ == "__main__":
    if sys.argv[1:] == ["--with-pass"]:
        with_pass()
        sys.exit(NO_FAULT)
    sys.exit(main())
'''

_OWN_PASS = """# {pass_name} is not TVM's (the notebook's own): written as the IR it returned
after_consts = _constants({weights!r})
{after}

PASS = tvm.transform.module_pass(lambda mod, ctx: {after_module}, opt_level=0, name={name!r})"""


@dataclass(frozen=True)
class Repro:
    """What `save` writes (`text`), or why there is none for this pass (`missing`)."""

    text: str = ""
    missing: str = ""

    def write(self, path: str) -> str:
        if self.missing:
            raise CallError(f"bisect cannot write a repro: {self.missing}")
        return write_whole(path, self.text, "the repro")


def repro_of(search, result, before: str, after: str) -> Repro:
    """The repro of `result` (a `Bisection` with a culprit) from the IR before and after the
    pass (JSON; `after` is "" when it crashed)."""
    culprit = result.culprit
    if culprit.phase != PIPELINE:
        return Repro(
            missing=f"{culprit.name} is a pass of the TIR build, whose IR comes mid-way through "
            "tirx.build; only passes of the Relax pipeline have a repro file yet"
        )
    if not before:
        return Repro(missing=f"the IR before {culprit.name} was not kept")
    own = _tvm_pass(culprit.name)
    if own is None and not after:
        return Repro(
            missing=f"{culprit.name} is not TVM's and crashed: a repro would need its code"
        )
    before_text, weights = _script("Before", before, "consts.")
    if own is None:
        after_text, after_weights = _script("After", after, "after_consts.")
        pass_text = _OWN_PASS.format(
            pass_name=culprit.name,
            weights=_npz(after_weights),
            after=after_text,
            after_module="After",
            name=culprit.name,
        )
    else:
        pass_text = f"PASS = {own}"
    crashes = result.outcome == "crashed"
    finish = [
        f"relax.transform.{run.name}()"
        for run in search.runs
        if run.index > culprit.index and run.phase == PIPELINE and _tvm_pass(run.name)
        and run.name in set(result.needed)
    ]  # fmt: skip
    text = _TEMPLATE.format(
        title=f"{culprit.name} crashes the build of `{search.fn}`"
        if crashes
        else f"{culprit.name} changes the numbers of `{search.fn}`",
        crashes=crashes,
        fault="the build crashes" if crashes else "the numbers differ",
        version=__version__,
        tvm_version=tvm.__version__,
        function=search.fn,
        pass_name=culprit.name,
        weights=_npz(weights),
        before=before_text,
        inputs=_npz({f"a{i}": a for i, a in enumerate(search.inputs)}),
        target=str(search.parts.target),
        rtol=search.rtol,
        atol=search.atol,
        pass_text=pass_text,
        finish=", ".join(finish),
        module="Before",
    )
    return Repro(text)


def _tvm_pass(name: str) -> str | None:
    """`relax.transform.<name>()` if TVM has that Relax pass and it takes no arguments."""
    make = getattr(relax.transform, name, None)
    if make is None or "." in name:
        return None
    try:
        make()
    except Exception:  # it needs arguments: not made by name
        return None
    return f"relax.transform.{name}()"


def _script(name: str, ir_json: str, prefix: str) -> tuple[str, dict[str, np.ndarray]]:
    """The module of `ir_json` as a class `name` of TVMScript, each weight written
    `<prefix><its name>`, and the weights by name."""
    consts = ConstantTable()
    text = module_text(name, tvm.ir.load_json(ir_json), consts, {}, prefix)
    weights = {k: consts.numpy(k) for k in consts}
    return text.replace("from __future__ import annotations\n", ""), weights


def _npz(arrays: dict[str, np.ndarray]) -> str:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return base64.b64encode(buffer.getvalue()).decode()
