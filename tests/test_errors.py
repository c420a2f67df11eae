"""The error corpus: bad cells and calls in a real IPython shell, and a module that survives them.

Every case asserts what a user sees: an error of the package's own class,
whose message names the function and the cell line where one applies, fits
on a screen, and leaves every function that worked before giving the same
numbers, with `ir_mod` unchanged. In a cell body, `# <-` marks the line the
error must point at.
"""

from __future__ import annotations

import gc
import itertools
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import tvm
import tvm_ffi
from cells import ADD_TIR, MAIN_PYFUNC, MAIN_RELAX, RELAX_CALLS_BOTH, SCALE_PYFUNC
from tvm.script import relax as R
from tvm.script.ir_builder.base import IRBuilder, IRBuilderFrame

from tvm_pyfunc_nb import (
    CallError,
    CellSyntaxError,
    CompileError,
    IllFormedModuleError,
    PyFuncError,
    TVMModuleError,
    TVMScriptError,
)
from tvm_pyfunc_nb.testing import NotebookShell as Shell

MAX_LINES = 40
MARK = "# <-"
X = torch.arange(4, dtype=torch.float32)
Y = torch.ones(4)
SEED = {
    "seed-tir": ADD_TIR,
    "seed-main": MAIN_PYFUNC,
    "seed-relax": MAIN_RELAX,
    "seed-scale": SCALE_PYFUNC,
    "seed-pipeline": RELAX_CALLS_BOTH,
}
_fresh_ids = itertools.count(1)


class Seed:
    """The seed module `demo` and the numbers each of its functions gives."""

    def __init__(self, shell: Shell):
        self.shell = shell
        for cell_id, body in SEED.items():
            shell.cell("demo", body, cell_id=cell_id, options="--quiet")
        self.live = shell.ns["demo"]
        self.expected = self.results()
        self.ir_mod = self.live.ir_mod
        self.script = self.live.script()

    def results(self) -> dict[str, torch.Tensor]:
        demo, out = self.live, torch.empty(4)
        demo.add_tir(X, Y, out)
        return {
            "add_tir": out,
            "call_tir": demo.call_tir("add_tir", [X, Y], R.Tensor((4,), "float32")),
            "main": demo.main(X, Y),
            "main_relax": demo.main_relax(X, Y),
            "scale": demo.scale(X),
            "pipeline": demo.pipeline(X, Y),
        }

    def assert_intact(self) -> None:
        """Every seed function gives the numbers it gave before; the module is the one it was."""
        assert self.shell.ns["demo"] is self.live
        assert tvm_ffi.structural_equal(self.live.ir_mod, self.ir_mod)
        assert self.live.script() == self.script
        assert set(self.live.functions) == set(self.expected) - {"call_tir"}
        for name, value in self.results().items():
            assert torch.equal(value, self.expected[name]), name


@pytest.fixture(scope="module")
def seed(_ipython):
    shell = Shell(_ipython)
    shell.ns.update(torch=torch, np=np, tvm=tvm, R=R, X=X, Y=Y)
    yield Seed(shell)
    _ipython.run_line_magic("tvmmodule_drop", "demo")


def marked_line(body: str) -> int | None:
    """The cell line of the line marked `# <-` (the `%%tvmmodule` line is line 1)."""
    for number, line in enumerate(body.splitlines(), start=2):
        if MARK in line:
            return number
    return None


def assert_compact(
    err: BaseException, error: type, function: str | None, line: int | None, shown: str
) -> None:
    """The package's error, naming the function and the cell line, on one screen, shown without
    traceback noise.
    """
    assert isinstance(err, error) and isinstance(err, TVMModuleError), repr(err)
    message = str(err)
    if function:
        assert err.function == function and f"`{function}`" in message, message
    if line:
        assert err.line == line and f"cell line {line}" in message, message
    assert len(message.splitlines()) <= MAX_LINES, message
    assert f"{type(err).__name__}: " in shown and "Traceback" not in shown, shown
    assert len(shown.strip().splitlines()) <= MAX_LINES, shown


# -- bad cells -----------------------------------------------------------------------------------
@dataclass
class BadCell:
    """A cell that must fail: when it runs, or (with `call`) when `call` runs after it."""

    id: str
    body: str
    error: type
    function: str | None
    call: str | None = None  # an expression that fails, for errors that only a call can show
    replaces: str | None = None  # a seed cell this one is an edit of (run under its cell id)
    line: int | None = None  # where `# <-` cannot mark it (in an unterminated string)
    says: str = ""  # what the message must say besides (what to write instead)

    @property
    def expected_line(self) -> int | None:
        return self.line or marked_line(self.body)


