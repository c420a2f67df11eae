"""Models people bring: failures that keep their reason, a `compare` to trust, `time` against a
model, dynamic sequence lengths.

Real tiny models (Hugging Face `transformers` from configs with random weights, no downloads;
small `torch.nn` modules), a real IPython shell, real TVM compiles.
"""

from __future__ import annotations

import inspect

import pytest
import torch
import transformers
from cells import PAIR

from tvm_pyfunc_nb._core.inspect.comparing import WITHIN_ROUNDING, Comparison, difference
from tvm_pyfunc_nb._core.inspect.tracing import summary
from tvm_pyfunc_nb._views.render import summarize
from tvm_pyfunc_nb.errors import CompileError, ModelImportError

MAX_MESSAGE_LINES = 12


class Branchy(torch.nn.Module):
    def forward(self, y):
        if y.sum() > 0:
            return y * 2
        return y - 1


class SizedByData(torch.nn.Module):
    def forward(self, y):
        return torch.zeros(int(y.sum()))


class MaskedByData(torch.nn.Module):
    def forward(self, y):
        return y[y > 0] * 2


class Neighbours(torch.nn.Module):
    """Slices of a dynamic length: `x[:, 1:]` and `x[:, :-1]`."""

    def forward(self, x):
        return x[:, 1:] + x[:, :-1]


class Interleaved(torch.nn.Module):
    """Even and odd columns: TVM cannot tell that both have the same dynamic length."""

    def forward(self, x):
        return x[:, ::2] + x[:, 1::2]


def module(shell, name: str = "m"):
    return shell.run(f"%tvmmodule {name}")


def line_of(cls: type, code: str) -> str:
    """`file:line: code` of `code` in `cls`'s source, as the error should show it."""
    lines, first = inspect.getsourcelines(cls)
    (at,) = [first + i for i, line in enumerate(lines) if line.strip() == code]
    return f"{inspect.getsourcefile(cls)}:{at}: {code}"


def bert_config() -> transformers.BertConfig:
    return transformers.BertConfig(
        num_hidden_layers=1,
        hidden_size=32,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=100,
        max_position_embeddings=64,
    )


# -- errors that keep their reason -----------------------------------------------------------
@pytest.mark.parametrize(
    ("model", "code"),
    [(Branchy, "if y.sum() > 0:"), (SizedByData, "return torch.zeros(int(y.sum()))")],
)
def test_a_model_torch_export_refuses_gives_pytorchs_reason_and_the_users_line(
    shell, capsys, model, code
):
    m = module(shell)
    with pytest.raises(ModelImportError) as info:
        m.add_torch(model(), (torch.randn(3),))
    message = str(info.value)
    assert message.startswith(f"torch.export could not export {model.__name__}: ")
    assert "Could not guard on data-dependent expression" in message
    assert line_of(model, code) in message
    assert "The error above occurred" not in message
    assert len(message.splitlines()) <= MAX_MESSAGE_LINES
    assert "The error above occurred" in str(info.value.__cause__)  # PyTorch's whole story
    assert "def forward(" not in capsys.readouterr().err  # nor the graph it had traced
    assert m.functions == {}


def test_a_node_tvms_importer_refuses_is_named_with_the_users_line(shell):
    m = module(shell)
    with pytest.raises(ModelImportError) as info:
        m.add_torch(MaskedByData(), (torch.randn(3),))
    message = str(info.value)
    assert "TVM's PyTorch importer could not translate MaskedByData" in message
    assert "node `index` (aten.index.Tensor)" in message
    assert line_of(MaskedByData, "return y[y > 0] * 2") in message
    assert info.value.__cause__ is not None


BOOL_EQUAL = """
@R.function
def eq(x: R.Tensor((4,), "bool"), y: R.Tensor((4,), "bool")) -> R.Tensor((4,), "bool"):
    with R.dataflow():
        lv = R.logical_not(x)
        lv1 = R.equal(lv, y)
        R.output(lv1)
    return lv1
"""


def test_a_kernel_that_does_not_compile_is_named_by_its_binding_with_tvms_reason(shell):
    shell.cell("m", BOOL_EQUAL)
    ones = torch.ones(4, dtype=torch.bool)
    with pytest.raises(CompileError) as info:
        shell.ns["m"].eq(ones, ones)
    message = str(info.value)
    assert message.startswith("`eq`, cell line 3: `lv1 = R.equal(lv, y)` (bool[4], bool[4] -> ")
    assert "does not compile for target llvm: LLVM module verification failed" in message
    assert "Invalid operand types for FCmp instruction" in message
    assert "%" not in message and "fcmp" not in message  # no line of LLVM IR
    assert "fcmp oeq i1" in str(info.value.__cause__)  # TVM's own error, for %tb


