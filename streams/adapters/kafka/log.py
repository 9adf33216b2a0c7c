"""Appending envelopes to a tenant's events topic and reading the topic back."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from streams.adapters.avro.codec import envelope_from_record
from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.config import producer_config, reader_config
from streams.core.errors import KafkaUnavailable, NotFound, SchemaError
from streams.core.events import Envelope, Seq
from streams.core.tenancy import tenant_topics
from streams.settings import Settings

HEADER_EVENT_TYPE = "event_type"
HEADER_TRACEPARENT = "traceparent"


Headers = list[tuple[str, str | bytes | None]]


def envelope_headers(envelope: Envelope) -> Headers:
    """Record headers: the event type (so readers can skip without decoding) and trace context."""
    headers: Headers = [(HEADER_EVENT_TYPE, envelope.event_type.encode()),
               ("workspace", envelope.workspace.encode())]
    if envelope.trace is not None:
        headers.append((HEADER_TRACEPARENT, envelope.trace.traceparent.encode()))
        if envelope.trace.tracestate:
            headers.append(("tracestate", envelope.trace.tracestate.encode()))
    return headers


def header_value(headers: Any, name: str) -> bytes | None:
    """The first header called `name` from a confluent-kafka or aiokafka message's headers
    (a list of pairs or a mapping), as bytes."""
    pairs = headers.items() if isinstance(headers, dict) else (headers or ())
    for key, value in pairs:
        if key == name:
            return value.encode() if isinstance(value, str) else value
    return None


class EventLog:
    """Appends envelopes to tenants' events topics and reads them back."""

    def __init__(self, settings: Settings, serde: AvroSerde, *,
                 producer: Producer | None = None) -> None:
        self.settings = settings
        self.serde = serde
        # A worker hands in its one shared producer; alone, the log makes its own.
        self._owned = producer is None
        self._producer = producer or Producer(producer_config(settings))
        self._known: set[str] = set()

    def _check_topic(self, topic: str) -> None:
        # Topics are never created on demand: without this check a write to a tenant that
        # does not exist would wait for the producer's message timeout.
        started = time.monotonic()
        while True:
            info = self._producer.list_topics(
                topic, timeout=self.settings.admin_timeout).topics.get(topic)
            if info is not None and info.error is None:
                self._known.add(topic)
                return
            if time.monotonic() - started > MISSING_TOPIC_GRACE:
                raise missing_topic(topic)
            time.sleep(0.2)

    async def require_tenant(self, tenant: str) -> None:
        """Return once the tenant's events topic exists; NotFound (saying how to create the
        tenant) if the broker does not know it."""
        topic = tenant_topics(tenant, self.settings.topic_prefix).events
        if topic in self._known:
            return
        try:
            await asyncio.to_thread(self._check_topic, topic)
        except NotFound as exc:
            raise NotFound(f"no tenant {tenant!r}: its events topic {topic} does not exist; "
                           f"create it with `streams tenant create {tenant}`") from exc

    async def append(self, envelope: Envelope) -> Seq:
        """Write one envelope, keyed by its chain, and return where it landed once acked.
        NotFound if the tenant does not exist."""
        topic = tenant_topics(envelope.tenant, self.settings.topic_prefix).events
        if topic not in self._known:
            await asyncio.to_thread(self._check_topic, topic)
        value = self.serde.encode_envelope(envelope, topic)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Seq] = loop.create_future()

        def delivered(err: Any, msg: Message) -> None:
            if err is not None:
                outcome: Any = KafkaUnavailable(f"append to {topic} failed: {err}")
            else:
                outcome = Seq(partition=msg.partition(), offset=msg.offset())
            loop.call_soon_threadsafe(_settle, done, outcome)

        try:
            self._producer.produce(topic, value=value, key=envelope.correlation_id.encode(),
                                   headers=envelope_headers(envelope), on_delivery=delivered)
        except (KafkaException, BufferError) as exc:
            raise KafkaUnavailable(f"append to {topic} failed: {exc}") from exc
        timeout = self.settings.flush_timeout
        remaining = await asyncio.to_thread(self._producer.flush, timeout)
        if remaining and not done.done():
            raise KafkaUnavailable(f"append to {topic} not acknowledged within {timeout:g} s")
        return await done

    def close(self) -> None:
        """Flush what is pending (a shared producer is flushed by its owner)."""
        if self._owned:
            self._producer.flush(10.0)


