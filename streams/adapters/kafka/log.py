"""Appending envelopes to a tenant's events topic and reading the topic back."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Collection, Iterator
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from streams.adapters.avro.codec import envelope_from_record
from streams.adapters.avro.fast import RegistryUnavailable
from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.access import denied
from streams.adapters.kafka.config import reader_config
from streams.adapters.kafka.reports import ReportPoller, produce_all, settle
from streams.core.errors import (
    KafkaUnavailable,
    NotFound,
    SchemaError,
    TooLarge,
)
from streams.core.events import Envelope, Seq
from streams.core.tenancy import reader_group, tenant_topics
from streams.settings import Settings

log = logging.getLogger(__name__)

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


Landed = Callable[[Envelope, int, int], None]


class EventLog:
    """Appends envelopes to tenants' events topics and reads them back.

    An append produces its record and awaits its own delivery report: no flush per call, so
    many appends from one process (concurrent tasks, or several event loops) share the
    producer's batches. Each event loop with appends in flight polls the producer for their
    reports (every POLL_INTERVAL); no thread is started.
    """

    def __init__(self, settings: Settings, serde: AvroSerde, *, producer: Producer,
                 owned: bool = False, broker_answers: Callable[[], bool] | None = None) -> None:
        self.settings = settings
        self.serde = serde
        # Asked (in a thread) only when an append times out, to tell a broker that is away
        # from a producer that cannot reach a broker others reach (the composition root's
        # fresh-client probe).
        self._broker_answers = broker_answers
        # The composition root hands in the producer (streams.runtime.root); `owned` says
        # this log flushes it on close rather than the producer's owner.
        self._owned = owned
        self._producer = producer
        self._known: set[str] = set()
        # Reports are served in the awaiting loops' own threads (see ReportPoller); other
        # writers on this producer (the command ledger) share the same poller.
        self.reports = ReportPoller(self._producer, POLL_INTERVAL)

    @property
    def producer(self) -> Producer:
        """The producer appends go through (the index entries use it too)."""
        return self._producer

    def _check_topic(self, topic: str) -> None:
        # Topics are never created on demand: without this check a write to a tenant that
        # does not exist would wait for the producer's message timeout.
        started = time.monotonic()
        while True:
            try:
                info = self._producer.list_topics(
                    topic, timeout=self.settings.admin_timeout).topics.get(topic)
            except KafkaException as exc:
                self._producer.poll(0)  # serve the error callback: it knows an auth failure
                raise denied(exc, self.settings, f"look up topic {topic}") or KafkaUnavailable(
                    f"cannot reach the brokers to look up {topic}: {exc}; "
                    "check KAFKA_BOOTSTRAP_SERVERS") from exc
            if info is not None and info.error is None:
                self._known.add(topic)
                return
            refused = info is not None and denied(info.error, self.settings,
                                                  f"describe topic {topic}")
            if refused:
                raise refused
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

    async def require_topic(self, tenant: str) -> None:
        """Return once the tenant's events topic exists; NotFound (create the tenant first)
        if it does not."""
        topic = tenant_topics(tenant, self.settings.topic_prefix).events
        if topic not in self._known:
            await asyncio.to_thread(self._check_topic, topic)

    def encode(self, envelope: Envelope, topic: str) -> bytes:
        """The record value of an envelope; ValidationFailed (naming the largest field and
        the limit) if it is over the configured maximum record size."""
        value = self.serde.encode_envelope(envelope, topic)
        limit = self.settings.max_record_bytes
        if len(value) > limit:
            name, size = largest_field(envelope)
            raise TooLarge(
                f"the {envelope.event_type} event is {len(value)} bytes encoded, over the "
                f"maximum record size of {limit} bytes (STREAMS_MAX_RECORD_BYTES); its "
                f"largest field is {name} ({size} bytes): shorten it, or store the content "
                "elsewhere and give a reference to it")
        return value

    async def _encode_within(self, envelope: Envelope, topic: str, deadline: float,
                             wait: float) -> bytes:
        """Encode, waiting out a registry outage until `deadline` (loop time)."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                return self.encode(envelope, topic)
            except RegistryUnavailable as exc:
                if loop.time() + 0.5 >= deadline:
                    raise RegistryUnavailable(
                        f"{exc}; gave up after {wait:g} s (STREAMS_FEEDBACK_TIMEOUT)") from exc
                await asyncio.sleep(0.5)

    async def append(self, envelope: Envelope, *, landed: Landed | None = None,
                     wait_s: float | None = None) -> Seq:
        """Write one envelope, keyed by its chain, and return where it landed once acked.

        NotFound if the tenant does not exist; ValidationFailed if the record is too large;
        RegistryUnavailable if the schema registry cannot be reached within `wait_s`
        (default STREAMS_FEEDBACK_TIMEOUT); KafkaUnavailable if the broker does not
        acknowledge within it. `landed(envelope, partition, offset)` runs once the record is
        acknowledged (in the producer's thread).
        """
        topic = tenant_topics(envelope.tenant, self.settings.topic_prefix).events
        if topic not in self._known:
            await asyncio.to_thread(self._check_topic, topic)
        loop = asyncio.get_running_loop()
        wait = self.settings.feedback_timeout if wait_s is None else wait_s
        deadline = loop.time() + wait
        value = await self._encode_within(envelope, topic, deadline, wait)
        done: asyncio.Future[Seq] = loop.create_future()

        def delivered(err: Any, msg: Message) -> None:
            if err is not None:
                outcome: Any = denied(err, self.settings, f"write to topic {topic}") or \
                    KafkaUnavailable(f"append to {topic} failed: {err}")
            else:
                outcome = Seq(partition=msg.partition() or 0, offset=msg.offset() or 0)
                if landed is not None:
                    try:
                        landed(envelope, outcome.partition, outcome.offset)
                    except Exception:  # the index catches up on its own; never lose the ack
                        log.exception("after-append hook failed for %s", envelope.event_id)
            try:
                here = asyncio.get_running_loop()
            except RuntimeError:
                here = None
            if here is loop:
                settle(done, outcome)
            else:
                with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits
                    loop.call_soon_threadsafe(settle, done, outcome)

        while True:
            try:
                self._producer.produce(topic, value=value, key=envelope.correlation_id.encode(),
                                       headers=envelope_headers(envelope), on_delivery=delivered)
                break
            except BufferError as exc:  # the local queue is full: let it drain
                if loop.time() >= deadline:
                    raise KafkaUnavailable(f"append to {topic}: the producer's queue stayed "
                                           f"full for {wait:g} s; are the brokers up?") from exc
                await asyncio.sleep(0.01)
            except KafkaException as exc:
                raise KafkaUnavailable(f"append to {topic} failed: {exc}") from exc
        with self.reports.awaiting(loop):
            try:
                async with asyncio.timeout_at(deadline):
                    return await asyncio.shield(done)
            except TimeoutError as exc:
                raise KafkaUnavailable(await self._unacknowledged(topic, wait)) from exc

    async def _unacknowledged(self, topic: str, wait: float) -> str:
        """Why an append was not acknowledged in time, and what to do about it."""
        said = f"append to {topic} not acknowledged within {wait:g} s (STREAMS_FEEDBACK_TIMEOUT)"
        if self._broker_answers is not None and await asyncio.to_thread(self._broker_answers):
            return (f"{said}, although the brokers answer a new client: the partition's "
                    "leader was slow to take the write (a broker just started, or a new "
                    "topic), or this process's producer cannot reach the brokers (seen after "
                    "a broker restart); retry, raise STREAMS_FEEDBACK_TIMEOUT if it is short, "
                    "and restart the process if it lasts")
        return f"{said}; check that the brokers in KAFKA_BOOTSTRAP_SERVERS are up"

    async def append_encoded(self, tenant: str,
                             records: list[tuple[bytes, bytes, Headers]],
                             wait_s: float | None = None) -> list[Seq | Exception]:
        """Write encoded events (key, value, headers) to a tenant's events topic together and
        return, in order, where each landed or the error it was refused with (AccessDenied,
        KafkaUnavailable), once the broker acknowledged them all: a batch's appends in one
        wait. NotFound if the tenant does not exist; KafkaUnavailable if the acknowledgements
        do not all arrive within `wait_s` (default STREAMS_FEEDBACK_TIMEOUT)."""
        topic = tenant_topics(tenant, self.settings.topic_prefix).events
        if topic not in self._known:
            await asyncio.to_thread(self._check_topic, topic)
        wait = self.settings.feedback_timeout if wait_s is None else wait_s
        landed = await produce_all(
            self._producer, self.reports,
            [(topic, key, value, headers, None) for key, value, headers in records],
            wait_s=wait,
            refused=lambda err, t: denied(err, self.settings, f"write to topic {t}") or
            KafkaUnavailable(f"append to {t} failed: {err}"))
        return [where if isinstance(where, Exception) else
                Seq(partition=where[0], offset=where[1]) for where in landed]

    def close(self) -> None:
        """Flush what is pending (a shared producer is flushed by its owner)."""
        if self._owned:
            self._producer.flush(10.0)


