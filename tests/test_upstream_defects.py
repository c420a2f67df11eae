"""Each defect of upstream `BasePyModule` (apache-tvm 0.27) that a live module must not inherit."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

import pytest
import torch
from cells import ADD_TIR, RELAX_CALLS_BOTH, SCALE_PYFUNC
from tvm.relax.base_py_module import BasePyModule

from tvm_pyfunc_nb import CompileError

X = torch.arange(5, dtype=torch.float32)
Y = torch.ones(5)

RELAX_SCALES = """
@R.function
def run(x: R.Tensor(("n",), "float32")) -> R.Tensor(("n",), "float32"):
    n = T.int64()
    return R.call_py_func("scale", x, out_ty=R.Tensor((n,), "float32"))
"""


def test_relax_calls_a_pyfunc_on_the_normal_path_and_after_it_is_redefined(shell):
    shell.cell("demo", SCALE_PYFUNC, cell_id="py")
    shell.cell("demo", RELAX_SCALES)
    demo = shell.ns["demo"]
    assert torch.equal(demo.run(X), X * 10)
    compiles = len(demo.stats.compiles)
    shell.cell("demo", SCALE_PYFUNC.replace("x * 10", "x + 1000"), cell_id="py")
    assert torch.equal(demo.run(X), X + 1000)
    assert len(demo.stats.compiles) == compiles
    # and through TVM's own BasePyModule object
    assert isinstance(demo.module, BasePyModule)


def test_two_modules_with_a_pyfunc_of_the_same_name_each_call_their_own(shell):
    shell.cell("a", SCALE_PYFUNC + RELAX_SCALES)
    shell.cell("b", SCALE_PYFUNC.replace("x * 10", "x * -1") + RELAX_SCALES)
    assert torch.equal(shell.ns["a"].run(X), X * 10)
    assert torch.equal(shell.ns["b"].run(X), X * -1)
    assert torch.equal(shell.ns["a"].run(X), X * 10)


def test_dropping_or_collecting_one_module_leaves_the_others_working(shell):
    shell.cell("a", SCALE_PYFUNC + RELAX_SCALES)
    shell.cell("b", SCALE_PYFUNC.replace("x * 10", "x * 2") + RELAX_SCALES)
    shell.cell("c", SCALE_PYFUNC.replace("x * 10", "x * 3") + RELAX_SCALES)
    a, b = shell.ns["a"], shell.ns["b"]
    for name in "abc":
        shell.ns[name].run(X)
    shell.run("%tvmmodule_drop a")
    assert "a" not in shell.ns
    assert torch.equal(shell.ns["b"].run(X), X * 2)
    # upstream's own BasePyModule.__del__ clears the registry of every module ...
    upstream = BasePyModule.__new__(BasePyModule)
    del upstream
    gc.collect()
    # ... which the live modules survive
    assert torch.equal(shell.ns["b"].run(X), X * 2)
    shell.run("%tvmmodule_drop b")
    gc.collect()
    assert torch.equal(shell.ns["c"].run(X), X * 3)
    assert a.kept["registered_pyfunc_sites"] == b.kept["registered_pyfunc_sites"] == 0
    assert shell.ns["c"].kept["registered_pyfunc_sites"] == 1


def test_the_module_object_does_not_clear_the_registry_when_collected(shell):
    shell.cell("a", SCALE_PYFUNC + RELAX_SCALES)
    a = shell.ns["a"]
    module = a.module
    del module
    gc.collect()
    assert torch.equal(a.run(X), X * 10)


PROCESS_USING_THE_REGISTRY = textwrap.dedent('''
    from IPython.testing.globalipapp import start_ipython
    ip = start_ipython()
    ip.run_line_magic("load_ext", "tvm_pyfunc_nb")
    result = ip.run_cell("""%%tvmmodule demo
    @I.pyfunc
    def scale(self, x):
        return x * 10

    @R.function
    def run(x: R.Tensor(("n",), "float32")) -> R.Tensor(("n",), "float32"):
        n = T.int64()
        return R.call_py_func("scale", x, out_ty=R.Tensor((n,), "float32"))
    """)
    assert result.success, result
    import torch
    out = ip.user_ns["demo"].run(torch.ones(3))
    assert out.tolist() == [10.0, 10.0, 10.0], out
    print("ran")
''')


def test_a_process_that_used_the_registry_exits_cleanly():
    proc = subprocess.run(
        [sys.executable, "-c", PROCESS_USING_THE_REGISTRY],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "ran" in proc.stdout, proc.stderr[-2000:]
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_add_python_function_is_callable_from_relax_and_shown(shell):
    shell.cell("demo", "# functions come later\n")
    demo = shell.ns["demo"]

    def late(self, x):
        """Added at run time."""
        return x - 1

    demo.add_python_function("late", late)
    shell.cell("demo", RELAX_SCALES.replace('"scale"', '"late"'))
    assert torch.equal(demo.run(X), X - 1)
    demo.add_python_function("late", lambda x: x + 100)
    assert torch.equal(demo.run(X), X + 100)
    assert "late" in demo.functions and demo.functions["late"] == "pyfunc"
    assert any(gv.name_hint == "late" for gv in demo.ir_mod.get_global_vars())
    script = demo.script()
    assert "@I.pyfunc\n    def late(x):" in script  # a lambda has no source: a stub that says so
    assert "add_python_function" in script


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_call_tir_allocates_the_declared_dtype(shell, dtype):
    shell.cell("demo", ADD_TIR.replace('"float32"', f'"{dtype}"'))
    shell.run(f'''
import torch
from tvm.script import relax as R
a = torch.arange(4).to(torch.{dtype})
out = demo.call_tir("add_tir", [a, a], R.Tensor((4,), "{dtype}"))
''')
    out = shell.ns["out"]
    assert out.dtype == getattr(torch, dtype)
    assert torch.equal(out, shell.ns["a"] * 2)


BROKEN_TIR = """
@T.prim_func
def broken(a: T.handle):
    A = T.match_buffer(a, (4,), "float32", scope="no_such_scope")
    for i in range(4):
        A[i] = T.float32(1)
"""


def test_one_primfunc_that_fails_to_compile_does_not_disable_the_module(shell, capsys):
    shell.cell(
        "demo",
        ADD_TIR
        + BROKEN_TIR
        + """
@R.function
def uses_broken(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    cls = demo
    return R.call_tir(cls.broken, (), out_ty=R.Tensor((4,), "float32"))

@R.function
def fine(x: R.Tensor(("n",), "float32")) -> R.Tensor(("n",), "float32"):
    return R.add(x, x)
""",
    )
    demo = shell.ns["demo"]
    with pytest.raises(CompileError) as err:
        demo.broken(torch.zeros(4))
    assert err.value.function == "broken" and "llvm" in str(err.value)
    with pytest.raises(CompileError) as err:
        demo.uses_broken(torch.zeros(4))
    assert "broken" in str(err.value)
    assert torch.equal(demo.fine(X), X * 2)
    out = torch.empty(5)
    demo.add_tir(X, Y, out)
    assert torch.equal(out, X + Y)
    assert "Warning" not in capsys.readouterr().out


def test_non_contiguous_torch_inputs_work(shell):
    shell.cell("demo", ADD_TIR + SCALE_PYFUNC + RELAX_CALLS_BOTH)
    demo = shell.ns["demo"]
    base = torch.arange(10, dtype=torch.float32)
    x = base[::2]
    assert not x.is_contiguous()
    assert torch.equal(demo.pipeline(x, x), (x + x) * 10)
    out = demo.call_tir("add_tir", [x, x], (5,))
    assert torch.equal(out, x + x)