def _settle(future: asyncio.Future[Seq], outcome: Any) -> None:
    if future.done():
        return
    if isinstance(outcome, Exception):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


MISSING_TOPIC_GRACE = 2.0


def missing_topic(topic: str) -> NotFound:
    """The error for a tenant topic that does not exist."""
    return NotFound(f"topic {topic} does not exist: create the tenant first "
                    f"(streams tenant create)")


def watermarks(consumer: Consumer, topic: str, timeout: float = 30.0,
               ) -> dict[int, tuple[int, int]]:
    """(low, high) offsets of every partition of a topic.

    A topic created a moment ago may not have leaders yet; retriable errors are retried
    until `timeout`. A topic the broker does not know for `MISSING_TOPIC_GRACE` seconds
    raises NotFound.
    """
    started = time.monotonic()
    deadline = started + timeout
    while True:
        try:
            meta = consumer.list_topics(topic, timeout=10.0)
            info = meta.topics.get(topic)
            if info is None or info.error is not None:
                if time.monotonic() - started > MISSING_TOPIC_GRACE:
                    raise missing_topic(topic)
                raise KafkaUnavailable(f"topic {topic} does not exist")
            return {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10.0)
                for p in sorted(info.partitions)
            }
        except (KafkaException, KafkaUnavailable) as exc:
            retriable = isinstance(exc, KafkaUnavailable) or exc.args[0].retriable() or \
                exc.args[0].code() == KafkaError.NOT_LEADER_FOR_PARTITION
            if not retriable or time.monotonic() > deadline:
                raise KafkaUnavailable(f"cannot read offsets of {topic}: {exc}") from exc
            time.sleep(0.2)


class TopicReader:
    """Reads a topic from remembered positions up to its end at the time of the call.

    No consumer group: positions live in this object, so reading commits nothing.
    """

    def __init__(self, settings: Settings, topic: str) -> None:
        self.topic = topic
        self._consumer = Consumer(reader_config(settings, f"streams-reader-{uuid.uuid4().hex}"))
        self._positions: dict[int, int] = {}

    def read_to_end(self) -> Iterator[Message]:
        """Messages from the remembered positions up to each partition's current end."""
        try:
            ends = {p: high for p, (_low, high) in watermarks(self._consumer, self.topic).items()}
            todo = {p: e for p, e in ends.items() if self._positions.get(p, 0) < e}
            if not todo:
                return
            self._consumer.assign([
                TopicPartition(self.topic, p, self._positions.get(p, OFFSET_BEGINNING))
                for p in todo
            ])
            while todo:
                msg = self._consumer.poll(1.0)
                if msg is None:
                    continue
                if msg.error():
                    raise KafkaUnavailable(f"reading {self.topic} failed: {msg.error()}")
                p, off = msg.partition(), msg.offset()
                assert p is not None and off is not None
                self._positions[p] = off + 1
                if p in todo and off + 1 >= todo[p]:
                    del todo[p]
                yield msg
            self._consumer.unassign()
        except KafkaException as exc:
            raise KafkaUnavailable(f"reading {self.topic} failed: {exc}") from exc

    def close(self) -> None:
        """Leave the broker."""
        self._consumer.close()


def decode_envelopes(serde: AvroSerde, messages: Iterator[Message],
                     on_error: Callable[[Message, SchemaError], None] | None = None,
                     ) -> Iterator[Envelope]:
    """Envelopes of messages, with their seq; undecodable ones go to `on_error` or raise."""
    for msg in messages:
        try:
            record = serde.decode(msg.value() or b"", msg.topic() or "")
            yield envelope_from_record(record, Seq(partition=msg.partition() or 0,
                                                   offset=msg.offset() or 0))
        except SchemaError as exc:
            if on_error is None:
                raise
            on_error(msg, exc)


__all__ = [
    "HEADER_EVENT_TYPE",
    "HEADER_TRACEPARENT",
    "MISSING_TOPIC_GRACE",
    "EventLog",
    "Headers",
    "TopicReader",
    "decode_envelopes",
    "envelope_headers",
    "header_value",
    "missing_topic",
    "watermarks",
]
