"""The tutorials as saved: run top to bottom in one fresh kernel, with what a reader should see.

nbval (`make test`) runs every tutorial again and compares each output with
the saved one, but it passes a cell that was never run, so a tutorial saved
without outputs would go unnoticed. These checks read the saved files: every
code cell ran, in order, in one kernel (`make notebooks` saves them so);
errors appear exactly in the cells tagged `raises-exception`; and the widget
views were saved with their state, so they render on nbviewer and in
JupyterLab without running anything.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
PACKAGE_ERRORS = {
    "CellSyntaxError",
    "TVMScriptError",
    "IllFormedModuleError",
    "CompileError",
    "CallError",
    "UnknownFunctionError",
    "PyFuncError",
    "ModelImportError",
    "ScheduleError",
}


def code_cells(nb):
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def test_the_tutorials_are_numbered_from_the_tour_on():
    assert [p.stem[:2] for p in NOTEBOOKS] == [f"{n:02d}" for n in range(len(NOTEBOOKS))]
    assert len(NOTEBOOKS) == 13 and NOTEBOOKS[0].stem == "00_tour"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_cell_ran_in_order_in_one_fresh_kernel(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    counts = [cell.execution_count for cell in code_cells(nb)]
    assert counts == list(range(1, len(counts) + 1)), f"{path.name}: save it with `make notebooks`"
    assert nb.metadata.kernelspec.name == "python3"
    assert code_cells(nb)[0].source.startswith("%load_ext tvm_pyfunc_nb")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_errors_appear_exactly_where_a_cell_is_tagged_to_raise(path):
    nb = nbformat.read(path, as_version=4)
    for cell in code_cells(nb):
        tagged = "raises-exception" in cell.metadata.get("tags", [])
        errors = [o for o in cell.outputs if o.output_type == "error"]
        where = f"{path.name} In[{cell.execution_count}]"
        assert bool(errors) == tagged, f"{where}: {errors or 'no error'}"
        for error in errors:  # the package's own short errors, never a stray Python one
            assert error.ename in PACKAGE_ERRORS and "Traceback" not in error.evalue, (where, error)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_widget_views_are_saved_with_their_state_and_a_text_fallback(path):
    nb = nbformat.read(path, as_version=4)
    outputs = [o for cell in code_cells(nb) for o in cell.outputs]
    views = [o.data for o in outputs if WIDGET_VIEW in o.get("data", {})]
    cells = [cell for cell in code_cells(nb) if cell.source.startswith("%%tvmmodule")]
    assert views or not cells, f"{path.name}: a %%tvmmodule cell shows its widget"
    state = nb.metadata.widgets[WIDGET_STATE]["state"] if views else {}
    for data in views:
        assert data[WIDGET_VIEW]["model_id"] in state
        # a module's panes as HTML; a graph as the SVG picture it draws
        static = data.get("text/html") or data.get("image/svg+xml", "")
        assert data["text/plain"].strip() and static.startswith("<"), sorted(data)


def test_links_between_tutorials_resolve():
    links = []
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        text = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown")
        links += [(path, target) for target in re.findall(r"\]\(([^)#]+\.ipynb)\)", text)]
    assert links, "the tutorials link to each other (the quickstart to what comes next)"
    for path, target in links:
        assert (path.parent / target).exists(), f"{path.name} links to missing {target}"


def test_the_readme_lists_every_tutorial():
    readme = (REPO / "README.md").read_text()
    for path in NOTEBOOKS:
        assert f"(notebooks/{path.name})" in readme, path.name


def test_a_saved_pane_shows_what_its_reader_saw_when_its_cell_ended():
    """The quickstart's first cell defines functions that later cells call: saved, its panes say
    "not called yet", in the static HTML and in the widgets' state alike. In notebook 02, panes
    of definitions that later cells replaced say so."""
    quickstart = nbformat.read(NOTEBOOKS[1], as_version=4)
    (first,) = [o for o in code_cells(quickstart)[1].outputs if WIDGET_VIEW in o.get("data", {})]
    assert "not called yet" in first.data["text/html"]
    assert "latest call" not in first.data["text/html"]
    state = quickstart.metadata.widgets[WIDGET_STATE]["state"]
    box = state[first.data[WIDGET_VIEW]["model_id"]]["state"]
    panes = [state[child[len("IPY_MODEL_") :]]["state"] for child in box["children"][2:]]
    results = [state[pane["children"][1][len("IPY_MODEL_") :]]["state"]["value"] for pane in panes]
    assert results and all("not called yet" in value for value in results), results

    redefinition = nbformat.read(NOTEBOOKS[2], as_version=4)
    html = [
        o.data["text/html"]
        for cell in code_cells(redefinition)
        for o in cell.outputs
        if WIDGET_VIEW in o.get("data", {})
    ]
    assert any("is now defined by a later cell" in h for h in html)
