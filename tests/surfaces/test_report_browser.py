"""The report page in a real browser: headless Chromium (the system's `chromium`, which
deploy/test.sh installs when absent) draws every chart, asks the network for nothing, and
logs no error."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from streams.surfaces.report import CHARTS, build_report
from streams.surfaces.report.run import write_report
from tests.surfaces.report_log import sample_log


def chromium() -> str:
    """The system's Chromium; Playwright's own browser downloads do not work here."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("no chromium on PATH: install Debian's `chromium` package "
                    "(deploy/test.sh does: apt-get install -y chromium)")
    return found


def test_every_chart_renders_with_marks_and_the_console_stays_clean(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    files = write_report(build_report(sample_log(), tenant="acme", workspace="prod"),
                         tmp_path / "report")
    problems: list[str] = []
    requests: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(),
                                             args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 840, "height": 1000})
            page.on("console", lambda message: problems.append(message.text)
                    if message.type == "error" else None)
            page.on("pageerror", lambda error: problems.append(str(error)))
            page.on("request", lambda request: requests.append(request.url))
            page.goto(files.html_path.resolve().as_uri(), wait_until="load")
            for chart in CHARTS:
                svg = page.locator(f'svg.chart[data-chart="{chart}"]')
                assert svg.count() == 1, chart
                box = svg.bounding_box()
                assert box is not None and box["width"] > 0 and box["height"] > 0, chart
                marks = svg.locator(".mark")
                assert marks.count() > 0, f"{chart} has no marks"
                # Drawn, not only present: each mark has a rendered extent on the page.
                extents = marks.evaluate_all(
                    "marks => marks.map(m => { const r = m.getBoundingClientRect();"
                    " return r.width + r.height; })")
                assert all(extent > 0 for extent in extents), chart
                assert svg.locator("text.empty").count() == 0, chart
            # STREAMS_REPORT_SCREENSHOT=docs/report.png refreshes the picture in the docs.
            shot = os.environ.get("STREAMS_REPORT_SCREENSHOT") or str(tmp_path / "report.png")
            page.screenshot(path=shot, full_page=True)
        finally:
            browser.close()
    assert problems == []
    assert requests == [files.html_path.resolve().as_uri()]