UNKNOWN_SHAPE = """
@R.function
def twice(x: R.Tensor(dtype="float32", ndim=1)) -> R.Tensor(dtype="float32", ndim=1):
    with R.dataflow():
        doubled = R.add(x, x)
        R.output(doubled)
    return doubled
"""


@pytest.mark.parametrize("pipeline", ["auto", "default"])
def test_an_op_that_cannot_be_lowered_is_named_by_its_binding_not_the_pipelines_names(
    shell, pipeline
):
    shell.cell("m", UNKNOWN_SHAPE, options=f"--pipeline {pipeline}")
    with pytest.raises(CompileError) as info:
        shell.ns["m"].twice(torch.ones(3))
    message = str(info.value)
    assert "`doubled = R.add(x, x)` (float32[shape not known, 1 dims]" in message
    assert "TVM cannot lower it while a shape is not known" in message
    assert "alloc" not in message
    if pipeline == "default":  # the VM's codegen finds it; a fusing pipeline's FoldConstant
        assert "CodeGenVM cannot emit this Relax operator directly" in message
        assert "Offending call" in str(info.value.__cause__)


# -- a compare to trust ----------------------------------------------------------------------
def test_compare_on_a_correct_resnet_finds_no_divergence_and_names_its_outputs(shell):
    torch.manual_seed(0)
    config = transformers.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic"
    )
    resnet = transformers.ResNetModel(config).eval()
    # float32 rounding alone once made 4 of these ops FAIL and a conv2d "diverge"
    x = torch.randn(1, 3, 64, 64)
    m = module(shell)
    m.add_torch(resnet, (x,))
    comparison = m.compare("main", resnet, x)
    assert comparison.passed and comparison.first_divergence is None
    assert comparison.output_names == ["last_hidden_state", "pooler_output"]
    assert all(c.diff.passed for c in comparison.ops if c.diff is not None)
    shown = shell.text(comparison)
    assert "FAIL" not in shown and "main matches within" in shown
    assert "output last_hidden_state" in shown and "output pooler_output" in shown


def test_the_tolerance_is_rounding_in_the_dtype_scaled_by_values_and_reduction():
    torch.manual_seed(0)
    expected = torch.randn(64, 64) * 5
    eps = torch.finfo(torch.float32).eps
    rounded = expected + expected.abs().max() * 4 * eps * torch.randn(64, 64).sign()
    assert difference(rounded, expected, 0.0, 0.0).passed  # 4 units in the last place
    off = expected * 1.001  # a real error in float32, even behind a 3x3 conv over 64 channels
    assert not difference(off, expected, 1e-5, 1e-6, reduction=576).passed
    assert difference(off.half(), expected.half(), 0.0, 0.0).passed  # but float16 rounding
    # a reduction of 576 values (a 3x3 conv over 64 channels) rounds more than an add does
    summed = expected + expected.abs().max() * 100 * eps
    assert difference(summed, expected, 0.0, 0.0, reduction=576).passed
    assert not difference(summed, expected, 0.0, 0.0).passed
    # an output allows for the rounding PyTorch's own float32 output carries (against float64),
    # which another order of the same sums changes by as much, a few times over
    chained = expected + 1e-3 * torch.randn(64, 64).sign()
    assert not difference(chained, expected, 0.0, 0.0).passed
    assert difference(chained, expected, 0.0, 0.0, carried=1e-4).passed
    assert not difference(off, expected, 0.0, 0.0, carried=1e-4).passed  # 0.001 of 20


def test_an_error_rounding_explains_shows_no_digits_and_a_real_one_does():
    """The last bits of a float32 result vary from one CPU to the next (the vector width changes
    the order of a sum): a table showing them would differ by machine, and say nothing."""
    torch.manual_seed(0)
    expected = torch.randn(64)
    eps = torch.finfo(torch.float32).eps
    rounded = expected + expected.abs().max() * 2 * eps * torch.randn(64).sign()
    ints = torch.arange(8)
    rows = Comparison(
        "m",
        "f",
        1e-5,
        1e-6,
        [
            difference(rounded, expected, 1e-5, 1e-6),
            difference(expected.clone(), expected, 1e-5, 1e-6),  # exact: no digits either
            difference(expected * 1.001, expected, 1e-2, 1e-6),  # passes, but is no rounding
            difference(expected * 1.001, expected, 1e-5, 1e-6),
            difference(ints, ints, 0.0, 0.0),  # an exact dtype: its 0 is 0 on every CPU
            # off by more than itself: how much more depends on the last bits of 1e-3
            difference(torch.tensor([1.0, 2.0]), torch.tensor([1e-3, 2.0]), 1e-5, 1e-6),
        ],
    ).output_rows()
    assert [row[1:] for row in rows[:2]] == [(WITHIN_ROUNDING, WITHIN_ROUNDING, "pass")] * 2
    assert rows[2][1] != WITHIN_ROUNDING and rows[2][3] == "pass"
    assert float(rows[3][1]) == pytest.approx(float((expected * 0.001).abs().max()), rel=1e-2)
    assert rows[3][2:] == ("0.001", "FAIL") and rows[4][1:] == ("0", "0", "pass")
    assert rows[5][1:] == ("0.999", "> 1", "FAIL")


