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
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import expect

from browser.quickstart import (
    NOTEBOOK,
    expect_no_broken_widget,
    open_quickstart,
    run_all_cells,
    screenshot,
)

REPO = Path(__file__).resolve().parents[2]
SCREENSHOT = REPO / "build/screenshots/widget.png"
README_IMAGE = REPO / "docs/widget.png"


@pytest.mark.browser
def test_run_all_cells_shows_script_and_results_in_the_widget(lab, browser):
    page = open_quickstart(lab, browser)
    expect(page.locator(".lm-TabBar-tab.jp-mod-current .lm-TabBar-tabLabel")).to_have_text(NOTEBOOK)
    expect(page.get_by_text("Python 3 (ipykernel) | Idle", exact=True)).to_be_visible()

    cell = run_all_cells(page)
    expect(page.get_by_text("Python 3 (ipykernel) | Idle", exact=True)).to_be_visible()
    expect_no_broken_widget(page)

    page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").click()  # widen the shot
    screenshot(cell, SCREENSHOT)
    if os.environ.get("UPDATE_README_SCREENSHOT") == "1":
        shutil.copyfile(SCREENSHOT, README_IMAGE)
