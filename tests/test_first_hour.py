"""What a careful new user runs into in the first hour, each behaviour as they meet it.

Forward references to pyfuncs, `--eager` failures, error lines, stats by name, honest panes,
notices, the crash guards' switch, leaving the notebook, packed functions, and code written
for upstream's `BasePyModule` run as it is.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import cells
import pytest
import torch
import tvm
import tvm_ffi
from cells import ADD_TIR, MAIN_PYFUNC, MAIN_RELAX, RELAX_CALLS_BOTH, SCALE_PYFUNC, SYMBOLIC_LOOP
from tvm import relax, tirx
from tvm.script import relax as R

from tvm_pyfunc_nb import CallError, CompileError, IllFormedModuleError, TVMScriptError
from tvm_pyfunc_nb._core.inspect.timing import duration

X = torch.arange(4, dtype=torch.float32)
Y = torch.ones(4)


def marked(body: str) -> int:
    """The cell line of the line marked `# <-` (the `%%tvmmodule` line is line 1)."""
    (line,) = [n for n, text in enumerate(body.splitlines(), start=2) if "# <-" in text]
    return line


# -- 1. references that are not there yet ----------------------------------------------------
def test_a_relax_function_may_call_a_pyfunc_defined_later(shell):
    shell.cell("demo", ADD_TIR, cell_id="tir")
    view = shell.cell("demo", RELAX_CALLS_BOTH, cell_id="relax")
    notice = shell.text(view)
    assert "pipeline calls pyfunc scale with R.call_py_func, which is not defined yet" in notice
    demo = shell.ns["demo"]
    with pytest.raises(CallError) as caught:
        demo.pipeline(X, Y)
    assert caught.value.function == "pipeline" and "`scale`" in str(caught.value)
    compiles = len(demo.stats.compiles)
    shell.cell("demo", SCALE_PYFUNC, cell_id="py")
    assert torch.equal(demo.pipeline(X, Y), (X + Y) * 10)
    assert len(demo.stats.compiles) == compiles  # the pyfunc arriving compiles nothing


def test_add_python_function_after_the_relax_function_that_calls_it(shell):
    shell.cell("demo", ADD_TIR + RELAX_CALLS_BOTH)
    demo = shell.ns["demo"]
    demo.add_python_function("scale", lambda x: x * 3)
    assert torch.equal(demo.pipeline(X, Y), (X + Y) * 3)
    assert "def scale(" in demo.script()


# -- 2. --eager is part of the cell ---------------------------------------------------------
THREADS_ON_CPU = """
@T.prim_func
def bad(A: T.Buffer((4,), "float32")):
    tx = T.launch_thread("threadIdx.x", 4)
    A[tx] = 1.0
"""


@pytest.mark.parametrize("how", ["--eager", "config"])
def test_an_eager_compile_failure_leaves_the_module_as_it_was(shell, how):
    shell.cell("demo", ADD_TIR + MAIN_RELAX, cell_id="a")
    demo = shell.ns["demo"]
    before, functions = demo.ir_mod, dict(demo.functions)
    if how == "config":
        shell.run("%config TVMModuleMagics.eager = True")
    try:
        options = "--eager" if how == "--eager" else ""
        shell.cell("demo", THREADS_ON_CPU, cell_id="b", options=options, expect_error=CompileError)
    finally:
        shell.run("%config TVMModuleMagics.eager = False")
    assert demo.functions == functions and demo.ir_mod.same_as(before)
    assert torch.equal(demo.main_relax(X, Y), X + Y)


# -- 3. error lines point at the fault ------------------------------------------------------
def test_a_parameter_without_annotation_names_the_function_and_its_def_line(shell):
    body = """
@R.function
def ok(x: R.Tensor((4,), "float32")):
    return x

@R.function
def f(x):  # <-
    return x
"""
    err = shell.cell("demo", body, expect_error=TVMScriptError)
    assert err.function == "f" and err.line == marked(body)


def test_an_ill_formed_binding_is_the_line_reported(shell):
    shell.cell("demo", ADD_TIR)
    body = """
