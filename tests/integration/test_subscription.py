"""The workspace tail on the real broker: live events of one workspace, resumable from the
acknowledged cursor without gaps or repeats, and a bounded buffer for a slow client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from streams.core.errors import NotFound, SlowConsumer, ValidationFailed
from streams.core.events import AppEvent, Envelope, Seq
from streams.runtime.client.subscription import Subscription
from streams.runtime.client.workspace import StreamsClient, Workspace


async def _append(ws: Workspace, n: int, tag: str) -> list[str]:
    recorded = await asyncio.gather(*(
        ws.append(AppEvent(name="app:tick", data={"tag": tag, "i": i})) for i in range(n)))
    return [r.id for r in recorded]


async def _take(sub: Subscription, n: int, within: float = 30.0) -> list[Envelope]:
    async with asyncio.timeout(within):
        return [await sub.next() for _ in range(n)]


@pytest.fixture
async def subscriptions(client_factory: Callable[..., Any],
                        ) -> AsyncIterator[Callable[..., Subscription]]:
    made: list[Subscription] = []
    client: StreamsClient = client_factory()

    def make(tenant: str, workspace: str = "prod", **kw: Any) -> Subscription:
        sub = Subscription(client.runtime, tenant, workspace, **kw)
        made.append(sub)
        return sub

    yield make
    for sub in made:
        await sub.close()


async def test_the_tail_delivers_new_events_of_its_workspace_only(
    tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
    subscriptions: Callable[..., Subscription],
) -> None:
    tenant = tenant_factory()
    client = client_factory()
    prod, other = client.workspace(tenant, "prod"), client.workspace(tenant, "other")
    before = await _append(prod, 3, "before")
    sub = subscriptions(tenant)
    cursor = await sub.start("end")
    assert set(cursor) == {0, 1, 2} and sum(cursor.values()) == 3
    await _append(other, 5, "other")
    mine = await _append(prod, 20, "live")
    got = await _take(sub, 20)
    assert {e.event_id for e in got} == set(mine)
    assert not {e.event_id for e in got} & set(before)
    # Each partition's events come in offset order.
    for p in {e.seq.partition for e in got if e.seq}:
        offsets = [e.seq.offset for e in got if e.seq and e.seq.partition == p]
        assert offsets == sorted(offsets)
    with pytest.raises(TimeoutError):  # nothing else: the other workspace's are skipped
        await _take(sub, 1, within=1.5)


async def test_resuming_from_the_acknowledged_cursor_has_no_gaps_and_no_repeats(
    tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
    subscriptions: Callable[..., Subscription],
) -> None:
    tenant = tenant_factory()
    prod = client_factory().workspace(tenant, "prod")
    first = await _append(prod, 30, "first")
    sub = subscriptions(tenant)
    await sub.start("start")
    got = await _take(sub, 30)
    assert {e.event_id for e in got} == set(first)
    # The client processed some of each partition's events, then dropped the connection.
    acked: set[str] = set()
    for p in {e.seq.partition for e in got if e.seq}:
        mine = [e for e in got if e.seq and e.seq.partition == p]
        done = mine[: len(mine) // 2]
        if done:
            last = done[-1].seq
            assert last is not None
            sub.ack(last)
            acked.update(e.event_id for e in done)
    resume = sub.acknowledged()
    await sub.close()
    later = await _append(prod, 10, "later")

    again = subscriptions(tenant)
    assert await again.start(resume) == resume
    expected = (set(first) - acked) | set(later)
    regot = await _take(again, len(expected))
    assert [e.event_id for e in regot if e.event_id in acked] == []
    assert {e.event_id for e in regot} == expected
    with pytest.raises(TimeoutError):
        await _take(again, 1, within=1.5)


async def test_a_client_that_does_not_ack_is_dropped_after_a_bounded_buffer(
    tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
    subscriptions: Callable[..., Subscription],
) -> None:
    tenant = tenant_factory()
    prod = client_factory().workspace(tenant, "prod")
    await _append(prod, 50, "backlog")
    sub = subscriptions(tenant, buffer=8, slow_timeout=0.5)
    await sub.start("start")
    got = await _take(sub, 8)
    assert sub.pending == 8
    with pytest.raises(SlowConsumer, match="8 events unacknowledged"):
        await _take(sub, 1)
    # An ack frees room: a client that keeps up is served on.
    last = got[-1].seq
    assert last is not None
    assert sub.ack(last) >= 1
    await _take(sub, 1)


async def test_a_missing_tenant_and_a_foreign_cursor_are_refused(
    tenant_factory: Callable[..., str], subscriptions: Callable[..., Subscription],
) -> None:
    with pytest.raises(NotFound):
        await subscriptions("nosuchtenant").start("end")
    tenant = tenant_factory()
    with pytest.raises(ValidationFailed, match="partitions 0-2"):
        await subscriptions(tenant).start({9: 0})
    sub = subscriptions(tenant)
    await sub.start("end")
    with pytest.raises(ValidationFailed, match="not delivered"):
        sub.ack(Seq(partition=0, offset=0))
