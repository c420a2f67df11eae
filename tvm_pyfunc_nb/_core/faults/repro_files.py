"""What every repro file holds, whichever feature writes it (`bisect`, `minimize`).

A repro is one Python file for an upstream report: plain TVM and numpy,
nothing of this package. Its parts, shared here:
- `HEAD`: the docstring (what it shows, how to run it, the exit statuses),
  the hook that turns any failure of the file itself into status 2 (a
  missing package, IR that no longer parses), the imports, and the readers
  of the arrays it carries (weights and inputs as base64 `.npz`, as `export`
  writes them);
- `TOOLS` (plain text, not a format string): `run` (build with a Relax
  pipeline, run on the inputs: the outputs flat, then the arguments as the
  run left them, since a build that writes into its arguments is a fault
  too), `same` (two runs, or a run and
  the reference's values, compared and printed), `crash_in_child` (a build
  that may crash runs in a child process: the signal is the answer);
- `Repro`: the text, or why there is none, written whole (`write_whole`).
Each feature adds its IR, its constants and its `main`.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass

import numpy as np
import tvm

from ...errors import CallError
from ..live.editing import ConstantTable, module_text
from ..user_files import write_whole

HEAD = '''"""{title}

Found by tvm_pyfunc_nb {version}'s {feature}; needs only apache-tvm {tvm_version} and numpy.
{about}
Exit status: 1 while the fault shows ({fault}), 0 when it does not, 2 when this file itself
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
    print(f"REPRO FAILED: this file could not run ({{kind.__name__}}), so it says nothing "
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
        return {{key: data[key] for key in data.files}}


def _constants(text):
    return types.SimpleNamespace(
        **{{k: relax.const(tvm.runtime.tensor(a)) for k, a in _load(text).items()}}
    )
'''

TOOLS = '''

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
'''


@dataclass(frozen=True)
class Repro:
    """What `save` writes (`text`), or why there is none (`missing`)."""

    text: str = ""
    missing: str = ""
    feature: str = "bisect"  # which feature's result it is

    def write(self, path: str) -> str:
        if self.missing:
            raise CallError(f"{self.feature} cannot write a repro: {self.missing}")
        return write_whole(path, self.text, "the repro")


def head(title: str, feature: str, about: str, fault: str) -> str:
    """`HEAD` filled in: what the file is, and what it shows."""
    from ..._version import __version__

    return HEAD.format(
        title=title,
        feature=feature,
        version=__version__,
        tvm_version=tvm.__version__,
        about=about,
        fault=fault,
    )


def script(name: str, mod: tvm.IRModule, prefix: str) -> tuple[str, dict[str, np.ndarray]]:
    """`mod` as a class `name` of TVMScript, each weight written `<prefix><its name>`, and the
    weights by name."""
    consts = ConstantTable()
    text = module_text(name, mod, consts, {}, prefix)
    weights = {k: consts.numpy(k) for k in consts}
    return text.replace("from __future__ import annotations\n", ""), weights


def npz(arrays: dict[str, np.ndarray]) -> str:
    """`arrays` as base64 `.npz` text (what `_load` reads)."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return base64.b64encode(buffer.getvalue()).decode()
