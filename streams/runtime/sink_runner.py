"""Running a sink as a consumer group on every tenant's scores topic.

The group id is `<prefix>.sink.<cursor>`: the committed offsets are the sink's cursor. The
runner commits an offset only after the sink has durably handed on the scores below it (and
dead letters for what it refused are on the broker), so a crash repeats scores, never skips
them; the sink replaces a repeat by its id. A cursor remembers which sink owns it (in the
offset-commit metadata), and another sink that tries to use it is refused.

`cursor=None` keeps no cursor: nothing is committed and every start reads from the beginning.
`replay=True` reads from the beginning but leaves the committed cursor where it is until the
replay passes it, so a restart during a replay carries on from the cursor.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition

from streams.adapters.avro.codec import score_from_record
from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.outputs import Output, dead_letter_output
from streams.core.errors import SchemaError, SinkError, ValidationFailed
from streams.core.scores import Score
from streams.core.sinks.base import Rejected, ScoreSink, flush_sink, rejected_of
from streams.runtime.root import Runtime
from streams.settings import Settings

__all__ = ["CURSOR_PATTERN", "SinkRunner", "SinkStats", "cursor_group", "sink_identity"]

log = logging.getLogger(__name__)

CURSOR_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")


def sink_identity(sink: ScoreSink) -> str:
    """What a cursor records as its owner: the sink's `identity`, else its class."""
    identity = getattr(sink, "identity", None)
    return str(identity) if identity else f"{type(sink).__module__}.{type(sink).__qualname__}"


def cursor_group(settings: Settings, cursor: str) -> str:
    """The consumer group id of a sink cursor."""
    if not CURSOR_PATTERN.match(cursor):
        raise ValidationFailed(f"invalid cursor name {cursor!r} (pattern {CURSOR_PATTERN.pattern})")
    return f"{settings.topic_prefix}.sink.{cursor}"


@dataclass
class SinkStats:
    """What a runner has done."""

    records: int = 0
    scores: int = 0
    rejected: int = 0
    undecodable: int = 0
    commits: int = 0
    retries: int = 0
    batches: int = 0
    per_tenant: dict[str, int] = field(default_factory=dict)


