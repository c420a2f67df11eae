"""Every call direction for every supported dtype, symbolic shapes included, zero-copy through
DLPack.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm

DTYPES = ["float32", "float16", "bfloat16", "int32", "int64", "bool"]

CELLS = """
@T.prim_func
def copy_tir(a: T.handle, c: T.handle):
    n = T.int64()
    m = T.int64()
    A = T.match_buffer(a, (n, m), "{dt}")
    C = T.match_buffer(c, (n, m), "{dt}")
    for i, j in T.grid(n, m):
        C[i, j] = A[i, j]

@I.pyfunc
def py_copy(self, x):
    return self.call_tir(self.copy_tir, [x], out_ty=R.Tensor((x.shape[0], x.shape[1]), "{dt}"))

@I.pyfunc
def py_identity(self, x):
    return x.clone()

@R.function
def relax_copy(x: R.Tensor(("n", "m"), "{dt}")) -> R.Tensor(("n", "m"), "{dt}"):
    n = T.int64()
    m = T.int64()
    cls = M
    y = R.call_tir(cls.copy_tir, (x,), out_ty=R.Tensor((n, m), "{dt}"))
    z = R.call_py_func("py_identity", y, out_ty=R.Tensor((n, m), "{dt}"))
    return z

@I.pyfunc
def py_calls_relax(self, x):
    return self.relax_copy(x)
"""


def sample(dtype: str, shape=(2, 3)) -> torch.Tensor:
    values = torch.arange(int(np.prod(shape))).reshape(shape)
    return (values % 2 == 1) if dtype == "bool" else values.to(getattr(torch, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_direction_keeps_the_dtype(shell, dtype):
    shell.cell("M", CELLS.format(dt=dtype))
    mod = shell.ns["M"]
    for shape in [(2, 3), (4, 1)]:  # symbolic n, m bound per call
        x = sample(dtype, shape)
        for fn in (mod.py_copy, mod.relax_copy, mod.py_calls_relax):
            out = fn(x)
            assert isinstance(out, torch.Tensor), fn
            assert out.dtype == x.dtype and torch.equal(out, x), (fn, out)
        direct = torch.empty_like(x)
        mod.copy_tir(x, direct)
        assert torch.equal(direct, x)


def test_tensors_pass_zero_copy(shell):
    shell.cell("M", CELLS.format(dt="float32"))
    mod = shell.ns["M"]
    x = sample("float32")
    out = torch.zeros_like(x)
    mod.copy_tir(x, out)  # the PrimFunc wrote into the caller's own torch memory
    assert torch.equal(out, x)
    shell.cell(
        "M",
        """
@I.pyfunc
def same(self, x):
    return x
""",
    )
    assert mod.same(x) is x


def test_numpy_and_tvm_inputs_are_accepted(shell):
    shell.cell("M", CELLS.format(dt="float32"))
    mod = shell.ns["M"]
    x = sample("float32")
    assert torch.equal(mod.relax_copy(x.numpy()), x)
    assert torch.equal(mod.relax_copy(tvm.runtime.tensor(x.numpy())), x)
