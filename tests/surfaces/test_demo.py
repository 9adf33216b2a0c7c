"""The demo's output: the live view fits 80 columns with no label or tenant cut, a child it
stops says it stopped as asked, and the kappa line is explained."""

from __future__ import annotations

import subprocess
import sys

from rich.console import Console

from streams.surfaces.demo import KAPPA_NOTE, ROWS, _status, _stop, view_table


def _render(width: int, tenants: list[str]) -> list[str]:
    console = Console(width=width, record=True, color_system=None)
    cells = {t: ["123", "45", "30", "0", "7", "90 / 30", "10 / 10", "540", "540", "540", "0"]
             for t in tenants}
    console.print(view_table("feedback-streams demo (12s)", "DuckDB", cells))
    return console.export_text().splitlines()


def test_the_live_view_fits_80_columns_and_cuts_no_label() -> None:
    for tenants in (["acme", "globex"], ["acme", "globex", "initech", "umbrella"]):
        lines = _render(80, tenants)
        assert max(len(line) for line in lines) <= 80
        text = "\n".join(lines)
        for label in ROWS:
            assert label.format(sink="DuckDB") in text, label
        header = next(line for line in lines if "acme" in line)
        assert all(t in header for t in tenants), header
        assert "90 / 30" in text and "…" not in text


def test_the_live_view_uses_a_wider_terminal_only_as_wide_as_it_needs() -> None:
    narrow, wide = _render(80, ["acme", "globex"]), _render(200, ["acme", "globex"])
    assert [line.rstrip() for line in narrow] == [line.rstrip() for line in wide]


def test_a_child_stopped_by_the_demo_says_it_stopped_as_asked() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert _stop(child) == "stopped on the demo's SIGTERM, as asked (not a crash)"
    assert _stop(child) == "had already ended (killed by SIGTERM)"
    assert _status(3) == "exit status 3"


def test_kappa_is_explained_as_chance_corrected_agreement() -> None:
    assert "corrected for chance" in KAPPA_NOTE and "one label dominates" in KAPPA_NOTE