def test_a_mean_that_is_rounding_shows_as_about_zero():
    normalized = torch.nn.functional.layer_norm(torch.randn(4, 8), (8,))
    assert summary(normalized).endswith(" / ~0")  # its last bits vary from one CPU to the next
    assert summarize("out", normalized).stats.endswith(" · mean ~0")  # a call's pane says so too
    assert summary(torch.tensor([1.0, 3.0])) == "1 / 3 / 2"
    assert summary(torch.zeros(3)) == "0 / 0 / 0"


def test_compare_matches_a_dict_by_field_and_a_tuple_by_position(shell):
    shell.cell("c", PAIR)
    c, x = shell.ns["c"], torch.tensor([1.0, 2.0, 3.0])
    by_field = c.compare("pair", lambda t: {"doubled": t + t, "squared": t * t + 1}, x)
    assert by_field.output_names == ["doubled", "squared"]
    assert [d.passed for d in by_field.outputs] == [True, False]
    assert by_field.verdict() == "pair does not match"  # outputs only: no ops were compared
    assert "outputs only" in by_field.why_not_op_by_op
    assert c.compare("pair", lambda t: [t + t, t * t], x).passed


# -- time against a model --------------------------------------------------------------------
class Recorded(torch.nn.Sequential):
    """Remembers whether autograd was off in each call."""

    def forward(self, x):
        self.inference = torch.is_inference_mode_enabled()
        return super().forward(x)


