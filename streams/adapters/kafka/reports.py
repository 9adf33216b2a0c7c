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
import logging
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from confluent_kafka import KafkaException, Message, Producer

from streams.core.errors import KafkaUnavailable

__all__ = ["Outgoing", "ReportPoller", "produce_acked", "produce_all", "settle"]

log = logging.getLogger(__name__)

Outgoing = tuple[str, bytes | None, bytes, list[tuple[str, str | bytes | None]] | None,
                 int | None]
"""One record to produce: (topic, key, value, headers, partition or None for the
producer's partitioner)."""


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
            try:
                self._producer.poll(0)
            except Exception:  # a callback that raised: the other writes still need reports
                log.exception("serving a producer's callbacks failed; polling on")
            await asyncio.sleep(self._interval)


async def produce_all(producer: Producer, reports: ReportPoller, records: Sequence[Outgoing],
                      *, wait_s: float,
                      refused: Callable[[Any, str], Exception] | None = None,
                      ) -> list[tuple[int, int] | Exception]:
    """Produce `records` and return, in their order, each one's (partition, offset) once the
    broker acknowledged it, or the error it was refused with; nothing is flushed, so the
    producer batches them (and whatever else shares it).

    One future for the whole sequence, settled when its last report arrives: a batch costs
    one wake of the event loop, not one per record. `refused(err, topic)` maps a delivery
    error (default KafkaUnavailable). KafkaUnavailable if the producer's queue stays full or
    the reports do not all arrive within `wait_s` seconds.
    """
    loop = asyncio.get_running_loop()
    results: list[tuple[int, int] | Exception | None] = [None] * len(records)
    done: asyncio.Future[None] = loop.create_future()
    left = [len(records)]
    if not records:
        return []

    def report(n: int, topic: str) -> Callable[[Any, Message], None]:
        def delivered(err: Any, msg: Message) -> None:
            results[n] = (msg.partition() or 0, msg.offset() or 0) if err is None else \
                (refused(err, topic) if refused is not None else
                 KafkaUnavailable(f"writing to {topic} failed: {err}"))
            left[0] -= 1
            if left[0] == 0:
                try:
                    here = asyncio.get_running_loop()
                except RuntimeError:
                    here = None
                if here is loop:
                    if not done.done():
                        done.set_result(None)
                else:
                    with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits
                        loop.call_soon_threadsafe(_finish, done)
        return delivered

    deadline = loop.time() + wait_s
    with reports.awaiting(loop):
        for n, (topic, key, value, headers, partition) in enumerate(records):
            while True:
                try:
                    if partition is None:
                        producer.produce(topic, value=value, key=key, headers=headers,
                                         on_delivery=report(n, topic))
                    else:
                        producer.produce(topic, value=value, key=key, headers=headers,
                                         partition=partition, on_delivery=report(n, topic))
                    break
                except BufferError as exc:  # the local queue is full: let it drain
                    if loop.time() >= deadline:
                        raise KafkaUnavailable(
                            f"writing to {topic}: the producer's queue stayed full for "
                            f"{wait_s:g} s; are the brokers up?") from exc
                    producer.poll(0)
                    await asyncio.sleep(0.005)
                except KafkaException as exc:
                    raise KafkaUnavailable(f"writing to {topic} failed: {exc}") from exc
        try:
            async with asyncio.timeout_at(deadline):
                await asyncio.shield(done)
        except TimeoutError as exc:
            raise KafkaUnavailable(
                f"{left[0]} of {len(records)} records were not acknowledged within "
                f"{wait_s:g} s; check that the brokers in KAFKA_BOOTSTRAP_SERVERS are up, "
                "then retry") from exc
    return [r if r is not None else KafkaUnavailable("no delivery report") for r in results]


def _finish(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


def settle(future: asyncio.Future[Any], result: Any) -> None:
    """Set a future's result, or its exception when `result` is one; nothing when it is done
    already (a caller that timed out)."""
    if future.done():
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


async def produce_acked(producer: Producer, reports: ReportPoller, topic: str, key: bytes,
                        value: bytes, *, partition: int, wait_s: float,
                        then: str) -> tuple[int, int]:
    """Produce one record and return its (partition, offset) once acknowledged, without a
    flush (concurrent writes share the producer's batches); KafkaUnavailable, saying what
    to do `then`, when it is refused or not acknowledged within `wait_s` seconds."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[tuple[int, int]] = loop.create_future()

    def delivered(err: Any, msg: Message) -> None:
        result: Any = KafkaUnavailable(f"writing to {topic} failed: {err}; {then}") \
            if err is not None else (msg.partition() or 0, msg.offset() or 0)
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits
            loop.call_soon_threadsafe(settle, done, result)

    try:
        producer.produce(topic, key=key, value=value, partition=partition,
                         on_delivery=delivered)
    except (KafkaException, BufferError) as exc:
        raise KafkaUnavailable(f"writing to {topic} failed: {exc}; check the brokers, "
                               f"{then}") from exc
    with reports.awaiting(loop):
        try:
            async with asyncio.timeout(wait_s):
                return await asyncio.shield(done)
        except TimeoutError as exc:
            raise KafkaUnavailable(f"{topic} did not acknowledge within {wait_s:g} s "
                                   f"(STREAMS_FEEDBACK_TIMEOUT); check the brokers, {then}"
                                   ) from exc
