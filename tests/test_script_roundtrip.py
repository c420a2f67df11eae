"""`NAME.script()` of a module built from several cells parses back, through the magic, to an equal
module.
"""

from __future__ import annotations

import importlib

import torch
import tvm_ffi
from cells import ADD_TIR, RELAX_CALLS_BOTH
from tvm import relax

NESTED_PYFUNC = '''
@I.pyfunc
def scale(self, x):
    """Scale by 10.

        An indented docstring line, <b>kept</b> as typed.
    """
    out = x
    for _ in range(2):
        if out.sum() > 1e9:
            out = out / 2
        else:
            continue
    return out * 10
'''

MORE = """
@T.prim_func(private=True)
def shifted(a: T.handle, c: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n,), "float32")
    C = T.match_buffer(c, (n,), "float32")
    for i in range(n):
        if i > 0:
            C[i] = A[i - 1]
        else:
            C[i] = T.float32(0)

@R.function
def two_out(
    x: R.Tensor(("n",), "float32")
) -> R.Tuple(R.Tensor(("n",), "float32"), R.Tensor(("n",), "float32")):
    n = T.int64()
    cls = demo
    s = R.call_tir(cls.shifted, (x,), out_ty=R.Tensor((n,), "float32"))
    both = R.call_py_func(
        "pair", x, s, out_ty=[R.Tensor((n,), "float32"), R.Tensor((n,), "float32")]
    )
    return both

@I.pyfunc
def pair(self, a, b):
    return a + b, a - b
"""


def build(shell):
    shell.cell("demo", ADD_TIR)
    shell.cell("demo", NESTED_PYFUNC)
    shell.cell("demo", RELAX_CALLS_BOTH)
    shell.cell("demo", MORE)
    return shell.ns["demo"]


def assert_same_module(a, b):
    assert a.functions == b.functions
    for name, kind in a.functions.items():
        if kind == "pyfunc":
            assert a.entry(name).source.source == b.entry(name).source.source, name
        else:
            assert tvm_ffi.structural_equal(
                a.entry(name).func, b.entry(name).func, map_free_vars=True
            ), name


def test_script_parses_back_through_the_magic(shell):
    demo = build(shell)
    script = demo.script()
    assert script.count("def scale(") == 1
    assert "        An indented docstring line, <b>kept</b> as typed." in script
    shell.cell("copy", script)
    copy = shell.ns["copy"]
    assert_same_module(demo, copy)
    x = torch.arange(4, dtype=torch.float32)
    assert torch.equal(copy.pipeline(x, x), demo.pipeline(x, x))
    for got, want in zip(copy.two_out(x), demo.two_out(x), strict=False):
        assert torch.equal(got, want)
    assert copy.script() == script.replace("class demo(", "class copy(").replace(
        "cls = demo", "cls = copy"
    )


def test_script_parses_back_through_plain_ir_module(shell, tmp_path, monkeypatch):
    demo = build(shell)
    (tmp_path / "printed_module.py").write_text(demo.script())
    monkeypatch.syspath_prepend(str(tmp_path))
    factory = importlib.import_module("printed_module").demo
    plain = factory.ir_module  # a BasePyModule class gives a factory holding the parsed IRModule
    for gv, func in demo.ir_mod.functions_items():
        other = plain[gv.name_hint]
        if isinstance(func, relax.ExternFunc):
            assert isinstance(other, relax.ExternFunc)
        else:
            assert tvm_ffi.structural_equal(func, other, map_free_vars=True), gv.name_hint
