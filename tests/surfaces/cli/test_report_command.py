"""`streams report` pauses Python's garbage collector while it reads and measures the log,
and turns it on again after (no broker: the report itself is replaced)."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from streams.core.errors import NotFound
from streams.surfaces.cli.app import app
from streams.surfaces.report.run import ReportFiles

runner = CliRunner()

SUMMARY = {"events": 6, "rule_outcomes": [], "time_to_resolution": {"chains": 0},
           "judge_agreement": [], "quality": {"agents": []}, "unregistered_feedback_types": []}


def _report_recording_the_collector(seen: list[bool], *, fails: bool = False) -> Any:
    def make_report(*_args: Any, out: Path, **_kwargs: Any) -> ReportFiles:
        seen.append(gc.isenabled())
        if fails:
            raise NotFound("no tenant 'acme'")
        return ReportFiles(out / "report.json", out / "report.html", SUMMARY)
    return make_report


def test_the_report_is_made_with_the_collector_paused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[bool] = []
    monkeypatch.setattr("streams.surfaces.report.run.make_report",
                        _report_recording_the_collector(seen))
    gc.enable()
    result = runner.invoke(app, ["report", "--tenant", "acme", "--workspace", "prod",
                                 "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert seen == [False], "make_report ran with the collector on"
    assert gc.isenabled(), "the command left the collector off"
    assert json.loads(result.stdout.strip().splitlines()[-1])["json"].endswith("report.json")


def test_a_failed_report_turns_the_collector_on_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[bool] = []
    monkeypatch.setattr("streams.surfaces.report.run.make_report",
                        _report_recording_the_collector(seen, fails=True))
    gc.enable()
    result = runner.invoke(app, ["report", "--tenant", "acme", "--workspace", "prod",
                                 "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert "no tenant 'acme'" in result.output
    assert seen == [False]
    assert gc.isenabled()
