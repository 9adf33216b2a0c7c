"""`streams report` on the real broker: it reads one workspace's log from the tenant's events
topic and writes the measures as report.json and report.html; bad input is a clear error and
exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streams.core.actors import UserActor
from streams.core.events import AppEvent
from streams.core.feedback import FeedbackRegistry, registry
from streams.runtime.jobs.queues import QueueBook
from streams.runtime.jobs.rules import Rulebook
from streams.settings import Settings
from streams.surfaces.cli.base import ExitCode
from streams.surfaces.report import CHARTS, build_report
from tests.conftest import REPO
from tests.surfaces.report_log import sample_log


def streams_report(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams", "report", *args],
        env=settings.child_env(STREAMS_FEEDBACK_MODULES="streams.examples.ops"),
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False)


async def test_report_reads_the_workspace_and_writes_json_and_html(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], tmp_path: Path,
) -> None:
    tenant = tenant_factory()
    client = client_factory()
    ws = client.workspace(tenant, "prod")
    log = sample_log(tenant, "prod")
    for envelope in log:
        await ws.append_envelope(envelope)
    other = client.workspace(tenant, "staging", actor=UserActor(id="ada"))
    for _ in range(5):
        await other.append(AppEvent(name="ops:error_spike"))
    await QueueBook(client.runtime).install(tenant, "prod", {
        "name": "judged-runs", "enters": {"runs_of": "ops:judge-triage"},
        "feedback_types": ["triage_quality"]})

    out = tmp_path / "report"
    done = streams_report(settings, "--tenant", tenant, "--workspace", "prod", "--out",
                          str(out))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"json": str(out / "report.json"),
                                       "html": str(out / "report.html")}
    assert f"reading {tenant}'s log" in done.stderr  # the progress bar's line
    written = json.loads((out / "report.json").read_text())
    # The command loads the ops types only (STREAMS_FEEDBACK_MODULES), not workflow_review,
    # which this process registers: the same report from the same types.
    known = FeedbackRegistry()
    for cls in registry:
        if cls.feedback_name != "workflow_review":
            known.register(cls)
    expected = build_report(log, tenant=tenant, workspace="prod", types=known)
    for report in (written, expected):
        report.pop("generated_at")
        # The time the report was made, to the second: the two were made moments apart.
        report["proposals"]["rule_conversion"].pop("now")
    # It names workflow_review as a type it did not know.
    assert written["unregistered_feedback_types"] == ["workflow_review"]
    # The live queue's section: every run of its rule is an item.
    [queue] = written.pop("queues")
    runs = {r["rule"]: r["runs"] for r in written["rule_outcomes"]}["ops:judge-triage"]
    assert (queue["queue"], queue["items"]) == ("judged-runs", runs)
    assert queue["judged"] <= runs and queue["judge_agreement"] == [
        r for r in queue["judge_agreement"] if r["feedback_type"] == "triage_quality"]
    expected.pop("queues")
    assert written == expected
    page = (out / "report.html").read_text()
    for chart in CHARTS:
        assert f'data-chart="{chart}"' in page

    window = streams_report(settings, "--tenant", tenant, "--workspace", "prod", "--out",
                            str(tmp_path / "window"), "--since", "2026-11-28", "--until",
                            "2026-11-29", "--resolves", "run_dead_lettered")
    assert window.returncode == 0, window.stderr
    narrow = json.loads((tmp_path / "window" / "report.json").read_text())
    assert narrow["time_to_resolution"]["chains"] == 1
    assert narrow["events"] < written["events"]

    # What the rules did: a rules module's rule and one installed as data.
    await Rulebook(client.runtime).install(tenant, "prod", {
        "name": "t:spikes", "when": {"on": "ops:error_spike", "sample": 0.5},
        "then": {"action": "noop"}}, actions={"noop"})
    why = streams_report(settings, "--tenant", tenant, "--workspace", "prod", "--out",
                         str(tmp_path / "why"), "--rules", "streams.examples.ops_rules")
    assert why.returncode == 0, why.stderr
    rows = {r["rule"]: r for r in json.loads(
        (tmp_path / "why" / "report.json").read_text())["why"]}
    spikes = sum(1 for e in log if e.event_type == "ops:error_spike")
    assert rows["t:spikes"]["watched"] == spikes
    assert set(rows["t:spikes"]["outcomes"]) <= {"sampled_out", "undecided"}
    # The sample log's runs carry ids of their own, not derived ones: nothing fired here.
    assert rows["ops:error-spike"]["outcomes"] == {"counting": spikes}
    assert "Why rules did or did not act" in (tmp_path / "why" / "report.html").read_text()


async def test_bad_input_is_a_clear_error_and_its_exit_code(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], tmp_path: Path,
) -> None:
    tenant = tenant_factory()
    empty = tenant_factory()
    await client_factory().workspace(tenant, "prod").append(AppEvent(name="ops:error_spike"))
    out = str(tmp_path / "out")

    cases = [
        (["--tenant", "nosuchtenant", "--workspace", "prod"],
         ["no tenant 'nosuchtenant'", "streams tenant list"]),
        (["--tenant", tenant, "--workspace", "nosuch"],
         [f"tenant '{tenant}' has no workspace 'nosuch'", "prod"]),
        (["--tenant", empty, "--workspace", "prod"], ["is empty", "nothing to report"]),
        (["--tenant", tenant, "--workspace", "prod", "--since", "2026-12-01",
          "--until", "2026-11-01"], ["is not before --until"]),
        (["--tenant", tenant, "--workspace", "prod", "--since", "yesterday"],
         ["not an ISO 8601 date"]),
        (["--tenant", tenant, "--workspace", "prod", "--until", "2000-01-01"],
         ["no events in the window", "widen --since/--until"]),
    ]
    for args, messages in cases:
        done = streams_report(settings, *args, "--out", out)
        said = " ".join(done.stderr.split())
        # An unknown tenant is NotFound; the other refusals are usage errors.
        code = ExitCode.NOT_FOUND if args[1] == "nosuchtenant" else ExitCode.USAGE
        assert done.returncode == code, (args, done.stderr)
        for message in messages:
            assert message in said, (args, done.stderr)
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "out" / "report.html").exists()


async def test_the_demo_section_saves_a_dataset_reports_agreement_and_writes_the_report(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], tmp_path: Path,
) -> None:
    import asyncio

    from rich.console import Console

    from streams.core.datasets import Dataset
    from streams.examples.ops import TriageQuality
    from streams.examples.ops_rules import TriageInput
    from streams.runtime.root import Runtime
    from streams.surfaces.demo import evaluate_and_report

    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod")
    log = sample_log(tenant, "prod")
    for envelope in log:
        await ws.append_envelope(envelope)
    envelopes = await ws.read()
    console = Console(record=True, width=200)
    runtime = Runtime(settings)
    try:
        await asyncio.to_thread(evaluate_and_report, runtime, tenant, "prod", envelopes,
                                tmp_path / tenant, console)
    finally:
        runtime.close()
    said = console.export_text()
    dataset = Dataset.load(tmp_path / tenant / "triage-dataset.jsonl",
                           feedback_type=TriageQuality, input_type=TriageInput)
    people = [e for e in log if e.actor.kind == "user"]
    assert len(dataset) == len(people) == 9
    assert {x.metadata["given_by"] for x in dataset.examples} == {"user:ada"}
    assert "evaluator:triage-judge@2 on triage_quality.correct: kappa" in said
    assert "evaluator:triage-judge@1 on triage_quality.severity: kappa" in said
    report = json.loads((tmp_path / tenant / "report.json").read_text())
    assert report["events"] == len(log)
    assert (tmp_path / tenant / "report.html").exists()


async def test_the_reader_counts_progress_against_the_end_offsets(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any],
) -> None:
    import asyncio

    from streams.runtime.jobs.log_read import read_workspace_log
    from streams.runtime.root import Runtime

    tenant = tenant_factory()
    client = client_factory()
    log = sample_log(tenant, "prod")
    prod = client.workspace(tenant, "prod")
    for envelope in log:
        await prod.append_envelope(envelope)
    staging = client.workspace(tenant, "staging")
    for _ in range(7):
        await staging.append(AppEvent(name="ops:error_spike"))

    calls: list[tuple[int, int]] = []
    runtime = Runtime(settings)
    try:
        read = await asyncio.to_thread(
            read_workspace_log, runtime, tenant, "prod",
            progress=lambda done, total: calls.append((done, total)))
    finally:
        runtime.close()
    total = len(log) + 7
    assert calls[0] == (0, total) and calls[-1] == (total, total)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    assert read.records == total and read.undecodable == 0
    assert read.workspaces == {"prod", "staging"}
    assert sorted(e.event_id for e in read.envelopes) == sorted(e.event_id for e in log)
