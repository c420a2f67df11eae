"""The live module through real `%%tvmmodule` cells in a real IPython shell, against real TVM
compiles.
"""

from __future__ import annotations

import cells
import pytest
import torch
from cells import ADD_TIR, MAIN_PYFUNC, MAIN_RELAX, RELAX_CALLS_BOTH, SCALE_PYFUNC

from tvm_pyfunc_nb import (
    CellSyntaxError,
    CompileError,
    IllFormedModuleError,
    LiveModule,
    TVMScriptError,
)

X = torch.arange(5, dtype=torch.float32)
Y = torch.ones(5)


def kinds(stats, since=0):
    return [(c.kind, c.functions) for c in stats.compiles[since:]]


def test_seed_example_runs_without_imports(shell):
    shell.cell("demo", ADD_TIR + MAIN_PYFUNC)
    shell.cell("demo", MAIN_RELAX)
    demo = shell.ns["demo"]
    assert isinstance(demo, LiveModule)
    assert demo.functions == {"add_tir": "tir", "main": "pyfunc", "main_relax": "relax"}
    assert torch.equal(demo.main(X, Y), (X + Y) * 2)
    out = demo.main_relax(X, Y)
    assert isinstance(out, torch.Tensor) and torch.equal(out, X + Y)


def test_nothing_compiles_at_cell_run(shell):
    shell.cell("demo", ADD_TIR + MAIN_PYFUNC + MAIN_RELAX)
    demo = shell.ns["demo"]
    assert demo.stats.compiles == []
    assert "stale" in repr(demo)
    demo.main(X, Y)
    assert kinds(demo.stats) == [("tir", ("add_tir",))]


def test_eager_compiles_at_cell_run(shell):
    shell.cell("demo", ADD_TIR + MAIN_RELAX, options="--eager")
    demo = shell.ns["demo"]
    compiled = {k for k, _ in kinds(demo.stats)}
    assert compiled == {"tir", "vm"}
    assert "compiled" in repr(demo)


def test_rerunning_an_edited_cell_replaces_its_functions(shell):
    shell.cell("demo", ADD_TIR + SCALE_PYFUNC, cell_id="a")
    shell.cell("demo", MAIN_RELAX, cell_id="b")
    shell.cell("demo", ADD_TIR, cell_id="a")  # scale removed from cell a
    demo = shell.ns["demo"]
    assert set(demo.functions) == {"add_tir", "main_relax"}
    assert torch.equal(demo.main_relax(X, Y), X + Y)


def test_last_run_wins_and_says_what_it_replaced(shell):
    shell.cell("demo", SCALE_PYFUNC, cell_id="a")
    view = shell.cell("demo", SCALE_PYFUNC.replace("x * 10", "x * 3"), cell_id="b")
    assert "scale replaces the definition from" in shell.text(view)
    assert torch.equal(shell.ns["demo"].scale(X), X * 3)


def test_plain_ipython_without_cell_ids_replaces_by_name(shell):
    shell.run("%%tvmmodule demo\n" + SCALE_PYFUNC)
    shell.run("%%tvmmodule demo\n" + SCALE_PYFUNC.replace("x * 10", "x * 4"))
    demo = shell.ns["demo"]
    assert list(demo.functions) == ["scale"]
    assert torch.equal(demo.scale(X), X * 4)


def test_cross_cell_calls_in_every_direction(shell):
    shell.cell("demo", ADD_TIR)
    shell.cell("demo", SCALE_PYFUNC)
    shell.cell("demo", RELAX_CALLS_BOTH)
    shell.cell(
        "demo",
        """
@I.pyfunc
def outer(self, x, y):
    return self.pipeline(x, y) + self.call_py_func("scale", [x])
""",
    )
    demo = shell.ns["demo"]
    assert torch.equal(demo.pipeline(X, Y), (X + Y) * 10)
    assert torch.equal(demo.outer(X, Y), (X + Y) * 10 + X * 10)
    direct = torch.empty(5)
    demo.add_tir(X, Y, direct)
    assert torch.equal(direct, X + Y)
    assert torch.equal(demo.call_tir("add_tir", [X, Y], R_TENSOR(shell, "(5,)", "float32")), X + Y)


def R_TENSOR(shell, shape, dtype):
    return shell.eval(
        f"__import__('tvm.script', fromlist=['relax']).relax.Tensor({shape}, {dtype!r})"
    )


def test_relax_calls_relax_across_cells(shell):
    shell.cell("demo", MAIN_RELAX)
    shell.cell(
        "demo",
        """
@R.function
def twice(x: R.Tensor(("n",), "float32")) -> R.Tensor(("n",), "float32"):
    cls = demo
    return cls.main_relax(x, x)
""",
    )
    assert torch.equal(shell.ns["demo"].twice(X), X * 2)
    # redefining the callee is seen by the caller from the other cell
    shell.cell("demo", MAIN_RELAX.replace("R.add(x, y)", "R.multiply(x, y)"), cell_id="callee")
    assert torch.equal(shell.ns["demo"].twice(X), X * X)


