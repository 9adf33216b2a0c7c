"""The in-process mirror (streams.runtime.sink.mirror.FeedbackMirror) on the real broker: a
workspace's feedback into a ScoreSink, with a cursor that is a consumer group."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer
from confluent_kafka.admin import AdminClient

from streams import FeedbackMirror, Seq
from streams.core.actors import UserActor
from streams.core.errors import NotFound, ValidationFailed
from streams.core.events import AppEvent, RunStarted
from streams.core.feedback import Feedback, registry
from streams.core.sinks.memory import InMemoryScoreSink
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.runtime.client.workspace import Recorded, Workspace
from streams.runtime.sink.mirror import FollowStats, mirror_group
from streams.settings import Settings
from tests.conftest import read_topic

SCORES_PER_FEEDBACK = 2  # TriageQuality without a note: correct and severity


def committed(settings: Settings, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets ({} when it has none)."""
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    try:
        result = futures[group].result()
    except Exception:
        return {}
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions
            if tp.offset >= 0}


def end_offsets(settings: Settings, topic: str) -> dict[tuple[str, int], int]:
    """The high watermark of every partition of `topic` that has records."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers,
                         "group.id": "end-offsets"})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        out = {}
        for p in parts:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > 0:
                out[(topic, p)] = high
        return out
    finally:
        consumer.close()


async def give(ws: Workspace, n: int, *, start: int = 0) -> list[Recorded]:
    """`n` runs, each with one TriageQuality verdict; the verdicts' Recorded."""
    async def one(i: int) -> Recorded:
        spike = await ws.append(AppEvent(name="ops:error_spike", data={"service": f"s{i}"}))
        await ws.append(RunStarted(run_id=f"run_{i}", rule="ops:error-spike", action="triage",
                                   firing_id=f"fir_{i}"),
                        correlation_id=spike.id, causation_id=spike.id)
        return await ws.give_feedback(TriageQuality(correct=i % 2 == 0, severity="high"),
                                      on=RunTarget(run_id=f"run_{i}"))
    return list(await asyncio.gather(*(one(i) for i in range(start, start + n))))


def feedback_ids(sink: InMemoryScoreSink) -> set[str]:
    return {s.source.feedback_event_id for s in sink.scores.values()}


async def eventually(done: Callable[[], bool], within: float = 90,
                     tasks: list[asyncio.Task[FollowStats]] | None = None) -> None:
    """Return once `done()` holds; fail after `within` s, or with a task's error if one
    ends first."""
    async with asyncio.timeout(within):
        while True:
            if done():
                return
            for task in tasks or []:
                if task.done():
                    task.result()  # its error
                    pytest.fail("a follow ended before it was stopped")
            await asyncio.sleep(0.1)


async def follow_until(mirror: FeedbackMirror, done: Callable[[], bool], *,
                       after_seq: Any = None) -> FollowStats:
    """Follow as a task (as the seed does) until `done()`, then stop and return the stats."""
    task = asyncio.create_task(mirror.follow(after_seq=after_seq))
    await eventually(done, tasks=[task])
    mirror.stop()
    return await asyncio.wait_for(task, 60)


async def test_a_named_cursor_resumes_where_it_stopped(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any],
) -> None:
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    first = await give(ws, 12)
    sink = InMemoryScoreSink()
    mirror = FeedbackMirror(ws, sink, cursor="warehouse")
    stats = await follow_until(mirror, lambda: len(sink.scores) >= 12 * SCORES_PER_FEEDBACK)
    assert feedback_ids(sink) == {r.id for r in first}
    assert stats.feedback == 12 and stats.scores == 24 and stats.commits >= 1
    assert stats.skipped_unknown_type == stats.invalid == stats.rejected == 0
    assert sink.flushes == 1  # the stop flushed the sink
    # Stopped: everything it read is committed, in the workspace's own group.
    group = mirror_group(settings, tenant, "prod", "warehouse")
    events = tenant_topics(tenant, settings.topic_prefix).events
    assert committed(settings, group) == end_offsets(settings, events)

    # A restarted mirror (a new one, on a new sink) carries on from the cursor.
    later = await give(ws, 5, start=100)
    again = InMemoryScoreSink()
    restarted = FeedbackMirror(ws, again, cursor="warehouse")
    await follow_until(restarted, lambda: len(again.scores) >= 5 * SCORES_PER_FEEDBACK)
    await asyncio.sleep(1)  # anything read again would be in by now
    assert feedback_ids(again) == {r.id for r in later}
    assert again.received == 5 * SCORES_PER_FEEDBACK  # nothing before the cursor repeated
    assert committed(settings, group) == end_offsets(settings, events)


