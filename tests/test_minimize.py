"""`NAME.minimize`: a failing function cut to the fewest bindings that still show its fault, and a
repro of that cut that shows it in a fresh Python without this package.

The faults: the passes planted in a pipeline (`testing.add_becomes_subtract`,
`testing.aborts`) and three that TVM 0.27 has:
- `RewriteDataflowReshape` makes `R.reshape` of an argument a view, so a
  `call_tir_inplace` on it writes into the caller's tensor (and a later read of
  the argument sees `x + 1`: `2x + 2` where `2x + 1` is right);
- LLVM aborts on `T.call_llvm_pure_intrin` of AVX2's `pmadd.wd` built for a
  CPU without AVX2 ("Do not know how to split the result of this operator!");
- apache/tvm#20192: a reshape to `R.tensor_to_shape` of a tensor computed from
  constants, then an `R.add`: the default pipeline leaves the add to VM
  codegen, which refuses it ("CodeGenVM cannot emit this Relax operator").
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from cells import RESHAPE_THEN_IN_PLACE, tensor_to_shape_then_add
from torch import nn
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_pyfunc_nb import LiveModule
from tvm_pyfunc_nb._core import front_end_port
from tvm_pyfunc_nb._core.faults import (
    cut_judging,
    cutting,
    minimize_repro,
    minimizing,
    shrinking,
    worker_builds,
)
from tvm_pyfunc_nb._views import render
from tvm_pyfunc_nb.errors import CallError

# AVX2's pmadd.wd by name in a kernel of a Relax function, for a CPU without AVX2: LLVM aborts
PMADD = """
@T.prim_func(s_tir=True)
def pmadd(A: T.Buffer((4, 16), "int16"), B: T.Buffer((4, 8), "int32")):
    for i in range(4):
        with T.sblock("b"):
            vi = T.axis.spatial(4, i)
            B[vi, T.ramp(0, 1, 8)] = T.call_llvm_pure_intrin(
                "int32x8", "llvm.x86.avx2.pmadd.wd",
                A[vi, T.ramp(0, 1, 16)], A[vi, T.ramp(0, 1, 16)],
            )

@R.function
def main(
    x: R.Tensor((4, 16), "int16"), y: R.Tensor((4, 8), "float32")
) -> R.Tensor((4, 8), "float32"):
    cls = llvm
    with R.dataflow():
        a = R.add(x, x)
        b = R.call_tir(cls.pmadd, (a,), out_ty=R.Tensor((4, 8), "int32"))
        c = R.astype(b, "float32")
        d = R.nn.relu(R.multiply(c, y))
        R.output(d)
    return d
"""

MLP = """
@R.function
def mlp(
    x: R.Tensor((4, 8), "float32"), w: R.Tensor((8, 8), "float32"), b: R.Tensor((8,), "float32")
) -> R.Tensor((4, 8), "float32"):
    with R.dataflow():
        h = R.matmul(x, w)
        h2 = R.nn.relu(h)
        y = R.add(h2, b)
        R.output(y)
    return y
"""
MLP_ARGS = (torch.randn(4, 8), torch.randn(8, 8), torch.randn(8))


class Attention(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        weights = torch.softmax(self.q(x) @ self.k(x).transpose(-2, -1), dim=-1)
        return torch.tanh(weights @ self.v(x))


@pytest.fixture
def steps():
    """The progress the front end is told, as `(done, note)` steps."""

    class Heard(front_end_port.FrontEnd):
        def progress(self, live, title, total, unit=""):
            heard.append((title, total, unit))

            class Steps(front_end_port.Progress):
                def step(self, done, note=""):
                    heard.append((done, note))

            return Steps()

    heard: list = []
    previous = front_end_port.install(Heard())
    yield heard
    front_end_port.install(previous)


def run_repro(path, cwd) -> subprocess.CompletedProcess:
    """The repro in a fresh Python that cannot import this package."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, str(path)], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


# -- the search and the cut, on their own ---------------------------------------------------


def test_the_search_ends_on_a_set_that_needs_every_binding_it_keeps():
    asked = []

    def shows(kept):
        asked.append(kept)
        return {40, 43} <= kept

    found = shrinking.smallest(200, shows, frozenset)
    assert found == {40, 43}
    assert len(asked) < 40  # a window first, not 200 single removals
    assert shrinking.smallest(5, lambda kept: 3 in kept, frozenset) == {3}


