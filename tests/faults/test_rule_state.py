"""Stateful rules' state on the real broker: restored from the changelog after a SIGKILL,
rebuilt when the local store is deleted or truncated, and moved between two workers of one
group (a second one joining, one SIGKILLed) with exact limits and counts.

The rules (tests/integration/rules_fixture.py): `t:host-limited`, at most 3 firings per host
(one window for the test), and `t:host-count`, a firing for every 4 hits of a host. Each hit
matches both, so a host's two keys (`<rule>|host=<h>`) sit in the partitions they hash to.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from streams.adapters.kafka.config import admin_config
from streams.core.actors import UserActor
from streams.core.events import AppEvent, RuleFired
from streams.core.tenancy import decider_group, tenant_topics, worker_rules_group
from streams.runtime.client.workspace import Workspace
from streams.runtime.worker.app import MIRROR_CURSOR
from streams.settings import Settings
from tests.conftest import WorkerProcess, decided_matches, wait_until
from tests.faults.conftest import assert_alive

RULES = "tests.integration.rules_fixture"
TYPES = "streams.examples.ops,streams.core.judges"
HOSTS = [f"h{i}" for i in range(8)]


def decided(settings: Settings, tenant: str) -> dict[int, int]:
    """The decider group's committed offset per partition of the tenant's rules topic."""
    admin = AdminClient(admin_config(settings))
    group = decider_group(settings.topic_prefix)
    rules = tenant_topics(tenant, settings.topic_prefix).rules
    try:
        result = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)])[group].result()
    except Exception:
        return {}
    return {tp.partition: tp.offset for tp in result.topic_partitions
            if tp.topic == rules and tp.offset > 0}


def members_with(settings: Settings, tenant: str) -> int:
    """How many members of the decider group hold partitions of the tenant's rules topic."""
    admin = AdminClient(admin_config(settings))
    group = decider_group(settings.topic_prefix)
    rules = tenant_topics(tenant, settings.topic_prefix).rules
    described = admin.describe_consumer_groups([group])[group].result()
    return sum(any(tp.topic == rules for tp in member.assignment.topic_partitions)
               for member in described.members)


async def hit(ws: Workspace, rounds: int) -> list[tuple[int, int]]:
    """`rounds` hits of every host (one round after the other); where each landed
    (partition, offset), in order."""
    landed: list[tuple[int, int]] = []
    for _ in range(rounds):
        done = await asyncio.gather(*(ws.append(AppEvent(name="t:hit", data={"host": h}))
                                      for h in HOSTS))
        landed += [(result.seq.partition, result.seq.offset) for result in done]
    return landed


async def firings(ws: Workspace, settings: Settings, tenant: str,
                  hits: int) -> Counter[tuple[str, str]]:
    """Once every forwarded match of `hits` hits per host is decided: the firings per
    (rule, scope key), distinct by firing id."""
    wanted = 2 * hits * len(HOSTS)
    wait_until(lambda: decided_matches(settings, tenant) >= wanted, 180,
               f"{wanted} decisions")
    await asyncio.sleep(2)
    seen: dict[str, tuple[str, str]] = {}
    for e in await ws.read():
        if isinstance(e.event, RuleFired):
            seen[e.event.firing_id] = (e.event.rule, e.event.scope_key or "")
    return Counter(seen.values())


def expected(hits: int) -> Counter[tuple[str, str]]:
    want: Counter[tuple[str, str]] = Counter()
    for h in HOSTS:
        want[("t:host-limited", f"host={h}")] = min(hits, 3)
        if hits // 4:
            want[("t:host-count", f"host={h}")] = hits // 4
    return want


def stores(state_dir: Path) -> list[Path]:
    return sorted(state_dir.rglob("state.sqlite"))


async def test_state_is_restored_from_the_changelog_after_sigkill(
    settings: Settings, tenant_factory: Callable[..., str], tmp_path: Path,
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    tenant = tenant_factory(partitions=3)
    state = tmp_path / "state"
    worker = worker_factory("--rules", RULES, types=TYPES, STREAMS_STATE_DIR=str(state))
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="load"))
    await hit(ws, 3)
    assert await firings(ws, settings, tenant, 3) == expected(3)
    assert len(decided(settings, tenant)) > 1  # the keys really spread over partitions
    worker.kill(signal.SIGKILL)
    # Another machine's worker: no local store, so the state comes from the changelog alone.
    other = worker_factory("--rules", RULES, types=TYPES,
                           STREAMS_STATE_DIR=str(tmp_path / "elsewhere"))
    await hit(ws, 5)
    assert await firings(ws, settings, tenant, 8) == expected(8)
    assert stores(tmp_path / "elsewhere")
    other.kill(signal.SIGKILL)
    # Back on the first machine: its store is behind the changelog, which it catches up.
    worker.start()
    await hit(ws, 2)
    assert await firings(ws, settings, tenant, 10) == expected(10)
    assert_alive(worker)