@R.function
def f(x: R.Tensor((4,), "float32"), y: R.Tensor((4,), "float32")):
    cls = demo
    with R.dataflow():
        w = R.add(x, y)
        z = R.call_tir(cls.add_tir, (x, w), out_ty=R.Tensor((4,), "int32"))  # <-
        R.output(z)
    return z
"""
    err = shell.cell("demo", body, expect_error=IllFormedModuleError)
    assert err.function == "f" and err.line == marked(body)
    assert "Check failed" not in str(err)  # TVM's assertion prefix says nothing to a user


def test_a_run_time_division_by_zero_names_its_statement(shell):
    body = """
@T.prim_func
def divide(A: T.Buffer((4,), "int32"), B: T.Buffer((4,), "int32"), C: T.Buffer((4,), "int32")):
    for i in range(4):
        C[i] = A[i] // B[i]  # <-
"""
    shell.cell("demo", body)
    ones = torch.ones(4, dtype=torch.int32)
    with pytest.raises(CallError) as caught:
        shell.ns["demo"].divide(ones, torch.tensor([1, 0, 1, 1], dtype=torch.int32), ones.clone())
    assert caught.value.line == marked(body) and "division or remainder by zero" in str(
        caught.value
    )


# -- 4. stats tell the whole story -----------------------------------------------------------
def test_stats_say_which_cache_served_which_function(shell, tmp_path):
    shell.run(f"%config TVMModuleMagics.cache_dir = {str(tmp_path)!r}")
    try:
        shell.cell("demo", ADD_TIR + MAIN_PYFUNC)
        shell.ns["demo"].main(X, Y)
        shell.ns["demo"].main(X, Y)
        shell.ns["demo"].recompile()
        shell.flush_cache()
        shell.run("%tvmmodule_drop demo")
        shell.cell("demo", ADD_TIR + MAIN_PYFUNC)
        shell.ns["demo"].main(X, Y)
    finally:
        shell.run("%config TVMModuleMagics.cache_dir = ''")
    stats = shell.ns["demo"].stats
    assert stats.served["disk"]["add_tir"] == 1 and stats.compiles == []
    text = shell.text(stats)
    assert "from memory" in text and "from disk" in text
    assert any(
        line.split()[:1] == ["add_tir"] and line.split()[-1] == "1" for line in text.splitlines()
    )
    html = shell.ip.display_formatter.formatters["text/html"].lookup(stats)(stats)
    assert "<table" in html and "add_tir" in html


# -- 5. panes are honest ---------------------------------------------------------------------
def test_a_calls_own_run_time_is_apart_from_the_compile_it_triggered(shell):
    view = shell.cell("demo", ADD_TIR + MAIN_PYFUNC)
    demo = shell.ns["demo"]
    demo.main(X, Y)  # compiles add_tir inside the pyfunc's call
    record = demo.last_calls["main"]
    assert record.compile_seconds > 0 and record.seconds < record.compile_seconds
    shell.run("pass")  # after a cell, the views show the latest calls
    (pane,) = [p for p in view.panes if p.name == "main"]
    run, compiled = duration(record.seconds, 1), duration(record.compile_seconds, 1)
    assert f"{run} run + {compiled} compile" in pane.results.value  # both, apart
    assert "compiled on this call: tir add_tir" in pane.results.value


def test_a_pyfunc_called_from_compiled_relax_shows_in_its_pane(shell):
    view = shell.cell("demo", ADD_TIR + SCALE_PYFUNC + RELAX_CALLS_BOTH)
    shell.ns["demo"].pipeline(X, Y)
    shell.run("pass")  # after a cell, the views show the latest calls
    record = shell.ns["demo"].last_calls["scale"]
    assert torch.equal(record.args[0], X + Y) and torch.equal(record.result, (X + Y) * 10)
    (pane,) = [p for p in view.panes if p.name == "scale"]
    assert "[10, 20, 30, 40]" in pane.results.value


def test_long_script_lines_scroll_instead_of_being_cut(shell):
    view = shell.cell(
        "demo", ADD_TIR.replace("C[i] = A[i] + B[i]", "C[i] = " + " + ".join(["A[i]"] * 60))
    )
    (pane,) = view.panes
    assert "white-space: pre" in pane.script.value and "overflow:auto" in pane.script.value


# -- 6. notices ------------------------------------------------------------------------------
def test_removing_an_override_brings_the_earlier_definition_back_and_says_so(shell):
    shell.cell("demo", SCALE_PYFUNC, cell_id="first")
    shell.cell("demo", SCALE_PYFUNC.replace("x * 10", "x * 20"), cell_id="second")
    view = shell.cell("demo", "# scale moved away\n", cell_id="second")
    assert "scale is the definition from" in shell.text(view)
    assert torch.equal(shell.ns["demo"].scale(X), X * 10)


# -- 8. the crash guards' cost is visible and optional ---------------------------------------


def test_guards_can_be_turned_off_per_module_or_by_config(shell):
    shell.cell("checked", SYMBOLIC_LOOP)
    assert "index out of bounds" in shell.ns["checked"].lowered("copy")
    with pytest.raises(CallError):
        shell.ns["checked"].copy(torch.ones(8), torch.empty(4))
    shell.cell("fast", SYMBOLIC_LOOP, options="--unchecked")
    assert "index out of bounds" not in shell.ns["fast"].lowered("copy")
    assert not shell.ns["fast"].options.checked
    shell.run("%config TVMModuleMagics.checked = False")
    try:
        shell.cell("configured", SYMBOLIC_LOOP)
    finally:
        shell.run("%config TVMModuleMagics.checked = True")
    assert not shell.ns["configured"].options.checked
    assert "checks" in repr(shell.ns["checked"].time("copy", torch.ones(4), torch.empty(4)))


# -- 9. leaving the notebook -------------------------------------------------------------------
def test_export_writes_a_file_plain_python_runs_and_checks(shell, tmp_path):
    shell.cell("demo", ADD_TIR + MAIN_PYFUNC + MAIN_RELAX + SCALE_PYFUNC + RELAX_CALLS_BOTH)
    path = tmp_path / "demo_module.py"
    shell.ns["demo"].export(str(path), example=("pipeline", (X, Y)))
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "gives the numbers of the live module" in done.stdout
    assert "tvm_pyfunc_nb" not in path.read_text().split('"""', 2)[2]  # nothing of this package