def largest_field(envelope: Envelope) -> tuple[str, int]:
    """The dotted name and JSON size of the largest field of an envelope's event (for a
    feedback event, of its value)."""
    data = envelope.event.model_dump(mode="json")
    if isinstance(data.get("value"), dict):
        data = {f"value.{k}": v for k, v in data["value"].items()}
    sizes = {k: len(json.dumps(v)) for k, v in data.items()}
    if not sizes:
        return "(none)", 0
    name = max(sizes, key=lambda k: sizes[k])
    return name, sizes[name]


MISSING_TOPIC_GRACE = 2.0

# How often a loop with appends awaiting their delivery reports polls the producer, seconds.
POLL_INTERVAL = 0.001


def missing_topic(topic: str) -> NotFound:
    """The error for a tenant topic that does not exist."""
    return NotFound(f"topic {topic} does not exist: create the tenant first "
                    f"(streams tenant create)")


LEADER_MOVING = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION,
                           KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART})
"""What a partition's leader answers for a moment while it moves, or while a topic just
created reaches every broker of a cluster (one broker's metadata names it, its leader does not
know it yet): worth asking again until the caller's deadline."""


def watermarks(consumer: Consumer, topic: str, timeout: float = 30.0,
               settings: Settings | None = None) -> dict[int, tuple[int, int]]:
    """(low, high) offsets of every partition of a topic (for a read_committed consumer,
    every one here, `high` is the last stable offset: the end of the committed records).

    A topic created a moment ago may not have leaders yet; retriable errors are retried
    until `timeout`. A topic the broker does not know for `MISSING_TOPIC_GRACE` seconds
    raises NotFound; one the broker refuses to describe to this principal raises AccessDenied
    (naming the principal when `settings` are given).
    """
    started = time.monotonic()
    deadline = started + timeout
    while True:
        try:
            meta = consumer.list_topics(topic, timeout=10.0)
            info = meta.topics.get(topic)
            if info is not None and info.error is not None:
                refused = denied(info.error, settings or Settings(), f"describe topic {topic}")
                if refused is not None:
                    raise refused
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
                exc.args[0].code() in LEADER_MOVING
            if not retriable or time.monotonic() > deadline:
                raise KafkaUnavailable(f"cannot read offsets of {topic}: {exc}") from exc
            time.sleep(0.2)


