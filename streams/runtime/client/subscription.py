"""A live tail of one workspace's events, from a cursor, bounded by the client's acks.

    subscription = Subscription(runtime, "acme", "prod")
    cursor = await subscription.start("end")        # the concrete cursor it starts from
    while True:
        envelope = await subscription.next()        # SlowConsumer if acks stop coming
        await send(envelope)
        ...
        subscription.ack(seq)                       # as the client acknowledges

The tail reads the tenant's events topic with its own consumer (the runtime's reader:
assigned partitions, no group, nothing committed), skips other workspaces' records by their
`workspace` header without decoding them, and delivers each partition's events in offset
order. What it holds is bounded: at most `STREAMS_STREAM_BUFFER` events delivered and
unacknowledged (the `AckWindow`), one consumed batch, and the consumer's small prefetch.
When the window is full `next()` waits for acks; if none frees room within
`STREAMS_STREAM_SLOW_TIMEOUT` it raises `SlowConsumer`, and the surface disconnects the
client with that reason.

Partitions added to the events topic after `start()` are not followed (a new subscription
sees them).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from streams.adapters.kafka.log import decode_envelopes, header_value, watermarks
from streams.core.errors import KafkaUnavailable, SlowConsumer
from streams.core.events import Envelope, Seq
from streams.core.stream import AckWindow, Cursor, StartFrom, resolve_start
from streams.core.tenancy import check_tenant, check_workspace, tail_group, tenant_topics
from streams.runtime.root import Runtime

__all__ = ["Subscription"]

log = logging.getLogger(__name__)

# Records one consume() call takes, and how long it waits for the first of them.
_BATCH = 500
_WAIT = 0.25
# librdkafka prefetches up to 64 MB per partition by default; a tail needs little.
_PREFETCH = {"queued.max.messages.kbytes": 2048, "fetch.max.bytes": 4 * 1024 * 1024}


class Subscription:
    """One client's tail of one workspace. Owned by one event loop; `close()` it."""

    def __init__(self, runtime: Runtime, tenant: str, workspace: str, *,
                 buffer: int | None = None, slow_timeout: float | None = None) -> None:
        check_tenant(tenant)
        check_workspace(workspace)
        self.runtime = runtime
        self.settings = settings = runtime.settings
        self.serde = runtime.serde
        self.tenant = tenant
        self.workspace = workspace
        self.topic = tenant_topics(tenant, settings.topic_prefix).events
        self.capacity = buffer if buffer is not None else settings.stream_buffer
        self.slow_timeout = (slow_timeout if slow_timeout is not None
                             else settings.stream_slow_timeout)
        self._workspace_header = workspace.encode()
        self._consumer: Consumer | None = None
        self._window: AckWindow | None = None
        self._ready: deque[Envelope] = deque()
        self._room: asyncio.Event | None = None
        self._reading: asyncio.Future[list[Message]] | None = None
        self._closed = False

    # -- starting -----------------------------------------------------------------------------

    def _open(self, start: StartFrom) -> Cursor:
        consumer = self.runtime.reader(tail_group(), **_PREFETCH)
        try:
            cursor = resolve_start(start, watermarks(consumer, self.topic,
                                                     timeout=self.settings.admin_timeout))
            consumer.assign([TopicPartition(self.topic, p, offset)
                             for p, offset in cursor.items()])
        except KafkaException as exc:
            consumer.close()
            raise KafkaUnavailable(f"cannot read {self.topic}: {exc}; check that the brokers "
                                   "in KAFKA_BOOTSTRAP_SERVERS are up") from exc
        except BaseException:
            consumer.close()
            raise
        self._consumer = consumer
        return cursor

    async def start(self, start: StartFrom = "end") -> Cursor:
        """Begin the tail at `start` ("start", "end", or a cursor) and return the concrete
        cursor it begins from: every partition's next offset, which a client may save as
        its resume point before any event arrives.

        NotFound if the tenant has no events topic; ValidationFailed if the cursor names a
        partition the topic lacks; KafkaUnavailable if the broker cannot be reached.
        """
        if self._consumer is not None:
            raise RuntimeError("a Subscription starts once")
        cursor = await asyncio.to_thread(self._open, start)
        self._window = AckWindow(self.capacity, cursor)
        self._room = asyncio.Event()
        return cursor

    # -- delivering ---------------------------------------------------------------------------

    def _consume(self) -> list[Message]:
        assert self._consumer is not None
        try:
            return self._consumer.consume(_BATCH, _WAIT)
        except KafkaException as exc:
            raise KafkaUnavailable(f"reading {self.topic} failed: {exc}") from exc

    def _mine(self, messages: list[Message]) -> list[Message]:
        mine = []
        for msg in messages:
            if msg.error():
                raise KafkaUnavailable(f"reading {self.topic} failed: {msg.error()}")
            workspace = header_value(msg.headers(), "workspace")
            # A record without the header (another producer's) is decoded to find out.
            if workspace is None or workspace == self._workspace_header:
                mine.append(msg)
        return mine

    async def _fill(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._ready:
            if self._closed:
                raise RuntimeError("the subscription is closed")
            # A read left in flight by a cancelled call is awaited, never started twice:
            # its records must not be lost, and a consumer serves one call at a time.
            if self._reading is None:
                self._reading = loop.run_in_executor(None, self._consume)
            messages = await asyncio.shield(self._reading)
            self._reading = None
            for envelope in decode_envelopes(self.serde, iter(self._mine(messages)),
                                             on_error=self._undecodable):
                if envelope.workspace == self.workspace:
                    self._ready.append(envelope)

    def _undecodable(self, msg: Message, exc: Exception) -> None:
        log.warning("tail of %s skips %s/%s: %s", self.topic, msg.partition(), msg.offset(),
                    exc)

    async def next(self) -> Envelope:
        """The workspace's next event (with its seq), once the window has room for it.

        Waits for new events as long as it takes; waits for acks at most the slow timeout,
        then raises SlowConsumer.
        """
        window, room = self._window, self._room
        if window is None or room is None:
            raise RuntimeError("start() the subscription first")
        while window.full:
            room.clear()
            try:
                async with asyncio.timeout(self.slow_timeout):
                    await room.wait()
            except TimeoutError:
                raise SlowConsumer(
                    f"too slow: {window.pending} events unacknowledged for "
                    f"{self.slow_timeout:g} s; resume from your last acknowledged seq"
                ) from None
        await self._fill()
        envelope = self._ready.popleft()
        assert envelope.seq is not None
        window.admit(envelope.seq)
        return envelope

    def ack(self, seq: Seq) -> int:
        """Acknowledge the delivered events of `seq.partition` up to `seq.offset` (see
        AckWindow.ack); returns how many were freed."""
        if self._window is None or self._room is None:
            raise RuntimeError("start() the subscription first")
        freed = self._window.ack(seq)
        if freed:
            self._room.set()
        return freed

    @property
    def pending(self) -> int:
        """Events delivered and not acknowledged."""
        return 0 if self._window is None else self._window.pending

    def acknowledged(self) -> Cursor:
        """The cursor to resume from (see AckWindow.acknowledged)."""
        return {} if self._window is None else self._window.acknowledged()

    async def close(self) -> None:
        """Leave the broker, after a consume call in flight returns (within a fraction of a
        second)."""
        self._closed = True
        reading, self._reading = self._reading, None
        if reading is not None:
            await asyncio.wait([reading])
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await asyncio.to_thread(consumer.close)
