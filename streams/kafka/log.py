"""Appending envelopes to a tenant's events topic and reading the topic back."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, Producer, TopicPartition

from streams.avro.codec import envelope_from_record
from streams.avro.serde import AvroSerde
from streams.errors import KafkaUnavailable, SchemaError
from streams.events import Envelope, Seq
from streams.settings import Settings
from streams.tenancy import tenant_topics

HEADER_EVENT_TYPE = "event_type"
HEADER_TRACEPARENT = "traceparent"


def envelope_headers(envelope: Envelope) -> list[tuple[str, bytes]]:
    """Record headers: the event type (so readers can skip without decoding) and trace context."""
    headers = [(HEADER_EVENT_TYPE, envelope.event_type.encode()),
               ("workspace", envelope.workspace.encode())]
    if envelope.trace is not None:
        headers.append((HEADER_TRACEPARENT, envelope.trace.traceparent.encode()))
        if envelope.trace.tracestate:
            headers.append(("tracestate", envelope.trace.tracestate.encode()))
    return headers


def header(message: Message, name: str) -> bytes | None:
    """The first header of that name on a message, if any."""
    for key, value in message.headers() or ():
        if key == name:
            return value  # type: ignore[no-any-return]
    return None


def producer_config(settings: Settings, **extra: Any) -> dict[str, Any]:
    """An idempotent, fully acknowledged producer: nothing written is lost or doubled by
    the producer's own retries."""
    return {
        "bootstrap.servers": settings.bootstrap_servers,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "lz4",
        **settings.kafka_extra,
        **extra,
    }


class EventLog:
    """Appends envelopes to tenants' events topics and reads them back."""

    def __init__(self, settings: Settings, serde: AvroSerde) -> None:
        self.settings = settings
        self.serde = serde
        self._producer = Producer(producer_config(settings))

    async def append(self, envelope: Envelope) -> Seq:
        """Write one envelope, keyed by its chain, and return where it landed once acked."""
        topic = tenant_topics(envelope.tenant, self.settings.topic_prefix).events
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
        remaining = await asyncio.to_thread(self._producer.flush, 30.0)
        if remaining and not done.done():
            raise KafkaUnavailable(f"append to {topic} not acknowledged within 30 s")
        return await done

    def close(self) -> None:
        """Flush what is pending."""
        self._producer.flush(10.0)


def _settle(future: asyncio.Future[Seq], outcome: Any) -> None:
    if future.done():
        return
    if isinstance(outcome, Exception):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


class TopicReader:
    """Reads a topic from remembered positions up to its end at the time of the call.

    No consumer group: positions live in this object, so reading commits nothing.
    """

    def __init__(self, settings: Settings, topic: str) -> None:
        self.topic = topic
        self._consumer = Consumer({
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": f"streams-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            **settings.kafka_extra,
        })
        self._positions: dict[int, int] = {}

    def _partitions(self) -> list[int]:
        meta = self._consumer.list_topics(self.topic, timeout=10.0)
        info = meta.topics.get(self.topic)
        if info is None or info.error is not None:
            raise KafkaUnavailable(f"topic {self.topic} does not exist")
        return sorted(info.partitions)

    def read_to_end(self) -> Iterator[Message]:
        """Messages from the remembered positions up to each partition's current end."""
        try:
            ends: dict[int, int] = {}
            for p in self._partitions():
                _low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=10.0)
                ends[p] = high
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
            record = serde.decode(msg.value(), msg.topic())
            yield envelope_from_record(record, Seq(partition=msg.partition(), offset=msg.offset()))
        except SchemaError as exc:
            if on_error is None:
                raise
            on_error(msg, exc)