def ends(consumer: Consumer, topic: str, timeout: float = 30.0,
         settings: Settings | None = None) -> dict[int, int]:
    """Each partition's end, as `watermarks` gives it (for a read_committed consumer the last
    stable offset, for a read_uncommitted one the high watermark), in two round trips
    whatever the partition count: the topic's metadata, then one ListOffsets request for all
    its partitions (`watermarks` makes one per partition, in turn). Falls back to
    `watermarks` (its retries, NotFound, AccessDenied) when either fails."""
    try:
        info = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if info is not None and info.error is None and info.partitions:
            found = consumer.offsets_for_times(
                [TopicPartition(topic, p, OFFSET_END) for p in sorted(info.partitions)],
                timeout=timeout)
            if all(tp.error is None and tp.offset >= 0 for tp in found):
                return {tp.partition: tp.offset for tp in found}
    except KafkaException:
        pass  # watermarks says what is wrong, or waits it out
    return {p: high for p, (_low, high) in
            watermarks(consumer, topic, timeout=timeout, settings=settings).items()}


# confluent-kafka's OffsetSpec factories are untyped.
_LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
_EARLIEST: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]


def watermarks_of(admin: AdminClient, consumer: Consumer, topic: str,
                  known: Collection[int], timeout: float = 30.0,
                  settings: Settings | None = None) -> dict[int, tuple[int, int]]:
    """`watermarks` in one round trip, for a caller that asks again and again (a read
    view's catch-up before each read): the `known` partitions' low and last stable offsets
    from two concurrent ListOffsets requests (read_committed), with the topic's metadata
    fetched meanwhile to check the partitions are still those. `watermarks` asks for each
    partition's offsets in turn (a round trip each: 8 partitions cost about 5x as much, with
    a tail to match on a loaded machine).

    Falls back to `watermarks` (its retries, NotFound, AccessDenied) when `known` is empty,
    the partitions changed, or any request fails.
    """
    if known:
        wanted = sorted(known)
        try:
            ends = admin.list_offsets(
                {TopicPartition(topic, p): _LATEST for p in wanted},
                isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout)
            starts = admin.list_offsets(
                {TopicPartition(topic, p): _EARLIEST for p in wanted},
                isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout)
            info = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if info is not None and info.error is None and set(info.partitions) == set(wanted):
                low = {tp.partition: f.result(timeout).offset for tp, f in starts.items()}
                return {tp.partition: (low[tp.partition], f.result(timeout).offset)
                        for tp, f in sorted(ends.items(), key=lambda i: i[0].partition)}
        except (KafkaException, TimeoutError):
            pass  # watermarks says what is wrong, or waits it out
    return watermarks(consumer, topic, timeout=timeout, settings=settings)


