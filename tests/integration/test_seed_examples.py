"""Seed 000's awaited examples, run as written on the real broker, with workers running its
rules.

What differs from the seed, and nothing else:
- the import lines: the seed's `reflexr`/`reflexr.scores` names come from `streams`
  (`FeedbackMirror`, `sync_score_configs`, ...), and `evalr.langfuse`'s
  `LangfuseScoreConfigStore` and `LangfuseScoreSink` from `streams.adapters.langfuse`;
- the placeholders the seed leaves to the application, bound by the tests: `workspaces` is a
  StreamsClient; `workspace` is a handle from `await workspaces.open(tenant, "prod", ...)`;
  `latest` comes from the seed's own `[latest] = await ada.runs(...)`; the mirror block's
  `sink` is the seed's own PrintingSink; the Langfuse block's `telemetry` is an object whose
  `.langfuse` is a Langfuse client on the Langfuse stand-in (standins/langfuse_standin.py,
  an HTTP server that applies Langfuse's rules; not Langfuse), and `AppDeps`/`deps` are bound
  in tests/seed_000.py;
- the seed's `Reactor(workspaces, actions=..., deps=deps)` is its product's in-process
  runtime; here a worker runs the rules (`streams worker --types tests.seed_000 --rules
  tests.integration.seed_000_rules ...`), so the tests of rules start one. The mirror blocks
  need no worker: the mirror reads the log itself;
- the seed's mirror tasks run "until cancelled": the tests cancel them (`task.cancel()`) once
  the scores are in, and check what the sink received and where the cursor stands.
The seed's code is marked `# --- ... (the seed's code) ---` in each test.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from langfuse import Langfuse

from standins.langfuse_standin import LangfuseStandIn
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
    Workspace,
    scores_of,
)
from streams.core.tenancy import tenant_topics
from streams.runtime.root import Runtime
from streams.runtime.sink.mirror import mirror_group
from streams.runtime.sink.runner import SinkRunner
from streams.settings import Settings
from tests.conftest import WorkerProcess
from tests.integration.test_feedback_mirror import committed as group_committed
from tests.integration.test_feedback_mirror import end_offsets, eventually
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


async def triage_run(ws: Workspace, run_id: str) -> None:
    """A triage run in the log, for feedback to be about (no worker needed for the mirror)."""
    spike = await ws.append(AppEvent(name="ops:error_spike", data={"service": "api"}))
    await ws.append(RunStarted(run_id=run_id, rule="ops:error-spike", action="triage",
                               firing_id=f"fir_{run_id}"),
                    correlation_id=spike.id, causation_id=spike.id)


def printed_lines(envelopes: list[Any]) -> list[str]:
    """What the seed's PrintingSink prints for these feedback envelopes' scores."""
    return sorted(f"{s.name} {s.value} {s.trace_id or s.session_id}"
                  for e in envelopes for s in scores_of(e) or [])


async def printed_until(capsys: pytest.CaptureFixture[str], want: list[str],
                        seen: list[str], within: float = 90) -> list[str]:
    """The lines printed, once `want` are all among them."""
    async with asyncio.timeout(within):
        while True:
            seen += capsys.readouterr().out.splitlines()
            if sorted(seen) == want or len(seen) > len(want):
                return sorted(seen)
            await asyncio.sleep(0.1)


async def cancelled(task: asyncio.Task[Any]) -> None:
    """Cancel a task the seed runs "until cancelled", and wait for it to end."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_the_seeds_mirror_follows_a_workspace_into_its_printing_sink(
    seed: ModuleType, settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., StreamsClient], capsys: pytest.CaptureFixture[str],
) -> None:
    TriageQuality = seed.TriageQuality
    tenant = tenant_factory()
    workspaces = client_factory()
    workspace = await workspaces.open(tenant, "prod", actor=UserActor(id="ada"))
    await triage_run(workspace, "run_1")
    before = await workspace.give_feedback(
        TriageQuality(correct=False, severity="critical", note="It missed the bad deploy."),
        on=RunTarget(run_id="run_1"))
    sink = seed.PrintingSink()

    # --- Scores: the mirror (the seed's code) ---
    import asyncio

    from streams import FeedbackMirror

    mirror = FeedbackMirror(workspace, sink, cursor="warehouse")
    task = asyncio.create_task(mirror.follow())  # until cancelled
    # ---

    # Feedback from before the mirror started and while it runs, each printed once.
    during = await workspace.as_actor(UserActor(id="bo")).give_feedback(
        TriageQuality(correct=True, severity="high"), on=RunTarget(run_id="run_1"))
    want = printed_lines([before.envelope, during.envelope])
    assert len(want) == 5  # correct, severity and note; correct and severity
    assert await printed_until(capsys, want, []) == want
    await cancelled(task)
    events = tenant_topics(tenant, settings.topic_prefix).events
    group = mirror_group(settings, tenant, "prod", "warehouse")
    assert group_committed(settings, group) == end_offsets(settings, events)

    # The seed's block again, as a restarted process would run it: the cursor carries on,
    # so only feedback given since is printed.
    after = await workspace.give_feedback(TriageQuality(correct=True, severity="low"),
                                          on=RunTarget(run_id="run_1"))
    mirror = FeedbackMirror(workspace, sink, cursor="warehouse")
    task = asyncio.create_task(mirror.follow())  # until cancelled
    want = printed_lines([after.envelope])
    assert await printed_until(capsys, want, []) == want
    await asyncio.sleep(1)  # a repeat of the earlier feedback would be printed by now
    await cancelled(task)
    assert capsys.readouterr().out == ""
    assert mirror.stats.feedback == 1


