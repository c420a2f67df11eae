"""Every row says where a binding came from in the user's PyTorch code (SPEC: "Finding the
fault"): the `nn.Module` path and the source line, from `torch.export`'s node metadata, in
`trace`, `compare` and `kernels`, kept through `edit`, and in a failed compile's error.

Small models written here, so that their lines are known; a real IPython shell, real compiles.
"""

from __future__ import annotations

import inspect
import os
import re
import warnings

import pytest
import torch
import tvm
from tvm import relax

from tvm_pyfunc_nb import CompileError, LiveModule, ScheduleWarning
from tvm_pyfunc_nb._core.build.kernel_sites import recording
from tvm_pyfunc_nb._core.models.source_sites import SourceSite, innermost_user_frame
from tvm_pyfunc_nb.testing import parts_of

HERE = os.path.basename(__file__)
pytestmark = pytest.mark.usefixtures("frozen_heap")


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        hidden = self.fc1(x)
        return self.fc2(self.act(hidden))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(Block())

    def forward(self, x):
        return self.encoder(x) * 2


class Agree(torch.nn.Module):
    """Compares two boolean tensors: TVM 0.27 cannot compile `R.equal` of bools for a CPU."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        return ((h > 0) == (x > 0)).float()


def line(cls: type, code: str) -> str:
    """`file.py:N` of the line of `cls` that holds `code`."""
    lines, first = inspect.getsourcelines(cls)
    (at,) = [first + i for i, text in enumerate(lines) if code in text]
    return f"{HERE}:{at}"


def coded(cls: type, code: str) -> str:
    """`file.py:N: code` of the line of `cls` that holds `code` (all of it): a row's where."""
    lines, _ = inspect.getsourcelines(cls)
    (text,) = [text.strip() for text in lines if code in text]
    return f"{line(cls, code)}: {text}"


@pytest.fixture
def net(shell):
    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(3, 8)
    live = shell.run("%tvmmodule net")
    live.add_torch(model, (x,))
    return live, model, x


def test_a_stack_gives_the_innermost_line_outside_torch_with_its_code():
    torch_file = os.path.join(os.path.dirname(torch.__file__), "nn", "modules", "linear.py")
    here = inspect.currentframe().f_lineno
    stack = (
        f'File "/models/modeling_bert.py", line 653, in forward\n    out = self.encoder(x)\n'
        f'File "/models/modeling_bert.py", line 312, in forward\n    q = self.query(x)\n'
        f'File "{torch_file}", line 134, in forward\n    return F.linear(input, self.weight)\n'
    )
    assert innermost_user_frame(stack) == ("/models/modeling_bert.py", 312, "q = self.query(x)")
    # a stack that does not quote the line: the file gives it
    assert innermost_user_frame(f'File "{__file__}", line {here}, in f') == (
        __file__,
        here,
        "here = inspect.currentframe().f_lineno",
    )
    assert innermost_user_frame(f'File "{torch_file}", line 1, in f') is None


def test_a_site_is_short_in_a_row_and_whole_in_a_message():
    site = SourceSite(
        "encoder.layer.0.attention.self.query", "Linear", "/m/modeling_bert.py", 312, "q = f(x)"
    )
    assert site.short() == "…layer.0.attention.self.query · modeling_bert.py:312: q = f(x)"
    assert str(site) == (
        "encoder.layer.0.attention.self.query (Linear), modeling_bert.py:312: q = f(x)"
    )
    assert SourceSite("", "Net", "/m/x.py", 3, "").short() == "Net · x.py:3"
    # a long line keeps its beginning
    long = SourceSite("fc", "Linear", "/m/x.py", 3, "h = " + " + ".join(["self.fc(x)"] * 9))
    assert long.short() == "fc · x.py:3: h = self.fc(x) + self.fc(x) + self.fc(x) + self…"
    # a notebook cell's code: never the kernel's temporary file, which says nothing to a reader
    cell = SourceSite("", "Net", "/tmp/ipykernel_23015/1146111172.py", 3, "y = f(x)")
    assert str(cell) == "Net, notebook cell, line 3: y = f(x)"


def test_trace_and_compare_rows_say_which_module_and_line_each_binding_came_from(net):
    live, model, x = net
    trace = live.trace("main", x)
    assert trace.header()[-1] == "where"
    where = {row[0]: row[-1] for row in trace.table_rows()}
    fc1 = f"encoder.0.fc1 · {coded(Block, 'hidden = self.fc1(x)')}"
    assert fc1 in where.values()
    assert f"encoder.0.act · {coded(Block, 'self.fc2(self.act(hidden))')}" in where.values()
    assert f"Net · {coded(Net, 'return self.encoder(x) * 2')}" in where.values()
    assert fc1 in repr(trace)
    assert trace.where[next(b for b, w in where.items() if w == fc1)].module == "Linear"

    comparison = live.compare("main", model, x)
    assert comparison.op_header()[-1] == "where"
    assert all(row[-1] for row in comparison.op_table_rows() if row[0] != "gv")
    # every binding passes: the result shows a count, and the full table is one call away
    assert "0 outside the tolerance; every row: .full()" in repr(comparison)
    assert fc1 not in repr(comparison) and fc1 in repr(comparison.full())