def test_user_names_are_visible_in_cells(shell):
    shell.run("FACTOR = 7\ndef helper(t):\n    return t + 1")
    shell.cell(
        "demo",
        """
@I.pyfunc
def f(self, x):
    return helper(x) * FACTOR
""",
    )
    assert torch.equal(shell.ns["demo"].f(X), (X + 1) * 7)
    shell.run("FACTOR = 2")
    assert torch.equal(shell.ns["demo"].f(X), (X + 1) * 2)


def test_full_class_form_replaces_the_whole_module(shell):
    shell.cell("demo", SCALE_PYFUNC)
    helper = '''
@I.pyfunc
def helper(self, x):
    """Docstring lines
        keep their own indentation."""
    return x - 1
'''
    main = cells.vector_relax(
        "main",
        """
n = T.int64()
cls = Whole
z = R.call_tir(cls.add_tir, (x, y), out_ty=R.Tensor((n,), "float32"))
return R.call_py_func("helper", z, out_ty=R.Tensor((n,), "float32"))
""",
    )
    shell.cell("demo", cells.ir_module_class("Whole", ADD_TIR, helper, main))
    demo = shell.ns["demo"]
    assert set(demo.functions) == {"add_tir", "helper", "main"}
    assert torch.equal(demo.main(X, Y), X + Y - 1)
    assert "    keep their own indentation." in demo.entry("helper").source.source


def test_reset_drops_every_earlier_contribution(shell):
    shell.cell("demo", SCALE_PYFUNC)
    shell.cell("demo", MAIN_RELAX, options="--reset")
    assert list(shell.ns["demo"].functions) == ["main_relax"]


def test_a_failing_cell_leaves_the_module_exactly_as_it_was(shell):
    shell.cell("demo", ADD_TIR + MAIN_RELAX, cell_id="a")
    demo = shell.ns["demo"]
    before = demo.ir_mod
    assert torch.equal(demo.main_relax(X, Y), X + Y)
    compiles = len(demo.stats.compiles)
    err = shell.cell(
        "demo",
        MAIN_RELAX.replace("R.add", "R.no_such_op"),
        cell_id="a",
        expect_error=TVMScriptError,
    )
    # %%tvmmodule is line 1, the blank line 2, the call line 7
    assert err.function == "main_relax" and err.line == 7
    err = shell.cell("demo", "x = 1\n", cell_id="a", expect_error=CellSyntaxError)
    assert err.line == 2
    err = shell.cell("demo", "@I.pyfunc\ndef f(self:\n", cell_id="a", expect_error=CellSyntaxError)
    assert demo.ir_mod.same_as(before)
    assert torch.equal(demo.main_relax(X, Y), X + Y)
    assert len(demo.stats.compiles) == compiles


def test_removing_a_kernel_still_called_elsewhere_is_refused(shell):
    shell.cell("demo", ADD_TIR, cell_id="tir")
    shell.cell("demo", SCALE_PYFUNC, cell_id="py")
    shell.cell("demo", RELAX_CALLS_BOTH, cell_id="relax")
    err = shell.cell(
        "demo", "# add_tir moved elsewhere\n", cell_id="tir", expect_error=IllFormedModuleError
    )
    assert err.function == "pipeline" and "add_tir" in str(err)
    assert torch.equal(shell.ns["demo"].pipeline(X, Y), (X + Y) * 10)


def test_pyfunc_edit_compiles_nothing_and_relax_sees_the_new_pyfunc(shell):
    shell.cell("demo", ADD_TIR, cell_id="tir")
    shell.cell("demo", SCALE_PYFUNC, cell_id="py")
    shell.cell("demo", RELAX_CALLS_BOTH, cell_id="relax")
    demo = shell.ns["demo"]
    assert torch.equal(demo.pipeline(X, Y), (X + Y) * 10)
    mark = len(demo.stats.compiles)
    shell.cell("demo", SCALE_PYFUNC.replace("x * 10", "x * 100"), cell_id="py")
    assert torch.equal(demo.pipeline(X, Y), (X + Y) * 100)
    assert demo.stats.compiles[mark:] == []


def test_one_primfunc_edit_in_a_twenty_primfunc_module_compiles_one_primfunc_and_the_vm(shell):
    for k in range(20):
        shell.cell(
            "big",
            ADD_TIR.replace("add_tir", f"k{k}").replace(
                "A[i] + B[i]", f"A[i] + B[i] + T.float32({k})"
            ),
            cell_id=f"k{k}",
        )
    main = """
n = T.int64()
cls = big
return R.call_tir(cls.k3, (x, y), out_ty=R.Tensor((n,), "float32"))
"""
    shell.cell("big", cells.vector_relax("main", main), cell_id="main")
    big = shell.ns["big"]
    big.compile()
    assert torch.equal(big.main(X, Y), X + Y + 3)
    mark = len(big.stats.compiles)
    shell.cell(
        "big", ADD_TIR.replace("add_tir", "k3").replace("A[i] + B[i]", "A[i] * B[i]"), cell_id="k3"
    )
    assert torch.equal(big.main(X, Y), X * Y)
    assert sorted(kinds(big.stats, mark)) == [("tir", ("k3",)), ("vm", ("main",))]
    mark = len(big.stats.compiles)
    shell.cell(
        "big", ADD_TIR.replace("add_tir", "k7").replace("A[i] + B[i]", "A[i] - B[i]"), cell_id="k7"
    )
    assert torch.equal(big.main(X, Y), X * Y)  # k7 is not used by Relax: no VM rebuild
    big.compile()
    assert kinds(big.stats, mark) == [("tir", ("k7",))]