async def test_the_seeds_langfuse_block_mirrors_feedback_into_langfuse(
    seed: ModuleType, settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., StreamsClient],
    standin_factory: Callable[[], LangfuseStandIn],
) -> None:
    TriageQuality = seed.TriageQuality
    tenant = tenant_factory()
    workspace = await client_factory().open(tenant, "prod", actor=UserActor(id="ada"))
    await triage_run(workspace, "run_1")
    given = await workspace.give_feedback(
        TriageQuality(correct=False, severity="critical", note="It missed the bad deploy."),
        on=RunTarget(run_id="run_1"))
    standin = standin_factory()
    telemetry = SimpleNamespace(langfuse=Langfuse(
        public_key=standin.public_key, secret_key=standin.secret_key, host=standin.url,
        tracing_enabled=False))

    # --- Scores in Langfuse (the seed's code) ---
    import asyncio  # noqa: I001  (the seed's imports, in its order)

    from streams.adapters.langfuse import LangfuseScoreConfigStore, LangfuseScoreSink

    from streams import FeedbackMirror, sync_score_configs

    # From configure_telemetry(..., langfuse="traces" or "scores"), or langfuse_client(...):
    langfuse = telemetry.langfuse
    await sync_score_configs(LangfuseScoreConfigStore(langfuse))  # once, at startup
    sink = LangfuseScoreSink(langfuse)
    mirror = FeedbackMirror(workspace, sink, cursor="langfuse")
    task = asyncio.create_task(mirror.follow())
    # ---

    later = await workspace.give_feedback(TriageQuality(correct=True, severity="high"),
                                          on=RunTarget(run_id="run_1"))
    want = {s.id: s for e in (given.envelope, later.envelope) for s in scores_of(e) or []}
    await eventually(lambda: {s["id"] for s in standin.scores()} == set(want), tasks=[task])
    await cancelled(task)
    assert {c["name"] for c in standin.score_configs()} >= {
        "triage_quality.correct", "triage_quality.severity", "triage_quality.note"}
    stored = {s["id"]: s for s in standin.scores()}
    for score_id, score in want.items():
        assert stored[score_id]["name"] == score.name
        assert stored[score_id]["sessionId"] == given.envelope.correlation_id
    assert len(standin.scores()) == len(want) == 5
    events = tenant_topics(tenant, settings.topic_prefix).events
    assert group_committed(settings, mirror_group(settings, tenant, "prod", "langfuse")) == \
        end_offsets(settings, events)