@pytest.mark.parametrize("damage", ["delete", "truncate"])
async def test_a_deleted_or_truncated_store_is_rebuilt_from_the_changelog(
    settings: Settings, tenant_factory: Callable[..., str], tmp_path: Path, damage: str,
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    tenant = tenant_factory(partitions=3)
    state = tmp_path / "state"
    worker = worker_factory("--rules", RULES, types=TYPES, STREAMS_STATE_DIR=str(state))
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="load"))
    await hit(ws, 3)
    assert await firings(ws, settings, tenant, 3) == expected(3)
    files = stores(state)
    assert files
    # Under the running worker: damage every store, then kill it before it notices.
    for path in files:
        if damage == "delete":
            shutil.rmtree(path.parent)
        else:
            for file in path.parent.iterdir():
                with file.open("r+b") as f:
                    f.truncate(file.stat().st_size // 3)
    worker.kill(signal.SIGKILL)
    worker.start()
    await hit(ws, 5)
    assert await firings(ws, settings, tenant, 8) == expected(8)
    assert_alive(worker)


async def test_two_workers_share_and_move_a_tenants_rule_state_with_exact_limits(
    settings: Settings, tenant_factory: Callable[..., str], tmp_path: Path,
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    tenant = tenant_factory(partitions=4)
    first = worker_factory("--rules", RULES, types=TYPES,
                           STREAMS_STATE_DIR=str(tmp_path / "first"))
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="load"))
    await hit(ws, 2)
    assert await firings(ws, settings, tenant, 2) == expected(2)
    # A second worker joins: the group rebalances, and some keys' state moves to it.
    second = worker_factory("--rules", RULES, types=TYPES,
                            STREAMS_STATE_DIR=str(tmp_path / "second"))
    wait_until(lambda: members_with(settings, tenant) == 2, 90,
               "both workers deciding the tenant's rules")
    await hit(ws, 3)
    assert await firings(ws, settings, tenant, 5) == expected(5)
    assert stores(tmp_path / "second")  # the second worker owns some of the state
    # The first is SIGKILLed mid-stream: its keys move back to the second.
    sending = asyncio.create_task(hit(ws, 4))
    await asyncio.sleep(0.3)
    first.kill(signal.SIGKILL)
    await sending
    assert await firings(ws, settings, tenant, 9) == expected(9)
    # And it comes back: the state moves once more.
    first.start()
    wait_until(lambda: members_with(settings, tenant) == 2, 90, "both workers again")
    await hit(ws, 3)
    assert await firings(ws, settings, tenant, 12) == expected(12)
    assert_alive(first, second)


async def test_a_one_partition_rules_topic_of_an_older_deployment_is_taken_over(
    settings: Settings, tenant_factory: Callable[..., str], tmp_path: Path,
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    """What an older deployment leaves: a one-partition rules topic whose records are keyed
    by rule name, the old decider's committed offset on it, the reactor's on the events, and
    no changelog. The new decider replays the decided records once (deciding nothing again),
    decides the rest, writes the state to the changelog, and restores from it next time."""
    tenant = tenant_factory(partitions=3)
    topics = tenant_topics(tenant, settings.topic_prefix)
    admin = AdminClient(admin_config(settings))
    for topic in (topics.rules, topics.rulestate):
        admin.delete_topics([topic])[topic].result()
    wait_until(lambda: not {topics.rules, topics.rulestate}
               & set(admin.list_topics(timeout=10).topics), 30, "the rule topics to go")
    admin.create_topics([NewTopic(topics.rules, 1, 1)])[topics.rules].result()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="load"))
    landed = await hit(ws, 3)
    # The old reactor's forwards, in the order the hits were made, keyed by rule name.
    reader = Consumer({"bootstrap.servers": settings.bootstrap_servers,
                       "group.id": f"{settings.topic_prefix}.{tenant}.old-reactor",
                       "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": settings.bootstrap_servers})
    ends: dict[int, int] = {}
    raw: dict[tuple[int, int], bytes] = {}
    try:
        parts = admin.list_topics(topics.events, timeout=10).topics[topics.events].partitions
        reader.assign([TopicPartition(topics.events, p, 0) for p in parts])
        for p in parts:
            ends[p] = reader.get_watermark_offsets(TopicPartition(topics.events, p))[1]
        while len(raw) < sum(ends.values()):
            msg = reader.poll(10)
            assert msg is not None, "the events topic ended early"
            raw[(msg.partition() or 0, msg.offset() or 0)] = msg.value() or b""
        for where in landed:
            for rule in ("t:host-limited", "t:host-count"):
                producer.produce(topics.rules, raw[where], rule.encode(), partition=0,
                                 headers=[("rule", rule.encode()), ("event_type", b"t:hit")])
        assert producer.flush(30) == 0
    finally:
        reader.close()
    # The old decider had decided the first two rounds; the reactor had read every event.
    old_decided = 2 * 2 * len(HOSTS)
    commits = {
        decider_group(settings.topic_prefix): [TopicPartition(topics.rules, 0, old_decided)],
        worker_rules_group(MIRROR_CURSOR, settings.topic_prefix):
            [TopicPartition(topics.events, p, o) for p, o in ends.items()],
    }
    for group, offsets in commits.items():
        admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, offsets)])[group].result()
    before = expected(2)  # fired by the old decider: not in this log

    worker = worker_factory("--rules", RULES, types=TYPES,
                            STREAMS_STATE_DIR=str(tmp_path / "state"))
    await hit(ws, 2)
    assert await firings(ws, settings, tenant, 5) == expected(5) - before
    meta = admin.list_topics(timeout=10).topics
    assert len(meta[topics.rules].partitions) == 1  # kept: its keys' state is in it
    assert len(meta[topics.rulestate].partitions) == 1
    # The next start restores from the changelog (another machine: no store at all).
    worker.kill(signal.SIGKILL)
    worker_factory("--rules", RULES, types=TYPES, STREAMS_STATE_DIR=str(tmp_path / "other"))
    await hit(ws, 2)
    assert await firings(ws, settings, tenant, 7) == expected(7) - before
