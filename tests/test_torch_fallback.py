"""Which nodes of an exported model run as PyTorch calls, and the pyfuncs that run them
(`torch_fallback`): direct tests of the logic, on graphs `torch.export` makes of small models;
the whole loop on such models (call, compare, trace, edit, export) is in test_real_models.py.
"""

from __future__ import annotations

import warnings

import torch
from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

from tvm_pyfunc_nb._core.models.torch_fallback import fallbacks

CONVERTERS = ExportedProgramImporter().convert_map


def exported(model: torch.nn.Module, *args):
    """The graph TVM's importer gets (torch 2.13's own deprecation inside torch.export aside)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return torch.export.export(model, args).run_decompositions()


class Spectrum(torch.nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x).abs() + 1


class TwoRunningMaxima(torch.nn.Module):
    def forward(self, x, y):
        return torch.cummax(x, 0).values + torch.cummax(y, 1).values


class Buckets(torch.nn.Module):
    def forward(self, x, edges):
        return torch.searchsorted(edges, x, right=True)


def test_a_value_tvm_cannot_hold_takes_its_readers_into_the_pyfunc():
    found = fallbacks(exported(Spectrum(), torch.randn(2, 8)), CONVERTERS, "main", "Spectrum")
    (region,) = found.regions
    assert [n.name for n in region.nodes] == ["_fft_r2c", "abs_1"]  # complex, then real again
    assert [n.name for n in region.inputs] == ["x"]
    assert [n.name for n in region.outputs] == ["abs_1"]  # the `+ 1` stays TVM's
    assert found.sources == {
        "main_fft_r2c": (
            "@I.pyfunc\n"
            "def main_fft_r2c(self, x):\n"
            '    """`main`\'s aten._fft_r2c.default (and what reads its value, which TVM cannot '
            'hold: aten.abs.default), run by PyTorch: TVM\'s importer cannot translate it."""\n'
            "    _fft_r2c = torch.ops.aten._fft_r2c.default(x, [1], 0, True)\n"
            "    abs_1 = torch.ops.aten.abs.default(_fft_r2c)\n"
            "    return abs_1\n"
        )
    }


def test_each_call_of_an_op_gets_a_pyfunc_and_the_notice_counts_them():
    graph = exported(TwoRunningMaxima(), torch.randn(3, 4), torch.randn(3, 4))
    found = fallbacks(graph, CONVERTERS, "main", "TwoRunningMaxima")
    assert list(found.sources) == ["main_cummax", "main_cummax_1"]
    assert found.notices("main") == [
        "main runs an op TVM's importer cannot translate as PyTorch calls: "
        "aten.cummax.default ×2 (pyfunc main_cummax, main_cummax_1)"
    ]
    # a tuple-valued op returns its items, flat
    assert "    return cummax[0], cummax[1]\n" in found.sources["main_cummax"]


def test_the_call_keeps_the_ops_arguments_and_runs_as_written():
    edges, x = torch.linspace(-1, 1, 5), torch.randn(2, 3)
    found = fallbacks(exported(Buckets(), x, edges), CONVERTERS, "main", "Buckets")
    text = found.sources["main_searchsorted"]
    assert "torch.ops.aten.searchsorted.Tensor(edges, x, right=True)" in text
    scope: dict = {"I": type("I", (), {"pyfunc": staticmethod(lambda f: f)}), "torch": torch}
    exec(text, scope)
    assert torch.equal(scope["main_searchsorted"](None, edges, x), Buckets()(x, edges))


def test_a_model_tvm_can_translate_needs_no_pyfunc():
    class Plain(torch.nn.Module):
        def forward(self, x):
            return x.relu()

    assert fallbacks(exported(Plain(), torch.randn(2)), CONVERTERS, "main", "Plain").regions == []


class IndexedRows(torch.nn.Module):
    """`x[i] = v` on a copy: an `index_put` of whole rows, which TVM's converter refuses
    ("IndexPut requires the number of index tensors (1) to match the data tensor dimensions")."""

    def forward(self, x, i, v):
        out = x * 1
        out[i] = v
        return out


class Scaled(torch.nn.Module):
    """`selu` (an `elu` with scales, which TVM drops) and an `add` with alpha (which it drops)."""

    def forward(self, x, y):
        return torch.selu(x) + torch.add(x, y, alpha=3)


def test_a_node_tvms_converter_fails_on_runs_as_a_pytorch_call(shell):
    x, i, v = torch.randn(6, 4), torch.tensor([4, 1]), torch.randn(2, 4)
    m = shell.run("%tvmmodule m")
    notice = shell.text(m.add_torch(IndexedRows(), (x, i, v)))
    assert "main runs an op TVM's importer fails on as PyTorch calls: aten.index_put.default" in (
        notice
    )
    assert "IndexPut requires" in notice
    assert torch.equal(m.main(x, i, v), IndexedRows()(x, i, v))


def test_ops_tvm_translates_wrong_run_as_pytorch_calls_and_the_notice_says_why(shell):
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    m = shell.run("%tvmmodule m")
    notice = shell.text(m.add_torch(Scaled(), (x, y)))
    assert "main runs 2 ops TVM's importer translates wrong as PyTorch calls:" in notice
    assert "aten.elu.default ×1 (pyfunc main_elu: it drops elu's scale and input_scale" in notice
    assert "aten.add.Tensor ×1 (pyfunc main_add: it drops alpha=3)" in notice
    torch.testing.assert_close(m.main(x, y), Scaled()(x, y), rtol=1e-6, atol=1e-6)
    assert "TVM's importer translates it wrong (it drops alpha=3)." in m.script()
