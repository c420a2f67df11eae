"""`NAME.graph`: a real `add_torch` of a small model, its graph model, overlays and picture.

The model (nodes, edges, groups, marks) is checked against the function itself, `kernels`,
`compare`, `profile` and `trace`; the picture (Graphviz in the kernel) without a browser: its
bytes, its folds, and what a cell shows. tests/browser/test_graph.py draws it in JupyterLab
and Notebook 7.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys

import pytest
import torch
from graph_models import Block, Net, Root

from tvm_pyfunc_nb._core.inspect.graph import INPUT, KERNEL, Graph
from tvm_pyfunc_nb._core.inspect.graph_marks import FAIL, NONFINITE, NOT_COMPARED, PASS, TIME
from tvm_pyfunc_nb._core.inspect.tracing import summary
from tvm_pyfunc_nb._views import graph_view, graphviz_engine
from tvm_pyfunc_nb._views.graph_widget import GraphWidget
from tvm_pyfunc_nb.errors import CallError
from tvm_pyfunc_nb.testing import parts_of

BLOCK_LINE = inspect.getsourcelines(Block.forward)[1] + 1


@pytest.fixture
def net(shell):
    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(3, 4)
    live = shell.run("%tvmmodule net")
    live.add_torch(model, (x,))
    return live, model, x


def edited(shell, live, block: int) -> str:
    """Make the ReLU of `blocks.<block>` a SiLU in a cell; its binding."""
    origin = parts_of(live).torch_origins["main"]
    relu = next(
        b
        for b, n in origin.bindings.items()
        if n.site is not None and n.site.path == f"blocks.{block}.act"
    )
    text, changed = re.subn(
        rf"(\b{relu}: .*? = )R\.nn\.relu\(", r"\1R.nn.silu(", live.edit_text("main")
    )
    assert changed == 1
    shell.run(text, cell_id="edit-net")
    return relu


def test_nodes_edges_and_groups_are_the_functions_bindings_and_the_models_modules(net):
    live, _, _ = net
    graph = live.graph("main")
    func = live.entry("main").func
    bindings = [b.var.name for block in func.body.blocks for b in block.bindings]
    assert [n.key for n in graph.nodes] == ["x", *bindings]
    assert graph.nodes[0].kind == INPUT and graph.nodes[0].shape == "float32[3, 4]"
    # every binding reads what its value names: the chain from x to the output is whole
    assert {b for _, b in graph.edges} <= set(bindings) and ("x", bindings[1]) in graph.edges
    groups = graph.groups
    assert {p: (g.module, g.parent) for p, g in groups.items() if p.startswith("blocks.1")} == {
        "blocks.1": ("Block", "blocks"),
        "blocks.1.fc": ("Linear", "blocks.1"),
        "blocks.1.act": ("ReLU", "blocks.1"),
    }
    assert groups["blocks"].label == "blocks (Sequential)" and groups["blocks.1.fc"].label == (
        "fc (Linear)"
    )
    # a node says its binding, op, TVMScript line (as edit_text numbers it) and source line
    lines = live.edit_text("main").splitlines()
    relu = next(n for n in graph.nodes if n.group == "blocks.0.act")
    ((number, text),) = relu.script
    assert lines[number - 1].strip() == text and text.startswith(f"{relu.key}: ")
    assert relu.op == "nn.relu" and relu.shape == "float32[3, 8]"
    assert relu.sources == (
        f"blocks.0.act (ReLU), graph_models.py:{BLOCK_LINE}: return x + self.act(self.fc(x))",
    )
    assert repr(graph) == (
        f"graph of main: {len(bindings)} bindings in 9 groups\n"
        "groups: inp (Linear), blocks (Sequential), out (Linear)"
    )


def test_a_compare_overlay_marks_the_first_divergence_and_its_groups_stay_open(shell, net):
    live, model, x = net
    relu = edited(shell, live, block=1)
    comparison = live.compare("main", model, x)
    assert comparison.first_divergence.binding == relu
    graph = live.graph("main", comparison)
    focus = graph.focus
    assert focus.key == relu and focus.mark.level == FAIL and focus.mark.first
    assert focus.mark.text.startswith("FAIL ")
    levels = {n.key: n.mark.level for n in graph.nodes if n.mark is not None}
    assert set(levels.values()) <= {PASS, FAIL, NOT_COMPARED} and PASS in levels.values()
    # a pass says no digits: their last bits differ from CPU to CPU, and the picture is saved
    passes = {n.mark.text for n in graph.nodes if n.mark is not None and n.mark.level == PASS}
    assert passes == {"≤ rounding"}  # each op runs on PyTorch's inputs: no error is inherited
    assert f"overlay: compare: {comparison.verdict()}; marked: {relu} = nn.silu" in repr(graph)
    # folded to a few boxes, the groups around the divergence open, the others folded
    folded = graph_view.initial_folds(graph, most=5)
    assert "blocks.0" in folded and not {"blocks", "blocks.1", "blocks.1.act"} & folded
    # a folded group shows the worst of its members: the divergence inside `blocks`
    assert graph.worst(graph.members("blocks")) == focus.mark
    dot = graph_view.dot(graph, {"blocks"})
    (line,) = [row for row in dot.splitlines() if "▸ blocks (Sequential)" in row]
    assert 'fillcolor="#f8d0d0"' in line and "penwidth=3" in line


def test_by_kernel_the_nodes_are_the_launches_kernels_lists(shell, net):
    live, model, x = net
    graph = live.graph("main", by="kernel")
    launches = [n for n in graph.nodes if n.kind == KERNEL]
    assert {n.op for n in launches} == set(live.kernels("main"))
    sites = parts_of(live).compiler.linked_for(parts_of(live).state, "main").sites.of("main")
    assert sorted(n.bindings for n in launches) == sorted(s for c in sites.values() for s in c)
    # edges join launches (and the input), through the bindings no launch computes
    keys = {n.key for n in launches}
    assert all(a in keys | {"x"} and b in keys for a, b in graph.edges)
    assert any(a == "x" for a, _ in graph.edges) and launches[-1].key in dict(graph.edges).values()

    relu = edited(shell, live, block=0)
    by_kernel = live.compare("main", model, x, by="kernel")
    graph = live.graph("main", by_kernel, by="kernel")
    assert relu in graph.focus.bindings and graph.focus.op == by_kernel.first_divergence.kernel
    # the same kernel compare on the graph by binding marks every binding of that launch
    by_binding = live.graph("main", by_kernel)
    assert by_binding.focus.key in by_kernel.first_divergence.bindings


def test_a_profile_overlay_gives_each_launch_its_time(net):
    live, _, x = net
    profile = live.profile("main", x, number=1, repeat=1)
    for by in ("binding", "kernel"):
        graph = live.graph("main", profile, by=by)
        timed = [n for n in graph.nodes if n.mark is not None]
        assert timed and all(n.mark.level == TIME and 0 <= n.mark.heat <= 1 for n in timed)
        assert all(n.mark.text.endswith("%") for n in timed)
        assert graph.verdict == profile.summary()
    dot = graph_view.dot(live.graph("main", profile, by="kernel"), set())
    assert '"#ff9800"' in dot  # the slowest launch is the hottest colour


def test_a_trace_overlay_shows_values_and_where_nan_starts(shell):
    torch.manual_seed(0)
    model, x = Root().eval(), torch.randn(2, 4)
    live = shell.run("%tvmmodule root")
    live.add_torch(model, (x,))
    trace = live.trace("main", x, stop_at="nonfinite")
    graph = live.graph("main", trace)
    assert graph.focus.key == trace.stopped.binding and graph.focus.op == "sqrt"
    assert graph.focus.mark.level == NONFINITE and "nan" in graph.focus.mark.text
    assert graph.focus.values == summary(trace[trace.stopped.binding])
    whole = live.graph("main", live.trace("main", x), by="kernel")
    assert any(n.mark is not None and n.mark.level == NONFINITE for n in whole.nodes)


def test_what_cannot_be_drawn_is_the_packages_error_and_the_module_keeps_working(shell, net):
    live, model, x = net
    shell.cell("net", '@T.prim_func\ndef add_one(A: T.Buffer((4,), "float32")):\n    T.evaluate(0)')
    with pytest.raises(CallError, match="graph"):
        live.graph("add_one")
    with pytest.raises(CallError, match="no_such"):
        live.graph("no_such")
    with pytest.raises(CallError, match="by must be one of 'binding', 'kernel'"):
        live.graph("main", by="op")
    with pytest.raises(CallError, match="overlay= takes what compare, profile or trace"):
        live.graph("main", live.time("main", x, number=1, repeat=1))
    outputs_only = live.compare("main", lambda t: model(t), x)
    with pytest.raises(CallError, match="went output by output only"):
        live.graph("main", outputs_only)
    other = shell.run("%tvmmodule other")
    other.add_torch(model, (x,))
    with pytest.raises(CallError, match=r"is a trace of `other\.main`, not of `net\.main`"):
        live.graph("main", other.trace("main", x))
    old = live.trace("main", x)
    live.add_torch(Root().eval(), (x,))  # `main` is another function now
    with pytest.raises(CallError, match=r"no longer has .*run trace again"):
        live.graph("main", old)
    assert live.main(x).shape == (3, 4)


def test_the_picture_is_the_same_bytes_each_time_and_a_fold_is_one_box(net):
    live, model, x = net
    graph = live.graph("main", live.compare("main", model, x))
    ids = graph_view.group_ids(graph)
    svg = graph_view.picture(graph, set())
    assert svg == graph_view.picture(graph, set())
    assert svg.count('class="cluster"') == len(graph.groups)
    assert f'<g id="{ids["blocks.1.fc"]}" class="cluster">' in svg
    folded = graph_view.picture(graph, {"blocks"})
    assert folded.count('class="cluster"') == 2 and "▸ blocks (Sequential)" in folded
    assert f'<g id="{ids["blocks"]}" class="node">' in folded
    # nothing in it of this machine: no temporary paths, no ids but the graph's own
    assert "/tmp" not in svg and not re.search(r'id="(?!graph"|graph_edge\d|[ng]\d|a_[ng]\d)', svg)
    assert graphviz_engine.version().startswith("16.")


def test_a_graph_as_a_cells_result_is_the_widget_and_its_picture(shell, net):
    _, model, x = net
    shell.ns["x"], shell.ns["model"] = x, model
    result = shell.run('net.graph("main", net.compare("main", model, x))')
    assert isinstance(result, Graph)
    data, _ = shell.ip.display_formatter.format(result)
    assert {"application/vnd.jupyter.widget-view+json", "image/svg+xml"} <= set(data)
    assert data["text/plain"] == repr(result)
    assert data["image/svg+xml"].startswith("<?xml")

    widget = GraphWidget(result)
    first = result.nodes[1]
    ((number, text),) = first.script
    rows = widget.details[graph_view.node_ids(result)[first.key]]
    assert ["TVMScript", f"line {number}: {text[:60]}"] in [[k, v[:68]] for k, v in rows]
    blocks = graph_view.group_ids(result)["blocks"]
    widget.fold(blocks)
    assert widget.folded == [blocks] and "▸ blocks (Sequential)" in widget.svg
    widget.unfold(blocks)
    assert widget.folded == [] and "▾ blocks (Sequential)" in widget.svg
    widget.close()


def test_the_engine_draws_where_an_asyncio_loop_runs_and_lets_the_interpreter_exit():
    """A Jupyter kernel runs cells on an asyncio loop: the engine must not wait on it."""
    code = (
        "import asyncio\n"
        "from tvm_pyfunc_nb._views import graphviz_engine\n"
        "async def cell():\n"
        "    return graphviz_engine.svg('digraph { a -> b }')\n"
        "print(asyncio.run(cell()).count('class=\"node\"'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "2\n"), done.stderr


def test_an_nn_sequentials_weights_are_names_python_reads():
    """`0.weight` of an `nn.Sequential` was the constant `consts.0_weight`: the graph, `edit`
    and every view that reads the function's text back failed with a SyntaxError."""
    from tvm_pyfunc_nb import LiveModule

    live = LiveModule("sequential")
    live.add_torch(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()), (torch.ones(2, 4),))
    assert "consts.p0_weight" in live.script()
    assert len(live.graph("main").nodes) > 1
