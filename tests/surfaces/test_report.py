"""The report's pure part: measures as a JSON-ready dict, and the page with one inline SVG
chart per measure (no network, no script)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from streams.core.events import AppEvent, Change
from streams.surfaces.report import CHARTS, ReportError, build_report, render_html
from streams.surfaces.report.model import (
    check_window,
    histogram,
    parse_period,
    parse_quality,
    parse_time,
    quantile,
)
from tests.core.proposals.log import T0, Log
from tests.core.rules.samples import limited_log
from tests.surfaces.report_log import CHAINS, sample_log


def test_the_report_holds_every_measure_of_the_log() -> None:
    report = build_report(sample_log(), tenant="acme", workspace="prod")
    assert report["format"] == "feedback-streams.report/1"
    json.dumps(report)  # JSON-ready as it is
    outcomes = {r["rule"]: r for r in report["rule_outcomes"]}
    assert sorted(outcomes) == ["ops:error-spike", "ops:judge-triage"]
    assert sum(r["runs"] for r in outcomes.values()) == CHAINS
    assert outcomes["ops:judge-triage"]["in_progress"] == 1
    assert sum(r["dead_lettered"] for r in outcomes.values()) == 2
    ttr = report["time_to_resolution"]
    # Every chain but the open one and the two dead-lettered ones reached run_succeeded.
    assert ttr["chains"] == CHAINS - 3
    assert sum(b["count"] for b in ttr["histogram"]) == ttr["chains"]
    assert ttr["seconds"]["max"] == 30 * (10 + 1)  # chain 10: 330 s
    versions = {(r["evaluator"], r["field"]): r for r in report["judge_agreement"]}
    assert set(versions) == {(f"evaluator:triage-judge@{v}", f) for v in (1, 2)
                             for f in ("correct", "severity")}
    assert versions[("evaluator:triage-judge@2", "correct")]["kappa"] > \
        versions[("evaluator:triage-judge@1", "correct")]["kappa"]
    assert all(r["n"] == CHAINS - 3 for r in versions.values())
    agents = {a["rule"]: a for a in report["quality"]["agents"]}
    assert sorted(agents) == ["ops:error-spike", "ops:judge-triage"]
    assert [d["day"] for d in agents["ops:error-spike"]["by_day"]] == [
        "2026-11-27", "2026-11-28", "2026-11-29"]


def test_the_report_says_how_each_side_answered_and_what_moved_per_day_or_week() -> None:
    report = build_report(sample_log(), tenant="acme", workspace="prod")
    answers = {(r["field"], r["who"]): r for r in report["answers"]}
    people = answers[("correct", "people")]
    # ada judged the nine chains that succeeded: right on i % 3 != 0 (six of nine).
    assert people["n"] == CHAINS - 3
    assert [(c["label"], c["count"]) for c in people["counts"]] == [("yes", 6), ("no", 3)]
    assert sum(c["share"] for c in people["counts"]) == pytest.approx(1.0)
    score = answers[("quality_score", "evaluator:workflow-reviewer@2026-11")]["numbers"]
    # Reviews of chains 0-10 but the dead-lettered 4 and 9: 0.4 + 0.05 i.
    assert score["min"] == pytest.approx(0.4) and score["max"] == pytest.approx(0.9)
    days = report["trends"]
    assert days["per"] == "day"
    assert [p["period"] for p in days["periods"]] == ["2026-11-27", "2026-11-28",
                                                       "2026-11-29"]
    assert sum(p["people"] for p in days["periods"]) == CHAINS - 3
    # Each pair counts in one period: the periods' pairs add up to the whole report's.
    for row in report["judge_agreement"]:
        assert sum(a["n"] for p in days["periods"] for a in p["agreement"]
                   if (a["evaluator"], a["field"]) == (row["evaluator"], row["field"])
                   ) == row["n"]
    weeks = build_report(sample_log(), tenant="acme", workspace="prod", per="week")["trends"]
    assert [p["period"] for p in weeks["periods"]] == ["2026-W48"]
    page = render_html(report)
    assert "How people and each evaluator version answered" in page
    assert "Trends per day" in page and "66.7%" in page  # ada's share of yes, as text too


def test_the_window_and_the_resolving_event_are_applied() -> None:
    since = datetime(2026, 11, 28, tzinfo=UTC)
    until = datetime(2026, 11, 29, tzinfo=UTC)
    report = build_report(sample_log(), tenant="acme", workspace="prod", since=since,
                          until=until, resolves="run_dead_lettered")
    assert report["since"] == since.isoformat() and report["until"] == until.isoformat()
    days = {d["day"] for a in report["quality"]["agents"] for d in a["by_day"]}
    assert days == {"2026-11-28"}
    assert report["time_to_resolution"]["resolves"] == "run_dead_lettered"
    assert report["time_to_resolution"]["chains"] == 1  # chain 4, begun on the 28th


def test_bad_input_is_refused_with_what_to_change() -> None:
    with pytest.raises(ReportError, match="is not before --until"):
        check_window(datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC))
    with pytest.raises(ReportError, match="ISO 8601"):
        parse_time("yesterday", "--since")
    assert parse_time("2026-11-30", "--since") == datetime(2026, 11, 30, tzinfo=UTC)
    with pytest.raises(ReportError, match=r"FEEDBACK_TYPE\.FIELD"):
        parse_quality("quality_score")
    with pytest.raises(ReportError, match="--per 'month' is one of day, week"):
        parse_period("month")
    with pytest.raises(ReportError, match="--per"):
        build_report(sample_log(), tenant="acme", workspace="prod", per="hour")


def test_histogram_and_quantiles() -> None:
    assert histogram([]) == []
    bins = histogram([0.0, 1.0, 9.0, 10.0])
    assert bins[0]["from"] == 0 and bins[-1]["to"] > 10
    assert sum(b["count"] for b in bins) == 4
    assert len({b["to"] - b["from"] for b in bins}) == 1
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5


def test_the_page_has_one_svg_chart_per_measure_with_marks_and_no_outside_reference(
) -> None:
    page = render_html(build_report(sample_log(), tenant="acme", workspace="prod"))
    for chart in CHARTS:
        svg = re.search(rf'<svg class="chart" data-chart="{chart}".*?</svg>', page, re.S)
        assert svg is not None, chart
        assert 'class="mark"' in svg.group(0), chart
    assert "<script" not in page
    assert not re.search(r'(src|href)=["\']?(https?:)?//', page)


def test_a_chart_without_data_says_so() -> None:
    empty = [e for e in sample_log() if isinstance(e.event, AppEvent)]
    assert empty
    page = render_html(build_report(empty, tenant="acme", workspace="prod"))
    assert page.count('class="empty"') == len(CHARTS)
    assert 'class="mark"' not in page


def test_text_from_the_log_is_escaped() -> None:
    report = build_report(sample_log(), tenant="acme", workspace="<b>prod</b>")
    page = render_html(report)
    assert "<b>prod</b>" not in page and "&lt;b&gt;prod&lt;/b&gt;" in page


def test_the_pure_report_modules_load_no_kafka() -> None:
    code = ("import sys, streams.surfaces.report.model, streams.surfaces.report.html; "
            "print([m for m in ('confluent_kafka', 'faust', 'aiokafka', 'httpx') "
            "if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_the_report_holds_the_proposal_measures() -> None:
    log = Log()
    log.create("a1", {"when": "x"})
    started = log.run("chat:draft-rule")
    edited = log.propose("p1", "a1", Change(set={"when": "y"}), by=started)
    log.resolve(edited, changes=Change(set={"then": "page"}))          # edited
    log.resolve(log.propose("p2", "a1", Change(set={"when": "z"}), by=started))  # accepted
    log.resolve(log.propose("p3", "a1", Change(set={"when": "w"}), by=started), "rejected")
    log.install("drafted", "a1")
    late = T0 + timedelta(days=40)
    report = build_report(log.envelopes, tenant="acme", workspace="prod",
                          generated_at=late)
    json.dumps(report)
    proposals = report["proposals"]
    assert proposals["rates"] == [{
        "rule": "chat:draft-rule", "accepted": 1, "edited": 1, "rejected": 1, "resolved": 3,
        "acceptance_rate": 1 / 3, "edit_rate": 1 / 3, "rejection_rate": 1 / 3}]
    conversion = proposals["rule_conversion"]
    assert (conversion["proposed"], conversion["accepted"], conversion["installed"],
            conversion["survived"], conversion["survival_days"]) == (1, 1, 1, 1, 30.0)
    [artifact] = proposals["artifacts"]
    # Created by ada, then the rule's p1 (with ada's changes, credited to the rule: it
    # proposed), then its p2: three versions, two transitions, one of them a rewrite (the
    # author changed from ada to the rule's agent; p2 follows the same author).
    assert (artifact["artifact_id"], artifact["versions"], artifact["transitions"]) == (
        "a1", 3, 2)
    assert artifact["rewrites"] == 1
    # The window applies to the resolutions: before any of them, nothing was resolved.
    early = build_report(log.envelopes, tenant="acme", workspace="prod",
                         until=T0, generated_at=late)["proposals"]
    assert early["rates"] == []
    assert early["rule_conversion"]["installed"] == 0     # nothing logged before `until`
    page = render_html(report)
    assert "<h2>Proposals</h2>" in page
    assert "chat:draft-rule" in page and "33.3%" in page
    assert "1 installed, 1 still live after 30 days" in page


def test_feedback_of_a_type_not_registered_is_named_not_dropped_silently() -> None:
    from streams.core.feedback import FeedbackRegistry

    # Without triage_quality registered, its categorical field (severity) cannot be measured:
    # the report says which types it did not know, so the reader can load them.
    empty = FeedbackRegistry()
    report = build_report(sample_log(), tenant="acme", workspace="prod", types=empty)
    assert report["unregistered_feedback_types"] == ["triage_quality", "workflow_review"]
    fields = {r["field"] for r in report["judge_agreement"]}
    assert "severity" not in fields
    known = build_report(sample_log(), tenant="acme", workspace="prod")
    assert known["unregistered_feedback_types"] == []


def test_the_report_prices_each_judges_calls_and_counts_reused_verdicts() -> None:
    from streams.core.events import Envelope, RunSucceeded
    from streams.core.measures import ModelPrice

    def verdict(n: int, reused: bool) -> Envelope:
        trace = {"model": "small", "prompt_tokens": "2000", "completion_tokens": "500"}
        return Envelope.new(RunSucceeded(run_id=f"run_{n}", rule="judge", action="grade",
                                         output={"evaluator": "grader", "version": "2",
                                                 "feedback_id": f"evt_{n}", "reused": reused,
                                                 "trace": trace}),
                            tenant="acme", workspace="prod", time=T0 + timedelta(minutes=n))

    log = [verdict(n, reused=n >= 3) for n in range(5)]
    report = build_report(log, tenant="acme", workspace="prod",
                          prices={"small": ModelPrice(prompt=1.0, completion=4.0)})
    [row] = report["judge_costs"]
    # 3 calls of 2,000 + 500 tokens at 1 and 4 per million: 0.004 each, over 5 verdicts.
    assert (row["verdicts"], row["reused"], row["calls"]) == (5, 2, 3)
    assert row["cost"] == pytest.approx(0.012)
    assert row["cost_per_verdict"] == pytest.approx(0.0024)
    page = render_html(report)
    assert "What each judge cost" in page and "grader@2" in page and "0.0024" in page
    # Without prices the calls are unpriced, not free.
    [unpriced] = build_report(log, tenant="acme", workspace="prod")["judge_costs"]
    assert unpriced["unpriced_calls"] == 3 and unpriced["cost_per_verdict"] is None
    assert "(+3 calls unpriced)" in render_html(build_report(log, tenant="acme",
                                                             workspace="prod"))


def test_each_queue_gets_agreement_and_answers_on_its_own_items() -> None:
    from streams.core.actors import EvaluatorActor, UserActor
    from streams.core.events import Envelope, FeedbackGiven
    from streams.core.targets import RunTarget

    def said(run: str, correct: bool, actor: object) -> Envelope:
        return Envelope.new(FeedbackGiven(feedback_type="triage_quality",
                                          target=RunTarget(run_id=run),
                                          value={"correct": correct, "severity": "low"}),
                            tenant="acme", workspace="prod", actor=actor,  # type: ignore
                            time=T0)

    judge, ada = EvaluatorActor(name="grader", version="1"), UserActor(id="ada")
    log = []
    for n in range(8):  # the judge agrees with Ada on runs 0-3, never on runs 4-7
        log += [said(f"run_{n}", True, judge), said(f"run_{n}", n < 4, ada)]
    queues = {"easy": [f"run:run_{n}" for n in range(4)],
              "hard": [f"run:run_{n}" for n in range(4, 8)] + ["run:run_99"]}
    report = build_report(log, tenant="acme", workspace="prod", queues=queues)
    easy, hard = report["queues"]
    assert (easy["queue"], easy["items"], easy["judged"]) == ("easy", 4, 4)
    assert (hard["queue"], hard["items"], hard["judged"]) == ("hard", 5, 4)
    observed = {q["queue"]: {r["field"]: r["observed"] for r in q["judge_agreement"]}
                for q in (easy, hard)}
    assert observed == {"easy": {"correct": 1.0, "severity": 1.0},
                        "hard": {"correct": 0.0, "severity": 1.0}}
    assert {r["who"] for r in hard["answers"]} >= {"people"}
    # One person per item: nothing between people to measure.
    assert easy["people_agreement"] == [] and report["people_agreement"] == []
    bo = UserActor(id="bo")
    both = build_report([*log, *(said(f"run_{n}", n % 2 == 0, bo) for n in range(4))],
                        tenant="acme", workspace="prod", queues=queues)
    easy = both["queues"][0]
    correct = next(r for r in easy["people_agreement"] if r["field"] == "correct")
    assert (correct["units"], correct["values"], correct["observed"]) == (4, 8, 0.5)
    assert correct["alpha"] is not None and correct["alpha_ci"] is not None
    assert both["queues"][1]["people_agreement"] == []  # bo judged none of the hard ones
    assert "Agreement between people" in render_html(both)
    assert "<td>triage_quality.correct</td><td>4</td><td>8</td><td>50.0%</td>" in \
        render_html(both)
    page = render_html(report)
    assert "<h3>hard</h3>" in page and "5 items, 4 with a verdict" in page
    assert "No annotation queue" in render_html(build_report(log, tenant="acme",
                                                             workspace="prod"))


def test_the_report_counts_what_each_rule_did_with_the_events_it_watches() -> None:
    limited, log = limited_log()
    report = build_report(log, tenant="acme", workspace="prod", rules=[limited])
    assert report["why"] == [{"rule": "t:two", "watched": 7, "outcomes": {
        "filtered_out": 2, "throttled": 3, "judged": 1, "running": 1}}]
    page = render_html(report)
    # The why table's row: the rule, 7 watched, then a column per outcome reached.
    row = re.search(r"<tr><td>t:two</td><td>7</td>.*?</tr>", page, re.S)
    assert row is not None and row.group(0).count("<td>") == 6
    assert "filtered out" in page and "throttled" in page
    assert build_report(log, tenant="acme", workspace="prod")["why"] == []
    assert "No rules were given" in render_html(
        build_report(log, tenant="acme", workspace="prod"))


def test_pairwise_preferences_are_tallied_per_pair_of_versions() -> None:
    from streams.core.actors import EvaluatorActor, UserActor
    from streams.core.events import Envelope, FeedbackGiven
    from streams.core.targets import RunTarget

    old, new = "evaluator:judge@2", "evaluator:judge@3"

    def prefer(run: str, who: str, preferred: str, *, a: str = old, b: str = new,
               kind: str = "pairwise_preference", actor: object = None) -> Envelope:
        return Envelope.new(FeedbackGiven(feedback_type=kind, target=RunTarget(run_id=run),
                                          value={"a": a, "b": b, "preferred": preferred}),
                            tenant="acme", workspace="prod", time=T0,
                            actor=actor or UserActor(id=who))  # type: ignore[arg-type]

    log = [prefer("r1", "ada", "b"), prefer("r2", "ada", "b"), prefer("r3", "ada", "tie"),
           prefer("r1", "bo", "a", a=new, b=old),          # bo prefers new, said reversed
           prefer("r4", "ada", "a", a=old, b=old),          # no pair of versions: left out
           prefer("r5", "x", "a", actor=EvaluatorActor(name="judge", version="9"))]
    [row] = build_report(log, tenant="acme", workspace="prod")["preferences"]
    assert (row["a"], row["b"], row["a_wins"], row["b_wins"], row["ties"], row["n"]) == (
        old, new, 0, 3, 1, 4)
    assert row["a_rate"] == pytest.approx(0.125)
    low, high = row["a_rate_ci"]
    assert 0 <= low < 0.125 < high < 1
    page = render_html(build_report(log, tenant="acme", workspace="prod"))
    assert "Pairwise preferences between evaluator versions" in page
    assert "<td>evaluator:judge@2</td><td>evaluator:judge@3</td><td>4</td>" in page
    assert "No pairwise preference" in render_html(build_report([], tenant="acme",
                                                                workspace="prod"))
