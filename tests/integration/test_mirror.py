"""The feedback mirror as a running Faust worker against the real broker."""

import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer

from streams.core.actors import UserActor
from streams.core.events import AppEvent, RunStarted
from streams.core.feedback import Feedback, registry
from streams.core.targets import ChainTarget, RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import Resolution, TriageQuality
from streams.runtime.client.workspace import Workspace
from streams.settings import Settings
from tests.conftest import WorkerProcess, read_topic, wait_until


async def _run(ws: Workspace, run_id: str) -> str:
    spike = await ws.append(AppEvent(name="ops:error_spike", data={"service": "api"}))
    await ws.append(RunStarted(run_id=run_id, rule="ops:error-spike", action="triage",
                               firing_id=f"fir_{run_id}"),
                    correlation_id=spike.id, causation_id=spike.id)
    return spike.id


def _last_stats(worker: WorkerProcess) -> dict[str, Any] | None:
    lines = [line for line in worker.log().splitlines() if '{"stats"' in line]
    if not lines:
        return None
    return json.loads(lines[-1][lines[-1].index("{"):])["stats"]  # type: ignore[no-any-return]


async def test_feedback_becomes_scores(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    chain = await _run(ws, "run_1")
    on_run = await ws.give_feedback(TriageQuality(correct=False, severity="critical"),
                                    on=RunTarget(run_id="run_1"))
    on_chain = await ws.give_feedback(Resolution(resolved=True, minutes_to_mitigate=30),
                                      on=ChainTarget(correlation_id=chain))
    worker_factory()
    records = read_topic(settings, tenant_topics(tenant, settings.topic_prefix).scores,
                         at_least=4)
    by_name = {r["name"]: (m, r) for m, r in records}
    assert sorted(by_name) == ["resolution.minutes_to_mitigate", "resolution.resolved",
                               "triage_quality.correct", "triage_quality.severity"]
    msg, correct = by_name["triage_quality.correct"]
    assert msg.key() == on_run.id.encode()
    assert correct["numeric_value"] == 0.0 and correct["data_type"] == "BOOLEAN"
    assert correct["session_id"] == chain and correct["trace_id"] is None
    assert correct["source"] == {
        "tenant": tenant, "workspace": "prod", "feedback_type": "triage_quality",
        "target_kind": "run", "target_id": "run_1", "participant": "user:ada",
        "feedback_event_id": on_run.id, "seq": str(on_run.seq),
        # The rule and action of the run the feedback judges, for per-rule analytics.
        "rule": "ops:error-spike", "action": "triage",
    }
    assert by_name["triage_quality.severity"][1]["string_value"] == "critical"
    minutes = by_name["resolution.minutes_to_mitigate"][1]
    assert minutes["numeric_value"] == 30.0
    assert minutes["source"]["feedback_event_id"] == on_chain.id
    assert minutes["source"]["rule"] is None  # a chain is no rule's


async def test_unknown_types_skipped_and_bad_records_dead_lettered(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    class Extra(Feedback, name="extra_only_here", targets={"run"}):
        fine: bool

    try:
        tenant = tenant_factory()
        topics = tenant_topics(tenant, settings.topic_prefix)
        ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
        await _run(ws, "run_1")
        await ws.give_feedback(Extra(fine=True), on=RunTarget(run_id="run_1"))
        producer = Producer({"bootstrap.servers": settings.bootstrap_servers})
        producer.produce(topics.events, value=b"not avro at all", key=b"k1",
                         headers=[("event_type", b"feedback_given")])
        producer.produce(topics.events, value=b"\x00\x00\x00\xff\xffgarbage", key=b"k2")
        producer.flush(10)
        known = await ws.give_feedback(TriageQuality(correct=True, severity="low"),
                                       on=RunTarget(run_id="run_1"))
        worker = worker_factory("--stats-interval", "0.5")
        scores = read_topic(settings, topics.scores, at_least=2)
        assert {r["source"]["feedback_event_id"] for _m, r in scores} == {known.id}
        dead = read_topic(settings, topics.deadletter, at_least=2)
        assert sorted(m.key() for m, _r in dead) == [b"k1", b"k2"]
        for _msg, record in dead:
            assert record["stage"] == "mirror"
            assert record["source_topic"] == topics.events
            assert record["reason"]
        assert {r["value"] for _m, r in dead} == {b"not avro at all",
                                                  b"\x00\x00\x00\xff\xffgarbage"}
        stats = wait_until(lambda: (s := _last_stats(worker)) and s["feedback"] >= 2
                           and s["dead_letters"] >= 2 and s, 30, "worker stats")
        assert stats["skipped_unknown_type"] == 1
        assert stats["dead_letters"] == 2
        assert stats["per_tenant"][tenant]["skipped"] == 1
    finally:
        registry.unregister("extra_only_here")


async def test_worker_picks_up_a_tenant_created_after_it_started(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    first = tenant_factory()
    worker = worker_factory("--stats-interval", "0.5")
    wait_until(lambda: _last_stats(worker) is not None, 60, "the worker to start")
    ws = client_factory().workspace(first, "prod", actor=UserActor(id="ada"))
    await _run(ws, "run_0")
    await ws.give_feedback(TriageQuality(correct=True, severity="low"),
                           on=RunTarget(run_id="run_0"))
    read_topic(settings, tenant_topics(first, settings.topic_prefix).scores, at_least=2)

    late = tenant_factory()
    created = time.monotonic()
    late_ws = client_factory().workspace(late, "prod", actor=UserActor(id="bo"))
    await _run(late_ws, "run_1")
    await late_ws.give_feedback(TriageQuality(correct=True, severity="high"),
                                on=RunTarget(run_id="run_1"))
    scores = read_topic(settings, tenant_topics(late, settings.topic_prefix).scores,
                        at_least=2, timeout=90, settle=0.2)
    took = time.monotonic() - created
    print(f"new tenant served {took:.1f}s after it was created")
    assert Counter(r["source"]["tenant"] for _m, r in scores) == {late: 2}
