"""What both browser tests do: open the quickstart with its outputs cleared, Run All, and check
the widgets, not their text fallbacks, with the scripts and the numbers of this run."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
from playwright.sync_api import Locator, Page, expect

NOTEBOOK = "01_quickstart.ipynb"
BROKEN_WIDGET = re.compile("Error displaying widget|model not found")


def clear_outputs(path: Path) -> None:
    """No saved output left: everything checked comes from this run."""
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    notebook.metadata.pop("widgets", None)
    nbformat.write(notebook, path)


def open_quickstart(server, browser) -> Page:
    """A new page on the quickstart of `server` (JupyterLab or Notebook 7), no output saved."""
    clear_outputs(server.root / NOTEBOOK)
    page = browser.new_page()
    page.set_default_timeout(60_000)
    page.goto(server.notebook_url(NOTEBOOK, "quickstart"))
    return page


def run_all_cells(page: Page) -> Locator:
    """Run All Cells from the menu bar; the first cell widget, once it shows this run's call."""
    run_all(page)
    return expect_quickstart_widgets(page)


def run_all(page: Page) -> None:
    """Run All Cells from the menu bar (JupyterLab's and Notebook 7's)."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile("^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Run All Cells$")).click()


def wait_for_notebook7_kernel(page: Page) -> None:
    """Notebook 7 may ask which kernel to start, at once or a moment after it looks idle; the
    one it proposes is the notebook's own, and whenever the dialog shows it is accepted. The
    kernel is ready when the top bar's kernel status fades out with no notice: idle or busy
    ("Kernel Initializing" fades out too, as a notice). Run All before that runs nothing, and
    the execution indicator says "idle" from the start, kernel or not."""
    select = page.get_by_role("button", name="Select Kernel")
    page.add_locator_handler(select, lambda button: button.click())
    ready = page.locator(".jp-NotebookKernelStatus-fade:not(.jp-NotebookKernelStatus-info)")
    expect(ready).to_be_attached()


def screenshot(cell: Locator, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    cell.scroll_into_view_if_needed()
    cell.screenshot(path=str(path))


def expect_quickstart_widgets(page: Page) -> Locator:
    """The first cell widget shows its scripts and the call a later cell made; the module view
    (`demo` as a cell's last expression) its tabs; no widget failed to render. Returns the
    cell widget."""
    cell = page.locator(".jp-OutputArea-output .tvm-pyfunc-nb-cell").first
    expect(cell).to_contain_text("this cell defines add_tir", timeout=90_000)
    expect(cell).to_contain_text("C[i] = A[i] + B[i]")  # add_tir's script
    expect(cell).to_contain_text("return z * 2")  # main's script
    expect(cell).to_contain_text("[2, 4, 6, 8, 10]")  # main's output, from the call in a later cell
    expect(cell).to_contain_text("min 2 · max 10 · mean 6")

    module = page.locator(".jp-OutputArea-output .tvm-pyfunc-nb-module")
    for title in ("add_tir · tir", "main · pyfunc", "main_relax · relax", "module"):
        expect(module.locator(".lm-TabBar-tabLabel", has_text=title)).to_be_visible()
    return cell


def expect_no_broken_widget(page: Page) -> None:
    assert not BROKEN_WIDGET.search(page.locator(".jp-Notebook").inner_text())