def stable_offsets(admin: AdminClient, partitions: Collection[tuple[str, int]],
                   timeout: float = 5.0) -> dict[tuple[str, int], tuple[int, int]]:
    """Each partition's low and last stable offset (read_committed), of any topics, from two
    concurrent ListOffsets requests: one round trip per leader, not one per partition.
    KafkaException (or TimeoutError) when the brokers do not answer in `timeout`."""
    wanted = sorted(partitions)
    if not wanted:
        return {}
    ends = admin.list_offsets({TopicPartition(t, p): _LATEST for t, p in wanted},
                              isolation_level=IsolationLevel.READ_COMMITTED,
                              request_timeout=timeout)
    starts = admin.list_offsets({TopicPartition(t, p): _EARLIEST for t, p in wanted},
                                isolation_level=IsolationLevel.READ_COMMITTED,
                                request_timeout=timeout)
    low = {(tp.topic, tp.partition): f.result(timeout).offset for tp, f in starts.items()}
    return {(tp.topic, tp.partition): (low[tp.topic, tp.partition], f.result(timeout).offset)
            for tp, f in ends.items()}


def take(consumer: Consumer, most: int, wait_s: float) -> list[Message]:
    """Up to `most` records: what is fetched already, else the first to arrive within
    `wait_s` with what came with it. consume(most, wait_s) alone waits for `most` records or
    the whole timeout, so a read of a few records past an end would cost `wait_s`."""
    messages = consumer.consume(most, 0)
    if messages:
        return list(messages)
    first = consumer.poll(wait_s)
    return [] if first is None else [first, *consumer.consume(most - 1, 0)]


def reached_end(consumer: Consumer, topic: str, partition: int, end: int) -> bool:
    """Whether a reader's position in a partition has reached `end` (an offset from
    `watermarks`). Read to an end by this, not by the last record's offset: transaction
    markers and aborted records occupy offsets a read_committed reader is never handed (the
    record before a committed transaction's marker is never at `end - 1`), while its
    position moves past them. A position not known yet is not the end."""
    try:
        [tp] = consumer.position([TopicPartition(topic, partition)])
    except KafkaException:
        return False
    return tp.offset >= end


