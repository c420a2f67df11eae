"""`NAME.as_torch(fn)`: runnable PyTorch text where TVM's mapping is faithful, flags where it is
not.
"""

from __future__ import annotations

import torch
from cells import ADD_TIR, RELAX_CALLS_BOTH, SCALE_PYFUNC

from tvm_pyfunc_nb._core.models import torch_source

MLP = """
@R.function
def mlp(
    x: R.Tensor((2, 3), "float32"), w: R.Tensor((3, 4), "float32"), b: R.Tensor((4,), "float32")
) -> R.Tensor((2, 4), "float32"):
    h = R.nn.relu(R.add(R.matmul(x, w), b))
    pair = (h, x)
    first = pair[0]
    return R.nn.softmax(first, axis=1)
"""


def run_source(source: str, name: str, live, *args):
    scope: dict = {}
    exec(compile(source, f"<as_torch {name}>", "exec"), scope)
    return scope[name](live, *args)


def test_faithful_mapping_runs_and_matches_the_compiled_function(shell):
    shell.cell("demo", MLP)
    demo = shell.ns["demo"]
    source = demo.as_torch("mlp")
    assert "torch.matmul(x, w)" in source and "F.relu(" in source and "F.softmax(" in source
    assert "NOT MAPPED" not in source and "REVIEW" not in source
    x, w, b = torch.randn(2, 3), torch.randn(3, 4), torch.randn(4)
    assert torch.allclose(run_source(source, "mlp", demo, x, w, b), demo.mlp(x, w, b), atol=1e-6)


def test_calls_to_tir_pyfuncs_and_relax_functions_stay_calls(shell):
    shell.cell(
        "demo",
        ADD_TIR
        + SCALE_PYFUNC
        + RELAX_CALLS_BOTH
        + """
@R.function
def outer(x: R.Tensor(("n",), "float32")) -> R.Tensor(("n",), "float32"):
    cls = demo
    return cls.pipeline(x, x)
""",
    )
    demo = shell.ns["demo"]
    assert "self.pipeline(x, x)" in demo.as_torch("outer")
    pipeline = demo.as_torch("pipeline")
    assert (
        "self.call_tir(self.add_tir" in pipeline and "self.call_py_func('scale', [z])" in pipeline
    )


def test_what_cannot_be_mapped_is_flagged_in_the_text_and_the_text_stays_python(shell):
    shell.cell(
        "demo",
        """
@R.function
def odd(x: R.Tensor((4,), "float32"), i: R.Tensor((4,), "int64")) -> R.Tensor((4,), "float32"):
    y = R.cumsum(x, axis=0)
    z = R.multiply(R.take(y, i, axis=0, mode="clip"), x)
    return R.astype(R.astype(z, "float16"), "float32")
""",
    )
    demo = shell.ns["demo"]
    source = demo.as_torch("odd")
    compile(source, "<as_torch odd>", "exec")
    assert "NOT MAPPED" in source and "mode='clip' is not translated" in source
    assert "step(s) need attention" in source
    assert "torch.cumsum(x, dim=0)" in source and ".to(torch.float16)" in source


def test_call_tir_text_runs_with_symbolic_sizes(shell):
    shell.cell("demo", ADD_TIR + SCALE_PYFUNC + RELAX_CALLS_BOTH)
    demo = shell.ns["demo"]
    x = torch.arange(4, dtype=torch.float32)
    assert torch.equal(
        run_source(demo.as_torch("pipeline"), "pipeline", demo, x, x), demo.pipeline(x, x)
    )


def test_an_attribute_no_rule_reads_is_flagged(shell, monkeypatch):
    monkeypatch.setitem(
        torch_source._RULES, "relax.nn.softmax", lambda op: f"F.softmax({op.args[0]})"
    )
    shell.cell(
        "demo",
        """
@R.function
def probs(x: R.Tensor((2, 3), "float32")) -> R.Tensor((2, 3), "float32"):
    return R.nn.softmax(x, axis=0)
""",
    )
    flag = "# REVIEW: `relax.nn.softmax` attributes ['axis'] are not translated"
    assert f"F.softmax(x)  {flag}" in shell.ns["demo"].as_torch("probs")