CELLS = [
    # -- Python syntax, and what may stand at the top level of a cell
    BadCell(
        "missing-colon",
        """
@I.pyfunc
def f(self, x)  # <-
    return x
""",
        CellSyntaxError,
        None,
    ),
    BadCell(
        "unclosed-paren",
        """
@I.pyfunc
def f(self, x):
    return torch.add(x, (x  # <-
""",
        CellSyntaxError,
        None,
    ),
    BadCell(
        "unexpected-indent",
        """
@I.pyfunc
def f(self, x):
    y = x
        return y  # <-
""",
        CellSyntaxError,
        None,
    ),
    BadCell(
        "syntax-inside-primfunc",
        """
@T.prim_func
def f(A: T.Buffer((4,), "float32")):
    for i in range(4)  # <-
        A[i] = 1.0
""",
        CellSyntaxError,
        None,
    ),
    BadCell(
        "unterminated-string",
        """
@I.pyfunc
def f(self, x):
    return "abc
""",
        CellSyntaxError,
        None,
        line=5,
    ),
    BadCell(
        "top-level-assignment",
        """
@I.pyfunc
def f(self, x):
    return x

limit = 3  # <-
""",
        CellSyntaxError,
        None,
    ),
    BadCell(
        "top-level-call",
        """
print("hello")  # <-
""",
        CellSyntaxError,
        None,
    ),
    BadCell(
        "undecorated-function",
        """
def f(x):  # <-
    return x
""",
        CellSyntaxError,
        "f",
    ),
    BadCell(
        "two-kinds-of-decorator",
        """
@I.pyfunc
@R.function
def f(x):  # <-
    return x
""",
        CellSyntaxError,
        "f",
    ),
    BadCell(
        "async-def",
        """
@I.pyfunc
async def f(self, x):  # <-
    return x
""",
        CellSyntaxError,
        None,
    ),
    BadCell(
        "defined-twice-in-a-cell",
        """
@I.pyfunc
def f(self, x):
    return x

@I.pyfunc
def f(self, x):  # <-
    return x + 1
""",
        CellSyntaxError,
        "f",
    ),
    BadCell(
        "class-without-ir-module",
        """
class Mod(BasePyModule):  # <-
    @I.pyfunc
    def f(self, x):
        return x
""",
        CellSyntaxError,
        None,
    ),
    BadCell(
        "default-argument-raises",
        """
@I.pyfunc  # <-
def f(self, x=1 / 0):
    return x
""",
        CellSyntaxError,
        "f",
    ),
    BadCell(
        "unknown-decorator-name",
        """
@I.pyfunc  # <-
@no_such_decorator
def f(self, x):
    return x
""",
        CellSyntaxError,
        "f",
    ),
    # -- TVMScript
    BadCell(
        "unknown-relax-op",
        """
@R.function
def f(x: R.Tensor((4,), "float32")):
    y = R.no_such_op(x)  # <-
    return y
""",
        TVMScriptError,
        "f",
    ),
    BadCell(
        "unknown-dtype-annotation",
        """
@R.function
def f(x: R.Tensor((4,), "floaty32")):  # <-
    return x
""",
        TVMScriptError,
        "f",
    ),
    BadCell(
        "undefined-variable-relax",
        """
@R.function
def f(x: R.Tensor((4,), "float32")):
    return R.add(x, zz)  # <-
""",
        TVMScriptError,
        "f",
    ),
    BadCell(
        "undefined-variable-tir",
        """
@T.prim_func
def f(A: T.Buffer((4,), "float32")):
    for i in range(4):
        A[i] = B[i]  # <-
""",
        TVMScriptError,
        "f",
    ),
    BadCell(
        "loop-variable-outside-its-loop",
        """
@T.prim_func
def f(A: T.Buffer((4,), "float32")):
    for i in range(4):
        A[i] = 1.0
    A[0] = T.float32(i)  # <-
""",
        TVMScriptError,
        "f",
    ),
    BadCell(
        "unknown-tir-annotation",
        """
@T.prim_func
def f(a: T.no_such_type):  # <-
    pass
""",
        TVMScriptError,
        "f",
    ),
    BadCell(
        "out-ty-not-a-type",
        """
@R.function
def f(x: R.Tensor((4,), "float32"), y: R.Tensor((4,), "float32")):
    cls = demo
    z = R.call_tir(cls.add_tir, (x, y), out_ty="float32")  # <-
    return z
""",
        TVMScriptError,
        "f",
    ),
    BadCell(
        "unknown-module-function",
        """
@R.function
def f(x: R.Tensor((4,), "float32")):
    cls = demo
    z = R.call_tir(cls.no_such_kernel, (x,), out_ty=R.Tensor((4,), "float32"))  # <-
    return z
""",
        TVMScriptError,
        "f",
    ),
    BadCell(
        "matmul-shapes-disagree",
        """
@R.function
def f(x: R.Tensor((4, 3), "float32"), y: R.Tensor((4, 3), "float32")):
    return R.matmul(x, y)  # <-
""",
        TVMScriptError,
        "f",
    ),
    BadCell(
        "add-dtypes-disagree",
        """
@R.function
def f(x: R.Tensor((4,), "float32"), y: R.Tensor((4,), "int32")):
    return R.add(x, y)  # <-
""",
        TVMScriptError,
        "f",
    ),
    BadCell(
        "add-shapes-do-not-broadcast",
        """
@R.function
def f(x: R.Tensor((4,), "float32"), y: R.Tensor((3,), "float32")):
    return R.add(x, y)  # <-
""",
        TVMScriptError,
        "f",
    ),
    BadCell(
        "unknown-keyword",
        """
@R.function
def f(x: R.Tensor((4,), "float32")):
    return R.sum(x, axiz=0)  # <-
""",
        TVMScriptError,
        "f",
    ),
    BadCell(
        "axis-out-of-range",
        """
@R.function
def f(x: R.Tensor((4,), "float32")):
    return R.sum(x, axis=3)  # <-
""",
        TVMScriptError,
        "f",
    ),
    BadCell(
        "reshape-changes-size",
        """
@R.function
def f(x: R.Tensor((4,), "float32")):
    return R.reshape(x, (3,))  # <-
""",
        TVMScriptError,
        "f",
    ),
    BadCell(
        "tuple-index-out-of-range",
        """
@R.function
def f(x: R.Tuple(R.Tensor((4,), "float32"))):
    return x[3]  # <-
""",
        TVMScriptError,
        "f",
    ),
    BadCell(
        "python-call-in-relax",
        """
@R.function
def f(x: R.Tensor((4,), "float32")):
    return print(x)  # <-
""",
        TVMScriptError,
        "f",
    ),
    BadCell(
        "relax-call-with-too-few-arguments",
        """
@R.function
def f(x: R.Tensor((4,), "float32")):
    cls = demo
    return cls.main_relax(x)  # <-
""",
        TVMScriptError,
        "f",
    ),
    BadCell(
        "dataflow-variable-escapes",
        """
@R.function
def f(x: R.Tensor((4,), "float32")):
    with R.dataflow():
        y = R.add(x, x)
    return y  # <-
""",
        TVMScriptError,
        "f",
    ),
    BadCell(
        "constant-division-by-zero",
        """
@T.prim_func
def f(A: T.Buffer((4,), "int32")):
    for i in range(4):
        A[i] = A[i] // 0  # <-
""",
        TVMScriptError,
        "f",
    ),
    BadCell(
        "edit-breaks-the-seed-kernel",
        ADD_TIR.replace("A[i] + B[i]", "A[i] + Q[i]").replace(
            "C[i] = A[i] + Q[i]", "C[i] = A[i] + Q[i]  # <-"
        ),
        TVMScriptError,
        "add_tir",
        replaces="seed-tir",
    ),
    # -- well-formedness of the module
    BadCell(
        "out-ty-dtype-disagrees-with-kernel",
        """
@R.function
def f(x: R.Tensor((4,), "float32"), y: R.Tensor((4,), "float32")):
    cls = demo
    z = R.call_tir(cls.add_tir, (x, y), out_ty=R.Tensor((4,), "int32"))  # <-
    return z
""",
        IllFormedModuleError,
        "f",
    ),
    BadCell(
        "out-ty-rank-disagrees-with-kernel",
        """
@R.function
def f(x: R.Tensor((4,), "float32"), y: R.Tensor((4,), "float32")):
    cls = demo
    z = R.call_tir(cls.add_tir, (x, y), out_ty=R.Tensor((2, 2), "float32"))  # <-
    return z
""",
        IllFormedModuleError,
        "f",
    ),
    BadCell(
        "sblock-in-a-plain-prim-func",
        """
@T.prim_func
def f(A: T.Buffer((4,), "float32")):
    for i in range(4):
        with T.sblock("b"):  # <-
            vi = T.axis.spatial(4, i)
            A[vi] = 1.0
""",
        IllFormedModuleError,
        "f",
        says="@T.prim_func(s_tir=True)",
    ),
    # a pyfunc named by string is resolved when it runs: the cell is fine, the call is not
    BadCell(
        "call-py-func-of-a-pyfunc-not-there-yet",
        """
@R.function
def f(x: R.Tensor((4,), "float32")):
    z = R.call_py_func("no_such_pyfunc", x, out_ty=R.Tensor((4,), "float32"))
    return z
""",
        CallError,
        "f",
        call="demo.f(X)",
    ),
    BadCell(
        "call-tir-of-a-pyfunc",
        """
@R.function
def f(x: R.Tensor((4,), "float32")):
    cls = demo
    return R.call_tir(cls.scale, (x,), out_ty=R.Tensor((4,), "float32"))  # <-
""",
        IllFormedModuleError,
        "f",
    ),
    BadCell(
        "call-py-func-of-a-kernel",
        """
@R.function
def f(x: R.Tensor((4,), "float32"), y: R.Tensor((4,), "float32")):
    z = R.add(x, y)
    w = R.multiply(z, z)
    return R.call_py_func("add_tir", w, out_ty=R.Tensor((4,), "float32"))  # <-
""",
        IllFormedModuleError,
        "f",
    ),
    BadCell(
        "pyfunc-redefined-as-a-kernel-breaks-a-caller",
        """
@T.prim_func
def scale(A: T.Buffer((4,), "float32")):
    for i in range(4):
        A[i] = 1.0
""",
        IllFormedModuleError,
        "pipeline",
    ),
    BadCell(
        "edit-drops-a-kernel-others-call",
        ADD_TIR.replace("def add_tir", "def add_tir_v2"),
        IllFormedModuleError,
        "pipeline",
        replaces="seed-tir",
    ),
    BadCell(
        "edit-drops-a-pyfunc-relax-calls",
        SCALE_PYFUNC.replace("def scale", "def scale_v2"),
        CallError,
        "pipeline",
        replaces="seed-scale",
        call="demo.pipeline(X, Y)",
    ),
    BadCell(
        "constant-index-outside-buffer",
        """
@T.prim_func
def f(A: T.Buffer((4,), "float32")):
    A[7] = 1.0  # <-
""",
        IllFormedModuleError,
        "f",
    ),
    BadCell(
        "loop-runs-past-buffer",
        """
@T.prim_func
def f(A: T.Buffer((4,), "float32")):
    for i in range(100000):
        A[i] = 1.0  # <-
""",
        IllFormedModuleError,
        "f",
    ),
    BadCell(
        "symbolic-loop-runs-past-buffer",
        """
@T.prim_func
def f(a: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n,), "float32")
    for i in range(n + 1):
        A[i] = 1.0  # <-
""",
        IllFormedModuleError,
        "f",
    ),
    # -- compile failures (lazy: the first call compiles)
    BadCell(
        "thread-binding-on-cpu",
        """
@T.prim_func
def f(A: T.Buffer((4,), "float32")):
    A[0] = 2.0
    tx = T.launch_thread("threadIdx.x", 4)  # <-
    A[tx] = 1.0
""",
        CompileError,
        "f",
        call="demo.f(torch.zeros(4))",
    ),
    BadCell(
        "extern-symbol-the-process-lacks",
        """
@T.prim_func
def f(A: T.Buffer((4,), "float32")):
    for i in range(4):
        A[i] = T.call_extern("float32", "no_such_symbol_xyz", A[i])  # <-
""",
        CompileError,
        "f",
        call="demo.f(torch.zeros(4))",
    ),
    BadCell(
        "relax-calls-a-kernel-that-does-not-compile",
        """
@T.prim_func
def k(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        B[i] = T.call_extern("float32", "no_such_symbol_xyz", A[i])  # <-

@R.function
def f(x: R.Tensor((4,), "float32")):
    cls = demo
    return R.call_tir(cls.k, (x,), out_ty=R.Tensor((4,), "float32"))
""",
        CompileError,
        "k",
        call="demo.f(X)",
    ),
    BadCell(
        "storage-scope-unknown-in-match-buffer",
        """
@T.prim_func
def f(a: T.handle):
    A = T.match_buffer(a, (4,), "float32", scope="no_such_scope")  # <-
    for i in range(4):
        A[i] = T.float32(1)
""",
        CompileError,
        "f",
        call="demo.f(torch.zeros(4))",
    ),
    BadCell(
        "storage-scope-unknown-in-alloc-buffer",
        """
@T.prim_func
def f(A: T.Buffer((4,), "float32")):
    B = T.alloc_buffer((4,), "float32",
                       scope="no_such_scope")  # <-
    for i in range(4):
        B[i] = T.float32(1)
    for i in range(4):
        A[i] = B[i]
""",
        CompileError,
        "f",
        call="demo.f(torch.zeros(4))",
    ),
    BadCell(
        "intrinsic-of-a-dtype-llvm-lacks",
        """
@T.prim_func
def f(A: T.Buffer((4,), "float32")):
    A[0] = 2.0
    for i in range(4):
        A[i] = T.float32(1) + T.exp(T.int32(1))  # <-
""",
        CompileError,
        "f",
        call="demo.f(torch.zeros(4))",
    ),
    BadCell(
        "packed-function-not-registered",
        """
@R.function
def f(x: R.Tensor((4,), "float32")):
    return R.call_dps_packed("no_such_packed", (x,), out_ty=R.Tensor((4,), "float32"))
""",
        CallError,
        "f",
        call="demo.f(X)",
    ),
    # -- pyfuncs that raise, however they are called
    BadCell(
        "pyfunc-raises-called-from-python",
        """
@I.pyfunc
def boom(self, x):
    raise ValueError("boom")  # <-
""",
        PyFuncError,
        "boom",
        call="demo.boom(X)",
    ),
    BadCell(
        "pyfunc-raises-called-through-call-py-func",
        """
@I.pyfunc
def boom(self, x):
    y = x + 1
    return y.no_such_method()  # <-
""",
        PyFuncError,
        "boom",
        call="demo.call_py_func('boom', [X])",
    ),
    BadCell(
        "pyfunc-raises-called-from-relax",
        """
@I.pyfunc
def boom(self, x):
    raise ValueError("boom")  # <-

@R.function
def f(x: R.Tensor((4,), "float32")):
    return R.call_py_func("boom", x, out_ty=R.Tensor((4,), "float32"))
""",
        PyFuncError,
        "boom",
        call="demo.f(X)",
    ),
    BadCell(
        "pyfunc-raises-called-from-another-pyfunc",
        """
@I.pyfunc
def boom(self, x):
    return x[10]  # <-

@I.pyfunc
def g(self, x):
    return self.boom(x)
""",
        PyFuncError,
        "boom",
        call="demo.g(X)",
    ),
    BadCell(
        "pyfunc-misuses-call-tir",
        """
@I.pyfunc
def g(self, x):
    return self.call_tir(self.add_tir, [x], out_ty=R.Tensor((4,), "float32"))
""",
        CallError,
        "add_tir",
        call="demo.g(X)",
    ),
    BadCell(
        "pyfunc-returns-wrong-shape-for-out-ty",
        """
@I.pyfunc
def half(self, x):
    return x[:2]

@R.function
def f(x: R.Tensor((4,), "float32")):
    return R.call_py_func("half", x, out_ty=R.Tensor((4,), "float32"))
""",
        PyFuncError,
        "half",
        call="demo.f(X)",
    ),
    BadCell(
        "pyfunc-returns-wrong-dtype-for-out-ty",
        """
@I.pyfunc
def ints(self, x):
    return x.int()

@R.function
def f(x: R.Tensor((4,), "float32")):
    return R.call_py_func("ints", x, out_ty=R.Tensor((4,), "float32"))
""",
        PyFuncError,
        "ints",
        call="demo.f(X)",
    ),
    BadCell(
        "pyfunc-returns-none-for-out-ty",
        """
@I.pyfunc
def nothing(self, x):
    x.add_(0)

@R.function
def f(x: R.Tensor((4,), "float32")):
    return R.call_py_func("nothing", x, out_ty=R.Tensor((4,), "float32"))
""",
        PyFuncError,
        "nothing",
        call="demo.f(X)",
    ),
    BadCell(
        "pyfunc-returns-wrong-symbolic-shape",
        """
@I.pyfunc
def longer(self, x):
    return torch.cat([x, x])

@R.function
def f(x: R.Tensor(("n",), "float32")):
    n = T.int64()
    return R.call_py_func("longer", x, out_ty=R.Tensor((n,), "float32"))
""",
        PyFuncError,
        "longer",
        call="demo.f(X)",
    ),
]


