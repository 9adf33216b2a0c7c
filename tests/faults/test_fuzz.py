"""Hostile records on a tenant's events topic, with a worker running: each is dead-lettered
with a reason that names its problem, and the good feedback interleaved with them is scored
exactly once (by score id)."""

from __future__ import annotations

import asyncio
import json
import math
import random
import struct
from collections import Counter
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer

from streams.adapters.avro.schemas import feedback_given_schema
from streams.adapters.avro.serde import AvroSerde
from streams.core.actors import UserActor
from streams.core.events import AppEvent, Envelope, FeedbackGiven, RunStarted
from streams.core.targets import ChainTarget, RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import Resolution, TriageQuality
from streams.settings import Settings
from tests.conftest import WorkerProcess, read_topic, wait_until
from tests.faults.conftest import assert_alive, check_scores
from tests.faults.fault_types import WORKER_TYPES, Edges

NOT_AN_EVENT = {"type": "record", "name": "NotAnEvent", "namespace": "tests.faults",
                "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "long"}]}


def _stats(worker: WorkerProcess) -> dict[str, Any] | None:
    lines = [line for line in worker.log().splitlines() if '{"stats"' in line]
    return json.loads(lines[-1][lines[-1].index("{"):])["stats"] if lines else None


def _feedback_bytes(serde: AvroSerde, topic: str, tenant: str, chain: str, feedback_type: str,
                    target: Any, value: dict[str, Any], schema: Any = None) -> bytes:
    """A feedback_given record written straight as Avro, as another producer could, without
    give_feedback's validation."""
    envelope = Envelope.new(
        FeedbackGiven(feedback_type=feedback_type, target=target, value=value),
        tenant=tenant, workspace="prod", actor=UserActor(id="mallory"), correlation_id=chain)
    if schema is None:
        return serde.encode_envelope(envelope, topic)
    from streams.adapters.avro.codec import envelope_to_record
    return serde.encode(schema, envelope_to_record(envelope), topic)


async def test_hostile_records_are_dead_lettered_and_good_ones_scored_once(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    rng = random.Random(14)
    tenant = tenant_factory()
    topics = tenant_topics(tenant, settings.topic_prefix)
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    spike = await ws.append(AppEvent(name="ops:error_spike"))
    await ws.append(RunStarted(run_id="run_1", rule="r", action="triage", firing_id="f"),
                    correlation_id=spike.id, causation_id=spike.id)
    worker = worker_factory("--stats-interval", "0.5", "--batch-size", "20", types=WORKER_TYPES)
    wait_until(lambda: _stats(worker) is not None, 90, "the worker to start")

    serde = AvroSerde(settings)
    good = _feedback_bytes(serde, topics.events, tenant, spike.id, "triage_quality",
                           RunTarget(run_id="run_1"),
                           {"correct": True, "severity": "high", "note": "fine"})

    def edges(**change: Any) -> dict[str, Any]:
        return {"flag": True, "level": "mid", "big": 1, "small": 0, "ratio": 0.5,
                "anything": 1.0, "note": None, **change}

    def edges_bytes(**change: Any) -> bytes:
        return _feedback_bytes(serde, topics.events, tenant, spike.id, "fault_edges",
                               RunTarget(run_id="run_1"), edges(**change))

    # key -> (value, expected words of the reason)
    bad: dict[str, tuple[bytes | None, list[str]]] = {}
    for i in range(6):
        noise = bytes([rng.randrange(1, 256)]) + rng.randbytes(rng.randrange(0, 60))
        bad[f"random-{i}"] = (noise, ["not Confluent-framed Avro"])
    bad["empty"] = (b"", ["too short"])
    bad["tombstone"] = (None, ["no value"])
    bad["magic"] = (b"\x01" + good[1:], ["bad magic byte"])
    unknown_id = 2**31 - 11
    bad["unknown-id"] = (b"\x00" + struct.pack(">I", unknown_id) + good[5:],
                         [f"schema id {unknown_id}", "does not know"])
    for cut in (4, 7, len(good) // 2, len(good) - 1):
        bad[f"truncated-{cut}"] = (good[:cut], ["too short"] if cut < 5 else ["undecodable"])
    bad["trailing"] = (good + b"\x00\x02", ["2 bytes after"])
    bad["not-an-event"] = (serde.encode(NOT_AN_EVENT, {"id": "x", "n": 3}, topics.events),
                           ["not an event", "envelope"])
    bad["wrong-target"] = (
        _feedback_bytes(serde, topics.events, tenant, spike.id, "triage_quality",
                        ChainTarget(correlation_id=spike.id), {"correct": True,
                                                                "severity": "low",
                                                                "note": None}),
        ["triage_quality", "cannot be given on a chain"])
    bad["minutes-below"] = (
        _feedback_bytes(serde, topics.events, tenant, spike.id, "resolution",
                        ChainTarget(correlation_id=spike.id),
                        {"resolved": True, "minutes_to_mitigate": -5},
                        feedback_given_schema(Resolution)),
        ["resolution", "minutes_to_mitigate", "greater than or equal to 0"])
    bad["minutes-above"] = (
        _feedback_bytes(serde, topics.events, tenant, spike.id, "resolution",
                        ChainTarget(correlation_id=spike.id),
                        {"resolved": False, "minutes_to_mitigate": 1441},
                        feedback_given_schema(Resolution)),
        ["minutes_to_mitigate", "less than or equal to 1440"])
    bad["small-above"] = (edges_bytes(small=4), ["fault_edges", "small", "less than or equal"])
    bad["ratio-zero"] = (edges_bytes(ratio=0.0), ["ratio", "greater than 0"])
    bad["ratio-above"] = (edges_bytes(ratio=1.0000001), ["ratio", "less than or equal to 1"])
    bad["nan"] = (edges_bytes(anything=math.nan), ["fault_edges.anything", "not a finite"])
    bad["inf"] = (edges_bytes(anything=-math.inf), ["fault_edges.anything", "not a finite"])

    producer = Producer({"bootstrap.servers": settings.bootstrap_servers})
    expected: dict[str, set[str]] = {}
    triage = {"triage_quality.correct", "triage_quality.severity"}
    edge_names = {f"fault_edges.{f}" for f in ("flag", "level", "big", "small", "ratio",
                                               "anything")}
    # Garbage whose header says it is not feedback is skipped without decoding: no letter.
    producer.produce(topics.events, value=b"\xff garbage", key=b"skipped-by-header",
                     headers=[("event_type", b"app_event")])
    for n, (key, (value, _words)) in enumerate(sorted(bad.items(), key=lambda _: rng.random())):
        headers = [("event_type", b"feedback_given")] if n % 2 else None
        producer.produce(topics.events, value=value, key=key.encode(), headers=headers)
        producer.flush(10)
        # Good feedback between every two bad records, at the edges of its type.
        batch = await asyncio.gather(
            ws.give_feedback(TriageQuality(correct=n % 2 == 0, severity="critical"),
                             on=RunTarget(run_id="run_1")),
            ws.give_feedback(Edges(flag=False, level="high",
                                   big=[2**63 - 1, -(2**63), 0][n % 3],
                                   small=[-3, 3, 0][n % 3], ratio=[5e-324, 1.0, 0.25][n % 3],
                                   anything=[-1.7976931348623157e308, 0.0, 1e-300][n % 3],
                                   note=["", "ünïcödé ✓ 🎉", "\x00tab\t"][n % 3]),
                             on=ChainTarget(correlation_id=spike.id)))
        expected[batch[0].id] = triage
        expected[batch[1].id] = edge_names | ({"fault_edges.note"} if n % 3 else set())
    assert producer.flush(10) == 0

    scores = read_topic(settings, topics.scores,
                        at_least=sum(len(v) for v in expected.values()), timeout=120)
    dead = read_topic(settings, topics.deadletter, at_least=len(bad), timeout=120)
    repeats = check_scores(scores, expected)
    assert repeats == 0, "nothing failed: no score is written twice"
    by_key = Counter(m.key().decode() for m, _r in dead)
    assert by_key == Counter(list(bad)), "each bad record dead-lettered exactly once, nothing else"
    for msg, record in dead:
        key = msg.key().decode()
        value, words = bad[key]
        assert record["stage"] == "mirror" and record["source_topic"] == topics.events
        assert record["value"] == value
        for word in words:
            assert word in record["reason"], (key, record["reason"])
        assert dict(msg.headers() or [])["reason"].decode() == record["reason"][:200]
    # The values written at the edges of their types came out as given.
    edge_scores = {(r["source"]["feedback_event_id"], r["name"]): r for _m, r in scores}
    bigs = sorted(r["numeric_value"] for (_f, name), r in edge_scores.items()
                  if name == "fault_edges.big")
    assert {bigs[0], bigs[-1]} == {float(-(2**63)), float(2**63 - 1)}
    assert any(r["string_value"] == "ünïcödé ✓ 🎉" for r in edge_scores.values())
    stats = wait_until(lambda: (s := _stats(worker)) and s["dead_letters"] >= len(bad) and s,
                       30, "worker stats")
    assert stats["dead_letters"] == len(bad)
    assert stats["skipped_unknown_type"] == 0
    assert_alive(worker)
    print(f"{len(bad)} hostile records dead-lettered, {len(expected)} good feedback events "
          f"scored once ({len(scores)} score records)")
