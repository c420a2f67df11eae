"""Post-mortem debugging lands in the user's pyfunc, however the pyfunc was reached.

A pyfunc fails, and then, as a user debugging in a notebook does, `%debug` runs
in the real IPython shell, commands typed at its prompt: `where` must end in
the pyfunc's frame at its cell line, with no frame of the package after it,
and `p <local>` must print the pyfunc's local. The error itself stays the
package's short one, and the module keeps working.
"""

from __future__ import annotations

import contextlib
import io
import re
import traceback
from dataclasses import dataclass

import pytest
import torch
import tvm
import tvm_ffi
from tvm.script import relax as R

from tvm_pyfunc_nb import CallError, PyFuncError, TVMModuleError
from tvm_pyfunc_nb.testing import NotebookShell as Shell
from tvm_pyfunc_nb.testing import typed_into_debugger

X = torch.ones(4)
BODY = """
@I.pyfunc
def bad(self, x):
    y = x + 1
    z = y[100]  # <- bad
    return z

@I.pyfunc
def outer(self, x):
    v = x * 3
    return self.bad(v)  # <- outer

@I.pyfunc
def misuses_kernel(self, x):
    q = x[:2]
    return self.call_tir("copy4", [x], R.Tensor((8,), "float32"))  # <- misuses_kernel

@I.pyfunc
def calls_refusing_packed(self, x):
    q = x[:2]
    return self.call_dps_packed("tvmnb_pm_refuses", [x], R.Tensor((4,), "float32"))  # <- packed

@I.pyfunc
def fine(self, x):
    return x * 2

@T.prim_func
def copy4(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
    for i in range(4):
        b[i] = a[i]

@R.function
def through_py_func(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    y = R.call_py_func("bad", x, out_ty=R.Tensor((4,), "float32"))
    return y

@R.function
def through_packed(x: R.Tensor((4,), "float32")):
    return R.call_dps_packed("tvmnb_pm_calls_bad", (x,), out_ty=R.Tensor((4,), "float32"))
"""
# Global packed functions written in the notebook: one calls the pyfunc, one refuses
PACKED = """
def calls_bad(x, out):
    out.copyfrom(demo.bad(torch.from_dlpack(x)).numpy())

def refuses(x, out):
    raise ValueError("refused on purpose")

tvm.register_global_func("tvmnb_pm_calls_bad", calls_bad, override=True)
tvm.register_global_func("tvmnb_pm_refuses", refuses, override=True)
"""
FRAME = re.compile(r"^(?:> |  )(\S.*)\((\d+)\)([\w<>]+)\(\)$", re.MULTILINE)


def line_of(mark: str) -> int:
    """The cell line marked `# <- mark` (the `%%tvmmodule` line is line 1, BODY's first is 2)."""
    for number, text in enumerate(BODY.splitlines(), start=2):
        if text.endswith(f"# <- {mark}"):
            return number
    raise KeyError(mark)


@pytest.fixture(scope="module")
def demo(_ipython):
    shell = Shell(_ipython)
    shell.ns.update(torch=torch, tvm=tvm, R=R, X=X)
    shell.cell("demo", BODY, options="--quiet")
    shell.run(PACKED)
    yield shell
    for name in ("tvmnb_pm_calls_bad", "tvmnb_pm_refuses"):
        tvm_ffi.remove_global_func(name)
    _ipython.run_line_magic("tvmmodule_drop", "demo")


def frames_of(where: str) -> list[tuple[str, int, str]]:
    """`(file, line, function)` of each frame `where` lists, outermost first."""
    return [(file, int(line), name) for file, line, name in FRAME.findall(where)]


def typed(output: str, command: str) -> str:
    """What the debugger printed for `command` (up to its next prompt)."""
    return output.split(f"ipdb> {command}\n", 1)[1].split("ipdb> ", 1)[0]


@dataclass
class Path:
    """One way of reaching a failing pyfunc: `call` fails; `%debug` stops in `function` at
    the line marked `mark`, where `p local` prints `value`."""

    id: str
    call: str
    error: type
    function: str
    mark: str
    local: str
    value: str


TWOS, SIXES = "tensor([2., 2., 2., 2.])", "tensor([4., 4., 4., 4.])"
PATHS = [
    Path("directly", "demo.bad(X)", PyFuncError, "bad", "bad", "y", TWOS),
    Path("by-name", "demo.call_py_func('bad', [X])", PyFuncError, "bad", "bad", "y", TWOS),
    Path("from-a-pyfunc", "demo.outer(X)", PyFuncError, "bad", "bad", "y", SIXES),
    Path("R.call_py_func", "demo.through_py_func(X)", PyFuncError, "bad", "bad", "y", TWOS),
    Path("R.call_dps_packed", "demo.through_packed(X)", PyFuncError, "bad", "bad", "y", TWOS),
    Path(
        "NAME.call_dps_packed",
        "demo.call_dps_packed('tvmnb_pm_calls_bad', [X], R.Tensor((4,), 'float32'))",
        PyFuncError,
        "bad",
        "bad",
        "y",
        TWOS,
    ),
    Path(
        "self.call_tir",
        "demo.misuses_kernel(X)",
        CallError,
        "misuses_kernel",
        "misuses_kernel",
        "q",
        "tensor([1., 1.])",
    ),
    Path(
        "self.call_dps_packed",
        "demo.calls_refusing_packed(X)",
        CallError,
        "calls_refusing_packed",
        "packed",
        "q",
        "tensor([1., 1.])",
    ),
]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.id)
def test_debug_stops_in_the_pyfunc_frame_with_its_locals(demo, path, capsys):
    err = demo.run(path.call, expect_error=path.error)
    shown = capsys.readouterr().out
    printed = demo.debug("where", f"p {path.local}")

    line = line_of(path.mark)
    stop = f"{path.function}()"
    assert re.match(rf"> <tvmmodule demo cell \d+>\({line}\){re.escape(stop)}\n", printed), printed
    frames = frames_of(typed(printed, "where"))
    assert frames[0][0].startswith("<ipython-input-"), printed  # the notebook cell that called
    last_file, last_line, last_function = frames[-1]
    assert last_file.startswith("<tvmmodule demo cell ") and last_line == line, printed
    assert last_function == path.function, printed
    assert typed(printed, f"p {path.local}").strip() == path.value, printed
    # The error itself is still the package's short one, and shown without a traceback
    assert isinstance(err, TVMModuleError) and len(str(err).splitlines()) == 1, err
    assert shown.strip() == f"{type(err).__name__}: {err}", shown