def test_a_cut_is_a_function_of_the_bindings_it_keeps():
    @I.ir_module
    class Module:
        @R.function
        def main(x: R.Tensor((8,), "float32"), w: R.Tensor((4,), "float32")):
            with R.dataflow():
                c = R.add(R.const(np.ones(8, "float32")), R.const(np.ones(8, "float32")))
                y = R.multiply(x, c)
                s = R.split(y, 2)
                a = s[0]
                b = R.add(a, w)
                R.output(b)
            return b

    cuts = cutting.DataflowCut(Module["main"])
    names = cuts.names
    assert names == ["c", "y", "s", "a", "b"]
    # `a` is a tensor: it enters as a parameter; the tuple `s` cannot, nor the constant `c`
    cut = cuts.cut([names.index("b")])
    assert [p.name for p in cut.function.params] == ["a", "w"]
    assert cut.entering == (("binding", names.index("a")), ("param", 1))
    cut = cuts.cut([names.index("a")])
    assert {names[i] for i in cut.kept} == {"s", "a"}  # the split comes along
    cut = cuts.cut([names.index("y")])
    assert {names[i] for i in cut.kept} == {"c", "y"}  # the constant stays one
    relax.analysis.well_formed(cutting.module_of(Module, "main", cut))
    assert isinstance(cut.function.body.blocks[0], relax.DataflowBlock)


# -- planted faults --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def planted(pipelines):
    """A model whose pipeline turns its adds into subtracts, bisected."""
    torch.manual_seed(0)
    model, x = Attention().eval(), torch.randn(4, 8)
    live = LiveModule("planted", pipeline="add_becomes_subtract")
    live.add_torch(model, (x,))
    return live, model, x, live.bisect("main", x)


def test_the_pass_bisect_found_still_breaks_one_binding_and_its_repro_shows_it(
    planted, steps, tmp_path
):
    bisected = planted[-1]
    cut = bisected.minimize()
    assert cut.found and cut.fault.kind == "pass" and cut.fault.culprit == "AddBecomesSubtract"
    assert cut.size == 1 and cut.original > 10
    assert "R.add(" in cut.script  # the binding the pass turns into a subtract
    assert "AddBecomesSubtract changes the numbers" in cut.verdict()
    assert repr(cut).startswith(f"minimize main: main: {cut.original} bindings cut to 1")
    assert steps[0] == ("minimize main", cut.original, "bindings cut away")
    assert steps[-1][0] == cut.original - 1 and "smallest so far 1" in steps[-1][1]
    assert "the cut" in render.minimized_html(cut)
    path = cut.save(str(tmp_path / "repro.py"))
    shows = run_repro(path, tmp_path)
    assert shows.returncode == 1, shows.stderr[-2000:]
    assert "AddBecomesSubtract CHANGES the numbers" in shows.stdout
    assert "tvm_pyfunc_nb" not in Path(path).read_text().replace("Found by tvm_pyfunc_nb", "")


def test_the_numbers_against_the_model_minimize_without_bisect(planted):
    live, _, x, _ = planted
    cut = live.minimize("main", x)
    assert cut.fault.kind == "numbers" and cut.size == 1
    assert "PyTorch model Attention" in cut.values and "R.add(" in cut.script
    with pytest.raises(CallError, match="`add_becomes_subtract` is the notebook's own"):
        cut.save("unused.py")


def test_a_pass_that_crashes_is_cut_to_one_binding_and_the_kernel_goes_on(pipelines):
    live = LiveModule("aborting", pipeline="aborts")
    live.run_cell(MLP)
    cut = live.minimize("mlp", *MLP_ARGS)
    assert cut.fault.kind == "crash" and cut.fault.signal == "SIGABRT"
    assert cut.fault.stage == "pipeline pass Aborts" and cut.size == 1
    with pytest.raises(CallError, match="is the notebook's own"):
        cut.save("unused.py")


# -- faults TVM 0.27 has ---------------------------------------------------------------------


def test_rewrite_dataflow_reshape_writing_into_the_argument_is_cut_to_two_bindings(tmp_path):
    live = LiveModule("reshape")
    live.run_cell(RESHAPE_THEN_IN_PLACE)
    x, w = torch.arange(8.0).reshape(2, 4), torch.rand(8)
    cut = live.minimize("main", x.clone(), w)
    assert cut.fault.kind == "numbers" and cut.size <= 3
    assert "R.reshape(x" in cut.script and "call_tir_inplace" in cut.script
    assert "writes into its argument `x`" in cut.detail
    shows = run_repro(cut.save(str(tmp_path / "repro.py")), tmp_path)
    assert shows.returncode == 1, shows.stderr[-2000:]
    assert "argument 0 after the run: max abs error 1" in shows.stdout
    assert "LEAVES the reference's numbers" in shows.stdout


