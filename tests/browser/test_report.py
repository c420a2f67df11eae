"""A report opens from disk in Chromium, offline, and its sections render: the headings, the tables,
the diff of a pass (folded, opened with a click), the repro's code. A screenshot goes to
`build/screenshots/report.png`."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import expect
from tvm import relax

from tvm_pyfunc_nb import testing

SHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"


def test_the_report_opens_from_disk_and_its_sections_render(browser, tmp_path):
    from test_report import SECTIONS, planted_report
    from tvm.relax.pipeline import PIPELINE_MAP

    relax.register_pipeline("add_becomes_subtract")(testing.add_becomes_subtract)
    try:
        path = planted_report(tmp_path / "report.html")
    finally:
        PIPELINE_MAP.pop("add_becomes_subtract")
    page = browser.new_page()
    page.route(path.as_uri(), lambda route: route.continue_())  # the file itself, and only it
    page.goto(path.as_uri())
    for key in (*SECTIONS, "bisect", "minimize"):
        expect(page.locator(f"section#{key} h2")).to_be_visible()
    expect(page.locator("section#environment table").first).to_contain_text("TVM")
    expect(page.locator("section#compare table").first).to_contain_text("FAIL")
    diff = page.locator("section#passes details").first
    expect(diff.locator(".highlight")).to_be_hidden()  # folded until clicked
    diff.locator("summary").click()
    expect(diff.locator(".highlight")).to_contain_text("R.subtract(")
    expect(page.locator("section#minimize .highlight").first).to_contain_text("R.add(")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "report.png"), full_page=False)
