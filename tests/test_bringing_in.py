"""Real models in: `NAME.add`, `NAME.add_torch`, `edit_text`/`edit`, `trace` and `compare`.

A real IPython shell runs real cells against real TVM compiles and real
`torch.export` imports. Every error is checked for its class, and for leaving
the module exactly as it was: the same `ir_mod` (structurally), the same
script, the same numbers from the functions that worked before.
"""

from __future__ import annotations

import gc
import html
import inspect
import math
import re
import textwrap
from collections.abc import Callable, Mapping

import numpy as np
import pytest
import torch
import tvm
import tvm_ffi
from cells import PAIR, SCALE_PYFUNC
from IPython.utils.capture import capture_output
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from tvm_pyfunc_nb import CallError, LiveModule
from tvm_pyfunc_nb._views import notebook_front_end
from tvm_pyfunc_nb.errors import ModelImportError

TOL = {"rtol": 1e-5, "atol": 1e-5}
V4 = R.Tensor((4,), "float32")


# -- what a TVM user holds -------------------------------------------------------------------
@T.prim_func
def twice(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        B[i] = A[i] * T.float32(2)


@T.prim_func
def thrice(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        B[i] = A[i] * T.float32(3)


@R.function
def inc(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    return R.add(x, R.const(1.0, "float32"))


@R.function
def negate(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    return R.negative(x)


# A Relax function as TVM's own passes and builders make it: no global symbol
NAMELESS = negate.without_attr("global_symbol")


def cube(self, x):
    """Cube, in PyTorch."""
    return x**3


def halve(x):
    return x / 2


@I.ir_module
class Lib:
    """An IRModule whose Relax function calls its own PrimFunc (what LegalizeOps gives)."""

    @T.prim_func
    def double_it(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
        for i in range(4):
            B[i] = A[i] * T.float32(2)

    @R.function
    def weighted(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        cls = Lib
        y = R.call_tir(cls.double_it, (x,), out_ty=R.Tensor((4,), "float32"))
        return R.multiply(y, R.const(np.array([1, 2, 3, 4], dtype="float32")))


def scaled_module(weights: np.ndarray) -> tvm.IRModule:
    """An IRModule built by hand: `scaled(x) = x * weights`, the weights a `relax.const`."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(weights.shape, "float32"))
    with bb.function("scaled", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.multiply(x, relax.const(weights)))
        bb.emit_func_output(out)
    return bb.get().with_attr("made_by", "BlockBuilder")


# -- models ----------------------------------------------------------------------------------
class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        return self.fc(torch.flatten(torch.relu(self.conv(x)), 1))


class Attention(torch.nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.d = d
        self.q = torch.nn.Linear(d, d)
        self.k = torch.nn.Linear(d, d)
        self.v = torch.nn.Linear(d, d)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.d), dim=-1)
        return self.norm(weights @ v)


class DataDependent(torch.nn.Module):
    """Python control flow on a tensor's value: torch.export cannot export it."""

    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    """Freeze what is alive before these tests (torch, TVM, IPython): the `%reset -f` after each
    test then collects only what the test made, not the whole heap (seconds per test here).
    """
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


SHAPES = {"mlp": (2, 8), "conv": (2, 3, 6, 6), "attn": (2, 5, 8)}


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(20)


@pytest.fixture(scope="module")
def models() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    return {"mlp": MLP().eval(), "conv": ConvNet().eval(), "attn": Attention().eval()}


def randn(name: str) -> torch.Tensor:
    return torch.randn(*SHAPES[name])


def empty_module(shell, name: str = "m") -> LiveModule:
    live = shell.run(f"%tvmmodule {name}")
    assert isinstance(live, LiveModule) and shell.ns[name] is live
    return live


def call_tir(live: LiveModule, kernel: str, x: torch.Tensor) -> torch.Tensor:
    return live.call_tir(kernel, [x], V4)


def weights_of(func) -> list:
    """The tensor constants (weights) inside a Relax function."""
    found = []

    def visit(expr) -> None:
        if isinstance(expr, tvm.ir.GenericConst) and len(expr.value.shape) > 0:
            found.append(expr)

    relax.analysis.post_order_visit(func.body, visit)
    return found


def raises(error: type, call: Callable, *args, **kwargs) -> BaseException:
    with pytest.raises(error) as info:
        call(*args, **kwargs)
    return info.value


class Snapshot:
    """What a module is now, to check that a failed add or import changed nothing."""

    def __init__(self, live: LiveModule, calls: dict[str, Callable[[], torch.Tensor]]):
        self.live, self.calls = live, calls
        self.ir_mod = live.ir_mod
        self.script = live.script()
        self.functions = dict(live.functions)
        self.results = {name: call() for name, call in calls.items()}

    def assert_intact(self) -> None:
        assert tvm_ffi.structural_equal(self.live.ir_mod, self.ir_mod)
        assert self.live.script() == self.script
        assert self.live.functions == self.functions
        for name, call in self.calls.items():
            assert torch.equal(call(), self.results[name]), name


X4 = torch.tensor([-2.0, 0.5, 1.0, 3.0])


# -- NAME.add --------------------------------------------------------------------------------
def test_add_an_irmodule_brings_every_function_its_weights_and_its_attributes(shell, models):
    m = empty_module(shell)
    mlp = models["mlp"]
    exported = from_exported_program(torch.export.export(mlp, (randn("mlp"),)))
    result = m.add(exported.with_attr("source_model", "MLP"))
    assert result.defined == ["main"] and result.kinds == {"main": "relax"}
    assert "m.add(IRModule) defines main (relax)" in shell.text(result)
    # the weights (fc1 and fc2, weight and bias) are constants inside it, not parameters
    assert len(weights_of(m.ir_mod["main"])) == 4 and len(m.ir_mod["main"].params) == 1
    x = randn("mlp")
    (out,) = m.main(x)  # TVM's importer returns a tuple unless told to unwrap it
    torch.testing.assert_close(out, mlp(x).detach(), **TOL)

    w = np.array([1.0, -2.0, 0.5], dtype="float32")
    result = m.add(scaled_module(w))
    assert result.defined == ["scaled"] and m.functions == {"main": "relax", "scaled": "relax"}
    assert torch.equal(m.scaled(torch.ones(3)), torch.from_numpy(w))
    # the module attributes of both come along
    assert m.ir_mod.attrs["source_model"] == "MLP"
    assert m.ir_mod.attrs["made_by"] == "BlockBuilder"
    # the weights are named in the script, which no longer says `metadata`
    script = m.script()
    assert "m.consts." in script and "metadata" not in script


def test_add_a_primfunc_by_its_global_symbol_or_a_given_name(shell):
    m = empty_module(shell)
    assert m.add(twice).defined == ["twice"]
    assert m.add(twice, name="doubled").defined == ["doubled"]
    assert m.functions == {"twice": "tir", "doubled": "tir"}
    assert m.ir_mod["doubled"].attrs["global_symbol"] == "doubled"
    out = torch.empty(4)
    m.twice(X4, out)
    assert torch.equal(out, X4 * 2)
    assert torch.equal(call_tir(m, "doubled", X4), X4 * 2)


def test_add_a_relax_function_needs_a_name_when_it_has_no_global_symbol(shell):
    m = empty_module(shell)
    assert m.add(inc).defined == ["inc"]  # TVMScript gave it its global symbol
    intact = Snapshot(m, {"inc": lambda: m.inc(X4)})
    assert "global_symbol" not in (NAMELESS.attrs or {})
    err = raises(CallError, m.add, NAMELESS)
    assert "global symbol" in str(err) and "name=" in str(err)
    assert err.function is None and err.line is None
    intact.assert_intact()
    assert m.add(NAMELESS, name="minus").defined == ["minus"]
    assert m.ir_mod["minus"].attrs["global_symbol"] == "minus"
    assert torch.equal(m.minus(X4), -X4)
    assert torch.equal(m.inc(X4), X4 + 1)


def test_add_one_relax_function_under_two_names(shell):
    m = empty_module(shell)
    m.add(negate)
    m.add(negate, name="negate_again")
    assert torch.equal(m.negate_again(X4), -X4)


def test_add_a_python_callable_makes_a_pyfunc_callable_and_in_the_script(shell):
    m = empty_module(shell)
    assert m.add(cube).kinds == {"cube": "pyfunc"}
    assert m.add(halve).kinds == {"halve": "pyfunc"}
    assert torch.equal(m.cube(X4), X4**3)
    assert torch.equal(m.halve(X4), X4 / 2)
    script = m.script()
    assert "def cube(self, x):" in script and "return x**3" in script
    assert "def halve(x):" in script
    # Relax calls it like a cell's pyfunc
    shell.cell(
        "m",
        """
@R.function
def cubed(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    y = R.call_py_func("cube", x, out_ty=R.Tensor((4,), "float32"))
    return y
""",
    )
    assert torch.equal(m.cubed(X4), X4**3)


def test_add_a_list_is_one_contribution(shell):
    m = empty_module(shell)
    result = m.add([twice, inc, cube])
    assert result.defined == ["twice", "inc", "cube"]
    assert result.kinds == {"twice": "tir", "inc": "relax", "cube": "pyfunc"}
    assert "m.add(3 functions) defines twice (tir), inc (relax), cube (pyfunc)" in shell.text(
        result
    )
    assert m.functions == result.kinds
    assert len({m.origin_of(name) for name in m.functions}) == 1
    assert torch.equal(call_tir(m, "twice", X4), X4 * 2)
    assert torch.equal(m.inc(X4), X4 + 1)
    assert torch.equal(m.cube(X4), X4**3)


def test_adding_the_same_names_again_replaces_the_earlier_add(shell):
    m = empty_module(shell)
    m.add(twice, name="k")
    m.add(thrice, name="k")
    assert m.functions == {"k": "tir"} and len(m.ir_mod.functions) == 1
    assert torch.equal(call_tir(m, "k", X4), X4 * 3)
    m.add([twice, inc])
    m.add([thrice.with_attr("global_symbol", "twice"), inc])
    assert m.functions == {"k": "tir", "twice": "tir", "inc": "relax"}
    assert torch.equal(call_tir(m, "twice", X4), X4 * 3)


def test_adding_the_same_names_again_says_where_the_replaced_ones_came_from(shell):
    m = empty_module(shell)
    m.add(twice, name="k")
    result = m.add(thrice, name="k")
    assert result.replaced == {"k": "m.add(PrimFunc)"}
    assert "k replaces the definition from m.add(PrimFunc)" in shell.text(result)


def test_a_cell_takes_over_an_added_name_and_running_the_add_again_takes_it_back(shell):
    m = empty_module(shell)
    m.add([twice, inc])
    added = m.origin_of("inc")
    assert added == "m.add(2 functions)"
    own_inc = """
@R.function
def inc(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    return R.add(x, R.const(5.0, "float32"))
"""
    view = shell.cell("m", own_inc, cell_id="own-inc")
    assert "inc replaces the definition from m.add(2 functions)" in shell.text(view)
    cell = m.origin_of("inc")
    assert cell.startswith("cell In[")
    assert m.origin_of("twice") == added  # only the name the cell defines moves
    assert torch.equal(m.inc(X4), X4 + 5)

    result = m.add([twice, inc])
    assert result.replaced["inc"] == cell
    assert f"inc replaces the definition from {cell}" in shell.text(result)
    assert m.origin_of("inc") == added
    assert torch.equal(m.inc(X4), X4 + 1)

    view = shell.cell("m", own_inc, cell_id="own-inc")  # and the cell, run again, once more
    assert "inc replaces the definition from m.add(2 functions)" in shell.text(view)
    assert torch.equal(m.inc(X4), X4 + 5)


def test_bad_adds_raise_call_error_and_change_nothing(shell):
    m = empty_module(shell)
    shell.cell(
        "m",
        """
@R.function
def double(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    return R.multiply(x, R.const(2.0, "float32"))
""",
    )
    m.add([inc, cube])
    intact = Snapshot(m, {"double": lambda: m.double(X4), "inc": lambda: m.inc(X4)})

    err = raises(CallError, m.add, 3)
    assert "int" in str(err)
    intact.assert_intact()

    err = raises(CallError, m.add, [twice, twice])
    assert err.function == "twice" and "two functions named `twice`" in str(err)
    intact.assert_intact()

    err = raises(CallError, m.add, [twice, thrice.with_attr("global_symbol", "twice")])
    assert err.function == "twice"
    intact.assert_intact()

    err = raises(CallError, m.add, NAMELESS)
    assert "name=" in str(err)
    intact.assert_intact()

    err = raises(CallError, m.add, [thrice, 3])  # the good one in the list is not added either
    assert "int" in str(err)
    intact.assert_intact()

    raises(CallError, m.add, twice, name="not a name")
    raises(CallError, m.add, [twice, thrice], name="both")
    intact.assert_intact()
    assert "twice" not in m.functions and "thrice" not in m.functions


def test_added_functions_are_like_cell_made_ones_in_script_stats_widget_and_compile(shell):
    m = empty_module(shell)
    m.add([twice, inc, cube])
    view = shell.cell(
        "m",
        """
@R.function
def use(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    y = R.call_py_func("cube", x, out_ty=R.Tensor((4,), "float32"))
    return R.add(y, R.const(1.0, "float32"))

@I.pyfunc
def both(self, x):
    return self.call_tir(self.twice, [x], out_ty=R.Tensor((4,), "float32")) + self.inc(x)
""",
    )
    assert "m: this cell defines use (relax), both (pyfunc)" in shell.text(view)

    # compile(): the added PrimFunc and Relax function are compiled with the cell's
    compiled = m.compile()
    assert ("tir", ("twice",)) in [(c.kind, c.functions) for c in compiled]
    (vm,) = [c for c in compiled if c.kind == "vm"]
    assert {"inc", "use"} <= set(vm.functions)
    assert not m.is_stale

    # calls compile nothing more; stats count the added functions by name
    mark = len(m.stats.compiles)
    assert torch.equal(m.use(X4), X4**3 + 1)
    assert torch.equal(m.both(X4), X4 * 2 + X4 + 1)
    assert torch.equal(call_tir(m, "twice", X4), X4 * 2)
    assert len(m.stats.compiles) == mark
    table = m.stats.by_function()
    assert table["twice"]["compiles"] == 1 and table["inc"]["compiles"] >= 1
    assert any(row[0] == "twice" for row in m.stats.rows())

    # the widget: a tab per function, added ones included, and the text twin
    widget = notebook_front_end.module_view(m)
    try:
        assert [p.name for p in widget.panes] == ["twice", "inc", "cube", "use", "both"]
    finally:
        widget.close()
    text = shell.text(m)
    rows = {line.split()[0]: " ".join(line.split()[1:]) for line in text.splitlines()[1:]}
    assert rows == {
        "twice": "tir latest call (float32[4], float32[4])",  # destination-passing: no return
        "inc": "relax latest call (float32[4]) -> float32[4]",
        "cube": "pyfunc latest call (float32[4]) -> float32[4]",
        "use": "relax latest call (float32[4]) -> float32[4]",
        "both": "pyfunc latest call (float32[4]) -> float32[4]",
    }, text

    # script(): every function, and it parses back to the same module
    script = m.script()
    for header in ("def twice(", "def inc(", "def cube(self, x):", "def use(", "def both("):
        assert header in script
    before = m.ir_mod
    shell.run(f"%%tvmmodule m\n{script}", cell_id="whole")
    assert tvm_ffi.structural_equal(before, m.ir_mod)
    assert torch.equal(m.use(X4), X4**3 + 1)
    assert torch.equal(m.both(X4), X4 * 2 + X4 + 1)


def test_a_cells_relax_function_calls_added_functions(shell, models):
    m = empty_module(shell)
    m.add([twice, inc])
    m.add_torch(models["mlp"], (randn("mlp"),), name="mlp")
    shell.cell(
        "m",
        """
@R.function
def use(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    cls = m
    y = R.call_tir(cls.twice, (x,), out_ty=R.Tensor((4,), "float32"))
    return cls.inc(y)

@R.function
def head(x: R.Tensor((2, 8), "float32")) -> R.Tensor((2, 4), "float32"):
    cls = m
    return R.nn.relu(cls.mlp(x))
""",
    )
    assert torch.equal(m.use(X4), X4 * 2 + 1)
    x = randn("mlp")
    torch.testing.assert_close(m.head(x), torch.relu(models["mlp"](x)).detach(), **TOL)


def test_add_an_irmodule_whose_relax_function_calls_its_own_primfunc(shell):
    m = empty_module(shell)
    assert m.add(Lib).kinds == {"double_it": "tir", "weighted": "relax"}
    assert torch.equal(m.weighted(X4), X4 * 2 * torch.tensor([1.0, 2.0, 3.0, 4.0]))


# -- NAME.add_torch --------------------------------------------------------------------------
def test_add_torch_imports_an_mlp_a_conv_net_and_attention_that_match_pytorch(shell, models):
    nets = empty_module(shell, "nets")
    for name, model in models.items():
        result = nets.add_torch(model, (randn(name),), name=name)
        assert result.kinds == {name: "relax"}
        assert f"nets.add_torch({type(model).__name__}) defines {name}" in shell.text(result)
    assert nets.functions == {"mlp": "relax", "conv": "relax", "attn": "relax"}
    torch.manual_seed(1)
    for name, model in models.items():
        for _ in range(2):  # new random inputs of the example's shape
            x = randn(name)
            with torch.no_grad():
                expected = model(x)
            torch.testing.assert_close(getattr(nets, name)(x), expected, **TOL)


def test_add_torch_names_the_weights_in_consts(shell, models):
    nets = empty_module(shell, "nets")
    nets.add_torch(models["mlp"], (randn("mlp"),), name="mlp")
    assert set(nets.consts) == {"fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias"}
    assert np.array_equal(
        nets.consts.numpy("fc1_weight"), models["mlp"].fc1.weight.detach().numpy()
    )


def test_add_torch_with_a_dynamic_batch_runs_at_two_batch_sizes(shell, models):
    nets = empty_module(shell, "nets")
    batch = torch.export.Dim("batch", min=1, max=64)
    nets.add_torch(models["mlp"], (torch.randn(4, 8),), dynamic_shapes=({0: batch},))
    assert nets.functions == {"main": "relax"}
    for size in (3, 17):
        x = torch.randn(size, 8)
        out = nets.main(x)
        assert out.shape == (size, 4)
        torch.testing.assert_close(out, models["mlp"](x).detach(), **TOL)


def test_a_model_torch_export_cannot_export_raises_model_import_error(shell, models):
    nets = empty_module(shell, "nets")
    nets.add_torch(models["mlp"], (randn("mlp"),), name="mlp")
    x = randn("mlp")
    intact = Snapshot(nets, {"mlp": lambda: nets.mlp(x)})
    err = raises(
        ModelImportError, nets.add_torch, DataDependent(), (torch.randn(3),), name="branchy"
    )
    assert "torch.export" in str(err) and "DataDependent" in str(err)
    assert err.__cause__ is not None  # %tb has torch's own story
    intact.assert_intact()
    assert "branchy" not in nets.functions
    # and the module keeps going op by op with the model it did import
    comparison = nets.compare("mlp", models["mlp"], x)
    assert comparison.passed and comparison.first_divergence is None
    assert sum(check.diff is not None for check in comparison.ops) >= 3  # its linears and relus


# -- edit_text and edit ----------------------------------------------------------------------
def test_edit_text_of_imported_models_parses_back_equal_and_the_cell_owns_them(shell, models):
    nets = empty_module(shell, "nets")
    for name, model in models.items():
        nets.add_torch(model, (randn(name),), name=name)
    inputs = {name: randn(name) for name in models}
    for name, model in models.items():
        text = nets.edit_text(name)
        assert text.startswith(f"%%tvmmodule nets\n@R.function\ndef {name}(")
        assert "metadata" not in text
        first_param = next(iter(model.state_dict())).replace(".", "_")
        assert f"nets.consts.{first_param}" in text
        before = nets.ir_mod[name]
        expected = getattr(nets, name)(inputs[name])

        view = shell.run(text, cell_id=f"edit-{name}")
        assert (
            f"{name} replaces the definition from nets.add_torch({type(model).__name__})"
            in shell.text(view)
        )
        assert nets.origin_of(name).startswith("cell In[")
        assert tvm_ffi.structural_equal(before, nets.ir_mod[name])
        assert torch.equal(getattr(nets, name)(inputs[name]), expected)


def test_edit_text_of_a_dynamic_batch_import_parses_back(shell, models):
    nets = empty_module(shell, "nets")
    batch = torch.export.Dim("batch", min=1, max=64)
    nets.add_torch(models["mlp"], (torch.randn(4, 8),), dynamic_shapes=({0: batch},))
    before = nets.ir_mod["main"]
    shell.run(nets.edit_text("main"), cell_id="edit-main")
    assert tvm_ffi.structural_equal(before, nets.ir_mod["main"])
    x = torch.randn(5, 8)
    torch.testing.assert_close(nets.main(x), models["mlp"](x).detach(), **TOL)


def test_edit_text_of_a_pyfunc_is_its_source(shell):
    m = empty_module(shell)
    m.add([cube, halve])
    text = m.edit_text("cube")
    assert text == "%%tvmmodule m\n@I.pyfunc\n" + textwrap.dedent(inspect.getsource(cube))
    assert m.edit_text("halve") == "%%tvmmodule m\n@I.pyfunc\ndef halve(x):\n    return x / 2\n"
    shell.run(text, cell_id="edit-cube")
    assert m.origin_of("cube").startswith("cell In[")
    assert m.origin_of("halve") == "m.add(2 functions)"
    assert torch.equal(m.cube(X4), X4**3)


def test_edit_puts_the_text_into_the_next_input(shell, models):
    m = empty_module(shell)
    m.add_torch(models["mlp"], (randn("mlp"),), name="mlp")
    m.add(cube)
    shell.ip.rl_next_input = None
    try:
        with capture_output() as shown:
            assert m.edit("mlp") is None  # in the shell: not returned, but put below
        assert shell.ip.rl_next_input == m.edit_text("mlp")
        # and said in the output, which a notebook run without a front end (a saved one) keeps
        (said,) = shown.outputs
        head = said.data["text/plain"].splitlines()[0]
        assert head.startswith("opened `mlp` in a new cell below") and "%%tvmmodule m" in head
        opened = m.edit_text("mlp").splitlines()
        plain = said.data["text/plain"].splitlines()
        assert plain[1:13] == opened[:12]
        assert plain[-1] == f"… {len(opened) - 12} more lines, in the new cell"
        shown_html = html.unescape(re.sub(r"<[^>]+>", "", said.data["text/html"]))
        assert "def mlp(" in shown_html and "<details>" in said.data["text/html"]
        shell.ip.rl_next_input = None
        shell.run("%tvmmodule_edit m.cube")
        assert shell.ip.rl_next_input == m.edit_text("cube")
    finally:
        shell.ip.rl_next_input = None


def test_script_of_a_module_holding_an_imported_model_parses_back(shell, models):
    nets = empty_module(shell, "nets")
    nets.add_torch(models["conv"], (randn("conv"),), name="conv")
    nets.add(twice)
    shell.cell(
        "nets",
        """
@I.pyfunc
def head(self, x):
    return self.conv(x).softmax(-1)
""",
    )
    x = randn("conv")
    expected = nets.head(x)
    before = nets.ir_mod
    script = nets.script()
    assert "nets.consts.conv_weight" in script and "metadata" not in script
    shell.run(f"%%tvmmodule nets\n{script}", cell_id="whole")
    assert tvm_ffi.structural_equal(before, nets.ir_mod)
    assert set(nets.functions) == {"conv", "twice", "head"}
    assert torch.equal(nets.head(x), expected)


def test_script_parses_back_with_the_attributes_of_an_added_irmodule(shell):
    m = empty_module(shell)
    m.add(scaled_module(np.array([1.0, 2.0, 3.0], dtype="float32")))
    before = m.ir_mod
    assert before.attrs["made_by"] == "BlockBuilder"
    shell.run(f"%%tvmmodule m\n{m.script()}", cell_id="whole")
    assert m.ir_mod.attrs.get("made_by") == "BlockBuilder"
    assert tvm_ffi.structural_equal(before, m.ir_mod)


# -- trace -----------------------------------------------------------------------------------
CHAIN = """
@R.function
def chain(x: R.Tensor((6,), "float32")) -> R.Tensor((6,), "float32"):
    y = R.multiply(x, R.const(2.0, "float32"))
    z = R.add(y, R.const(1.0, "float32"))
    w = R.nn.relu(z)
    return w
"""
X6 = torch.tensor([-3.0, -1.0, -0.5, 0.0, 1.0, 2.5])


def test_trace_binds_each_intermediate_to_its_value(shell):
    shell.cell("t", CHAIN)
    t = shell.ns["t"]
    before = t.ir_mod
    first_compile = len(t.stats.compiles)
    trace = t.trace("chain", X6)
    assert len(t.stats.compiles) > first_compile  # the traced copy is compiled once

    y = X6 * 2
    z = y + 1
    w = torch.relu(z)
    assert isinstance(trace, Mapping)
    assert list(trace) == ["y", "z", "w"] and len(trace) == 3
    for name, value in {"y": y, "z": z, "w": w}.items():
        assert isinstance(trace[name], torch.Tensor)
        assert torch.equal(trace[name], value), name
    assert dict(trace.items()).keys() == {"y", "z", "w"}
    assert torch.equal(trace.output, w)
    assert [row[:4] for row in trace.rows()] == [
        ("y", "multiply", "[6]", "float32"),
        ("z", "add", "[6]", "float32"),
        ("w", "nn.relu", "[6]", "float32"),
    ]
    shown = shell.text(trace)
    assert shown == repr(trace)
    lines = shown.splitlines()
    assert lines[0] == "trace of chain: 3 intermediates"
    assert lines[1].split() == ["binding", "op", "shape", "dtype", "min", "/", "max", "/", "mean"]
    assert lines[4].split()[:4] == ["w", "nn.relu", "[6]", "float32"]
    assert "0 / 6 / 1.667" in lines[4]  # relu(2x + 1): min, max, mean

    # tracing changes nothing, and again compiles nothing
    assert t.ir_mod.same_as(before) and tvm_ffi.structural_equal(t.ir_mod, before)
    compiles = len(t.stats.compiles)
    again = t.trace("chain", X6 + 1)
    assert len(t.stats.compiles) == compiles
    assert torch.equal(again["w"], torch.relu((X6 + 1) * 2 + 1))
    assert torch.equal(t.chain(X6), w)


def test_trace_values_is_the_mappings_values(shell):
    shell.cell("t", CHAIN)
    trace = shell.ns["t"].trace("chain", X6)
    values = list(trace.values())
    assert len(values) == 3 and torch.equal(values[0], X6 * 2)


IN_PLACE_INTO = 'out_ty=R.Tensor((6,), "float32"), inplace_indices=[0]'
IN_PLACE = f"""
@T.prim_func
def add_one(a: T.Buffer((6,), "float32")):
    for i in range(6):
        a[i] = a[i] + T.float32(1)

@R.function
def twice(x: R.Tensor((6,), "float32")) -> R.Tensor((6,), "float32"):
    cls = w
    with R.dataflow():
        y = R.multiply(x, R.const(2.0, "float32"))
        z = R.call_tir_inplace(cls.add_one, (y,), {IN_PLACE_INTO})
        v = R.call_tir_inplace(cls.add_one, (z,), {IN_PLACE_INTO})
        r = R.reshape(v, (2, 3))
        u = R.call_tir_inplace(cls.add_one, (R.reshape(r, (6,)),), {IN_PLACE_INTO})
        R.output(u)
    return u
"""


@pytest.mark.parametrize("pipeline", [None, "default"])
def test_a_value_written_over_in_place_is_traced_as_its_binding_made_it(shell, pipeline):
    """`z = call_tir_inplace(add_one, (y,))` writes `z` into `y`'s memory: the trace showed `y`
    as `z` (and `z` as what the next write made), not the value each binding made."""
    shell.run(f"%%tvmmodule w{f' --pipeline {pipeline}' if pipeline else ''}\n{IN_PLACE}")
    trace = shell.ns["w"].trace("twice", X6)
    expected = {"y": X6 * 2, "z": X6 * 2 + 1, "v": X6 * 2 + 2, "u": X6 * 2 + 3}
    for name, value in expected.items():
        assert torch.equal(trace[name], value), (name, trace[name])
    assert torch.equal(trace["r"], (X6 * 2 + 2).reshape(2, 3))  # a view the next write shares
    assert torch.equal(trace.output, X6 * 2 + 3)


# -- compare ---------------------------------------------------------------------------------
def test_compare_gives_each_outputs_largest_errors_and_verdict(shell):
    shell.cell("c", PAIR)
    c = shell.ns["c"]
    x = torch.tensor([1.0, 2.0, 3.0])
    comparison = c.compare("pair", lambda t: (t + t, t * t + 0.5), x)
    first, second = comparison.outputs
    assert (first.max_abs, first.max_rel, first.passed) == (0.0, 0.0, True)
    expected = x * x + 0.5
    gap = (x * x - expected).abs()
    assert second.max_abs == pytest.approx(float(gap.max()))
    assert second.max_rel == pytest.approx(float((gap / expected.abs()).max()))
    assert not second.passed and not comparison.passed
    assert comparison.ops is None  # a cell's function: outputs only
    shown = shell.text(comparison)
    assert shown == repr(comparison)
    assert "output 0" in shown and "output 1" in shown and "FAIL" in shown
    # tolerances are the caller's
    assert c.compare("pair", lambda t: (t + t, t * t + 0.5), x, rtol=0, atol=0.5).passed


def test_compare_goes_op_by_op_and_finds_a_planted_divergence(shell, models):
    mlp = models["mlp"]
    nets = empty_module(shell, "nets")
    nets.add_torch(mlp, (randn("mlp"),), name="mlp")
    x = randn("mlp")

    clean = nets.compare("mlp", mlp, x, **TOL)
    assert clean.passed and clean.first_divergence is None and clean.ops is not None
    by_binding = {check.binding: check for check in clean.ops}
    relu = [c for c in clean.ops if c.op == "nn.relu"]
    assert len(relu) == 1 and relu[0].node.op == "aten.relu.default" and relu[0].diff.passed
    assert "matches" in clean.verdict()

    # plant: relu -> silu, and a binding of the cell's own that PyTorch has no node for
    original = nets.edit_text("mlp")
    relu_binding = relu[0].binding
    lines = original.splitlines(keepends=True)
    (at,) = [i for i, line in enumerate(lines) if "R.nn.relu(" in line]
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    lines[at] = lines[at].replace("R.nn.relu(", "R.nn.silu(")
    lines.insert(at + 1, f'{indent}extra = R.multiply({relu_binding}, R.const(1.0, "float32"))\n')
    planted = "".join(lines).replace(f"R.matmul({relu_binding},", "R.matmul(extra,")
    assert planted.count("extra") == 2
    shell.run(planted, cell_id="planted")

    comparison = nets.compare("mlp", mlp, x, **TOL)
    assert not comparison.passed
    first = comparison.first_divergence
    assert first.binding == relu_binding and first.op == "nn.silu"
    assert first.node.op == "aten.relu.default" and not first.diff.passed
    silu = torch.nn.functional.silu
    with torch.no_grad():
        gap = (silu(mlp.fc1(x)) - torch.relu(mlp.fc1(x))).abs().max()
    assert first.diff.max_abs == pytest.approx(float(gap), rel=1e-4)
    checks = {check.binding: check for check in comparison.ops}
    assert checks["extra"].node is None and checks["extra"].diff is None  # never guessed
    assert checks["gv"].node is None and checks["gv"].diff is None
    for binding, check in by_binding.items():  # the parts of an addmm have no value of their own
        if check.node is not None and not check.node.exact:
            assert checks[binding].diff is None
    verdict = comparison.verdict()
    assert "nets.edit('mlp')" in verdict and f"`{relu_binding}`" in verdict
    assert "aten.relu.default" in verdict
    assert verdict in shell.text(comparison)

    # with a reference that is not the imported model: outputs only
    other = MLP().eval()
    outputs_only = nets.compare("mlp", other, x)
    assert outputs_only.ops is None and "add_torch" in outputs_only.why_not_op_by_op
    (difference,) = outputs_only.outputs
    with torch.no_grad():
        expected_gap = (nets.mlp(x) - other(x)).abs().max()
    assert difference.max_abs == pytest.approx(float(expected_gap)) and not difference.passed

    # edited back, it matches again
    shell.run(original, cell_id="planted")
    assert nets.compare("mlp", mlp, x, **TOL).first_divergence is None


def test_compare_on_an_added_function_that_replaced_an_import_compares_outputs_only(shell, models):
    mlp = models["mlp"]
    nets = empty_module(shell, "nets")
    nets.add_torch(mlp, (randn("mlp"),), name="mlp")
    torch.manual_seed(2)
    other = MLP().eval()
    replacement = from_exported_program(torch.export.export(other, (randn("mlp"),)))["main"]
    nets.add(replacement, name="mlp")
    comparison = nets.compare("mlp", mlp, randn("mlp"))
    assert comparison.ops is None


def test_compare_of_a_function_not_from_add_torch_says_it_compared_outputs_only(shell):
    shell.cell("demo", SCALE_PYFUNC)
    x = torch.arange(4.0)
    comparison = shell.ns["demo"].compare("scale", lambda v: v * 11, x)
    assert comparison.ops is None and not comparison.passed
    assert comparison.verdict() == "scale does not match"
    shown = shell.text(comparison)
    assert shown.count("outputs only: `scale` was not imported with add_torch") == 1, shown
    assert "no op diverges alone" not in shown
    assert shell.ns["demo"].compare("scale", lambda v: v * 10, x).passed
