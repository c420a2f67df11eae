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
and with it, prints both results' largest errors and exits with status 1
while they differ (a pass that crashes crashes it).

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

_TEMPLATE = '''"""{title}

Found by tvm_pyfunc_nb {version}'s bisect; needs only apache-tvm {tvm_version} and numpy.
`python {{this file}}` builds `{function}` from the IR right before {pass_name}, without the
pass and with it, runs both on the same inputs and compares them: exit status 1 while
they differ.
"""

from __future__ import annotations

import base64
import io
import sys
import types

import numpy as np
import tvm
from tvm import relax


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


def run(mod):
    executable = tvm.compile(mod, target=TARGET, relax_pipeline=FINISH)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    out = vm[{function!r}](*[tvm.runtime.tensor(INPUTS[f"a{{i}}"]) for i in range(len(INPUTS))])
    return [o.numpy() for o in out] if isinstance(out, (list, tuple)) else [out.numpy()]


if __name__ == "__main__":
    without = run({module})
    with TARGET:
        after = PASS({module})
    with_pass = run(after)
    same = len(without) == len(with_pass)
    for i, (a, b) in enumerate(zip(without, with_pass)):
        gap = np.abs(a.astype("float64") - b.astype("float64"))
        rel = gap / np.maximum(np.abs(b.astype("float64")), ATOL)
        close = a.shape == b.shape and np.allclose(b, a, rtol=RTOL, atol=ATOL)
        same = same and close
        worst = "> 1" if rel.max() > 1 else f"{{rel.max():.2g}}"  # over the smallest values
        print(f"output {{i}}: max abs error {{gap.max():.3g}}, max rel error {{worst}}"
              f"{{'' if close else ' MISMATCH'}}")
    print("{pass_name} " + ("keeps the numbers" if same else "CHANGES the numbers"))
    sys.exit(0 if same else 1)
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
        with open(path, "w") as out:
            out.write(self.text)
        return path


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
    finish = [
        f"relax.transform.{run.name}()"
        for run in search.runs
        if run.index > culprit.index and run.phase == PIPELINE and _tvm_pass(run.name)
        and run.name in set(result.needed)
    ]  # fmt: skip
    text = _TEMPLATE.format(
        title=f"{culprit.name} {'crashes' if result.outcome == 'crashed' else 'changes'} "
        f"the numbers of `{search.fn}`"
        if result.outcome != "crashed"
        else f"{culprit.name} crashes the build of `{search.fn}`",
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
