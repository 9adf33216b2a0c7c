"""Seed 000's awaited examples, run as written on the real broker, with workers running its
rules.

The seed's placeholders are bound by the tests: `workspaces` is a StreamsClient, `latest`
comes from the seed's own `[latest] = await ada.runs(...)`, and `AppDeps`/`deps` are bound in
tests/seed_000.py. The seed's `Reactor(workspaces, actions=..., deps=deps)` is its product's
in-process runtime; here a worker runs the rules (`streams worker --types tests.seed_000
--rules tests.integration.seed_000_rules ...`), so each test starts one.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest

from streams import (
    AppEvent,
    EvaluatorActor,
    FeedbackGiven,
    NotFound,
    RunStarted,
    RunSucceeded,
    RunTarget,
    StreamsClient,
    UserActor,
)
from streams.runtime.root import Runtime
from streams.runtime.sink.runner import SinkRunner
from streams.settings import Settings
from tests.conftest import WorkerProcess
from tests.integration.test_rules_reactor import of, wait_log
from tests.integration.test_sinks import committed, make_scores, produce_scores
from tests.seed_loader import load_seed

TYPES = "tests.seed_000"
RULES = "tests.integration.seed_000_rules"
JUDGE_RULES = "tests.integration.seed_000_judge_rules"


@pytest.fixture
def seed() -> Iterator[ModuleType]:
    yield from load_seed()


async def spike(ws: Any, service: str, errors: int) -> None:
    """The three error events that make the error-spike rule start a triage run."""
    for _ in range(3):
        await ws.append(AppEvent(name="ops:error_spike",
                                 data={"service": service, "errors": errors}))


async def test_open_runs_give_and_read_feedback_as_in_the_seed(
    seed: ModuleType, tenant_factory: Callable[..., str],
    client_factory: Callable[..., StreamsClient],
    worker_factory: Callable[..., WorkerProcess],
) -> None:
    TriageQuality = seed.TriageQuality
    # Each test has its own topic prefix, so the seed's tenant name is this test's own.
    tenant_factory("acme")
    worker_factory("--rules", RULES, types=TYPES)
    workspaces = client_factory()
    with pytest.raises(NotFound, match=r"no tenant 'globex'.*streams tenant create globex"):
        await workspaces.open("globex", "prod", actor=UserActor(id="ada"))

    # Two triage runs, the db one after the api one.
    producer = await workspaces.open("acme", "prod", actor=UserActor(id="monitor"))
    await spike(producer, "api", 2)
    await wait_log(producer, lambda es: of(es, RunSucceeded, rule="ops:error-spike"), 90,
                   "the api triage run")
    await spike(producer, "db", 2)
    log = await wait_log(producer,
                         lambda es: len(of(es, RunSucceeded, rule="ops:error-spike")) == 2, 90,
                         "the db triage run")
    db_run = next(e.event.run_id for e in of(log, RunStarted, rule="ops:error-spike")
                  if e.event.scope == {"service": "db"})  # type: ignore[attr-defined]

    # --- Giving feedback (the seed's code) ---
    ada = await workspaces.open("acme", "prod", actor=UserActor(id="ada"))
    [latest] = await ada.runs(rule="ops:error-spike", limit=1)
    await ada.give_feedback(
        TriageQuality(correct=False, severity="critical", note="It missed the bad deploy."),
        on=RunTarget(run_id=latest.id),
    )
    # ---
    assert latest.id == db_run  # the newest run of the rule
    assert ada.actor.participant == "user:ada"
    assert [r.run.scope["service"] for r in await ada.runs(rule="ops:error-spike")] == [
        "db", "api"]

    # --- Evaluators (the seed's code) ---
    evaluator = ada.as_actor(EvaluatorActor(name="triage-judge", version="2026-09-28"))
    await evaluator.give_feedback(
        TriageQuality(correct=True, severity="high"), on=RunTarget(run_id=latest.id)
    )
    # ---

    # --- Reading feedback (the seed's code) ---
    verdicts = [
        (envelope.actor.participant, envelope.event.value)
        for envelope in await ada.read()
        if isinstance(envelope.event, FeedbackGiven)
        and envelope.event.feedback_type == "triage_quality"
    ]
    # ---
    assert verdicts == [('user:ada', {'correct': False, 'severity': 'critical', 'note': 'It missed the bad deploy.'}), ('evaluator:triage-judge@2026-09-28', {'correct': True, 'severity': 'high', 'note': None})]  # noqa: E501  (the seed's printed list, as printed)

    # The wrong-triage rule escalates ada's verdict (in the run's chain), not the judge's.
    log = await wait_log(ada, lambda es: of(es, RunSucceeded, rule="ops:wrong-triage"), 90,
                         "the escalation run")
    await asyncio.sleep(2)  # a second escalation, if one were coming, would be in by now
    log = await ada.read()
    [escalation] = of(log, RunStarted, rule="ops:wrong-triage")
    [started] = [e for e in log if isinstance(e.event, RunStarted) and e.event.run_id == db_run]
    assert escalation.correlation_id == started.correlation_id
    [escalated] = [e for e in log if e.event_type == "oncall:escalated"]
    ada_verdict = next(e for e in log if isinstance(e.event, FeedbackGiven)
                       and e.actor.participant == "user:ada")
    assert escalated.data == {"because": ada_verdict.event_id, "pager": "ops-oncall"}


async def test_the_evaluator_as_a_rule_judges_triage_runs(
    seed: ModuleType, tenant_factory: Callable[..., str],
    client_factory: Callable[..., StreamsClient],
    worker_factory: Callable[..., WorkerProcess],
) -> None:
    tenant = tenant_factory()
    worker_factory("--rules", RULES, "--rules", JUDGE_RULES, types=TYPES)
    ws = await client_factory().open(tenant, "prod", actor=UserActor(id="monitor"))
    await spike(ws, "api", 5)  # 15 errors: triage opens an incident
    await spike(ws, "db", 1)  # 3 errors: triage opens none
    log = await wait_log(ws, lambda es: len(of(es, RunSucceeded, rule="ops:judge-triage")) == 2
                         and of(es, RunSucceeded, rule="ops:wrong-triage"), 120,
                         "two judgements and an escalation")
    triage = {e.event.scope["service"]: e.event.run_id  # type: ignore[attr-defined]
              for e in of(log, RunStarted, rule="ops:error-spike")}
    verdicts = {e.event.target.id: (e.actor.participant, e.event.value)  # type: ignore[attr-defined]
                for e in of(log, FeedbackGiven)}
    assert verdicts == {
        triage["api"]: ("evaluator:opened-incident@1",
                        {"correct": True, "severity": "high", "note": None}),
        triage["db"]: ("evaluator:opened-incident@1",
                       {"correct": False, "severity": "high", "note": None}),
    }
    outputs = [e.event.output for e in of(log, RunSucceeded, rule="ops:judge-triage")]  # type: ignore[attr-defined]
    assert {(o["evaluator"], o["version"]) for o in outputs} == {("opened-incident", "1")}
    # The judge's wrong verdict on the db triage escalates, in that run's chain.
    [escalation] = of(log, RunStarted, rule="ops:wrong-triage")
    [db_started] = [e for e in of(log, RunStarted, rule="ops:error-spike")
                    if e.event.run_id == triage["db"]]  # type: ignore[attr-defined]
    assert escalation.correlation_id == db_started.correlation_id


async def test_the_printing_sink_runs_in_the_sink_runner(
    seed: ModuleType, settings: Settings, tenant_factory: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    tenant = tenant_factory()
    scores = make_scores(tenant, 20)
    produce_scores(settings, tenant, scores)
    cursor = f"printing-{uuid.uuid4().hex[:8]}"
    runner = SinkRunner(Runtime(settings), seed.PrintingSink(), cursor=cursor)
    stats = await asyncio.wait_for(runner.run(until=lambda s: s.scores >= len(scores)), 90)
    assert stats.scores == len(scores) and stats.rejected == 0 and stats.undecodable == 0
    printed = capsys.readouterr().out.splitlines()
    assert sorted(printed) == sorted(f"{s.name} {s.value} {s.trace_id or s.session_id}"
                                     for s in scores)
    # None from record means all accepted: the cursor moved past every score.
    assert sum(committed(settings, cursor).values()) == len(scores)
