"""Models people bring: their text parses back, TVM's importer defects are repaired at import,
and the kernels legalized from them stop on a bad index instead of reading garbage.

Real `torch.nn` models through the real `add_torch` (torch.export and TVM's importer), a real
IPython shell, real compiles; the exported file runs in a fresh Python.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
import tvm_ffi
from torch import nn
from tvm.relax.frontend.torch import from_exported_program
from tvm.script import relax as R

from tvm_pyfunc_nb import CallError
from tvm_pyfunc_nb.errors import ModelImportError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


# -- text that parses back -------------------------------------------------------------------
@R.function
def masked(x: R.Tensor((4,), "float32"), i: R.Tensor((2,), "int64")):
    # what attention masks hold: infinities and NaN in every float dtype, scalars and tensors
    lo = R.maximum(x, R.const(float("-inf"), "float32"))
    hi = R.minimum(lo, R.const(float("inf"), "float32"))
    nan = R.where(R.isnan(R.add(hi, R.const(float("nan"), "float32"))), hi, x)
    half = R.maximum(R.astype(nan, "float16"), R.const(float("-inf"), "float16"))
    wide = R.minimum(R.astype(half, "float64"), R.const(float("inf"), "float64"))
    brain = R.maximum(R.astype(wide, "bfloat16"), R.const(float("-inf"), "bfloat16"))
    mask = R.const(np.array([0, float("-inf"), 0, float("nan")], "float32"))
    kept = R.where(R.isfinite(R.add(x, mask)), R.astype(brain, "float32"), x)
    # integers exactly, at the int64 extremes
    low = R.maximum(i, R.const(INT64_MIN, "int64"))
    ints = R.minimum(low, R.const(np.array([INT64_MAX, 2**53 + 1]), "int64"))
    return (kept, ints)


X = torch.tensor([1.5, -2.0, 3.25, 0.5])
IDS = torch.tensor([2**53 + 1, -(2**62)])


def test_non_finite_constants_and_int64_extremes_parse_back(shell, tmp_path):
    m = shell.run("%tvmmodule m")
    m.add(masked, name="masked")
    expected = m.masked(X, IDS)
    before = m.ir_mod["masked"]
    script = m.script()
    assert 'R.const("' not in script and "metadata" not in script
    assert 'R.const(float("-inf"), "float16")' in script
    for text in (script, m.edit_text("masked")):
        shell.run(text if text.startswith("%%") else f"%%tvmmodule m\n{text}")
        assert tvm_ffi.structural_equal(m.ir_mod["masked"], before, map_free_vars=True)
        for got, want in zip(m.masked(X, IDS), expected, strict=True):
            assert torch.equal(got, want)
    assert expected[1].tolist() == [2**53 + 1, -(2**62)]
    path = tmp_path / "masked_module.py"
    m.export(str(path), example=("masked", (X, IDS)))
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "gives the numbers of the live module" in done.stdout


# -- repairs of the importer's defects -------------------------------------------------------
class LastStep(nn.Module):
    """A recurrent layer read at its last step, as sequence classifiers do."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(6, 8, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


class SamePosition(nn.Module):
    """The pattern of GPT-2's and Llama's causal mask: positions from a cumsum of bools."""

    def forward(self, ids):
        position = (ids != 0).cumsum(-1)
        return (position[:, :, None] == position[:, None, :]).float()


def test_a_take_at_a_negative_index_is_repaired_and_matches_pytorch(shell):
    torch.manual_seed(0)
    model, x = LastStep().eval(), torch.randn(2, 5, 6)
    m = shell.run("%tvmmodule m")
    notice = shell.text(m.add_torch(model, (x,)))
    assert "repaired main: lv" in notice and "R.take(" in notice and 'mode="fast"' in notice
    assert 'now mode="wrap"' in notice
    with torch.no_grad():
        torch.testing.assert_close(m.main(x), model(x), rtol=1e-5, atol=1e-5)
    assert 'mode="wrap"' in m.edit_text("main")


def test_a_cumsum_of_bools_becomes_int64_and_compiles(shell):
    ids = torch.tensor([[3, 0, 5, 7, 0, 2]])
    model = SamePosition().eval()
    m = shell.run("%tvmmodule m")
    notice = shell.text(m.add_torch(model, (ids,)))
    assert "repaired main: lv" in notice and "R.cumsum(" in notice
    assert 'now dtype="int64"' in notice
    assert torch.equal(m.main(ids), model(ids))
    # the same repair when the module comes from TVM's importer directly
    imported = from_exported_program(torch.export.export(model, (ids,)))
    assert "R.cumsum(" in shell.text(m.add(imported))
    assert torch.equal(m.main(ids)[0], model(ids))


class FiniteOnly(torch.nn.Module):
    """`torch.isfinite` decomposes into a product of two masks."""

    def forward(self, x):
        return torch.where(torch.isfinite(x), x, 0.0)


def test_a_product_of_bools_becomes_a_logical_and_and_compiles(shell):
    x = torch.tensor([1.0, float("nan"), float("inf"), -2.0, float("-inf"), 0.5] * 4)
    m = shell.run("%tvmmodule m")
    notice = shell.text(m.add_torch(FiniteOnly(), (x,)))
    assert "R.multiply(" in notice and "now R.logical_and" in notice
    assert torch.equal(m.main(x), FiniteOnly()(x))


class NanFinder(torch.nn.Module):
    def forward(self, x):
        return x != x


def test_a_float_not_equal_says_a_nan_equals_nothing_as_pytorch_does(shell):
    x, model = torch.tensor([1.0, float("nan"), float("inf"), -2.0] * 4), NanFinder()
    m = shell.run("%tvmmodule m")
    notice = shell.text(m.add_torch(model, (x,)))
    assert "R.not_equal(x, x)" in notice and "R.isnan(x)" in notice
    assert torch.equal(m.main(x), model(x))
    comparison = m.compare("main", model, x)  # the repaired binding is still the node's value
    assert comparison.passed and comparison.first_divergence is None, comparison


def test_a_negative_constant_index_out_of_range_fails_at_import(shell):
    @R.function
    def last(x: R.Tensor((2, 5), "float32")):
        return R.take(x, R.const(-6, "int64"), axis=1, mode="fast")

    m = shell.run("%tvmmodule m")
    with pytest.raises(ModelImportError) as info:
        m.add(last, name="last")
    assert "index -6 is out of range for an axis of size 5" in str(info.value)
    assert "R.take(x, " in str(info.value) and "last" not in m.functions


# -- guards on imported kernels --------------------------------------------------------------
class Lookup(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.out = nn.Linear(4, 2)

    def forward(self, ids):
        return self.out(self.embed(ids))


@pytest.mark.parametrize("bad", [10, -1])
def test_a_bad_index_into_an_imported_kernel_names_the_binding_and_its_op(shell, bad):
    torch.manual_seed(0)
    model, ids = Lookup().eval(), torch.tensor([[1, 2, 3]])
    m = shell.run("%tvmmodule m")
    m.add_torch(model, (ids,))
    with pytest.raises(CallError) as info:
        m.main(torch.tensor([[1, bad, 3]]))
    said = str(info.value)
    assert said.startswith("`main`: stopped while running lv")
    assert "= R.take(m.consts.embed_weight, lv" in said and 'mode="fast")' in said
    assert "index out of bounds in its kernel `take`" in said
    with torch.no_grad():  # and the module still works
        torch.testing.assert_close(m.main(ids), model(ids), rtol=1e-5, atol=1e-5)
