"""The same user in Jupyter Notebook 7: open the quickstart, Run All, see the widgets working.

Notebook 7 renders outputs with JupyterLab's own components, so the checks are those of
the JupyterLab test (`browser.quickstart`); what differs is the page: one notebook per page,
its own menu bar and kernel indicator. A screenshot goes to
`build/screenshots/widget-notebook7.png`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from browser.quickstart import (
    expect_no_broken_widget,
    open_quickstart,
    run_all_cells,
    screenshot,
    wait_for_notebook7_kernel,
)

REPO = Path(__file__).resolve().parents[2]
SCREENSHOT = REPO / "build/screenshots/widget-notebook7.png"


@pytest.mark.browser
def test_run_all_cells_in_notebook_7_shows_script_and_results_in_the_widget(notebook7, browser):
    page = open_quickstart(notebook7, browser)
    expect(page).to_have_title(re.compile(r"^01_quickstart"))
    wait_for_notebook7_kernel(page)

    cell = run_all_cells(page)
    busy = page.locator(".jp-InputArea-prompt", has_text="[*]")
    expect(busy).to_have_count(0, timeout=120_000)  # every cell ran to its end
    expect_no_broken_widget(page)

    screenshot(cell, SCREENSHOT)
