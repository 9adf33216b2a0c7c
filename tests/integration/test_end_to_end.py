"""Feedback to Langfuse: a worker mirrors feedback into scores, a sink carries them into the
Langfuse stand-in (an HTTP server applying Langfuse's rules; not Langfuse); applications'
traces reach it through configure_telemetry, each tenant's in its own project."""

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from standins.langfuse_standin import LangfuseStandIn
from streams.core.actors import EvaluatorActor, UserActor
from streams.core.events import AppEvent, RunStarted, TraceContext
from streams.core.targets import ChainTarget, RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import Resolution, TriageQuality
from streams.settings import Settings
from tests.conftest import REPO, WorkerProcess, read_topic, wait_until
from tests.integration.conftest import SinkProcess

TRACE = TraceContext(traceparent=f"00-{'4b' * 16}-{'1c' * 8}-01")


async def test_feedback_reaches_langfuse_on_its_trace_or_session(
    tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
    worker_factory: Callable[..., WorkerProcess],
    standin_factory: Callable[[], LangfuseStandIn],
    sink_factory: Callable[..., SinkProcess],
) -> None:
    tenant = tenant_factory()
    standin = standin_factory()
    worker_factory()
    sink_factory(standin, "--cursor", "langfuse")
    ada = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    spike = await ada.append(AppEvent(name="ops:error_spike"), trace=TRACE)
    await ada.append(RunStarted(run_id="run_1", rule="ops:error-spike", action="triage",
                                firing_id="fir_1"),
                     correlation_id=spike.id, causation_id=spike.id, trace=TRACE)
    on_run = await ada.give_feedback(TriageQuality(correct=False, severity="critical",
                                                   note="missed the deploy"),
                                     on=RunTarget(run_id="run_1"))
    judge = ada.as_actor(EvaluatorActor(name="triage-judge", version="2"))
    on_chain = await judge.give_feedback(Resolution(resolved=True, minutes_to_mitigate=30),
                                         on=ChainTarget(correlation_id=spike.id))

    wait_until(lambda: len(standin.scores()) >= 5, 120, "five scores in the stand-in")
    scores = {s["name"]: s for s in standin.scores()}
    assert sorted(scores) == ["resolution.minutes_to_mitigate", "resolution.resolved",
                              "triage_quality.correct", "triage_quality.note",
                              "triage_quality.severity"]
    correct = scores["triage_quality.correct"]
    assert correct["traceId"] == "4b" * 16  # the run's trace
    assert correct["dataType"] == "BOOLEAN" and correct["value"] == 0
    assert correct["metadata"]["participant"] == "user:ada"
    assert correct["metadata"]["feedback_event_id"] == on_run.id
    assert scores["triage_quality.severity"]["stringValue"] == "critical"
    assert scores["triage_quality.note"]["stringValue"] == "missed the deploy"
    resolved = scores["resolution.resolved"]
    assert resolved["traceId"] == "4b" * 16  # the chain's first event had the trace
    assert resolved["metadata"]["participant"] == "evaluator:triage-judge@2"
    assert resolved["metadata"]["feedback_event_id"] == on_chain.id
    minutes = scores["resolution.minutes_to_mitigate"]
    assert minutes["value"] == 30 and minutes["dataType"] == "NUMERIC"
    assert {c["name"] for c in standin.score_configs()} >= set(scores)


async def test_each_tenants_traces_and_scores_reach_its_own_langfuse_project_and_no_other(
    settings: Settings, tenant_factory: Callable[..., str],
    worker_factory: Callable[..., WorkerProcess],
    standin_factory: Callable[[], LangfuseStandIn],
    sink_factory: Callable[..., SinkProcess], tmp_path: Path,
) -> None:
    acme, beta, gamma = tenant_factory(), tenant_factory(), tenant_factory()
    projects = {acme: standin_factory(), beta: standin_factory()}  # gamma has none
    path = tmp_path / "projects.json"
    path.write_text(json.dumps({tenant: {"public_key": s.public_key, "secret_key": s.secret_key,
                                         "host": s.url} for tenant, s in projects.items()}))
    worker_factory()
    # The projects file, not LANGFUSE_* (set to acme's stand-in here), decides where scores go.
    sink_factory(projects[acme], "--cursor", "langfuse", STREAMS_LANGFUSE_PROJECTS=str(path))
    # Each tenant's application: configure_telemetry(tenant=..., langfuse="traces"), a run
    # appended inside its span, then judged (tests/integration/telemetry_app.py).
    apps: dict[str, dict[str, Any]] = {}
    for tenant in (acme, beta, gamma):
        done = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "tests.integration.telemetry_app", tenant],
            env=settings.child_env(STREAMS_LANGFUSE_PROJECTS=str(path)), cwd=REPO,
            capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr[-4000:]
        apps[tenant] = json.loads(done.stdout.strip().splitlines()[-1])
        if tenant == gamma:
            assert "has no Langfuse project in STREAMS_LANGFUSE_PROJECTS" in done.stderr
    assert [t for t, app in apps.items() if app["langfuse"]] == [acme, beta]
    for tenant, standin in projects.items():
        wait_until(lambda s=standin: len(s.scores()) >= 3, 120, f"{tenant}'s three scores")
    dead = read_topic(settings, tenant_topics(gamma, settings.topic_prefix).deadletter,
                      at_least=3, timeout=120)
    await asyncio.sleep(2.0)  # anything sent to the wrong project would have arrived by now
    for tenant, standin in projects.items():
        scores = standin.scores()
        assert len(scores) == 3, scores
        assert {s["metadata"]["tenant"] for s in scores} == {tenant}
        assert [s["stringValue"] for s in scores if s["name"].endswith(".note")] == [tenant]
        # The scores sit on the run's trace, and that trace is in this project, no other's.
        assert {s["traceId"] for s in scores} == {apps[tenant]["trace_id"]}
        traces = {span["trace_id"] for span in standin.traces()}
        assert apps[tenant]["trace_id"] in traces
        assert traces.isdisjoint(app["trace_id"] for t, app in apps.items() if t != tenant)
        assert {span["service"] for span in standin.traces()} == {"triage-app"}
    assert len(dead) == 3
    assert all("has no Langfuse project in STREAMS_LANGFUSE_PROJECTS" in r["reason"]
               for _m, r in dead), [r["reason"] for _m, r in dead]
    assert {c["name"] for c in projects[beta].score_configs()} >= {
        "triage_quality.correct", "triage_quality.severity", "triage_quality.note"}