# -- kernels built together --------------------------------------------------------------------
def adds(k: int, op: str = "+") -> str:
    """PrimFunc `k{k}`: C = A op B + k."""
    return ADD_TIR.replace("add_tir", f"k{k}").replace(
        "A[i] + B[i]", f"A[i] {op} B[i] + T.float32({k})"
    )


CHAIN = """
@R.function
def main(x: R.Tensor(("n",), "float32"), y: R.Tensor(("n",), "float32")):
    n = T.int64()
    cls = demo
    z = R.call_tir(cls.k0, (x, y), out_ty=R.Tensor((n,), "float32"))
    return R.call_tir(cls.k1, (z, y), out_ty=R.Tensor((n,), "float32"))
"""
BAD_ON_CPU = """
@T.prim_func
def bad(A: T.Buffer((4,), "float32")):
    tx = T.launch_thread("threadIdx.x", 4)
    A[tx] = 1.0
"""


def test_the_first_call_builds_every_stale_kernel_in_one_compile(shell):
    shell.cell("demo", "".join(adds(k) for k in range(4)))
    demo, out = shell.ns["demo"], torch.empty(5)
    demo.k2(X, Y, out)
    assert kinds(demo.stats) == [("tir", ("k0", "k1", "k2", "k3"))]  # one build, not four
    for k in range(4):
        getattr(demo, f"k{k}")(X, Y, out)
        assert torch.equal(out, X + Y + k)
    assert len(demo.stats.compiles) == 1  # the others were built along
    shell.cell("demo", adds(1, "*"), cell_id="edit")
    demo.k1(X, Y, out)
    assert torch.equal(out, X * Y + 1)
    assert kinds(demo.stats, 1) == [("tir", ("k1",))]  # an edit builds what it changed


def test_a_kernel_that_does_not_compile_hides_none_of_those_built_with_it(shell):
    body = adds(0) + BAD_ON_CPU + adds(1)
    shell.cell("demo", body)
    demo, out = shell.ns["demo"], torch.empty(5)
    demo.k1(X, Y, out)  # together they fail: each is built on its own, k1 works
    assert torch.equal(out, X + Y + 1)
    assert sorted(kinds(demo.stats)) == [("tir", (n,)) for n in ("bad", "k0", "k1")]
    demo.k0(X, Y, out)
    assert torch.equal(out, X + Y)
    with pytest.raises(CompileError) as caught:
        demo.bad(torch.zeros(4))
    err = caught.value
    assert err.function == "bad" and "does not compile" in str(err)
    # the line that binds the GPU thread (cell line 2 is the body's first line)
    assert 'T.launch_thread("threadIdx.x", 4)' in body.splitlines()[err.line - 2]
    assert len(demo.stats.compiles) == 3  # what failed is remembered, not tried again


def test_a_vm_takes_each_kernel_from_its_newest_build(shell):
    shell.cell("demo", adds(0) + adds(1), cell_id="kernels")
    shell.cell("demo", CHAIN, cell_id="main")
    demo = shell.ns["demo"]
    assert torch.equal(demo.main(X, Y), X + Y + Y + 1)  # k0 and k1 built together
    shell.cell("demo", adds(0, "*") + adds(1), cell_id="kernels")
    # the new k0 is built alone; the first build, which k1 still comes from, holds the old k0
    assert torch.equal(demo.main(X, Y), X * Y + Y + 1)
    shell.cell("demo", adds(0, "*") + adds(1, "-"), cell_id="kernels")
    assert torch.equal(demo.main(X, Y), X * Y - Y + 1)


def test_builds_that_each_hold_an_old_version_of_the_others_kernel_are_built_anew(shell):
    shell.cell("demo", adds(0) + adds(1), cell_id="kernels")
    shell.cell("demo", CHAIN, cell_id="main")
    demo = shell.ns["demo"]
    demo.main(X, Y)  # one build: k0 and k1
    shell.cell("demo", adds(0, "*") + adds(1, "*"), cell_id="kernels")
    demo.main(X, Y)  # another: the new k0 and the new k1
    mark = len(demo.stats.compiles)
    shell.cell("demo", adds(0) + adds(1, "*"), cell_id="kernels")  # the first k0, the second k1
    # each is kept, in a build holding an old version of the other: no order links them right
    assert torch.equal(demo.main(X, Y), (X + Y) * Y + 1)
    (rebuilt,) = [names for kind, names in kinds(demo.stats, mark) if kind == "tir"]
    assert {"k0", "k1"} <= set(rebuilt)  # one build of what the VM calls