@pytest.mark.parametrize("case", CELLS, ids=lambda c: c.id)
def test_bad_cell(seed, case, capsys):
    cell_id = case.replaces or f"bad-{next(_fresh_ids)}"
    shell, before = seed.shell, seed.live.ir_mod
    capsys.readouterr()
    if case.call is None:
        err = shell.cell("demo", case.body, cell_id=cell_id, expect_error=case.error)
    else:
        shell.cell("demo", case.body, cell_id=cell_id, options="--quiet")
        before = seed.live.ir_mod
        err = shell.run(case.call, expect_error=case.error)
    shown = capsys.readouterr().out
    try:
        assert_compact(err, case.error, case.function, case.expected_line, shown)
        assert case.says in str(err)
        assert tvm_ffi.structural_equal(seed.live.ir_mod, before)
    finally:
        if case.replaces is None:
            seed.live.drop_functions(cell_id)
        else:
            shell.cell("demo", SEED[case.replaces], cell_id=case.replaces, options="--quiet")
    seed.assert_intact()


def test_the_corpus_is_large_enough():
    at_cell_run = [c for c in CELLS if c.call is None]
    assert len(CELLS) >= 40 and len(at_cell_run) >= 30 and len(CALLS) >= 15
    assert {c.error for c in CELLS} == {
        CellSyntaxError,
        TVMScriptError,
        IllFormedModuleError,
        CompileError,
        PyFuncError,
        CallError,
    }


