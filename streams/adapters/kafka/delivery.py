"""Producing a batch of records and knowing every one of them landed.

Agents call `deliver` before they let Faust ack the events the records came from, so an
offset is committed only after its outputs are on the broker. Failed records are produced
again with backoff until they land; delivery does not give up, because giving up would mean
acking an event whose outputs are lost.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from confluent_kafka import KafkaException, Message, Producer

from streams.adapters.kafka.log import Headers
from streams.settings import Settings

log = logging.getLogger(__name__)


class Record(Protocol):
    """Anything with a topic, key, value and headers (mirror.Output is one)."""

    @property
    def topic(self) -> str: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Headers | None: ...


class Delivery:
    """An idempotent producer that delivers batches completely or keeps trying.

    The producer may be shared (a worker's agents, its decider thread and its workspace
    handle write through one): each batch waits for its own records' delivery reports,
    whichever thread's poll or flush serves them.
    """

    def __init__(self, settings: Settings, *, producer: Producer,
                 max_backoff: float | None = None, flush_timeout: float | None = None
                 ) -> None:
        # The composition root hands in the producer (streams.runtime.root).
        self._producer = producer
        self.max_backoff = settings.delivery_max_backoff if max_backoff is None \
            else max_backoff
        self.flush_timeout = settings.flush_timeout if flush_timeout is None \
            else flush_timeout
        self.delivered = 0
        self.retries = 0

    def _produce(self, records: Sequence[Record], reports: _Reports) -> None:
        for record in records:
            while True:
                try:
                    self._producer.produce(record.topic, value=record.value, key=record.key,
                                           headers=record.headers,
                                           on_delivery=reports.callback(record))
                    break
                except BufferError:
                    self._producer.poll(0.05)  # local queue full: let it drain
                except KafkaException as exc:
                    log.warning("produce to %s failed: %s", record.topic, exc)
                    reports.failed_now(record)
                    break

    def send_sync(self, records: Sequence[Record], flush_timeout: float | None = None,
                  ) -> None:
        """Deliver all records, blocking; retries with backoff until every one is acked."""
        timeout = self.flush_timeout if flush_timeout is None else flush_timeout
        backoff = 0.1
        pending = list(records)
        while pending:
            reports = _Reports(len(pending))
            self._produce(pending, reports)
            while not reports.wait(0):
                remaining = self._producer.flush(timeout)
                if remaining:
                    log.warning("%d records still queued after %.0fs", remaining, timeout)
                else:
                    # The queue is empty, but another thread may still be running one of
                    # this batch's callbacks: wait for it rather than assume.
                    reports.wait(0.1)
            failed = reports.failed
            self.delivered += len(pending) - len(failed)
            if failed:
                self.retries += 1
                log.warning("%d of %d records not delivered; retrying in %.1fs",
                            len(failed), len(pending), backoff)
                time.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)
            pending = failed

    async def deliver(self, records: Sequence[Record]) -> None:
        """Deliver all records without blocking the event loop.

        If the task is cancelled (a worker shutting down) the delivery still completes, in
        this thread, before the cancellation propagates: the caller acks only after this.
        """
        if not records:
            return
        task = asyncio.ensure_future(asyncio.to_thread(self.send_sync, records))
        cancelled = False
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                cancelled = True
        task.result()
        if cancelled:
            raise asyncio.CancelledError

    def close(self) -> None:
        """Flush whatever is queued."""
        self._producer.flush(self.flush_timeout)


class _Reports:
    """The delivery reports of one batch: which records failed, and whether all arrived."""

    def __init__(self, expected: int) -> None:
        self.failed: list[Record] = []
        self._left = expected
        self._done = threading.Event()
        self._lock = threading.Lock()
        if expected == 0:
            self._done.set()

    def callback(self, record: Record) -> Callable[[Any, Message], None]:
        """The on_delivery callback of one record."""
        def on_delivery(err: Any, _msg: Message) -> None:
            self._settle(record, err is not None)
        return on_delivery

    def failed_now(self, record: Record) -> None:
        """A record the producer refused outright (no report will come)."""
        self._settle(record, True)

    def _settle(self, record: Record, failed: bool) -> None:
        with self._lock:
            if failed:
                self.failed.append(record)
            self._left -= 1
            if self._left == 0:
                self._done.set()

    def wait(self, timeout: float) -> bool:
        """Whether every record of the batch has its report (waiting up to `timeout`)."""
        return self._done.wait(timeout)


__all__ = ["Delivery", "Record"]