class SinkRunner:
    """Feeds a ScoreSink from the tenants' scores topics, committing only what it handed on."""

    def __init__(
        self,
        settings: Settings,
        sink: ScoreSink,
        *,
        cursor: str | None,
        replay: bool = False,
        batch_size: int | None = None,
        batch_wait: float | None = None,
        max_backoff: float | None = None,
        serde: AvroSerde | None = None,
        runtime: Runtime | None = None,
    ) -> None:
        # A runner alone owns its clients; one handed a runtime leaves them to its owner.
        self._owns_runtime = runtime is None
        self.runtime = runtime or Runtime(settings)
        self.settings = settings
        self.sink = sink
        self.cursor = cursor
        self.replay = replay
        self.batch_size = settings.sink_batch_size if batch_size is None else batch_size
        self.batch_wait = settings.sink_batch_wait if batch_wait is None else batch_wait
        self.max_backoff = settings.sink_max_backoff if max_backoff is None else max_backoff
        self.identity = sink_identity(sink)
        self._serde = serde
        self.stats = SinkStats()
        self.group = cursor_group(settings, cursor) if cursor else \
            f"{settings.topic_prefix}.sink-nocursor.{uuid.uuid4().hex}"
        self._stopping = asyncio.Event()
        self._replay_floor: dict[tuple[str, int], int] = {}
        self._error: BaseException | None = None
        self._consumer: Consumer | None = None

    @property
    def serde(self) -> AvroSerde:
        """The serde given, else the runtime's."""
        return self._serde or self.runtime.serde

    @property
    def consumer(self) -> Consumer:
        """The cursor's consumer-group member, made on first use (by `run`)."""
        if self._consumer is None:
            self._consumer = self.runtime.consumer(self.group)
        return self._consumer

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        try:
            timeout = self.settings.admin_timeout
            committed = consumer.committed(partitions, timeout=timeout) if self.cursor else []
            for tp in committed:
                owner = tp.metadata
                if owner and owner != self.identity:
                    self._error = ValidationFailed(
                        f"cursor {self.cursor!r} belongs to sink {owner!r}, not "
                        f"{self.identity!r}: give each sink its own cursor name")
                if self.replay and tp.offset >= 0:
                    self._replay_floor[(tp.topic, tp.partition)] = tp.offset
            if self.replay:
                for tp in partitions:
                    tp.offset = OFFSET_BEGINNING
            consumer.assign(partitions)
        except KafkaException as exc:
            self._error = exc

    def stop(self) -> None:
        """Ask the runner to finish its batch, flush the sink (if it has a flush), commit and
        return."""
        self._stopping.set()

    async def run(self, *, until: Callable[[SinkStats], bool] | None = None) -> SinkStats:
        """Consume until stopped (or until `until(stats)` holds); returns the stats."""
        pattern = f"^{re.escape(self.settings.topic_prefix)}\\.[a-z][a-z0-9-]*\\.scores$"
        self.consumer.subscribe([pattern], on_assign=self._on_assign)
        try:
            while not self._stopping.is_set():
                if self._error is not None:
                    raise self._error
                messages = await asyncio.to_thread(self.consumer.consume, self.batch_size,
                                                   self.batch_wait)
                if messages:
                    await self._handle(messages)
                if until is not None and until(self.stats):
                    break
            await flush_sink(self.sink)
        finally:
            await asyncio.to_thread(self.consumer.close)
            if self._owns_runtime:
                self.runtime.close()
        return self.stats

    async def _handle(self, messages: list[Message]) -> None:
        scores: list[Score] = []
        origin: dict[str, Message] = {}
        dead: list[Output] = []
        for msg in messages:
            if msg.error():
                log.warning("consume error: %s", msg.error())
                continue
            self.stats.records += 1
            try:
                score = score_from_record(self.serde.decode(msg.value() or b"",
                                                            msg.topic() or ""))
            except (SchemaError, KeyError, TypeError, ValueError) as exc:
                self.stats.undecodable += 1
                dead.append(self._dead_letter(msg.topic() or "", msg.partition() or 0,
                                              msg.offset() or 0, msg.key(), msg.value(),
                                              f"undecodable score: {exc}"))
                continue
            scores.append(score)
            origin[score.id] = msg
        rejected = await self._record(scores) if scores else []
        if self._stopping.is_set() and scores and rejected is None:
            return  # stopped during an outage: commit nothing of this batch
        for item in rejected or []:
            self.stats.rejected += 1
            dead.append(self._rejected(item, origin[item.score.id]))
        if dead:
            await self.runtime.delivery.deliver(dead)
        self.stats.scores += len(scores)
        for score in scores:
            self.stats.per_tenant[score.source.tenant] = \
                self.stats.per_tenant.get(score.source.tenant, 0) + 1
        self.stats.batches += 1
        await asyncio.to_thread(self._commit, messages)

    async def _record(self, scores: list[Score]) -> list[Rejected] | None:
        backoff = 0.2
        while True:
            try:
                return rejected_of(await self.sink.record(scores))
            except SinkError as exc:
                self.stats.retries += 1
                log.warning("sink failed, retrying in %.1fs (cursor stays): %s", backoff, exc)
                try:
                    await asyncio.wait_for(self._stopping.wait(), timeout=backoff)
                    return None
                except TimeoutError:
                    pass
                backoff = min(backoff * 2, self.max_backoff)

    def _commit(self, messages: list[Message]) -> None:
        if not self.cursor:
            return
        ends: dict[tuple[str, int], int] = {}
        for msg in messages:
            if msg.error():
                continue
            key = (msg.topic() or "", msg.partition() or 0)
            ends[key] = max(ends.get(key, 0), (msg.offset() or 0) + 1)
        offsets = [
            TopicPartition(topic, partition, offset, metadata=self.identity)
            for (topic, partition), offset in ends.items()
            if offset > self._replay_floor.get((topic, partition), -1)
        ]
        if offsets:
            self.consumer.commit(offsets=offsets, asynchronous=False)
            self.stats.commits += 1

    def _dead_letter(self, topic: str, partition: int, offset: int, key: bytes | None,
                     value: bytes | None, reason: str) -> Output:
        return dead_letter_output(self.serde, self.settings.topic_prefix, topic=topic,
                                  partition=partition, offset=offset, key=key, value=value,
                                  reason=reason, stage=f"sink:{self.cursor or '-'}")

    def _rejected(self, item: Rejected, msg: Message) -> Output:
        return self._dead_letter(msg.topic() or "", msg.partition() or 0, msg.offset() or 0,
                                 msg.key(), msg.value(),
                                 f"rejected by {self.identity}: {item.reason}")