def test_compile_error_names_function_target_and_reason_in_one_line(seed):
    body = CELLS[[c.id for c in CELLS].index("extern-symbol-the-process-lacks")].body
    seed.shell.cell("demo", body, cell_id="compile-line", options="--quiet")
    try:
        err = seed.shell.run("demo.f(torch.zeros(4))", expect_error=CompileError)
    finally:
        seed.live.drop_functions("compile-line")
    assert str(err) == (
        "`f`, cell line 6: does not compile for target llvm: calls external symbol(s) "
        "no_such_symbol_xyz, which this process does not provide"
    )
    seed.assert_intact()


@pytest.mark.parametrize(
    "body, says",
    [
        (
            """
@R.function
def f(x: R.Tensor((3,), "float32"), y: R.Tensor((4,), "float32")):
    return R.add(x, y)  # <-
""",
            "In R.add, the first input shape at dim 0 is 3 and the second input shape at dim 0 "
            "is 4, which are not broadcastable.",
        ),
        (  # a call with the wrong shape to the seed's `main_relax`, of another cell
            """
@R.function
def f(x: R.Tensor((2, 3), "float32")):
    cls = demo
    return cls.main_relax(x, x)  # <-
""",
            'Argument 0 type mismatch: expected R.Tensor((n,), dtype="float32"), given '
            'R.Tensor((2, 3), dtype="float32")',
        ),
    ],
    ids=["R.add", "cls.f"],
)
def test_a_shape_mismatch_is_one_line_naming_the_function_the_line_and_the_shapes(seed, body, says):
    err = seed.shell.cell("demo", body, cell_id="shapes", expect_error=TVMScriptError)
    assert str(err) == f"`f`, cell line {marked_line(body)}: {says}"  # no operator record
    seed.assert_intact()


