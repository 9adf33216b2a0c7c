"""Exactly once across a broker restart, on the real broker: two workers with
STREAMS_PROCESSING_GUARANTEE=exactly_once over 4 partitions while feedback flows before,
through and after `stack.sh stop-kafka` / `start-kafka` (the one broker, so the group and
transaction coordinators go too): a read_committed reader of the scores topic counts exactly
three scores per feedback event, by record count (0 repeats, 0 lost), and neither worker exits.

It stops the broker, so it runs on this session's own stack (`own_stack`), never the shared
one. The workers use the short timeouts of test_exactly_once.py (6 s session, 5 s
transaction) so the restart costs seconds; the guarantee does not depend on them. It runs
with transactions held open for the commit interval (the restart must meet an open one) and
with the default commit as soon as a loop has caught up."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from streams.core.actors import UserActor
from streams.core.tenancy import tenant_topics
from streams.settings import Settings
from tests.conftest import Stack, WorkerProcess, wait_until
from tests.faults.conftest import assert_alive
from tests.faults.test_exactly_once import (
    ARGS,
    EOS,
    _chains,
    _exact,
    _giver,
    _loop_stats,
    _members_with,
)
from tests.stacks import OwnStack

pytestmark = pytest.mark.timeout(600)

OUTAGE = 10.0  # seconds between stop-kafka returning and start-kafka being called


@pytest.fixture(scope="module")
def stack(own_stack: OwnStack) -> Stack:
    """The settings, tenants, clients and workers of this module use the own stack."""
    return Stack(own_stack.bootstrap, own_stack.registry_url, "own")


@pytest.mark.parametrize("caught_up", ["false", "true"])
async def test_broker_restart_mid_stream_counts_exactly(
    own_stack: OwnStack, settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
    caught_up: str,
) -> None:
    # With STREAMS_COMMIT_WHEN_CAUGHT_UP=false a transaction stays open for the commit
    # interval, so the broker goes while one is open and the loops must wait it out or
    # abort it; with the default (true) a loop that has read all there is has committed
    # already, and meets the outage between transactions, if at all.
    tenant = tenant_factory(partitions=4)
    topics = tenant_topics(tenant, settings.topic_prefix)
    # give_feedback waits out the outage (its acks) instead of failing the call.
    client = client_factory(flush_timeout=180.0, feedback_timeout=180.0)
    ws = client.workspace(tenant, "prod", actor=UserActor(id="ada"))
    give = _giver(ws, await _chains(ws))
    env = {**EOS, "STREAMS_COMMIT_WHEN_CAUGHT_UP": caught_up}
    workers = [worker_factory(*ARGS, **env), worker_factory(*ARGS, **env)]
    wait_until(lambda: _members_with(settings, topics.events) == 2, 90,
               "both workers to share the topic")

    given: list[str] = []
    stop = asyncio.Event()

    async def flow() -> None:
        # Batches of 50 at once, one after the other: some are in flight when the broker
        # goes, and their calls wait for it to come back.
        while not stop.is_set():
            start = len(given)
            given.extend(await asyncio.gather(*(give(i) for i in range(start, start + 50))))
            await asyncio.sleep(0.1)

    task = asyncio.create_task(flow())
    try:
        await _until(lambda: len(given) >= 1000 and all(
            _loop_stats(w).get("outputs", 0) > 0 for w in workers), 120,
            "both workers to be scoring")
        before = len(given)
        longest_before = max(_loop_stats(w).get("longest_commit_seconds", 0.0)
                             for w in workers)
        await asyncio.to_thread(own_stack.must, "stop-kafka")
        down = time.monotonic()
        try:
            await asyncio.sleep(OUTAGE)
        finally:
            await asyncio.to_thread(own_stack.must, "start-kafka")  # even if the test fails
        up = time.monotonic()
        during = len(given) - before
        await _until(lambda: len(given) >= before + during + 1000, 180,
                     "feedback to flow again after the restart")
    finally:
        stop.set()
        await task
    assert_alive(*workers)
    counted = _exact(settings, topics.scores, given, workers)
    assert_alive(*workers)
    stats = [_loop_stats(w) for w in workers]
    met = sum(s.get("outage_waits", 0) + s.get("aborts", 0) for s in stats)
    # A commit under way when the broker went can also wait it out inside librdkafka's own
    # retries (its timeout is 30 s) and then succeed: no wait or abort of the loop's, one
    # commit as long as most of the outage, and longer than any before it.
    waited = max(s.get("longest_commit_seconds", 0.0) for s in stats)
    if caught_up == "false":
        assert met > 0 or (waited >= OUTAGE / 2 and waited > longest_before), \
            f"neither worker met the outage: the test did not test it ({stats})"
    print(f"exactly once, broker restarted mid-stream ({up - down:.0f} s from stop-kafka "
          f"returning to start-kafka returning) under 2 workers: {len(given)} feedback "
          f"({before} before the stop), {counted} score records for {len(given) * 3} scores, "
          f"0 repeats, 0 lost; outage waits {[s.get('outage_waits') for s in stats]}, aborts "
          f"{[s.get('aborts_by_reason') for s in stats]}, longest commits "
          f"{[round(s.get('longest_commit_seconds', 0.0), 1) for s in stats]} s")


async def _until(check: Callable[[], Any], seconds: float, what: str) -> None:
    """wait_until that lets the feedback flow (an asyncio task) go on meanwhile."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {seconds:.0f}s waiting for {what}")
        await asyncio.sleep(0.2)