def test_an_edit_keeps_every_other_bindings_source_and_a_divergence_names_its_line(shell, net):
    live, model, x = net
    relu = next(
        b for b, n in parts_of(live).torch_origins["main"].bindings.items() if "relu" in n.op
    )
    relu_line = rf"(\b{relu}: .*? = )R\.nn\.relu\("
    text, changed = re.subn(relu_line, r"\1R.nn.silu(", live.edit_text("main"))
    assert changed == 1
    shell.run(text, cell_id="edit-net")

    trace = live.trace("main", x)
    assert len(trace.where) == len(trace) - 1  # the output tuple's binding came from no node
    comparison = live.compare("main", model, x)
    first = comparison.first_divergence
    assert first.binding == relu
    assert (
        f"at encoder.0.act (ReLU), {line(Block, 'self.fc2(self.act(hidden))')}: "
        "return self.fc2(self.act(hidden))" in comparison.verdict()
    )
    # shown: the first divergence with the rows just before and after it, and how to see all
    shown = repr(comparison)
    rows = comparison.shown_ops()
    assert comparison.ops[rows.start + 2] is first and len(rows) <= 6
    assert f"rows {rows.start + 1} to {rows.stop} below, every row: .full()" in shown
    assert len(repr(comparison.full()).splitlines()) == len(shown.splitlines()) - len(rows) + len(
        comparison.ops
    )


def test_kernels_is_a_list_of_names_shown_as_a_table_of_bindings_and_lines(shell):
    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(3, 8)
    live = shell.run("%tvmmodule fused --pipeline target")
    live.add_torch(model, (x,))
    kernels = live.kernels("main")
    assert isinstance(kernels, list) and all(isinstance(k, str) for k in kernels)
    assert kernels == list(kernels.rows()[i][0] for i in range(len(kernels)))
    text = shell.text(kernels)
    assert text.splitlines()[1].split() == ["kernel", "calls", "bindings", "where"]
    row = next(r for r in kernels.rows() if "matmul" in r[0] and "relu" in r[0])
    assert row[1] == "1" and len(row[2].split(", ")) >= 3  # matmul, add and relu: one kernel
    assert row[3].startswith(f"encoder.0.fc1 · {coded(Block, 'hidden = self.fc1(x)')}")


def test_a_failed_compile_of_an_import_names_the_binding_its_line_and_the_kernel(shell):
    model, x = Agree().eval(), torch.randn(2, 4)
    live = shell.run("%tvmmodule agree")
    live.add_torch(model, (x,))
    with pytest.raises(CompileError) as info:
        live.main(x)
    message = str(info.value)
    code = "return ((h > 0) == (x > 0)).float()"
    assert "= R.equal(" in message and "(kernel `equal`)" in message
    assert f"from Agree, {line(Agree, code)}: {code}" in message

    fused = shell.run("%tvmmodule agree_fused --pipeline target")
    fused.add_torch(model, (x,))
    with pytest.raises(CompileError) as info:
        fused.main(x)
    message = str(info.value)
    assert "kernel `fused_matmul_add_greater_greater_equal_cast`" in message
    assert f"from fc (Linear), {line(Agree, 'h = self.fc(x)')}" in message
    assert f"Agree, {line(Agree, code)}" in message


TWO_ALIKE = """
@R.function
def two(x: R.Tensor((4, 8), "float32"), w: R.Tensor((8, 8), "float32")):
    with R.dataflow():
        a = R.matmul(x, w)
        b = R.nn.relu(a)
        c = R.matmul(b, w)
        d = R.nn.relu(c)
        R.output(d)
    return d
"""


def test_two_groups_fused_into_one_kernel_each_keep_their_own_bindings():
    """FuseOps makes one function of two groups that look alike; each call site still names
    its own bindings, not the first group's."""
    live = LiveModule("alike")
    live.run_cell(TWO_ALIKE)
    mod, target = live.ir_mod, tvm.target.Target("llvm")
    with target, recording() as recorded:
        relax.get_default_pipeline(target)(mod)
    assert recorded.sites().of("two") == {"fused_matmul_relu": [("a", "b"), ("c", "d")]}
    live.close()


def test_a_kernel_the_cpu_schedule_fails_on_keeps_tvms_default_with_a_notice(shell):
    """A matmul with no columns: the written schedule finds no tile width. It compiled to an
    error before ("max() arg is an empty sequence")."""
    body = """
@R.function
def empty(x: R.Tensor((4, 8), "float32"), y: R.Tensor((8, 0), "float32")):
    with R.dataflow():
        product = R.matmul(x, y)
        R.output(product)
    return product
"""
    shell.cell("nocols", body)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shell.ns["nocols"].compile()
    (notice,) = [w for w in caught if issubclass(w.category, ScheduleWarning)]
    assert str(notice.message).startswith(
        "kernel `matmul` (binding product of `empty`) keeps TVM's default schedule"
    )