def test_an_error_about_another_cell_says_which_cell(seed):
    case = CELLS[[c.id for c in CELLS].index("pyfunc-redefined-as-a-kernel-breaks-a-caller")]
    err = seed.shell.cell("demo", case.body, cell_id="blame", expect_error=IllFormedModuleError)
    assert err.line is None  # pipeline's line is not a line of this cell
    # the line of its `R.call_py_func("scale", ...)` in the seed cell, not its decorator's
    assert "`pipeline` is defined in cell" in str(err) and "line 10)" in str(err)
    seed.assert_intact()


@pytest.mark.parametrize(
    "body",
    [
        MAIN_RELAX.replace('"float32"', '"floaty"', 1),  # a Relax function's parse fails
        ADD_TIR.replace("range", "rang"),  # a PrimFunc's parse fails inside its frame
    ],
    ids=["relax", "tir"],
)
def test_a_failed_parse_keeps_no_ir_builder(seed, body):
    """The builders of a failed parse warn on stderr when they go, so they go with the error: not
    when the shell lets go of its last traceback, nor at a garbage collection in a later cell."""
    gc.collect()
    seed.shell.cell("demo", body, cell_id="builders", expect_error=TVMScriptError)
    builders = (IRBuilder, IRBuilderFrame)
    kept = [type(o).__name__ for o in gc.get_objects() if issubclass(type(o), builders)]
    assert kept == []
    seed.assert_intact()