def test_export_library_loads_in_a_fresh_process(shell, tmp_path):
    shell.cell("demo", ADD_TIR + MAIN_RELAX + SCALE_PYFUNC + RELAX_CALLS_BOTH)
    path = tmp_path / "demo.so"
    report = shell.ns["demo"].export_library(str(path))
    assert report.relax == ["main_relax"] and "add_tir" in report.kernels
    assert "pipeline" in report.left_out
    script = f"""
import numpy as np, tvm
from tvm import relax
lib = tvm.runtime.load_module({str(path)!r})
x = tvm.runtime.tensor(np.arange(4, dtype="float32"))
print(relax.VirtualMachine(lib, tvm.cpu())["main_relax"](x, x).numpy().tolist())
out = tvm.runtime.tensor(np.zeros(4, dtype="float32"))
lib.get_function("add_tir", query_imports=True)(x, x, out)
print(out.numpy().tolist())
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["[0.0, 2.0, 4.0, 6.0]"] * 2


# -- 10. call_dps_packed ----------------------------------------------------------------------
PACKED = """
@R.function
def doubled(x: R.Tensor((4,), "float32")):
    return R.call_dps_packed("tvmnb_test_scale", (x,), out_ty=R.Tensor((4,), "float32"))

@I.pyfunc
def from_python(self, x):
    return self.call_dps_packed("tvmnb_test_scale", [x], R.Tensor((4,), "float32"))