def test_llvm_aborting_on_an_intrinsic_for_another_cpu_is_cut_to_its_kernel(tmp_path):
    live = LiveModule("llvm", target="llvm -mcpu=x86-64")
    live.run_cell(PMADD)
    cut = live.minimize("main", torch.ones(4, 16, dtype=torch.int16), torch.rand(4, 8))
    assert cut.fault.kind == "crash" and cut.fault.signal == "SIGABRT"
    assert cut.fault.stage == "codegen" and cut.size == 1 and "pmadd" in cut.script
    shows = run_repro(cut.save(str(tmp_path / "repro.py")), tmp_path)
    assert shows.returncode == 1, shows.stderr[-2000:]
    assert "CRASHES: killed by SIGABRT" in shows.stdout
    with pytest.raises(CallError, match="minimize"):  # a PrimFunc has no bindings to cut
        live.minimize("pmadd", torch.ones(4, 16, dtype=torch.int16), torch.ones(4, 8))


def test_an_upstream_compile_error_is_cut_to_its_bindings(tmp_path):
    # tvm.compile's own pipeline: the fused default folds the shape to a constant first
    live = LiveModule("issue20192", pipeline="default")
    live.add(tensor_to_shape_then_add()["main"], name="main")
    cut = live.minimize("main", torch.rand(2, 8), torch.rand(2, 8))
    assert cut.fault.kind == "fails"
    assert cut.fault.error == "CodeGenVM cannot emit this Relax operator directly"
    assert cut.size <= 4 and "R.tensor_to_shape" in cut.script and "zeros" in cut.values
    shows = run_repro(cut.save(str(tmp_path / "repro.py")), tmp_path)
    assert shows.returncode == 1, shows.stderr[-2000:]
    assert "FAILS: CodeGenVM cannot emit" in shows.stdout

    fused = LiveModule("issue20192_fused")  # builds: its reference (no optional pass) does not
    fused.add(tensor_to_shape_then_add()["main"], name="main")
    with pytest.raises(CallError, match=r"minimize: `main` builds and runs .* pass reference="):
        fused.minimize("main", torch.rand(2, 8), torch.rand(2, 8))


# -- what minimize refuses --------------------------------------------------------------------


def test_a_function_without_fault_and_the_mistakes_of_a_call(pipelines):
    live = LiveModule("fine")
    live.run_cell(MLP)
    result = live.minimize("mlp", *MLP_ARGS)
    assert not result.found and result.verdict().startswith("mlp gives the numbers of")
    with pytest.raises(CallError, match="found no fault in `mlp`"):
        result.save("unused.py")
    with pytest.raises(CallError, match=r"`mlp` takes 3 argument\(s\)"):
        live.minimize("mlp", *MLP_ARGS[:2])
    with pytest.raises(CallError, match="minimize: the reference is"):
        live.minimize("mlp", *MLP_ARGS, reference="model")
    with pytest.raises(CallError, match="bisect found no pass at fault"):
        live.bisect("mlp", *MLP_ARGS).minimize()
    assert {"LegalizeOps", "VMShapeLower"} <= worker_builds.NEEDED


def test_what_a_repro_checks_is_what_the_search_judged():
    # an error is known by what TVM says, without the names and numbers a cut changes
    error = (
        "`main`: `gv6 = R.add(gv5, gv5)` (float32[shape gv4, 2 dims]) (TVM cannot lower it "
        "while a shape is not known; TVM says: CodeGenVM cannot emit this Relax operator "
        "directly. Run the appropriate lowering pass.)"
    )
    assert cut_judging.error_key(error) == "CodeGenVM cannot emit this Relax operator directly"
    check = "Relax lowering failed: TVM's internal check `func->body->IsInstance<X>()` failed"
    assert cut_judging.error_key(check) == "func->body->IsInstance<X>()"
    assert cut_judging.crash_stage("building fused_add, matmul") == "building"
    # the file builds with the module's pipeline, made as the module makes it
    assert minimize_repro.pipeline_text("auto") == "relax.get_default_pipeline(TARGET)"
    assert minimize_repro.pipeline_text("fused") == "relax.get_default_pipeline(TARGET)"
    assert minimize_repro.pipeline_text("default") == "relax.get_pipeline('default')"
    assert minimize_repro.pipeline_text("target") == "relax.get_default_pipeline(TARGET)"
    assert "relax.get_pipeline('zero')" in minimize_repro.pipeline_text("zero")
    assert minimize_repro.pipeline_text("no_such_pipeline") is None
    assert minimizing.Minimized("m", "f", None, 3, summary="why").verdict() == "why"
