"""A user draws a model's graph with a compare overlay, in JupyterLab and in Notebook 7.

The notebook imports a small model whose first ReLU TVM computes as a SiLU (a
`custom_convert_map`), so `compare` names that binding; `net.graph("main", comparison)` must
show, offline: the picture with its nine `nn.Module` groups, that node in red with a thick
border, a group that folds on a click on its label (into one box that keeps the red) and
unfolds on a click on that box, and a node's details (TVMScript and source lines) on a click.
Screenshots go to `build/screenshots/graph*.png`.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
import pytest
from playwright.sync_api import Page, expect

from browser.quickstart import expect_no_broken_widget, run_all, wait_for_notebook7_kernel

SHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"
NOTEBOOK = "graph.ipynb"
CELLS = [
    """%load_ext tvm_pyfunc_nb
import torch
from tvm import relax
from graph_models import Net

def silu(node, importer):  # TVM computes the model's ReLUs as SiLUs: compare finds the first
    return importer.block_builder.emit(relax.op.nn.silu(importer.env[node.args[0]]))

torch.manual_seed(0)
model, x = Net().eval(), torch.randn(3, 4)
%tvmmodule net
net.add_torch(model, (x,), custom_convert_map={"relu.default": silu});""",
    'net.graph("main", net.compare("main", model, x))',
]
RED = "#f8d0d0"  # graph_view's fill of a node that fails


def write_notebook(root: Path) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(__file__).parents[1] / "graph_models.py", root / "graph_models.py")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    nbformat.write(notebook, root / NOTEBOOK)


def draw_and_use_the_graph(page: Page, shot: str) -> None:
    """Run All, then check the picture, the overlay, a fold and a node's details (a screenshot
    of the page if the picture does not come)."""
    run_all(page)
    graph = page.locator(".jp-OutputArea-output .tvm-pyfunc-nb-graph")
    try:
        expect(graph.locator("svg g.cluster")).to_have_count(9, timeout=120_000)
    except AssertionError:
        page.screenshot(path=str(SHOTS / f"failed-{shot}"), full_page=True)
        raise
    expect(graph.locator(".tvm-graph-title")).to_contain_text("first divergence")

    marked = graph.locator("g.node", has_text="= nn.silu").first  # the one compare names
    expect(marked.locator("path, polygon").first).to_have_attribute("fill", RED)
    expect(marked.locator("path, polygon").first).to_have_attribute("stroke-width", "3")
    second = graph.locator("g.node", has_text="= nn.silu").nth(1)  # a SiLU for a ReLU too
    expect(second.locator("path, polygon").first).to_have_attribute("fill", RED)
    expect(second.locator("path, polygon").first).not_to_have_attribute("stroke-width", "3")
    healthy = graph.locator("g.node", has_text="= add").last  # after both: no error of its own
    expect(healthy.locator("path, polygon").first).not_to_have_attribute("fill", RED)

    graph.locator("g.cluster", has_text="▾ 0 (Block)").locator("text").click()
    folded = graph.locator("g.node", has_text="▸ 0 (Block)")
    expect(folded).to_be_visible()
    expect(graph.locator("svg g.cluster")).to_have_count(6)  # it and its fc and act
    expect(folded.locator("polygon").first).to_have_attribute("fill", RED)  # its worst member
    graph.screenshot(path=str(SHOTS / shot))
    folded.click()
    expect(graph.locator("svg g.cluster")).to_have_count(9)

    graph.locator("g.node", has_text="= nn.silu").first.click()
    details = graph.locator(".tvm-graph-details")
    expect(details).to_contain_text("TVMScript")
    expect(details).to_contain_text(re.compile(r"blocks\.0\.act \(ReLU\), graph_models\.py:\d+"))
    expect_no_broken_widget(page)


def open_notebook(server, browser) -> Page:
    """A new page on the graph notebook of `server` (JupyterLab or Notebook 7)."""
    write_notebook(server.root)
    page = browser.new_page()
    page.set_default_timeout(60_000)
    page.goto(server.notebook_url(NOTEBOOK, "graph"))
    return page


@pytest.mark.browser
def test_the_graph_folds_and_shows_the_compare_in_jupyterlab(lab, browser):
    page = open_notebook(lab, browser)
    expect(page.get_by_text("Python 3 (ipykernel) | Idle", exact=True)).to_be_visible()
    draw_and_use_the_graph(page, "graph.png")


@pytest.mark.browser
def test_the_graph_folds_and_shows_the_compare_in_notebook_7(notebook7, browser):
    page = open_notebook(notebook7, browser)
    wait_for_notebook7_kernel(page)
    draw_and_use_the_graph(page, "graph-notebook7.png")