def test_a_failed_parse_while_an_error_is_handled_leaves_that_errors_frames_alone(seed):
    def fails():
        kept = "for post-mortem"  # noqa: F841 (a local of the handled error's frame)
        raise ValueError("the caller's own")

    try:
        fails()
    except ValueError as handled:
        with pytest.raises(TVMScriptError):
            seed.live.run_cell(ADD_TIR.replace("range", "rang"), key="while-handling")
        assert handled.__traceback__.tb_next.tb_frame.f_locals["kept"] == "for post-mortem"
    seed.assert_intact()


@pytest.mark.parametrize("how", ["demo.boom(X)", "demo.call_py_func('boom', [X])", "demo.f(X)"])
def test_pyfunc_traceback_shows_the_cell_line(seed, how):
    """However a pyfunc was called, the chained traceback has its frame at the cell line, with the
    cell's text.
    """
    import traceback

    case = CELLS[[c.id for c in CELLS].index("pyfunc-raises-called-from-relax")]
    seed.shell.cell("demo", case.body, cell_id="tb", options="--quiet")
    try:
        err = seed.shell.run(how, expect_error=PyFuncError)
        frames = traceback.extract_tb(err.__cause__.__traceback__)
    finally:
        seed.live.drop_functions("tb")
    boom = [f for f in frames if f.name == "boom"]
    assert (
        boom
        and boom[-1].lineno == marked_line(case.body)
        and boom[-1].filename.startswith("<tvmmodule demo")
    )
    assert boom[-1].line == 'raise ValueError("boom")  # <-'
    seed.assert_intact()


def test_a_kernel_misused_from_a_pyfunc_names_the_kernel_and_the_traceback_the_pyfunc_line(seed):
    import traceback

    body = """
@I.pyfunc
def g(self, x):
    y = x + 1
    return self.call_tir(self.add_tir, [y], out_ty=R.Tensor((4,), "float32"))  # <-
"""
    seed.shell.cell("demo", body, cell_id="plumbing", options="--quiet")
    try:
        err = seed.shell.run("demo.g(X)", expect_error=CallError)
        frames = traceback.extract_tb(err.__traceback__)
    finally:
        seed.live.drop_functions("plumbing")
    assert err.function == "add_tir" and "takes 3 argument(s)" in str(err)
    assert err.__cause__ is not err
    (g,) = [f for f in frames if f.name == "g"]
    assert g.lineno == marked_line(body) and g.filename.startswith("<tvmmodule demo")
    seed.assert_intact()


def test_tb_shows_the_full_story_with_the_cell_line(seed, capsys):
    case = CELLS[[c.id for c in CELLS].index("pyfunc-raises-called-from-relax")]
    seed.shell.cell("demo", case.body, cell_id="full-story", options="--quiet")
    try:
        seed.shell.run("demo.f(X)", expect_error=PyFuncError)
        capsys.readouterr()
        seed.shell.run("%tb")
        story = capsys.readouterr().out
    finally:
        seed.live.drop_functions("full-story")
    assert "ValueError: boom" in story and 'raise ValueError("boom")' in story
    assert f"line {marked_line(case.body)}" in story and "PyFuncError" in story