"""


def _register(factor: float) -> None:
    def scale(x, out):
        out.copyfrom((torch.from_dlpack(x) * factor).numpy())

    tvm.register_global_func("tvmnb_test_scale", scale, override=True)


def test_call_dps_packed_from_relax_a_pyfunc_and_python(shell):
    assert tvm_ffi.get_global_func("tvmnb_test_scale", allow_missing=True) is None
    shell.cell("demo", PACKED)
    demo = shell.ns["demo"]
    with pytest.raises(CallError) as caught:
        demo.doubled(X)
    assert caught.value.function == "doubled" and "tvmnb_test_scale" in str(caught.value)
    _register(2.0)
    try:
        assert torch.equal(demo.doubled(X), X * 2) and torch.equal(demo.from_python(X), X * 2)
        assert torch.equal(
            demo.call_dps_packed("tvmnb_test_scale", [X], R.Tensor((4,), "float32")), X * 2
        )
        compiles = len(demo.stats.compiles)
        _register(3.0)  # registered again: the next call runs it, nothing recompiles
        assert torch.equal(demo.doubled(X), X * 3)
        assert len(demo.stats.compiles) == compiles
        with pytest.raises(CallError):
            demo.call_dps_packed("tvmnb_no_such_function", [X], R.Tensor((4,), "float32"))
    finally:
        tvm_ffi.remove_global_func("tvmnb_test_scale")


# -- 11. what upstream's own examples do --------------------------------------------------------
SEED_PYTHON_ADD = """
@I.pyfunc
def python_add(self, x, y):
    x_tvm = self._convert_pytorch_to_tvm(x)
    y_tvm = self._convert_pytorch_to_tvm(y)
    result = self.call_tir(self.add_tir, [x_tvm, y_tvm],
                           out_sinfo=R.Tensor((x.shape[0],), "float32"))
    return self._convert_tvm_to_pytorch(result)
"""
SEED_MAIN = """
@R.function
def main(x: R.Tensor(("n",), "float32"), y: R.Tensor(("n",), "float32")):
    n = T.int64()
    cls = IRModuleWithPyFunc
    z = R.call_tir(cls.add_tir, (x, y), out_sinfo=R.Tensor((n,), "float32"))
    return z
"""
# upstream's example, as its docs write it: one class of a kernel, a pyfunc and a Relax function
SEED_CLASS = cells.ir_module_class("IRModuleWithPyFunc", ADD_TIR, SEED_PYTHON_ADD, SEED_MAIN)


def test_the_seed_example_runs_verbatim_as_one_class_cell(shell):
    shell.cell("demo", SEED_CLASS)
    demo = shell.ns["demo"]
    assert torch.equal(demo.python_add(X, Y), X + Y) and torch.equal(demo.main(X, Y), X + Y)


def test_the_seed_example_runs_as_per_function_cells(shell):
    parts = SEED_CLASS.split("\n    @")[1:]
    for number, part in enumerate(parts):
        body = "\n".join(line[4:] for line in ("    @" + part).splitlines())
        shell.cell(
            "demo", body.replace("cls = IRModuleWithPyFunc", "cls = demo"), cell_id=f"p{number}"
        )
    demo = shell.ns["demo"]
    assert torch.equal(demo.python_add(X, Y), X + Y) and torch.equal(demo.main(X, Y), X + Y)


def test_conversions_of_self_take_single_tensors_and_lists(shell):
    shell.cell("demo", SCALE_PYFUNC)
    demo = shell.ns["demo"]
    single = demo._convert_pytorch_to_tvm(X)
    assert isinstance(single, tvm.runtime.Tensor)
    assert torch.equal(demo._convert_tvm_to_pytorch(single), X)
    pair = demo._convert_pytorch_to_tvm([X, Y])
    back = demo._convert_tvm_to_pytorch(pair)
    assert isinstance(back, list) and torch.equal(back[1], Y)


@pytest.mark.parametrize(
    "out_ty",
    [
        relax.TensorType((tirx.Var("m", "int64"),), "float32"),
        R.Tensor((tirx.Var("fresh", "int64"),), "float32"),
    ],
    ids=["TensorType", "fresh-var"],
)
def test_a_symbolic_out_ty_is_inferred_by_position_as_upstream_does(shell, out_ty):
    shell.cell("demo", ADD_TIR)
    assert torch.equal(shell.ns["demo"].call_tir("add_tir", [X, Y], out_ty), X + Y)


def test_an_out_ty_size_that_cannot_be_told_is_named(shell):
    shell.cell("demo", ADD_TIR)
    with pytest.raises(CallError) as caught:
        shell.ns["demo"].call_tir(
            "add_tir", [X, Y], R.Tensor((tirx.Var("k", "int64"), 2), "float32")
        )
    assert "`k`" in str(caught.value) and "axis 0" in str(caught.value)


def test_the_tuple_form_of_call_py_func_is_checked_against_out_ty(shell):
    body = """
@I.pyfunc
def longer(self, x):
    return torch.cat([x, x])

