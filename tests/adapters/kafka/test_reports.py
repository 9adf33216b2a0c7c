"""The report poller (streams.adapters.kafka.reports): writes awaiting their delivery
reports get them while they wait, even after a callback raised in a poll."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import pytest
from confluent_kafka import Producer

from streams.adapters.kafka.reports import ReportPoller, settle


class Raising:
    """A producer whose first poll raises (a callback that failed), then serves queued
    callbacks one poll at a time."""

    def __init__(self) -> None:
        self.queued: list[Callable[[], None]] = []
        self.polls = 0

    def poll(self, _timeout: float) -> int:
        self.polls += 1
        if self.polls == 1:
            raise RuntimeError("a delivery callback raised")
        served, self.queued = self.queued, []
        for callback in served:
            callback()
        return len(served)


async def test_a_poll_whose_callback_raised_does_not_stop_the_reports(
        caplog: pytest.LogCaptureFixture) -> None:
    producer = Raising()
    poller = ReportPoller(cast(Producer, producer), 0.001)
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    with poller.awaiting(loop):
        producer.queued.append(lambda: settle(done, "acked"))
        assert await asyncio.wait_for(done, 5.0) == "acked"
    assert producer.polls >= 2
    assert "polling on" in caplog.text
