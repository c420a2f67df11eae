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

import tvm
from tvm import relax

from ..build.worker.pass_log import PIPELINE
from .repro_files import TOOLS, Repro, head, npz, script

_BODY = """

consts = _constants({weights!r})  # the weights of the IR below

# The IR right before {pass_name}
{before}
INPUTS = _load({inputs!r})
TARGET = tvm.target.Target({target!r})
FUNCTION = {function!r}
RTOL, ATOL = {rtol!r}, {atol!r}
CRASHES = {crashes!r}  # the fault is a crash of the build with the pass

# The pass
{pass_text}

# The rest of the build: the passes it needs to run (the optional ones stay off)
FINISH = tvm.transform.Sequential([{finish}])
{tools}

def with_pass():
    with TARGET:
        after = PASS({module})
    return run(after, FINISH)


def main():
    without = run({module}, FINISH)
    if CRASHES:
        crash = crash_in_child("--with-pass")
        print("{pass_name} " + (f"CRASHES the build: killed by {{crash}}" if crash else "builds"))
        return FAULT if crash else NO_FAULT
    agree = same(without, with_pass(), names_of(len(without)))
    print("{pass_name} " + ("keeps the numbers" if agree else "CHANGES the numbers"))
    return NO_FAULT if agree else FAULT


if __name__ == "__main__":
    if sys.argv[1:] == ["--with-pass"]:
        with_pass()
        sys.exit(NO_FAULT)
    sys.exit(main())
"""

_OWN_PASS = """# {pass_name} is not TVM's (the notebook's own): written as the IR it returned
after_consts = _constants({weights!r})
{after}

PASS = tvm.transform.module_pass(lambda mod, ctx: {after_module}, opt_level=0, name={name!r})"""


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
    before_text, weights = script("Before", tvm.ir.load_json(before), "consts.")
    if own is None:
        after_text, after_weights = script("After", tvm.ir.load_json(after), "after_consts.")
        pass_text = _OWN_PASS.format(
            pass_name=culprit.name,
            weights=npz(after_weights),
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
    title = (
        f"{culprit.name} crashes the build of `{search.fn}`"
        if crashes
        else f"{culprit.name} changes the numbers of `{search.fn}`"
    )
    about = (
        f"`python {{this file}}` builds `{search.fn}` from the IR right before {culprit.name}, "
        "without the\npass and with it, runs both on the same inputs and compares them."
    )
    fault = "the build crashes" if crashes else "the numbers differ"
    text = head(title, "bisect", about, fault) + _BODY.format(
        function=search.fn,
        pass_name=culprit.name,
        weights=npz(weights),
        before=before_text,
        inputs=npz({f"a{i}": a for i, a in enumerate(search.inputs)}),
        target=str(search.parts.target),
        rtol=search.rtol,
        atol=search.atol,
        crashes=crashes,
        pass_text=pass_text,
        finish=", ".join(finish),
        tools=TOOLS,
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