async def test_a_cancelled_follow_commits_what_the_sink_accepted(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any],
) -> None:
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    await give(ws, 6)
    sink = InMemoryScoreSink()
    task = asyncio.create_task(FeedbackMirror(ws, sink, cursor="lf").follow())
    await eventually(lambda: len(sink.scores) >= 12, tasks=[task])
    task.cancel()  # the seed's way to end it
    with pytest.raises(asyncio.CancelledError):
        await task
    events = tenant_topics(tenant, settings.topic_prefix).events
    assert committed(settings, mirror_group(settings, tenant, "prod", "lf")) == \
        end_offsets(settings, events)


async def test_no_cursor_reads_everything_every_time_and_commits_nothing(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any],
) -> None:
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    given = await give(ws, 8)
    for _ in range(2):
        sink = InMemoryScoreSink()
        stats = await follow_until(FeedbackMirror(ws, sink, cursor=None),
                                   lambda s=sink: len(s.scores) >= 16)
        assert feedback_ids(sink) == {r.id for r in given}
        assert stats.commits == 0
    # No group of the cursor-less mirrors kept offsets for this tenant.
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    groups = [g.group_id for g in admin.list_consumer_groups().result(timeout=30).valid
              if g.group_id.startswith(f"{settings.topic_prefix}.sink")]
    assert all(committed(settings, g) == {} for g in groups)


async def test_after_seq_replays_without_moving_the_cursor_back(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any],
) -> None:
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    given = await give(ws, 10)
    group = mirror_group(settings, tenant, "prod", "warehouse")
    sink = InMemoryScoreSink()
    await follow_until(FeedbackMirror(ws, sink, cursor="warehouse"),
                       lambda: len(sink.scores) >= 20)
    cursor = committed(settings, group)
    assert cursor

    # follow(after_seq=0) mirrors everything again and never commits below the cursor.
    replayed = InMemoryScoreSink()
    mirror = FeedbackMirror(ws, replayed, cursor="warehouse")
    stats = await follow_until(mirror, lambda: len(replayed.scores) >= 20, after_seq=0)
    assert feedback_ids(replayed) == {r.id for r in given}
    assert stats.commits == 0
    assert committed(settings, group) == cursor

    # A replay that passes the cursor moves it on from there.
    later = await give(ws, 3, start=50)
    passing = InMemoryScoreSink()
    await follow_until(FeedbackMirror(ws, passing, cursor="warehouse"),
                       lambda: len(passing.scores) >= 26, after_seq=0)
    now = committed(settings, group)
    assert all(now[tp] >= offset for tp, offset in cursor.items())
    assert now == end_offsets(settings, tenant_topics(tenant, settings.topic_prefix).events)
    assert {r.id for r in later} <= feedback_ids(passing)

    # After a Seq: that partition after the record; the others from their beginnings.
    mark = given[4].seq
    after = InMemoryScoreSink()
    everything = {r.id: r.seq for r in [*given, *later]}
    wanted = {i for i, s in everything.items()
              if s.partition != mark.partition or s.offset > mark.offset}
    await follow_until(FeedbackMirror(ws, after, cursor=None),
                       lambda: feedback_ids(after) >= wanted, after_seq=mark)
    await asyncio.sleep(1)
    assert feedback_ids(after) == wanted
    assert committed(settings, group) == now