def test_from_a_pyfunc_the_caller_frame_is_one_level_up(demo):
    """`where` after `outer` called the failing `bad` lists `outer`'s line, then `bad`'s."""
    demo.run("demo.outer(X)", expect_error=PyFuncError)
    printed = demo.debug("where", "up", "up", "p v")
    cell_frames = [
        (line, name)
        for file, line, name in frames_of(typed(printed, "where"))
        if "tvmmodule" in file
    ]
    assert cell_frames == [(line_of("outer"), "outer"), (line_of("bad"), "bad")], printed
    assert typed(printed, "p v").strip() == "tensor([3., 3., 3., 3.])", printed


@pytest.mark.parametrize(
    "call, mark", [("demo.through_py_func(X)", "bad"), ("demo.misuses_kernel(X)", "misuses_kernel")]
)
def test_the_traceback_ends_at_the_cell_line(demo, call, mark, capsys):
    """The plain traceback and `%tb` both end with the pyfunc's cell line, with its text."""
    err = demo.run(call, expect_error=TVMModuleError)
    last = traceback.extract_tb(err.__traceback__)[-1]
    assert last.filename.startswith("<tvmmodule demo cell ") and last.lineno == line_of(mark)
    assert last.line == BODY.splitlines()[line_of(mark) - 2].strip(), last
    capsys.readouterr()
    demo.run("%tb")
    story = capsys.readouterr().out
    tail = story[story.rindex("File ") :]  # the last frame %tb shows, and the error after it
    assert tail.startswith("File <tvmmodule demo cell "), story
    assert f":{last.lineno}, in {last.name}(" in tail.splitlines()[0], story
    assert "tvm_pyfunc_nb" not in tail and tail.rstrip().endswith(str(err)), story


def test_pdb_on_opens_the_debugger_in_the_pyfunc(demo):
    printed = io.StringIO()
    demo.ip.run_line_magic("pdb", "on")
    try:
        with contextlib.redirect_stdout(printed), typed_into_debugger("p y", shell=demo.ip):
            demo.run("demo.through_py_func(X)", expect_error=PyFuncError)
    finally:
        demo.ip.run_line_magic("pdb", "off")
    output = printed.getvalue()
    assert re.search(rf"^> <tvmmodule demo cell \d+>\({line_of('bad')}\)bad\(\)$", output, re.M)
    assert typed(output, "p y").strip() == TWOS, output


def test_a_pyfunc_error_caught_by_its_caller_is_not_a_later_call_error(demo):
    """A pyfunc's error waits for a compiled caller beyond TVM; one its caller caught does not
    stand in for a later, different failure of a compiled call."""
    demo.run("try:\n    demo.bad(X)\nexcept Exception:\n    pass")
    err = demo.run("demo.through_py_func(torch.ones(3))", expect_error=CallError)
    assert err.function == "through_py_func" and "float32[4]" in str(err), err


def test_after_post_mortem_the_kernel_and_module_keep_working(demo):
    """Debugged, the pyfunc is fixed in its cell and run again: the compiled caller, not
    recompiled, gives the right numbers, and the other functions theirs."""
    body = """
@I.pyfunc
def bad(self, x):
    y = x + 1
    z = y[100]
    return z

@R.function
def through_py_func(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    y = R.call_py_func("bad", x, out_ty=R.Tensor((4,), "float32"))
    return y
"""
    demo.cell("m", body, cell_id="pm-keeps-working", options="--quiet")
    try:
        demo.run("m.through_py_func(X)", expect_error=PyFuncError)
        assert "tensor([2., 2., 2., 2.])" in demo.debug("p y", "up", "where")
        compiles = len(demo.eval("m").stats.compiles)
        fixed = body.replace("z = y[100]", "z = y * 10")
        demo.cell("m", fixed, cell_id="pm-keeps-working", options="--quiet")
        assert torch.equal(demo.eval("m.through_py_func(X)"), (X + 1) * 10)
        assert len(demo.eval("m").stats.compiles) == compiles
        assert torch.equal(demo.eval("demo.fine(X)"), X * 2)
    finally:
        demo.ip.run_line_magic("tvmmodule_drop", "m")


def test_what_is_typed_into_the_debugger_prints_no_colour_codes(demo):
    """A kernel's shell colours its debugger (ipykernel's theme is not `nocolor`); the transcript
    `typed_into_debugger` prints is kept in a saved notebook, where escapes would stay raw."""
    colors = demo.ip.colors
    demo.ip.colors = "linux"
    try:
        demo.run("demo.bad(X)", expect_error=PyFuncError)
        printed = demo.debug("where", "p y")
    finally:
        demo.ip.colors = colors
    assert "\x1b[" not in printed, repr(printed)
    assert re.search(rf"^> <tvmmodule demo cell \d+>\({line_of('bad')}\)bad\(\)$", printed, re.M)
    assert typed(printed, "p y").strip() == TWOS, printed