@R.function
def f(x: R.Tensor((4,), "float32")):
    return R.call_py_func("longer", (x,), out_ty=R.Tensor((4,), "float32"))
"""
    shell.cell("demo", body)
    with pytest.raises(Exception) as caught:
        shell.ns["demo"].f(X)
    message = str(caught.value)
    assert type(caught.value).__name__ == "PyFuncError"
    assert "does not match out_ty: expected float32[4], got float32[8]" in message, message
    assert "tuple" not in message  # how the arguments were passed has nothing to do with it


def test_signatures_show_the_real_parameters(shell):
    shell.cell("demo", ADD_TIR + MAIN_PYFUNC + MAIN_RELAX)
    demo = shell.ns["demo"]
    assert list(inspect.signature(demo.main).parameters) == ["x", "y"]
    assert list(inspect.signature(demo.main_relax).parameters) == ["x", "y"]
    assert len(inspect.signature(demo.add_tir).parameters) == 3
    demo.main(X, Y)  # the fast callable too
    assert list(inspect.signature(demo.main).parameters) == ["x", "y"]


def test_list_functions_and_get_function_as_upstream(shell):
    shell.cell("demo", ADD_TIR + MAIN_PYFUNC + MAIN_RELAX)
    demo = shell.ns["demo"]
    assert demo.list_functions() == {"tirx": ["add_tir"], "relax": ["main_relax"], "extern": []}
    assert demo.list_functions() == demo.module.list_functions()  # upstream's own answer
    tvm_ffi.register_global_func("tvmnb_test_listed", lambda x, out: out.copyfrom(x), override=True)
    try:
        demo.call_dps_packed("tvmnb_test_listed", [X], R.Tensor((4,), "float32"))
    finally:
        tvm_ffi.remove_global_func("tvmnb_test_listed")
    assert demo.list_functions()["extern"] == ["tvmnb_test_listed"]  # as upstream's, once looked up
    assert torch.equal(demo.get_function("main_relax")(X, Y), X + Y)
    with pytest.raises(CallError):
        demo.get_function("nope")


# upstream's PyTorch integration test, its matmul in plain loops (no blocks)
UPSTREAM_MAIN = """
@I.pyfunc
def main(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    lv = self.call_tir(self.matmul, [x, w], out_sinfo=R.Tensor((n, 20), "float32"))
    lv1 = F.relu(lv)
    lv2 = self.call_dps_packed("my_softmax", [lv1, 1], out_sinfo=R.Tensor((n, 20), "float32"))
    return self.my_identity_func(lv2)

@T.prim_func
def matmul(var_A: T.handle, var_B: T.handle, var_C: T.handle):
    n = T.int32()
    A = T.match_buffer(var_A, (n, 16), "float32")
    B = T.match_buffer(var_B, (16, 20), "float32")
    C = T.match_buffer(var_C, (n, 20), "float32")
    for i, j in T.grid(n, 20):
        C[i, j] = T.float32(0)
    for i, j, k in T.grid(n, 20, 16):
        C[i, j] = C[i, j] + A[i, k] * B[k, j]

@I.pyfunc
def my_identity_func(self, x: torch.Tensor) -> torch.Tensor:
    return x
"""


def test_call_dps_packed_finds_a_function_added_with_add_python_function_as_upstream(shell):
    """Upstream's own integration test: `my_softmax`, added at run time, is what
    `self.call_dps_packed("my_softmax", [x, 1], ...)` calls, with the arguments as given."""
    shell.run("import torch.nn.functional as F")
    shell.cell("demo", UPSTREAM_MAIN)
    demo = shell.ns["demo"]

    def my_softmax(tensor, dim):
        return torch.nn.functional.softmax(tensor, dim=dim)

    demo.add_python_function("my_softmax", my_softmax)
    x, w = torch.randn(10, 16), torch.randn(16, 20)
    expected = torch.softmax(torch.relu(x @ w), dim=1)
    torch.testing.assert_close(demo.main(x, w), expected)
    torch.testing.assert_close(
        demo.call_dps_packed("my_softmax", [x @ w, 1], R.Tensor((10, 20), "float32")),
        torch.softmax(x @ w, dim=1),
    )
