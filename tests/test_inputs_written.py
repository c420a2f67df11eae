"""Models that write into their inputs, and models brought as a saved `ExportedProgram`.

- A model whose forward does `x.add_(1.0)` or `x[:, 0] = 0` changes the caller's tensor in
  PyTorch; imported, `NAME.main(x)` does the same (torch.export's `user_inputs_to_mutate`).
- `compare`, `trace`, `time`, `profile` and `bisect` give each run its own copy of every
  input: a first run that writes into an input never changes what the next one reads, nor the
  caller's tensor (issue 41: `compare` called `leaky_relu_` wrong after its reference run had
  changed the input).
- `add_torch` takes what `torch.export.load("model.pt2")` gives, and `compare` goes op by op
  against it.
"""

from __future__ import annotations

import pytest
import torch

from tvm_pyfunc_nb._core.models.input_writes import COPY_INTO
from tvm_pyfunc_nb.errors import CallError


class AddsOne(torch.nn.Module):
    """`x.add_(1.0)`, then a linear layer of the written `x`."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        x.add_(1.0)
        return self.fc(x)


class ZeroesAColumn(torch.nn.Module):
    def forward(self, x):
        x[:, 0] = 0.0
        return x * 2


class InPlaceOp(torch.nn.Module):
    """One in-place op on the first input, as issue 41's models."""

    def __init__(self, op):
        super().__init__()
        self.op = op

    def forward(self, x, y):
        return self.op(x, y)


IN_PLACE = {
    "leaky_relu_": lambda x, y: torch.ops.aten.leaky_relu_(x, 0.02) + y,
    "hardswish_": lambda x, y: torch.ops.aten.hardswish_(x) * y,
    "add_": lambda x, y: x.add_(y),
    "mul_": lambda x, y: x.mul_(y),
}


def pytorch(model, *args):
    """What PyTorch returns for `args`, and the inputs as it leaves them (copies are run)."""
    args = tuple(a.clone() for a in args)
    with torch.no_grad():
        return model(*args), args


def imported(shell, cls: type) -> tuple:
    """Module `m` with `cls` imported as `main`, the model, and an input for it."""
    torch.manual_seed(0)
    model, x = cls().eval(), torch.randn(2, 4)
    m = shell.run("%tvmmodule m")
    m.add_torch(model, (x.clone(),))
    return m, model, x


@pytest.mark.parametrize("cls", [AddsOne, ZeroesAColumn])
def test_a_call_writes_into_the_callers_tensor_as_pytorch_does(shell, cls):
    m, model, x = imported(shell, cls)
    expected, (written,) = pytorch(model, x)
    mine = x.clone()
    torch.testing.assert_close(m.main(mine), expected)
    assert not torch.equal(written, x) and torch.equal(mine, written)
    # the write is in the function itself: its text says so and runs as a cell
    text = m.edit_text("main")
    assert f'R.call_packed("{COPY_INTO}", x_written, x' in text
    shell.run(text, cell_id="edited")
    again = x.clone()
    m.main(again)
    assert torch.equal(again, written)
    # a view (a column of a wider tensor) goes in as a copy, and is written back all the same
    wide = torch.zeros(2, 8)
    wide[:, ::2] = x
    m.main(wide[:, ::2])
    assert torch.equal(wide[:, ::2], written) and torch.equal(wide[:, 1::2], torch.zeros(2, 4))


def test_compare_trace_time_and_profile_leave_the_callers_tensors_be(shell):
    m, model, x = imported(shell, AddsOne)
    before = x.clone()
    comparison = m.compare("main", model, x)
    assert comparison.passed and comparison.first_divergence is None, repr(comparison)
    (name, written), *_ = comparison.written
    assert name == "x" and written.passed  # the input as each side left it
    assert "input x, written" in shell.text(comparison)
    assert m.compare("main", model, x, by="kernel").passed
    traced = m.trace("main", x)
    torch.testing.assert_close(traced.output, pytorch(model, x)[0])
    m.time("main", x, number=2, repeat=2, against=model)
    m.profile("main", x, number=2, repeat=2)
    assert torch.equal(x, before)


def test_compare_sees_an_input_the_function_leaves_unwritten(shell):
    """The function was edited to drop its write: its outputs are right, its input is not."""
    m, model, x = imported(shell, AddsOne)
    text = m.edit_text("main")
    unwritten = "\n".join(line for line in text.splitlines() if COPY_INTO not in line)
    shell.run(unwritten, cell_id="unwritten")
    comparison = m.compare("main", model, x)
    assert not comparison.passed and [d.passed for d in comparison.outputs] == [True]
    ((name, written),) = comparison.written
    assert name == "x" and not written.passed
    assert comparison.verdict() == "main does not match; no op diverges alone"


@pytest.mark.parametrize("op", IN_PLACE)
def test_compare_of_a_model_whose_first_op_works_in_place_agrees_with_the_numbers(shell, op):
    """Issue 41: `main` gave PyTorch's numbers, and `compare` said "main does not match" (max
    rel 0.98): its two runs shared an input the first one changed."""
    torch.manual_seed(0)
    model = InPlaceOp(IN_PLACE[op]).eval()
    x, y = torch.randn(3, 5), torch.rand(3, 5) + 0.5
    before = x.clone()
    m = shell.run("%tvmmodule m")
    m.add_torch(model, (x.clone(), y))
    expected, (written, _) = pytorch(model, x, y)
    mine = x.clone()
    torch.testing.assert_close(m.main(mine, y), expected)
    torch.testing.assert_close(mine, written)
    for by in ("binding", "kernel"):
        comparison = m.compare("main", model, x, y, by=by)
        assert comparison.passed and comparison.first_divergence is None, repr(comparison)
    trace = m.trace("main", x, y)
    torch.testing.assert_close(trace.output, expected)
    assert torch.equal(x, before)


def test_bisect_runs_its_reference_on_copies(shell):
    m, _, x = imported(shell, AddsOne)
    before = x.clone()
    found = m.bisect("main", x)
    assert found.outcome == "same", found.verdict()
    assert torch.equal(x, before)


def test_add_torch_takes_a_saved_exported_program_and_compare_goes_op_by_op(shell, tmp_path):
    torch.manual_seed(0)
    model, x = AddsOne().eval(), torch.randn(2, 4)
    path = tmp_path / "model.pt2"
    torch.export.save(torch.export.export(model, (x.clone(),)), path)
    program = torch.export.load(path)
    m = shell.run("%tvmmodule m")
    result = m.add_torch(program)
    assert "m.add_torch(ExportedProgram) defines main" in shell.text(result)
    expected, (written,) = pytorch(program.module(), x)
    mine = x.clone()
    torch.testing.assert_close(m.main(mine), expected)
    assert torch.equal(mine, written)
    comparison = m.compare("main", program, x)
    assert comparison.ops is not None and comparison.passed, repr(comparison)
    assert comparison.first_divergence is None
    assert m.compare("main", program, x, by="kernel").reference_of_bindings == "PyTorch"
    with pytest.raises(CallError, match="keeps the dynamic shapes it was exported with"):
        m.add_torch(program, dynamic_shapes=({0: torch.export.Dim("b")},))
    with pytest.raises(CallError, match="needs example arguments"):
        m.add_torch(model)
    with pytest.raises(CallError, match=r"torch.nn.Module or a torch.export.ExportedProgram"):
        m.add_torch(lambda v: v, (x,))