# -- bad calls -----------------------------------------------------------------------------------
@dataclass
class BadCall:
    """A call that must fail with `error`, naming `function` and each of `mentions`."""

    id: str
    call: str
    error: type
    function: str
    mentions: tuple[str, ...] = ()


CALLS = [
    BadCall(
        "unknown-function",
        "demo.no_such_function(X)",
        CallError,
        "no_such_function",
        ("add_tir", "main"),
    ),
    BadCall(
        "relax-too-few-arguments",
        "demo.main_relax(X)",
        CallError,
        "main_relax",
        ("takes 2", "got 1"),
    ),
    BadCall(
        "relax-too-many-arguments",
        "demo.main_relax(X, Y, Y)",
        CallError,
        "main_relax",
        ("takes 2", "got 3"),
    ),
    BadCall(
        "relax-symbolic-shape-mismatch",
        "demo.main_relax(X, torch.ones(5))",
        CallError,
        "main_relax",
        ("`y`", "float32[n]", "float32[5]", "n is 4"),
    ),
    BadCall(
        "relax-wrong-dtype",
        "demo.main_relax(X, Y.double())",
        CallError,
        "main_relax",
        ("`y`", "float32", "float64"),
    ),
    BadCall(
        "relax-wrong-rank",
        "demo.main_relax(torch.ones(2, 2), torch.ones(2, 2))",
        CallError,
        "main_relax",
        ("`x`", "2 dims instead of 1"),
    ),
    BadCall(
        "relax-zero-dim-tensor",
        "demo.main_relax(torch.tensor(1.0), torch.tensor(1.0))",
        CallError,
        "main_relax",
        ("`x`", "0 dims instead of 1"),
    ),
    BadCall(
        "relax-none", "demo.main_relax(None, None)", CallError, "main_relax", ("`x`", "NoneType")
    ),
    BadCall("relax-strings", "demo.main_relax('a', 'b')", CallError, "main_relax", ("`x`", "str")),
    BadCall(
        "relax-complex-tensor",
        "demo.main_relax(X.to(torch.complex64), Y)",
        CallError,
        "main_relax",
        ("`x`", "complex64"),
    ),
    BadCall(
        "relax-complex-tvm-tensor",
        "demo.main_relax(tvm.runtime.from_dlpack(X.to(torch.complex64)), Y)",
        CallError,
        "main_relax",
        ("`x`",),
    ),
    BadCall(
        "relax-tensor-on-another-device",
        "demo.main_relax(torch.ones(4, device='meta'), Y)",
        CallError,
        "main_relax",
        ("`x`", "cpu:0", "meta"),
    ),
    BadCall("relax-unknown-keyword", "demo.main_relax(X, z=Y)", CallError, "main_relax", ("`z`",)),
    BadCall(
        "relax-numpy-of-wrong-dtype",
        "demo.main_relax(np.ones(4, 'int64'), np.ones(4, 'int64'))",
        CallError,
        "main_relax",
        ("`x`", "int64"),
    ),
    BadCall(
        "kernel-too-few-arguments", "demo.add_tir(X, Y)", CallError, "add_tir", ("takes 3", "got 2")
    ),
    BadCall(
        "kernel-output-of-wrong-dtype",
        "demo.add_tir(X, Y, torch.empty(4, dtype=torch.int32))",
        CallError,
        "add_tir",
        ("`C`", "int32"),
    ),
    BadCall(
        "kernel-symbolic-shape-mismatch",
        "demo.add_tir(X, Y, torch.empty(5))",
        CallError,
        "add_tir",
        ("`C`", "float32[5]", "n is 4"),
    ),
    BadCall(
        "kernel-wrong-rank",
        "demo.add_tir(torch.ones(2, 2), torch.ones(2, 2), torch.ones(2, 2))",
        CallError,
        "add_tir",
        ("`A`", "2 dims"),
    ),
    BadCall("kernel-plain-numbers", "demo.add_tir(1, 2, 3)", CallError, "add_tir", ("`A`", "int")),
    BadCall(
        "kernel-zero-dim-tensors",
        "demo.add_tir(torch.tensor(1.), torch.tensor(1.), torch.tensor(1.))",
        CallError,
        "add_tir",
        ("`A`", "0 dims"),
    ),
    BadCall(
        "kernel-complex-output",
        "demo.add_tir(X, Y, torch.empty(4, dtype=torch.complex64))",
        CallError,
        "add_tir",
        ("`C`", "complex64"),
    ),
    BadCall(
        "pyfunc-too-many-arguments", "demo.scale(X, Y, X)", CallError, "scale", ("(x)", "got 3")
    ),
    BadCall("pyfunc-unknown-keyword", "demo.scale(X, factor=2)", CallError, "scale", ("factor",)),
    BadCall(
        "pyfunc-passes-a-bad-shape-to-its-kernel",
        "demo.main(X, torch.ones(5))",
        CallError,
        "add_tir",
        ("`B`", "float32[5]"),
    ),
    BadCall(
        "relax-through-pyfunc-shape-mismatch",
        "demo.pipeline(X, torch.ones(5))",
        CallError,
        "pipeline",
        ("`y`", "float32[5]"),
    ),
    BadCall(
        "call-tir-negative-output",
        "demo.call_tir('add_tir', [X, Y], (-1,))",
        CallError,
        "add_tir",
        ("negative",),
    ),
    BadCall(
        "call-tir-huge-output",
        "demo.call_tir('add_tir', [X, Y], (10**13,))",
        CallError,
        "add_tir",
        ("cannot allocate",),
    ),
    BadCall(
        "call-tir-output-of-wrong-size",
        "demo.call_tir('add_tir', [X, Y], (8,))",
        CallError,
        "add_tir",
        ("`C`", "float32[8]"),
    ),
    BadCall(
        "call-tir-of-a-relax-function",
        "demo.call_tir('main_relax', [X, Y], (4,))",
        CallError,
        "main_relax",
        ("PrimFunc",),
    ),
    BadCall(
        "call-py-func-of-a-kernel",
        "demo.call_py_func('add_tir', [X, Y])",
        CallError,
        "add_tir",
        ("pyfunc",),
    ),
    BadCall(
        "call-py-func-of-unknown-name",
        "demo.call_py_func('nope', [X])",
        CallError,
        "nope",
        ("main",),
    ),
]


