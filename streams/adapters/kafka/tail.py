"""Following a small compacted topic: every record, from the start, then as it is written.

The key store and the command ledger are such topics: every server process holds their
current state in memory and must see another process's writes within moments (a revoked key
within 10 s, a rival claim on a command before it acts). A `TopicTail` is one consumer
assigned to every partition of the topic (no group, nothing committed) read by one thread,
handing each record to `on_record`; `wait_past(partition, offset)` blocks until the records
up to that offset have been handed on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from streams.adapters.kafka.config import reader_config
from streams.adapters.kafka.log import LEADER_MOVING, watermarks
from streams.adapters.kafka.reports import settle
from streams.core.errors import KafkaUnavailable
from streams.core.tenancy import tail_group
from streams.settings import Settings

__all__ = ["OnRecord", "TopicTail"]

log = logging.getLogger(__name__)

OnRecord = Callable[[int, int, bytes, bytes | None], None]
"""Called as (partition, offset, key, value) for each record; value None is a tombstone."""

# Fetches return at once when there is data and wait at most this long when there is none:
# what a waiting command pays at most beyond the broker's own latency.
_FETCH_WAIT_MS = 5


class TopicTail:
    """One thread following every partition of a topic from its start."""

    def __init__(self, settings: Settings, topic: str, on_record: OnRecord) -> None:
        self.settings = settings
        self.topic = topic
        self._on_record = on_record
        self._positions: dict[int, int] = {}
        self._waiters: dict[int, list[tuple[int, Callable[[], None]]]] = {}
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Consumer | None = None
        self._meta: Consumer | None = None
        self.failure: BaseException | None = None

    def start(self) -> None:
        """Assign every partition from its start and begin following (blocking: the topic is
        looked up); then `sync()` gives the topic as of now."""
        if self._thread is not None:
            return
        consumer = Consumer(reader_config(
            self.settings, tail_group(),
            **{"fetch.wait.max.ms": _FETCH_WAIT_MS, "fetch.error.backoff.ms": 50,
               "auto.offset.reset": "earliest"}))
        try:
            found = watermarks(consumer, self.topic, timeout=self.settings.admin_timeout)
            consumer.assign([TopicPartition(self.topic, p, 0) for p in found])
        except KafkaException as exc:
            consumer.close()
            raise KafkaUnavailable(f"cannot follow {self.topic}: {exc}; check that the "
                                   "brokers are up") from exc
        except BaseException:
            consumer.close()
            raise
        with self._changed:
            self._positions = dict.fromkeys(found, 0)
        self._consumer = consumer
        # A second consumer for watermarks: a call on the one the thread consumes with can
        # wait for that thread's consume() to return.
        self._meta = Consumer(reader_config(self.settings, tail_group()))
        self._thread = threading.Thread(target=self._run, name=f"tail-{self.topic}",
                                        daemon=True)
        self._thread.start()

    @property
    def partitions(self) -> int:
        """How many partitions the topic has."""
        return len(self._positions)

    def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while not self._stop.is_set():
            try:
                # consume() waits for a full batch or its timeout: wait for one record, then
                # take what else is already fetched, so a record is handed on at once.
                first = consumer.poll(0.1)
                batch = [] if first is None else [first, *consumer.consume(500, 0)]
            except KafkaException as exc:  # the consumer retries on its own
                log.warning("following %s: %s", self.topic, exc)
                time.sleep(0.1)
                continue
            if not batch:
                self._passed_markers(consumer)
                continue
            reached: dict[int, int] = {}
            for msg in batch:
                if msg.error():
                    log.warning("following %s: %s", self.topic, msg.error())
                    continue
                self._hand_on(msg)
                reached[msg.partition() or 0] = (msg.offset() or 0) + 1
            ready: list[Callable[[], None]] = []
            with self._changed:
                for partition, position in reached.items():
                    if position > self._positions.get(partition, 0):
                        self._positions[partition] = position
                    waiting = self._waiters.get(partition)
                    if waiting:
                        ready += [call for offset, call in waiting if offset < position]
                        self._waiters[partition] = [(o, c) for o, c in waiting
                                                    if o >= position]
                self._changed.notify_all()
            for call in ready:
                call()

    def _passed_markers(self, consumer: Consumer) -> None:
        """Idle: move positions up to the consumer's, past transaction markers and aborted
        records that were never handed on (so `sync` and `wait_past` do not wait for them)."""
        try:
            now = consumer.position([TopicPartition(self.topic, p) for p in self._positions])
        except KafkaException:
            return
        ready: list[Callable[[], None]] = []
        with self._changed:
            moved = False
            for tp in now:
                if tp.offset > self._positions.get(tp.partition, 0):
                    self._positions[tp.partition] = tp.offset
                    moved = True
                    waiting = self._waiters.get(tp.partition)
                    if waiting:
                        ready += [call for offset, call in waiting if offset < tp.offset]
                        self._waiters[tp.partition] = [(o, c) for o, c in waiting
                                                       if o >= tp.offset]
            if moved:
                self._changed.notify_all()
        for call in ready:
            call()

    def _hand_on(self, msg: Message) -> None:
        try:
            self._on_record(msg.partition() or 0, msg.offset() or 0, msg.key() or b"",
                            msg.value())
        except Exception:  # a bad record must not stop the tail
            log.exception("record %s/%s of %s not applied", msg.partition(), msg.offset(),
                          self.topic)

    def when_past(self, partition: int, offset: int, call: Callable[[], None]) -> None:
        """Call `call` (in the tail's thread, or here if it is so already) once the record at
        `offset` of `partition` has been handed on: for waiters that must not hold a
        thread."""
        with self._changed:
            if self._positions.get(partition, 0) <= offset:
                self._waiters.setdefault(partition, []).append((offset, call))
                return
        call()

    async def reached(self, partition: int, offset: int, wait_s: float) -> bool:
        """Whether the record at `offset` of `partition` was handed on within `wait_s`
        seconds, waiting without holding a thread."""
        loop = asyncio.get_running_loop()
        seen: asyncio.Future[bool] = loop.create_future()

        def ready() -> None:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits
                loop.call_soon_threadsafe(settle, seen, True)

        self.when_past(partition, offset, ready)
        try:
            async with asyncio.timeout(wait_s):
                await seen
            return True
        except TimeoutError:
            return False

    def position(self, partition: int) -> int:
        """The offset after the last record of `partition` handed on."""
        return self._positions.get(partition, 0)

    def wait_past(self, partition: int, offset: int, timeout: float) -> bool:
        """Block until the record at `offset` of `partition` has been handed on; False if that
        took longer than `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._positions.get(partition, 0) <= offset:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def sync(self, timeout: float | None = None) -> None:
        """Block until every record written before the call has been handed on;
        KafkaUnavailable if that takes longer than `timeout` (default STREAMS_ADMIN_TIMEOUT)."""
        consumer = self._meta
        if consumer is None:
            raise RuntimeError("start() the tail first")
        wait = self.settings.admin_timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        marks = {p: self._end_of(consumer, p, deadline) for p in list(self._positions)}
        for partition, (low, end) in marks.items():
            if end > low and not self.wait_past(partition, end - 1,
                                              max(0.0, deadline - time.monotonic())):
                raise KafkaUnavailable(f"reading {self.topic} did not reach its end within "
                                       f"{wait:g} s; check that the brokers are up")

    def _end_of(self, consumer: Consumer, partition: int, deadline: float) -> tuple[int, int]:
        """A partition's watermarks, asked again while the broker answers with a retriable
        error (a leader moving: a topic just created, a broker restarting) until `deadline`."""
        while True:
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(self.topic, partition),
                    timeout=max(0.1, deadline - time.monotonic()))
                return int(low), int(high)
            except KafkaException as exc:
                error = exc.args[0]
                moving = isinstance(error, KafkaError) and (
                    error.retriable() or error.code() in LEADER_MOVING)
                if not moving or time.monotonic() >= deadline:
                    raise KafkaUnavailable(
                        f"cannot read the end of {self.topic}: {exc}") from exc
                time.sleep(0.1)

    def close(self) -> None:
        """Stop following and leave the broker."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._meta is not None:
            self._meta.close()
            self._meta = None