def test_time_against_a_model_names_its_class_runs_it_without_autograd_and_says_threads(shell):
    torch.manual_seed(0)
    model = Recorded(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    x = torch.randn(2, 8)
    m = module(shell)
    m.add_torch(model, (x,))
    timing = m.time("main", x, number=2, repeat=2, against=model)
    assert timing.against.what == "Recorded" and model.inference
    assert timing.against.threads == timing.function.threads >= 1
    shown = shell.text(timing)
    assert "× Recorded's speed (above 1 is faster)" in shown and "Linear" not in shown
    assert len(shown.splitlines()) <= 4
    assert all("thread" in row[-1] for row in timing.rows())


# -- dynamic shapes --------------------------------------------------------------------------
def test_a_language_model_with_a_dynamic_sequence_length_matches_by_field_at_two_lengths(shell):
    torch.manual_seed(0)
    lm = transformers.BertForMaskedLM(bert_config()).eval()
    m = module(shell)
    seq = torch.export.Dim("seq", min=2, max=32)
    m.add_torch(lm, (torch.randint(0, 100, (1, 8)),), dynamic_shapes=({1: seq},))
    for length in (5, 13):
        ids = torch.randint(0, 100, (1, length))
        comparison = m.compare("main", lm, ids)  # a MaskedLMOutput, unpacked
        assert comparison.passed and comparison.first_divergence is None, comparison
        (logits,) = comparison.outputs
        assert comparison.output_names == ["logits"] and logits.max_abs < 1e-5
        assert "output logits" in shell.text(comparison)


def test_slices_of_a_dynamic_length_run_at_two_lengths(shell):
    m = module(shell)
    length = torch.export.Dim("length", min=3, max=30)
    m.add_torch(Neighbours(), (torch.randn(2, 8),), dynamic_shapes=({1: length},))
    for size in (4, 11):
        x = torch.randn(2, size)
        torch.testing.assert_close(m.main(x), x[:, 1:] + x[:, :-1])


def test_a_dimension_that_cannot_be_dynamic_fails_at_import_naming_it(shell):
    m = module(shell)
    unbounded = {"dynamic_shapes": ({1: torch.export.Dim("seq")},)}
    with pytest.raises(ModelImportError) as info:
        m.add_torch(
            transformers.BertModel(bert_config()).eval(),
            (torch.randint(0, 100, (1, 8)),),
            **unbounded,
        )
    message = str(info.value)
    assert "torch.export could not export BertModel: Constraints violated (seq)!" in message
    assert "Suggested fixes:" in message and "seq = Dim('seq', max=64)" in message
    half = torch.export.Dim("half", min=2, max=15)
    with pytest.raises(ModelImportError) as info:
        m.add_torch(Interleaved(), (torch.randn(2, 8),), dynamic_shapes=({1: 2 * half},))
    message = str(info.value)
    assert message.startswith("Interleaved cannot be dynamic in `")
    assert "(x.shape[1]): TVM cannot tell the shape of `lv2 = R.add(lv, lv1)`" in message
    assert m.functions == {}


def test_the_module_keeps_its_own_copy_of_the_weights(shell):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    x = torch.randn(2, 4)
    shell.ns.update(model=model.eval(), x=x)
    shell.run("%tvmmodule m")
    shell.run("m.add_torch(model, (x,))")
    before = shell.eval("m.main(x)")
    with torch.no_grad():
        model[0].weight.mul_(3.0)  # the model trains on, say
    assert torch.equal(shell.eval("m.main(x)"), before)  # imported weights are the module's own
    assert not shell.eval("m.compare('main', model, x)").passed  # and compare sees the drift


class ZeroFirstColumn(torch.nn.Module):
    """`h[:, 0] = 0.0`: an in-place slice write, which torch.export makes a `select`, then a
    `copy` into it."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        h[:, 0] = 0.0
        return h * 2


def test_an_in_place_slice_write_compares_as_what_it_computes(shell):
    """It was mapped to the `select` it writes into, whose value is the column before the write:
    a false divergence of the whole column."""
    torch.manual_seed(0)
    model, x = ZeroFirstColumn().eval(), torch.randn(3, 4)
    m = module(shell)
    m.add_torch(model, (x,))
    comparison = m.compare("main", model, x)
    assert comparison.passed and comparison.first_divergence is None, repr(comparison)
    nodes = {c.node.node: c for c in comparison.ops if c.node is not None and c.node.exact}
    assert nodes["copy"].diff.max_abs == 0  # the written zeros
    assert nodes["select"].diff.passed  # the column as it was before


def test_an_example_input_that_is_a_view_imports(shell):
    """A view makes torch.export add a size without an upper bound, which said it was finite."""
    view = torch.linspace(0, 1, 10).reshape(2, 5)
    assert view._base is not None
    m = module(shell)
    m.add_torch(Neighbours(), (view,))
    assert torch.equal(m.main(view), view[:, 1:] + view[:, :-1])


class Spectrum(torch.nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x)


def test_a_model_returning_a_value_tvm_has_no_dtype_for_says_so_at_import(shell):
    m = module(shell)
    with pytest.raises(ModelImportError) as info:
        m.add_torch(Spectrum(), (torch.randn(2, 8),))
    assert str(info.value) == (
        "Spectrum cannot come in: node `_fft_r2c` (aten._fft_r2c.default) gives a complex64 "
        "value to the rest of the model, and TVM has no such dtype"
    )
    assert m.functions == {}


def test_an_op_tvm_cannot_import_runs_as_a_pytorch_call_at_any_dynamic_size(shell):
    from real_models import UNSUPPORTED

    model, (x,) = UNSUPPORTED["buckets"].build()
    m = module(shell)
    m.add_torch(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch", max=16)},))
    for rows in (2, 5):
        x = torch.randn(rows, 6)
        with torch.no_grad():
            assert torch.equal(m.main(x), model(x))


class Distinct(torch.nn.Module):
    def forward(self, x):
        return torch.unique(x) * 2


class Repeated(torch.nn.Module):
    def forward(self, x, counts):
        return torch.repeat_interleave(x, counts) * 2


def test_an_op_whose_size_depends_on_the_data_comes_in_where_tvm_has_it(shell):
    m = module(shell)
    x = torch.tensor([1.0, 2.0, 2.0, -1.0])
    m.add_torch(Distinct(), (x,))  # R.unique, its size read when it runs
    assert torch.equal(m.main(x), Distinct()(x))


def test_an_op_whose_size_depends_on_the_data_fails_at_import_where_tvm_lacks_it(shell):
    m = module(shell)
    with pytest.raises(ModelImportError) as info:
        m.add_torch(Repeated(), (torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2, 0, 1])))
    message = str(info.value)
    assert message.startswith(
        "Repeated cannot come in: node `repeat_interleave` (aten.repeat_interleave.Tensor)"
    )
    assert "(it depends on the data)" in message