@pytest.mark.parametrize("case", CALLS, ids=lambda c: c.id)
def test_bad_call(seed, case, capsys):
    capsys.readouterr()
    err = seed.shell.run(case.call, expect_error=case.error)
    assert_compact(err, case.error, case.function, None, capsys.readouterr().out)
    for text in case.mentions:
        assert text in str(err), str(err)
    seed.assert_intact()


@pytest.mark.parametrize(
    "options, mentions",
    [
        ("--device foo", "device `foo`"),
        ("--device cpu:x", "device `cpu:x`"),
        ("--device cpu:99999999999", "device `cpu:99999999999`"),
        ("--target nonsense", "target `nonsense`"),
        ("--target cuda", "runs on cuda devices"),
        ("--device cuda:0", "runs on cpu devices"),
    ],
    ids=str,
)
def test_a_bad_target_or_device_is_the_package_error_and_creates_nothing(
    seed, options, mentions, capsys
):
    err = seed.shell.cell("fresh", SCALE_PYFUNC, options=options, expect_error=TVMModuleError)
    assert mentions in str(err) and len(str(err).splitlines()) == 1
    assert "fresh" not in seed.shell.ns
    assert "Traceback" not in capsys.readouterr().out
    seed.assert_intact()


ODD_BUT_RIGHT = {
    "output-is-a-strided-view": (
        "out = torch.zeros(8); demo.add_tir(X, Y, out[::2]); out[::2]",
        X + Y,
    ),
    "output-is-a-column": (
        "out = torch.zeros(4, 2); demo.add_tir(X, Y, out[:, 1]); out[:, 1]",
        X + Y,
    ),
    "numpy-output-view": (
        "out = np.zeros(8, 'float32'); demo.add_tir(X.numpy(), Y.numpy(), out[::2]); "
        "torch.from_numpy(out[::2].copy())",
        X + Y,
    ),
    "expanded-input": ("demo.main_relax(torch.ones(1).expand(4), X)", X + 1),
    "input-requires-grad": ("demo.main_relax(X.clone().requires_grad_(), Y)", X + Y),
    "tvm-tensors": (
        "demo.main_relax(tvm.runtime.tensor(X.numpy()), tvm.runtime.tensor(Y.numpy()))",
        X + Y,
    ),
    "keywords": ("demo.main_relax(y=Y, x=X)", X + Y),
    "empty-tensors": ("demo.pipeline(torch.zeros(0), torch.zeros(0))", torch.zeros(0)),
    "slices": ("demo.main(X[1:], Y[1:])", (X[1:] + 1) * 2),
}


@pytest.mark.parametrize("case", ODD_BUT_RIGHT, ids=str)
def test_odd_but_valid_calls_give_the_right_numbers(seed, case):
    source, expected = ODD_BUT_RIGHT[case]
    *statements, last = source.split("; ")
    for statement in statements:
        seed.shell.run(statement)
    assert torch.equal(torch.as_tensor(seed.shell.eval(last)).detach(), expected)
    seed.assert_intact()


def test_a_dropped_module_refuses_calls_and_others_keep_working(seed):
    shell = seed.shell
    shell.cell(
        "other",
        ADD_TIR + SCALE_PYFUNC + MAIN_RELAX + RELAX_CALLS_BOTH.replace("cls = demo", "cls = other"),
        options="--quiet",
    )
    shell.run("kept = other.pipeline; kept_kernel = other.add_tir; kept(X, Y)")
    shell.run("%tvmmodule_drop other")
    for call in ("kept(X, Y)", "kept_kernel(X, Y, torch.empty(4))"):
        err = shell.run(call, expect_error=CallError)
        assert "was dropped" in str(err)
    seed.assert_intact()
