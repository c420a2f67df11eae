"""A user opens the quickstart in JupyterLab, runs all cells, and sees the widgets working.

The first `%%tvmmodule` cell's widget must show its functions' scripts and,
once a later cell has called `main`, that call's values; the module view
(`demo` as a cell's last expression) must show its tabs. The notebook's saved
outputs are cleared first, so everything checked comes from this run. A
screenshot of the cell widget goes to `build/screenshots/widget.png`; with
`UPDATE_README_SCREENSHOT=1` it is also copied to `docs/widget.png` for the README.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from playwright.sync_api import expect

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = "01_quickstart.ipynb"
SCREENSHOT = REPO / "build/screenshots/widget.png"
README_IMAGE = REPO / "docs/widget.png"
BROKEN_WIDGET = re.compile("Error displaying widget|model not found")


def clear_outputs(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    notebook.metadata.pop("widgets", None)
    nbformat.write(notebook, path)


@pytest.mark.browser
def test_run_all_cells_shows_script_and_results_in_the_widget(lab, browser):
    clear_outputs(lab.root / NOTEBOOK)
    page = browser.new_page()
    page.set_default_timeout(60_000)
    page.goto(lab.notebook_url(NOTEBOOK, "quickstart"))
    expect(page.locator(".lm-TabBar-tab.jp-mod-current .lm-TabBar-tabLabel")).to_have_text(NOTEBOOK)
    expect(page.get_by_text("Python 3 (ipykernel) | Idle", exact=True)).to_be_visible()

    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile("^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Run All Cells$")).click()

    cell = page.locator(".jp-OutputArea-output .tvm-pyfunc-nb-cell").first
    expect(cell).to_contain_text("this cell defines add_tir", timeout=90_000)
    expect(cell).to_contain_text("C[i] = A[i] + B[i]")  # add_tir's script
    expect(cell).to_contain_text("return z * 2")  # main's script
    expect(cell).to_contain_text("[2, 4, 6, 8, 10]")  # main's output, from the call in a later cell
    expect(cell).to_contain_text("min 2 · max 10 · mean 6")

    module = page.locator(".jp-OutputArea-output .tvm-pyfunc-nb-module")
    for title in ("add_tir · tir", "main · pyfunc", "main_relax · relax", "module"):
        expect(module.locator(".lm-TabBar-tabLabel", has_text=title)).to_be_visible()
    expect(page.get_by_text("Python 3 (ipykernel) | Idle", exact=True)).to_be_visible()
    assert not BROKEN_WIDGET.search(page.locator(".jp-Notebook").inner_text())

    page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").click()  # widen the shot
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    cell.scroll_into_view_if_needed()
    cell.screenshot(path=str(SCREENSHOT))
    if os.environ.get("UPDATE_README_SCREENSHOT") == "1":
        shutil.copyfile(SCREENSHOT, README_IMAGE)
