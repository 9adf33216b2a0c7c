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


def test_the_demo_says_what_the_budget_refused_and_what_the_canary_did() -> None:
    from streams.core.events import Envelope, RunSucceeded
    from streams.examples.judged_ops import BUDGET, judge_triage
    from streams.surfaces.demo import budget_and_canary_lines

    def judge_run(i: int, output: dict[str, object]) -> Envelope:
        return Envelope.new(RunSucceeded(run_id=f"r{i}", rule=judge_triage.name,
                                         action="opened-incident",
                                         output=output), tenant="acme", workspace="prod")

    verdict = {"evaluator": "opened-incident", "version": "1", "value": {"correct": True},
               "feedback_id": "evt_1",
               "verdict_key": "opened-incident@1:aa", "reused": False}
    shadow = {"evaluator": "opened-incident", "version": "2", "value": {"correct": True},
              "verdict_key": "opened-incident@2:aa", "reused": False}
    handed = {"evaluator": "opened-incident", "version": "2", "handed_off": "too few"}
    log = [judge_run(0, {**verdict, "shadow": shadow}),
           judge_run(1, {**verdict, "verdict_key": "opened-incident@1:bb", "shadow": handed}),
           judge_run(2, {"over_budget": BUDGET.name, "claimed_tokens": 1_000})]
    lines = budget_and_canary_lines(log)
    assert "2 of 3 judge runs called the judge, 1 found the budget spent" in lines[0]
    assert any(line.startswith("  opened-incident@1: 2 verdicts, 2 calls") for line in lines)
    assert any("opened-incident@2: 1 verdicts, 1 calls (the canary" in line for line in lines)
    assert "the canary judged 1 of the 2 inputs" in lines[-1] and "handed 1" in lines[-1]
