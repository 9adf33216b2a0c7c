"""Producing a batch of records and knowing every one of them landed.

Agents call `deliver` before they let Faust ack the events the records came from, so an
offset is committed only after its outputs are on the broker. Failed records are produced
again with backoff until they land; delivery does not give up, because giving up would mean
acking an event whose outputs are lost.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any, Protocol

from confluent_kafka import KafkaException, Message, Producer

from streams.adapters.kafka.log import Headers, producer_config
from streams.settings import Settings

log = logging.getLogger(__name__)


class Record(Protocol):
    """Anything with a topic, key, value and headers (mirror.Output is one)."""

    @property
    def topic(self) -> str: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes: ...
    @property
    def headers(self) -> Headers | None: ...


class Delivery:
    """An idempotent producer that delivers batches completely or keeps trying."""

    def __init__(self, settings: Settings, *, max_backoff: float = 5.0, **extra: Any) -> None:
        self._producer = Producer(producer_config(settings, **{"linger.ms": 2, **extra}))
        self.max_backoff = max_backoff
        self.delivered = 0
        self.retries = 0

    def _produce(self, records: Sequence[Record], failed: list[Record]) -> None:
        def report(record: Record) -> Any:
            def on_delivery(err: Any, _msg: Message) -> None:
                if err is not None:
                    failed.append(record)
            return on_delivery

        for record in records:
            while True:
                try:
                    self._producer.produce(record.topic, value=record.value, key=record.key,
                                           headers=record.headers, on_delivery=report(record))
                    break
                except BufferError:
                    self._producer.poll(0.05)  # local queue full: let it drain
                except KafkaException as exc:
                    log.warning("produce to %s failed: %s", record.topic, exc)
                    failed.append(record)
                    break

    def send_sync(self, records: Sequence[Record], flush_timeout: float = 30.0) -> None:
        """Deliver all records, blocking; retries with backoff until every one is acked."""
        backoff = 0.1
        pending = list(records)
        while pending:
            failed: list[Record] = []
            self._produce(pending, failed)
            remaining = self._producer.flush(flush_timeout)
            if remaining:
                log.warning("%d records still queued after %.0fs", remaining, flush_timeout)
                continue  # delivery reports for those arrive on a later flush
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
        self._producer.flush(30.0)
