"""Completion-aware triggers on the real broker (streams.core.rules.chains): a worker judges
a chain once, when its terminal event comes or when the tenant's event time has moved a
quiet period past it; late events are ignored or judged again, also after a SIGKILL (the
chain's state and the partition's clock come back from the changelog).

The rules are tests/integration/rules_fixture.py's `t:chain-end` and `t:chain-quiet`.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from streams.adapters.kafka.config import reader_config
from streams.core.actors import UserActor
from streams.core.events import AppEvent, Envelope, RuleFired, RunSucceeded
from streams.core.tenancy import tenant_topics
from streams.runtime.client.views import view_path
from streams.runtime.client.workspace import Workspace
from streams.settings import Settings
from tests.conftest import WorkerProcess, decided_matches, unique, wait_until
from tests.integration.rules_fixture import RULES as FIXTURE_RULES
from tests.integration.test_rules_reactor import RULES, TYPES, of, wait_log


def _rules_records(settings: Settings, tenant: str) -> int:
    """The records (committed ones, not transaction markers) of the tenant's rules topic."""
    topic = tenant_topics(tenant, settings.topic_prefix).rules
    consumer = Consumer(reader_config(settings, unique("count-"),
                                      **{"enable.partition.eof": True}))
    try:
        meta = consumer.list_topics(topic, timeout=30)
        partitions = set(meta.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        counted, deadline = 0, time.monotonic() + 30
        while partitions and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                error = msg.error()
                if error is None:
                    counted += 1
                elif error.code() == KafkaError._PARTITION_EOF:
                    partitions.discard(msg.partition() or 0)
        return counted
    finally:
        consumer.close()


def _decided_all(settings: Settings, tenant: str) -> bool:
    """Whether the decider has committed past every record of the tenant's rules topic."""
    total = _rules_records(settings, tenant)
    return total > 0 and decided_matches(settings, tenant) >= total


def _fired(log: list[Envelope], rule: str) -> list[RuleFired]:
    found = [e.event for e in log if isinstance(e.event, RuleFired) and e.event.rule == rule]
    return [e for e in found if isinstance(e, RuleFired)]


async def _at(ws: Workspace, name: str, at: datetime, chain: str | None = None,
              **data: Any) -> Envelope:
    envelope = Envelope.new(AppEvent(name=name, data=data), tenant=ws.tenant,
                            workspace=ws.workspace, actor=ws.actor, correlation_id=chain,
                            time=at)
    return (await ws.append_envelope(envelope)).envelope


async def test_a_chain_is_judged_once_on_its_terminal_event_and_late_events_are_ignored(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    tenant = tenant_factory()
    worker_factory("--rules", RULES, types=TYPES)
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="agent"))
    now = datetime.now(UTC)
    first = await _at(ws, "t:step", now, kind="plan")
    c = first.correlation_id
    steps = [first] + [await _at(ws, "t:step", now + timedelta(seconds=i), c, kind="act")
                       for i in (1, 2)]
    await _at(ws, "t:step", now + timedelta(seconds=3), c, kind="noise")  # filtered out
    other = await _at(ws, "t:step", now, kind="plan")  # another chain, never ended here
    end = await _at(ws, "t:step-done", now + timedelta(seconds=4), c)
    log = await wait_log(ws, lambda es: of(es, RunSucceeded, rule="t:chain-end"), 120,
                         "the chain's judgement")
    [fired] = _fired(log, "t:chain-end")
    assert fired.matched == [s.event_id for s in steps]  # the whole chain, oldest first
    [succeeded] = of(log, RunSucceeded, rule="t:chain-end")
    assert succeeded.correlation_id == c
    assert isinstance(succeeded.event, RunSucceeded)
    assert succeeded.event.output == {"matched": [s.event_id for s in steps]}
    fired_envelope = next(e for e in log if isinstance(e.event, RuleFired)
                          and e.event.rule == "t:chain-end")
    assert fired_envelope.causation_id == end.event_id

    # A late step of the ended chain, and the terminal again: nothing more is judged.
    late = await _at(ws, "t:step", now + timedelta(seconds=5), c, kind="act")
    await _at(ws, "t:step-done", now + timedelta(seconds=6), c)
    wait_until(lambda: _decided_all(settings, tenant), 120, "the decider past every record")
    await asyncio.sleep(2)
    log = await ws.read()
    assert len(_fired(log, "t:chain-end")) == 1
    assert not [e for e in log if e.correlation_id == other.correlation_id
                and isinstance(e.event, RuleFired)]

    # `why` and `chain_events` from the index, then on a machine that keeps the tenant's
    # read view: the same answers, the view's without the index (a completion rule's `why`
    # reads the event's chain).
    rule = {r.name: r for r in FIXTURE_RULES}["t:chain-end"]
    asked = [*(s.event_id for s in steps), late.event_id, other.event_id]
    assert not view_path(settings, tenant).exists()  # so the index answers first
    by_index = [(await ws.why(rule, e)).as_dict() for e in asked]
    chains = (c, other.correlation_id)
    events_by_index = [[e.event_id for e in await ws.chain_events(x)] for x in chains]
    assert [o["outcome"] for o in by_index[3:]] == ["late", "gathered"]
    assert events_by_index[0][:3] == [s.event_id for s in steps]
    assert events_by_index[1] == [other.event_id]
    await client_factory().workspace(tenant, "prod").runs(limit=1)  # the view's file
    viewer = client_factory()
    seen = viewer.workspace(tenant, "prod", actor=UserActor(id="agent"))
    assert [(await seen.why(rule, e)).as_dict() for e in asked] == by_index
    assert [[e.event_id for e in await seen.chain_events(x)] for x in chains] \
        == events_by_index
    assert await seen.chain_events("evt_nothing") == []
    assert tenant not in viewer._indexes
    # Read-your-writes: an event appended a moment ago is in the chain the call reads.
    again = await _at(ws, "t:step", now + timedelta(seconds=7), c, kind="act")
    assert (await seen.chain_events(c))[-1].event_id == again.event_id