# The configuration of a consumer that only asks where a topic's records end, open
# transactions included: a read_committed reader that must see what was written before it
# was asked (an append it made itself) reads up to these ends, waiting for open transactions
# to commit or abort (at most a loop's commit interval, or the transaction timeout of a
# writer that died), instead of stopping at the last stable offset.
WRITTEN_ENDS = {"isolation.level": "read_uncommitted"}


class TopicReader:
    """Reads a topic from remembered positions up to its end at the time of the call.

    No consumer group: positions live in this object, so reading commits nothing. It reads
    committed records only, up to every record written before the call: what an open
    transaction holds is waited for, until it commits (and is read) or aborts (and is not).
    """

    def __init__(self, settings: Settings, topic: str) -> None:
        self.topic = topic
        self.settings = settings
        # It reads to an end and stops, so it never long-polls: a fetch waiting at a
        # partition's end (500 ms by default) would hold back the next read's offset queries,
        # which the broker answers after it on the same connection.
        self._made: Consumer | None = None
        self._ends: Consumer | None = None
        self._positions: dict[int, int] = {}

    @property
    def _consumer(self) -> Consumer:
        # Made on first read, so building a reader does no I/O.
        if self._made is None:
            self._made = Consumer(reader_config(
                self.settings, reader_group(self.topic, "reader", self.settings.topic_prefix),
                **{"fetch.wait.max.ms": 10}))
        return self._made

    @property
    def _ends_consumer(self) -> Consumer:
        if self._ends is None:
            self._ends = Consumer(reader_config(
                self.settings, reader_group(self.topic, "reader", self.settings.topic_prefix),
                **WRITTEN_ENDS))
        return self._ends

    def read_to_end(self) -> Iterator[Message]:
        """Messages from the remembered positions up to each partition's current end (every
        record written before the call, committed ones handed on)."""
        try:
            written = ends(self._ends_consumer, self.topic, settings=self.settings)
            todo = {p: e for p, e in written.items() if self._positions.get(p, 0) < e}
            if not todo:
                return
            self._consumer.assign([
                TopicPartition(self.topic, p, self._positions.get(p, OFFSET_BEGINNING))
                for p in todo
            ])
            while todo:
                msg = self._consumer.poll(0.1)
                if msg is None:
                    # Idle: the rest of a partition may be markers or aborted records.
                    for part in [q for q, e in todo.items()
                                 if reached_end(self._consumer, self.topic, q, e)]:
                        self._positions[part] = todo.pop(part)
                    continue
                if msg.error():
                    raise denied(msg.error(), self.settings, f"read topic {self.topic}") or \
                        KafkaUnavailable(f"reading {self.topic} failed: {msg.error()}")
                p, off = msg.partition(), msg.offset()
                assert p is not None and off is not None
                self._positions[p] = off + 1
                if p in todo and off + 1 >= todo[p]:
                    del todo[p]
                yield msg
            self._consumer.unassign()
        except KafkaException as exc:
            raise KafkaUnavailable(f"reading {self.topic} failed: {exc}") from exc

    def rewind(self, partition: int, offset: int) -> None:
        """Read `partition` from `offset` again at the next `read_to_end` (a record its
        caller could not handle now, in a registry outage say); never moves forward."""
        self._positions[partition] = min(self._positions.get(partition, offset), offset)

    def close(self) -> None:
        """Leave the broker (a reader that never read has nothing to close)."""
        made, self._made = self._made, None
        if made is not None:
            made.close()
        ends, self._ends = self._ends, None
        if ends is not None:
            ends.close()


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
    "LEADER_MOVING",
    "MISSING_TOPIC_GRACE",
    "POLL_INTERVAL",
    "WRITTEN_ENDS",
    "EventLog",
    "Headers",
    "Landed",
    "TopicReader",
    "decode_envelopes",
    "ends",
    "envelope_headers",
    "header_value",
    "largest_field",
    "missing_topic",
    "reached_end",
    "stable_offsets",
    "take",
    "watermarks",
    "watermarks_of",
]
