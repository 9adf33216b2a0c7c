"""Serving a producer's delivery reports in each event loop that awaits them.

confluent-kafka calls a record's delivery callback from whichever thread polls its producer.
An asyncio caller that produces and awaits the acknowledgement needs someone to poll; a
flush per call would end the batching that makes concurrent appends cheap. `ReportPoller`
keeps, per event loop, a count of the writes awaiting a report and one task polling the
producer while that count is above zero, so reports are served in the loop's own thread and
settle their futures without a thread hop (a report served elsewhere, by a worker's flush or
another loop, reaches its future with call_soon_threadsafe).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import Iterator

from confluent_kafka import Producer

__all__ = ["ReportPoller"]


class ReportPoller:
    """Polls `producer` in each event loop while some write of that loop awaits a report."""

    def __init__(self, producer: Producer, interval: float) -> None:
        self._producer = producer
        self._interval = interval
        self._waiting: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, int] = \
            weakref.WeakKeyDictionary()
        self._pollers: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, asyncio.Task[None]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def awaiting(self, loop: asyncio.AbstractEventLoop) -> Iterator[None]:
        """While inside, `loop` has a task polling the producer for reports."""
        self._change(loop, +1)
        try:
            yield
        finally:
            self._change(loop, -1)

    def _change(self, loop: asyncio.AbstractEventLoop, change: int) -> None:
        with self._lock:
            waiting = self._waiting.get(loop, 0) + change
            self._waiting[loop] = waiting
            task = self._pollers.get(loop)
            if waiting > 0 and (task is None or task.done()):
                self._pollers[loop] = loop.create_task(self._poll(loop))

    async def _poll(self, loop: asyncio.AbstractEventLoop) -> None:
        while self._waiting.get(loop, 0) > 0:
            self._producer.poll(0)
            await asyncio.sleep(self._interval)