async def test_a_quiet_chain_is_judged_in_event_time_and_again_with_late_events_after_a_kill(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    tenant = tenant_factory()
    worker = worker_factory("--rules", RULES, types=TYPES)
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="agent"))
    # Event time an hour ago: the quiet period (5 minutes) is measured on the events'
    # times, not on the wall clock.
    t0 = datetime.now(UTC) - timedelta(hours=1)
    q1 = await _at(ws, "t:qstep", t0)
    q = q1.correlation_id
    q2 = await _at(ws, "t:qstep", t0 + timedelta(minutes=1), q)
    # Nothing moves the clock past q2 + 5 minutes yet: not judged.
    wait_until(lambda: _decided_all(settings, tenant), 120, "the decider past the steps")
    await asyncio.sleep(2)
    assert not _fired(await ws.read(), "t:chain-quiet")
    # Another chain's event, 10 minutes on: the tenant's event time passes q's quiet end
    # (on whichever rules partition q's key is: the reactor's ticks carry the time there).
    r1 = await _at(ws, "t:qstep", t0 + timedelta(minutes=10))
    log = await wait_log(ws, lambda es: [f for f in _fired(es, "t:chain-quiet")
                                         if f.scope_key == f"chain={q}"], 120,
                         "q judged after its quiet period")
    [first] = [f for f in _fired(log, "t:chain-quiet") if f.scope_key == f"chain={q}"]
    assert first.matched == [q1.event_id, q2.event_id]

    # SIGKILL: q's ended state and the clock must come back from the changelog.
    wait_until(lambda: _decided_all(settings, tenant), 120, "the decider's commit")
    worker.kill(signal.SIGKILL)
    worker.start()
    late = await _at(ws, "t:qstep", t0 + timedelta(minutes=12), q)  # late: judged again
    await _at(ws, "t:qstep", t0 + timedelta(minutes=20))  # moves the clock past it
    try:
        log = await wait_log(ws, lambda es: len([f for f in _fired(es, "t:chain-quiet")
                                                 if f.scope_key == f"chain={q}"]) >= 2
                             and [f for f in _fired(es, "t:chain-quiet")
                                  if f.scope_key == f"chain={r1.correlation_id}"], 180,
                             "q judged again with its late event, and r1 judged")
    except AssertionError as exc:
        fired = [(f.scope_key, f.matched) for f in _fired(await ws.read(), "t:chain-quiet")]
        said = worker.log_path.read_text(errors="replace")[-3000:]
        raise AssertionError(f"{exc}; q={q}, r1={r1.correlation_id}, fired: {fired}; "
                             f"worker log: {said}") from None
    judged = [f for f in _fired(log, "t:chain-quiet") if f.scope_key == f"chain={q}"]
    assert [f.matched for f in judged] == [[q1.event_id, q2.event_id],
                                          [q1.event_id, q2.event_id, late.event_id]]
    # r1's chain ended too (quiet since minute 10); each chain once per judgement.
    r_fired = [f for f in _fired(log, "t:chain-quiet")
               if f.scope_key == f"chain={r1.correlation_id}"]
    assert [f.matched for f in r_fired] == [[r1.event_id]]
    assert len({f.firing_id for f in _fired(log, "t:chain-quiet")}) == \
        len(_fired(log, "t:chain-quiet"))