async def test_unknown_types_are_skipped_and_invalid_feedback_is_not_dead_lettered(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any],
) -> None:
    class Elsewhere(Feedback, name="only_elsewhere_mirror", targets={"run"}):
        fine: bool

    tenant = tenant_factory()
    topics = tenant_topics(tenant, settings.topic_prefix)
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    try:
        [known] = await give(ws, 1)
        await ws.give_feedback(Elsewhere(fine=True), on=RunTarget(run_id="run_0"))
    finally:
        registry.unregister("only_elsewhere_mirror")  # this process no longer knows it
    producer = Producer({"bootstrap.servers": settings.bootstrap_servers})
    producer.produce(topics.events, value=b"not avro at all", key=b"k1",
                     headers=[("event_type", b"feedback_given")])
    assert producer.flush(10) == 0
    [last] = await give(ws, 1, start=1)
    sink = InMemoryScoreSink()
    mirror = FeedbackMirror(ws, sink, cursor="dw")
    # The undecodable record may sit in a partition read after the last feedback's (CI once
    # stopped with every score in and that record not read yet): wait for both.
    stats = await follow_until(
        mirror, lambda: len(sink.scores) >= 4 and mirror.stats.invalid >= 1)
    assert feedback_ids(sink) == {known.id, last.id}
    assert stats.skipped_unknown_type == 1 and stats.invalid == 1
    # The cursor moved past both; the mirror wrote no dead letter (a worker's mirror would).
    assert committed(settings, mirror_group(settings, tenant, "prod", "dw")) == \
        end_offsets(settings, topics.events)
    assert read_topic(settings, topics.deadletter, settle=5) == []


async def test_two_workspaces_two_tasks(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any],
) -> None:
    tenant = tenant_factory()
    client = client_factory()
    prod = client.workspace(tenant, "prod", actor=UserActor(id="ada"))
    staging = client.workspace(tenant, "staging", actor=UserActor(id="bo"))
    in_prod, in_staging = await give(prod, 6), await give(staging, 4, start=10)
    sinks = {"prod": InMemoryScoreSink(), "staging": InMemoryScoreSink()}
    # One task per workspace, the same cursor name in each: two cursors.
    mirrors = [FeedbackMirror(prod, sinks["prod"], cursor="warehouse"),
               FeedbackMirror(staging, sinks["staging"], cursor="warehouse")]
    tasks = [asyncio.create_task(m.follow()) for m in mirrors]
    await eventually(lambda: len(sinks["prod"].scores) >= 12
                     and len(sinks["staging"].scores) >= 8, tasks=tasks)
    await asyncio.sleep(1)
    for mirror in mirrors:
        mirror.stop()
    await asyncio.gather(*tasks)
    assert feedback_ids(sinks["prod"]) == {r.id for r in in_prod}
    assert feedback_ids(sinks["staging"]) == {r.id for r in in_staging}
    assert {s.source.workspace for s in sinks["staging"].scores.values()} == {"staging"}
    events = end_offsets(settings, tenant_topics(tenant, settings.topic_prefix).events)
    for workspace in ("prod", "staging"):
        assert committed(settings, mirror_group(settings, tenant, workspace,
                                                "warehouse")) == events


async def test_two_mirrors_with_one_cursor_share_the_work(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any],
) -> None:
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    given = await give(ws, 30)
    a, b = InMemoryScoreSink(), InMemoryScoreSink()
    mirrors = [FeedbackMirror(ws, a, cursor="shared"), FeedbackMirror(ws, b, cursor="shared")]
    tasks = [asyncio.create_task(m.follow()) for m in mirrors]
    await eventually(lambda: len({**a.scores, **b.scores}) >= 60, 120, tasks)
    for mirror in mirrors:
        mirror.stop()
    await asyncio.gather(*tasks)
    assert feedback_ids(a) | feedback_ids(b) == {r.id for r in given}
    assert committed(settings, mirror_group(settings, tenant, "prod", "shared")) == \
        end_offsets(settings, tenant_topics(tenant, settings.topic_prefix).events)


async def test_a_missing_tenant_a_bad_cursor_and_a_second_follow_are_refused(
    tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
) -> None:
    client = client_factory()
    with pytest.raises(NotFound, match="streams tenant create nosuch"):
        await FeedbackMirror(client.workspace("nosuch", "prod"), InMemoryScoreSink(),
                             cursor="dw").follow()
    ws = client.workspace(tenant_factory(), "prod")
    with pytest.raises(ValidationFailed, match="invalid cursor name"):
        FeedbackMirror(ws, InMemoryScoreSink(), cursor="Not Valid")
    mirror = FeedbackMirror(ws, InMemoryScoreSink(), cursor="dw")
    task = asyncio.create_task(mirror.follow())
    await asyncio.sleep(0.5)
    with pytest.raises(ValidationFailed, match="following already"):
        mirror.follow(after_seq=Seq(partition=0, offset=0))
    mirror.stop()
    await asyncio.wait_for(task, 60)
