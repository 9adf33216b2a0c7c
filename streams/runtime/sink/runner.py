"""Running a sink as a consumer group on every tenant's scores topic.

The group id is `<prefix>.sink.<cursor>`: the committed offsets are the sink's cursor. The
runner commits an offset only after the sink has durably handed on the scores below it (and
dead letters for what it refused are on the broker), so a crash repeats scores, never skips
them; the sink replaces a repeat by its id. A cursor remembers which sink owns it (in the
offset-commit metadata), and another sink that tries to use it is refused.

A sink that stores its consumer offsets itself (`OffsetStoringSink`: the DuckDB sink) gets
them with every batch instead: its `write` applies the rows and stores the offsets after them
in one transaction, and on assignment the runner seeks to the offsets the sink holds (falling
back to the committed cursor, then to the beginning, for a partition it holds none of). Such a
sink has each record applied exactly once across crashes: the runner hands it one batch at a
time, in consumption order, and never a record below what it stores (a record consumed
again after a rebalance is dropped before the write). The Kafka commits still follow, as a
progress marker for lag monitoring, not as the sink's position.

The consumer reads with isolation.level=read_committed: records of aborted transactions (a
worker writing scores transactionally) never reach a sink.

`cursor=None` keeps no cursor: nothing is committed and every start reads from the beginning.
`replay=True` reads from the beginning but leaves the committed cursor where it is until the
replay passes it, so a restart during a replay carries on from the cursor.

The data path is a pipeline of three stages that overlap:

1. **fetch**: consume a batch (in a thread) and decode it with `FastCodec` (fastavro against
   the writer's schema, cached per registry id; a new id is fetched in a thread) straight to
   `Score` objects, on the event loop in slices so the sink's HTTP answers are not held back;
   undecodable records become dead letters. The batch is opened in the `OffsetLedger`, in
   consumption order.
2. **send**: `sink.record(batch)`, retried with backoff on `SinkError`; dead letters for the
   refused scores and the undecodable records are delivered; the batch is accepted in the
   ledger. Up to `in_flight` batches are at the sink at once (`STREAMS_SINK_IN_FLIGHT`), and
   while the sink sends them the fetch stage prepares the next.
3. **commit** (one committer, synchronous commits in a thread): the offsets the ledger
   releases, which are those of the accepted batches before the first batch that is not
   accepted, so a commit never passes a batch the sink has not accepted, and batches accepted
   while a commit is under way go together in the next. It overlaps the sending.

Outages are waits, not failures. A schema registry that cannot be reached or answers 5xx
(`RegistryUnavailable`) makes the fetch stage wait and decode the same batch again (good
scores are never dead-lettered for it); a commit that fails because the broker or the group
coordinator is away is retried with backoff; dead letters are delivered until they land. Each
outage logs once when it starts, at most every 30 s while it lasts, and once when it is over;
only an outage longer than `outage_limit` (`STREAMS_OUTAGE_LIMIT`, 600 s) ends the runner with
`OutageTooLong`. A failing sink (`SinkError`: Langfuse answering 5xx, 429, timing out) is
retried for as long as it lasts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from opentelemetry import trace

from streams.adapters.avro.codec import score_from_record
from streams.adapters.avro.fast import FastCodec, RegistryUnavailable, letter_writer
from streams.adapters.avro.schemas import fullname, score_schema
from streams.adapters.kafka.delivery import Delivery
from streams.adapters.kafka.lag import LagTracker
from streams.adapters.kafka.outputs import (
    Output,
    dead_letter_record,
    reason_headers,
)
from streams.adapters.kafka.stall import StallWatch
from streams.adapters.tracing import batch_span, tracing_enabled
from streams.core.errors import SchemaError, SinkError, ValidationFailed
from streams.core.scores import Score
from streams.core.sinks.base import (
    OffsetStoringSink,
    Rejected,
    ScoreSink,
    flush_sink,
    rejected_of,
)
from streams.core.tenancy import (
    CURSOR_PATTERN,
    SCORES,
    dead_letter_topic,
    sink_group,
    tenants_pattern,
)
from streams.runtime.batch import OutageTooLong
from streams.runtime.observe.health import HealthServer, serve_health
from streams.runtime.root import Runtime
from streams.settings import Settings

__all__ = [
    "CURSOR_PATTERN",
    "OffsetLedger",
    "OutageTooLong",
    "SinkRunner",
    "SinkStats",
    "cursor_group",
    "seek_positions",
    "serve_sink",
    "sink_identity",
]

log = logging.getLogger(__name__)

Partition = tuple[str, int]
_T = TypeVar("_T")


class _CommitUnanswered(Exception):
    """A synchronous offset commit that did not answer in time (it may still)."""


def _in_daemon_thread(fn: Callable[[], object]) -> asyncio.Future[None]:
    """Run `fn` in a daemon thread of its own; the returned future (of the running loop)
    is done when it returns (its result dropped), or has its error. Unlike the threads of
    asyncio.to_thread's pool, which an exiting process joins, a call that never returns
    here does not keep the process alive."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if future.done():
            return
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)

    def call() -> None:
        try:
            fn()
        except BaseException as exc:  # handed to the awaiting coroutine
            error: BaseException | None = exc
        else:
            error = None
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(settle, error)

    threading.Thread(target=call, name="sink-commit", daemon=True).start()
    return future

_SCORE = fullname(score_schema())
# A commit refused because the partitions moved to another member (or this member must
# rejoin): the next owner starts from the last commit, which is safe, so it is not retried.
_MOVED = frozenset({KafkaError._NO_OFFSET, KafkaError.REBALANCE_IN_PROGRESS,
                    KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
                    KafkaError._STATE})
# A commit that failed because the broker or the coordinator is away for now: retried.
_TRANSIENT = frozenset({KafkaError._WAIT_COORD, KafkaError._TRANSPORT, KafkaError._TIMED_OUT,
                        KafkaError._ALL_BROKERS_DOWN, KafkaError.COORDINATOR_NOT_AVAILABLE,
                        KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                        KafkaError.REQUEST_TIMED_OUT, KafkaError.NETWORK_EXCEPTION,
                        KafkaError._WAIT_CACHE, KafkaError._RESOLVE})
# What the consumer's error callback says when the brokers cannot be reached (counted).
_BROKER_AWAY = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                          KafkaError._RESOLVE})
# Accepted batches that may wait for their commit (beyond those in flight) before the runner
# stops taking new ones: a crash or a long commit outage repeats at most these.
_UNCOMMITTED = 4
# Seconds the fetch stage waits with a decoded batch the next stage does not take, before it
# pauses its partitions and keeps the consumer polled (a rebalance needs the polling).
_HOLD_BEFORE_PAUSING = 1.0
# Records decoded at a time on the event loop between looks at the sink's HTTP answers.
_SLICE = 50
# How often a lasting outage or a repeated consume error is logged again.
_LOG_EVERY = 30.0


class _Repeats(logging.Filter):
    """Lets a kind of log line through (its text with the numbers left out) at most every
    30 s, saying how many like it were held back."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        kind = re.sub(r"\d+", "#", record.getMessage())
        now = time.monotonic()
        with self._lock:
            last, held = self._seen.get(kind, (-_LOG_EVERY, 0))
            if now - last < _LOG_EVERY:
                self._seen[kind] = (last, held + 1)
                return False
            self._seen[kind] = (now, 0)
        if held:
            record.msg = f"{record.getMessage()} ({held} more like it in the last 30 s)"
            record.args = ()
        return True


kafka_log = logging.getLogger(f"{__name__}.kafka")
kafka_log.addFilter(_Repeats())


def _schema_id(value: bytes) -> int:
    """The registry id in a Confluent frame (bytes 1-4, big-endian)."""
    return int.from_bytes(value[1:5], "big")


def sink_identity(sink: ScoreSink) -> str:
    """What a cursor records as its owner: the sink's `identity`, else its class."""
    identity = getattr(sink, "identity", None)
    return str(identity) if identity else f"{type(sink).__module__}.{type(sink).__qualname__}"


def seek_positions(partitions: Sequence[Partition], stored: Mapping[Partition, int], *,
                   replay: bool, start: Callable[[str, int], int]) -> dict[Partition, int]:
    """Where each assigned partition starts when the sink stores its own offsets: a replay
    at `start(topic, partition)`; otherwise at the offset the sink stores for it. A partition
    missing from the answer starts at the group's committed offset (or, with none, where
    auto.offset.reset says: the beginning)."""
    if replay:
        return {tp: start(*tp) for tp in partitions}
    return {tp: stored[tp] for tp in partitions if tp in stored}


def already_applied(positions: Sequence[tuple[Partition, int]],
                    applied: Mapping[Partition, int]) -> list[int]:
    """The indexes of the positions (partition, offset) below what the sink already applied
    (`applied`: per partition, the next offset to apply): records consumed again after a
    rebalance, which must not reach the sink a second time."""
    return [i for i, (tp, offset) in enumerate(positions) if offset < applied.get(tp, -1)]


def cursor_group(settings: Settings, cursor: str) -> str:
    """The consumer group id of a sink cursor (streams.core.tenancy.sink_group)."""
    return sink_group(cursor, settings.topic_prefix)


@dataclass
class SinkStats:
    """What a runner has done (`paused`: times the fetch stage paused its partitions while
    the sink or the commits held the next batch back; `broker_errors`: times its consumer
    reported the brokers unreachable, which a commit blocked through a short outage and then
    accepted does not count in `outage_waits`; `consumers_replaced`: consumers found unable
    to commit while the brokers answered a new client, and replaced)."""

    records: int = 0
    scores: int = 0
    rejected: int = 0
    undecodable: int = 0
    commits: int = 0
    retries: int = 0
    batches: int = 0
    outage_waits: int = 0
    broker_errors: int = 0
    already_applied: int = 0
    paused: int = 0
    consumers_replaced: int = 0
    per_tenant: dict[str, int] = field(default_factory=dict)


class OffsetLedger:
    """The order rule of the pipelined runner: which offsets may be committed.

    Batches are opened in the order they were consumed, and accepted (handed on by the sink,
    their dead letters delivered) in any order. `ready()` releases the offsets of the accepted
    batches that come before the first batch not accepted yet, and only those: a batch is
    never committed before an earlier one, and a commit never passes a batch the sink has not
    accepted. Not thread-safe: the runner uses it from its event loop only.
    """

    def __init__(self) -> None:
        self._open: dict[int, dict[Partition, int]] = {}  # by sequence number, in order
        self._accepted: set[int] = set()
        self._next = 0

    def open(self, ends: Mapping[Partition, int]) -> int:
        """Register a consumed batch (the offset after its last record, per partition);
        returns its sequence number."""
        seq = self._next
        self._next += 1
        self._open[seq] = dict(ends)
        return seq

    def accept(self, seq: int) -> None:
        """The batch `seq` has been handed on; raises ValueError for a batch not open."""
        if seq not in self._open:
            raise ValueError(f"batch {seq} is not open (already released, or never opened)")
        self._accepted.add(seq)

    def ready(self) -> dict[Partition, int]:
        """The offsets to commit now (per partition, the highest of the released batches);
        the released batches leave the ledger."""
        out: dict[Partition, int] = {}
        while self._open:
            seq = next(iter(self._open))
            if seq not in self._accepted:
                break
            for tp, end in self._open.pop(seq).items():
                out[tp] = max(out.get(tp, end), end)
            self._accepted.discard(seq)
        return out

    @property
    def pending(self) -> int:
        """Batches opened and not released yet."""
        return len(self._open)


class _Outage:
    """One kind of outage (broker, registry): when it began, bounded logging, the limit."""

    def __init__(self, what: str, limit: float, stats: SinkStats) -> None:
        self.what = what
        self.limit = limit
        self.stats = stats
        self._since: float | None = None
        self._logged = 0.0
        self._tries = 0
        self._lock = threading.Lock()

    def waiting(self, problem: str) -> float:
        """Note one failed try; returns the pause before the next. Raises OutageTooLong once
        the outage has lasted longer than the limit."""
        now = time.monotonic()
        with self._lock:
            self.stats.outage_waits += 1
            if self._since is None:
                self._since = self._logged = now
                self._tries = 0
                log.warning("%s unavailable: %s; waiting and retrying (the cursor stays; "
                            "limit %.0f s, STREAMS_OUTAGE_LIMIT)", self.what, problem,
                            self.limit)
            elif now - self._since > self.limit:
                raise OutageTooLong(
                    f"{self.what} unavailable for over {self.limit:.0f} s: {problem}; "
                    "nothing was committed past what the sink handed on. Bring it back and "
                    "start the sink again, or raise STREAMS_OUTAGE_LIMIT")
            elif now - self._logged >= _LOG_EVERY:
                self._logged = now
                log.warning("%s still unavailable after %.0f s (%d tries): %s", self.what,
                            now - self._since, self._tries, problem)
            self._tries += 1
            return float(min(5.0, 0.2 * 2 ** min(self._tries - 1, 5)))

    @property
    def since(self) -> float | None:
        """When the outage began (monotonic), None when there is none."""
        return self._since

    def restart(self) -> None:
        """Start the clock again at the next failure (a new client replaced the failing
        one), without logging a recovery."""
        with self._lock:
            self._since = None

    def over(self) -> None:
        """The thing answered again: log the recovery once."""
        with self._lock:
            if self._since is not None:
                log.warning("%s available again after %.1f s", self.what,
                            time.monotonic() - self._since)
                self._since = None


@dataclass
class _Batch:
    """A consumed batch, decoded: the scores for the sink, and what to dead-letter."""

    records: int = 0
    scores: list[Score] = field(default_factory=list)
    positions: list[tuple[Partition, int]] = field(default_factory=list)  # one per score
    origin: dict[str, Message] = field(default_factory=dict)
    dead: list[Output] = field(default_factory=list)
    undecodable: int = 0
    ends: dict[Partition, int] = field(default_factory=dict)
    seq: int = -1


class SinkRunner:
    """Feeds a ScoreSink from the tenants' scores topics, committing only what it handed on."""

    def __init__(
        self,
        runtime: Runtime,
        sink: ScoreSink,
        *,
        cursor: str | None,
        replay: bool = False,
        batch_size: int | None = None,
        batch_wait: float | None = None,
        max_backoff: float | None = None,
        outage_limit: float | None = None,
        in_flight: int | None = None,
        codec: FastCodec | None = None,
        group: str | None = None,
    ) -> None:
        # The runtime builds the runner's clients; its owner closes it.
        self.runtime = runtime
        self.settings = settings = runtime.settings
        self.sink = sink
        self.cursor = cursor
        self.replay = replay
        self.batch_size = settings.sink_batch_size if batch_size is None else batch_size
        self.batch_wait = settings.sink_batch_wait if batch_wait is None else batch_wait
        self.max_backoff = settings.sink_max_backoff if max_backoff is None else max_backoff
        self.outage_limit = settings.outage_limit if outage_limit is None else outage_limit
        self.in_flight = max(1, settings.sink_in_flight if in_flight is None else in_flight)
        # A sink that stores its offsets (with a cursor to store them under) is written one
        # batch at a time in consumption order: a later batch's offsets committed before an
        # earlier batch's rows would skip those rows after a crash.
        self.store: OffsetStoringSink | None = (
            sink if cursor and isinstance(sink, OffsetStoringSink) else None)
        if self.store is not None:
            self.in_flight = 1
        # Per partition, the next offset the store has applied (read at assignment, raised
        # after every write): what is below is dropped before it reaches the store again.
        self._applied: dict[Partition, int] = {}
        # Per assigned partition, the offset the store holds where the Kafka cursor lags it
        # (a kill between the store's transaction and the commit): written by the assignment
        # callback in the fetch thread, taken by the fetch stage (see _cursor_catch_up).
        self._cursor_behind: dict[Partition, int] = {}
        self._behind_lock = threading.Lock()
        self.identity = sink_identity(sink)
        self._codec = codec
        self.stats = SinkStats()
        if not cursor:
            self.group = sink_group(None, settings.topic_prefix)
        else:
            # `group` names the cursor's group when it is not `cursor_group` (the in-process
            # mirror keeps one per workspace: streams.runtime.sink.mirror.mirror_group).
            self.group = group or cursor_group(settings, cursor)
        self._stopping = asyncio.Event()
        self._replay_floor: dict[Partition, int] = {}
        self._error: BaseException | None = None
        self._consumer: Consumer | None = None
        self._ledger = OffsetLedger()
        self._broker = _Outage("kafka broker", self.outage_limit, self.stats)
        self._registry = _Outage("schema registry", self.outage_limit, self.stats)
        self._threads: set[asyncio.Future[Any]] = set()
        # A synchronous commit that has not answered yet (see _committed_within).
        self._stuck_commit: asyncio.Future[None] | None = None
        # Why the consumer is to be replaced (see _wedged), for the fetch stage to do it, and
        # how many times it was: a commit of an earlier consumer failing late is no news.
        self._replace_for: str | None = None
        self._generation = 0
        # A consumer that stops fetching while records wait for it (librdkafka #4916, seen
        # after a broker restart under load: ci69) is replaced as a wedged one is.
        self._stall = StallWatch(settings.consumer_stall_timeout,
                                 lambda: runtime.broker_answers(),
                                 runtime.stable_offsets)
        self._consume_errors: dict[int, tuple[float, int]] = {}
        self._commit_wanted = asyncio.Event()
        self._known_ids: set[int] = set()
        self._delivery: Delivery | None = None
        self._unknown_ids: dict[int, str] = {}
        self._draining = False
        # Whether the fetch stage paused the assigned partitions (see _fetch_loop); used
        # from the fetch stage's thread only (the assignment callback runs in it too).
        self._paused = False
        # Records a paused poll was handed anyway (a partition that came with a rebalance,
        # unpaused): handed on first once reading resumes, in the fetch stage's thread.
        self._held: list[Message] = []
        # Read by the metrics and health endpoints (streams.runtime.observe), from their thread.
        self.name = self.label = cursor or "no-cursor"
        self.lag = LagTracker(self.group)
        self.running = False
        self.turned_at = time.monotonic()
        self._assigned = threading.Event()
        self.on_delays: Callable[[str, Sequence[float]], None] | None = None

    @property
    def in_outage(self) -> bool:
        """Whether the runner is waiting out an unreachable broker or registry now."""
        return self._broker.since is not None or self._registry.since is not None

    def wait_assigned(self, timeout: float) -> bool:
        """Block until the runner has been assigned partitions at least once."""
        return self._assigned.wait(timeout)

    @property
    def codec(self) -> FastCodec:
        """The codec given, else the runtime's (on its registry client)."""
        if self._codec is None:
            self._codec = self.runtime.codec
        return self._codec

    @property
    def consumer(self) -> Consumer:
        """The cursor's consumer-group member, made on first use (by `run`). Its librdkafka
        log goes to the `streams.runtime.sink.runner.kafka` logger, each kind of line at most
        every 30 s (a broker that is away is otherwise reported every few milliseconds)."""
        if self._consumer is None:
            # read_committed: a sink never sees the records of an aborted transaction.
            self._consumer = self.runtime.consumer(self.group, logger=kafka_log,
                                                   on_error=self._on_client_error,
                                                   **{"isolation.level": "read_committed"})
        return self._consumer

    @property
    def delivery(self) -> Delivery:
        """Where dead letters go: an idempotent producer of the runner's own, made on first
        use, that retries until every record is acknowledged, its librdkafka log throttled
        like the consumer's."""
        if self._delivery is None:
            self._delivery = self.runtime.delivery_of_own(logger=kafka_log)
        return self._delivery

    def _on_client_error(self, error: KafkaError) -> None:
        # librdkafka's thread: an int increment, no lock needed for a statistic.
        if error.code() in _BROKER_AWAY:
            self.stats.broker_errors += 1

    @property
    def ledger(self) -> OffsetLedger:
        """The batches consumed and not yet committed, in order."""
        return self._ledger

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Runs in the fetch thread, inside consume().
        committed: list[TopicPartition] = []
        while self.cursor:
            try:
                committed = consumer.committed(partitions, timeout=self.settings.admin_timeout)
                self._broker.over()
                break
            except KafkaException as exc:
                try:
                    pause = self._broker.waiting(f"reading the cursor failed: {exc}")
                except OutageTooLong as too_long:
                    self._error = too_long
                    return
                if self._stopping.is_set():
                    return
                time.sleep(pause)
        for tp in committed:
            owner = tp.metadata
            if owner and owner != self.identity:
                self._error = ValidationFailed(
                    f"cursor {self.cursor!r} belongs to sink {owner!r}, not "
                    f"{self.identity!r}: give each sink its own cursor name")
            if self.replay and tp.offset >= 0:
                self._replay_floor[(tp.topic, tp.partition)] = tp.offset
        if self.store is not None:
            try:
                stored = self.store.offsets(self.group)
            except Exception as exc:  # any failure of the sink: run() raises it
                failed = SinkError(f"reading the offsets {self.identity} stores for "
                                   f"{self.group!r} failed: {exc}")
                failed.__cause__ = exc
                self._error = failed
                return
            for tp_key, offset in stored.items():
                self._applied[tp_key] = max(self._applied.get(tp_key, -1), offset)
            seek = seek_positions([(tp.topic, tp.partition) for tp in partitions], stored,
                                  replay=self.replay, start=self.start_offset)
            for tp in partitions:
                tp.offset = seek.get((tp.topic, tp.partition), tp.offset)
            if not self.replay and self._error is None:  # not a cursor it was refused
                self._note_cursor_behind(committed, stored)
        elif self.replay:
            for tp in partitions:
                tp.offset = self.start_offset(tp.topic, tp.partition)
        # A partition given no start above starts at the committed offset just read, not
        # where librdkafka's own lookup would (see streams.runtime.batch._committed_starts).
        known = {(tp.topic, tp.partition): tp.offset for tp in committed if tp.error is None}
        for tp in partitions:
            at = known.get((tp.topic, tp.partition))
            if tp.offset == OFFSET_INVALID and at is not None:
                tp.offset = at if at >= 0 else OFFSET_BEGINNING
        assigned = {(tp.topic, tp.partition) for tp in partitions}
        # Read again from where the assignment starts: a held record of these is not kept.
        self._held = [m for m in self._held if (m.topic() or "", m.partition() or 0)
                      not in assigned]
        try:
            consumer.assign(partitions)
            if self._paused:  # assigned while the fetch stage holds back (see _fetch_loop)
                consumer.pause(partitions)
        except KafkaException as exc:
            self._error = exc
        self._stall.assigned({(tp.topic, tp.partition): tp.offset for tp in partitions})
        self._assigned.set()

    def _note_cursor_behind(self, committed: Sequence[TopicPartition],
                            stored: Mapping[Partition, int]) -> None:
        """Remember the assigned partitions whose Kafka cursor lags what the store holds.

        The partition starts at the stored offset; when nothing more is ever written to it,
        no batch would commit past the lagging cursor, and the group's lag would show records
        the sink already holds, for ever (a sink SIGKILLed after a partition's last
        transaction and before its commit leaves it so). Committing the stored offset is
        safe: the store holds every record below it. The assignment is the whole of it (an
        eager rebalance), so what an earlier one noted is dropped."""
        behind: dict[Partition, int] = {}
        for tp in committed:
            key = (tp.topic, tp.partition)
            at = stored.get(key)
            if at is not None and tp.error is None and at > tp.offset:
                behind[key] = at
        with self._behind_lock:
            self._cursor_behind = behind

    def _forget_cursor_behind(self) -> None:
        with self._behind_lock:
            self._cursor_behind = {}

    def _cursor_catch_up(self) -> None:
        """Commit the stored offsets the cursor lags (see _note_cursor_behind), in order
        after the batches consumed before: as an accepted batch of no records. Only for
        partitions still assigned, at what the store has applied since if that is further
        (a batch written after the assignment was read), never at a cursor refused."""
        with self._behind_lock:
            behind, self._cursor_behind = self._cursor_behind, {}
        if not behind or self._error is not None:
            return
        try:
            assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        except KafkaException:
            return  # the next assignment notes them again
        ends = {tp: max(at, self._applied.get(tp, at)) for tp, at in behind.items()
                if tp in assigned}
        if ends:
            self._ledger.accept(self._ledger.open(ends))
            self._commit_wanted.set()

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Runs in the fetch thread. Lost, not revoked (the session ran out: a pause, a broker
        # away): their new owner may be reading them already. librdkafka unassigns them after
        # this returns; the stall watch starts its clock, so a consumer that never rejoins
        # (while a fresh client reaches the brokers) is replaced as a stalled one is.
        log.warning("sink %s: lost %s", self.identity,
                    ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions))
        lost = {(tp.topic, tp.partition) for tp in partitions}
        self._held = [m for m in self._held
                      if (m.topic() or "", m.partition() or 0) not in lost]
        self._forget_cursor_behind()
        self._stall.lost()

    def hands_full(self, sending: int) -> bool:
        """Whether the runner waits before taking another batch: the sink has `in_flight`
        batches in hand, or (a sink that does not store its offsets) more than
        `_UNCOMMITTED` accepted batches wait for their commit, which bounds what a crash
        would send again. A sink that stores its offsets repeats nothing whatever the Kafka
        cursor says (it is a progress marker), so commits never hold it back: waiting for
        one could wait for ever, since a commit made while the group rejoins (a session lost
        in a broker outage) needs the consumer polled, and only the fetch stage polls it."""
        if sending >= self.in_flight:
            return True
        return self.store is None and self._ledger.pending > self.in_flight + _UNCOMMITTED

    def stop(self) -> None:
        """Ask the runner to finish the batch it is sending, flush the sink (if it has a
        flush), commit what was handed on, and return."""
        self._stopping.set()

    async def run(self, *, until: Callable[[SinkStats], bool] | None = None) -> SinkStats:
        """Consume until stopped (or until `until(stats)` holds); returns the stats.

        Raises OutageTooLong when the broker or registry stayed away longer than the outage
        limit, ValidationFailed when the cursor belongs to another sink.
        """
        self.consumer.subscribe(self.subscription(), on_assign=self._on_assign,
                                on_lost=self._on_lost)
        ready: asyncio.Queue[_Batch] = asyncio.Queue(maxsize=1)
        fetching = asyncio.create_task(self._fetch_loop(ready))
        committing = asyncio.create_task(self._commit_loop())
        sending: set[asyncio.Task[bool]] = set()
        self.running = True
        try:
            while not self._stopping.is_set():
                self.turned_at = time.monotonic()
                if self._error is not None:
                    raise self._error
                for task in [t for t in sending if t.done()]:
                    sending.discard(task)
                    if not task.result():
                        self._stopping.set()  # stopped during an outage: left uncommitted
                if until is not None and until(self.stats):
                    break
                for stage in (fetching, committing):
                    if stage.done():
                        stage.result()  # its error: OutageTooLong, a fatal Kafka error
                if self.hands_full(len(sending)):
                    # The sink has its hands full, or commits lag (a broker outage): wait.
                    await asyncio.wait({*sending, committing, fetching}, timeout=1.0,
                                       return_when=asyncio.FIRST_COMPLETED)
                    continue
                batch = await self._next(ready, fetching, sending, committing)
                if batch is not None:
                    sending.add(asyncio.create_task(self._send(batch)))
            if sending:  # finish what the sink has in hand
                await asyncio.gather(*sending)
            self._commit_wanted.set()
            self._draining = True
            await committing
            await flush_sink(self.sink)
        finally:
            self.running = False
            self._stopping.set()
            self._commit_wanted.set()
            tasks: list[asyncio.Task[Any]] = [fetching, committing, *sending]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # A consume still running in its thread finishes before the close.
            await asyncio.gather(*self._threads, return_exceptions=True)
            if self._stuck_commit is not None and not self._stuck_commit.done():
                # Closing under a commit that never answered would wait on it too; its
                # offsets are committed again by the partitions' next owner.
                log.warning("stopped with an offset commit unanswered; the consumer is left "
                            "open, and what it covered is handed on again after a restart")
            elif self._consumer is not None:
                await asyncio.to_thread(self._consumer.close)
            if self._delivery is not None:
                await asyncio.to_thread(self._delivery.close)
        return self.stats

    # -- what the runner reads: the in-process mirror (streams.runtime.sink.mirror) reads a
    # workspace's feedback instead, through these four, and shares everything else --------

    undecodable_reason = "undecodable score"
    """How the dead letter (or log line) of a record `scores_of` refused begins."""

    def subscription(self) -> list[str]:
        """The topics (or ^patterns) the runner subscribes to: every tenant's scores topic."""
        return [tenants_pattern(SCORES, self.settings.topic_prefix)]

    def start_offset(self, topic: str, partition: int) -> int:
        """Where a replay starts reading a partition: its beginning."""
        return OFFSET_BEGINNING

    def scores_of(self, msg: Message, value: bytes) -> list[Score]:
        """The scores of one consumed record (a Score record); SchemaError, KeyError,
        TypeError, ValueError or AttributeError for one that is not, RegistryUnavailable when
        its schema cannot be fetched now."""
        writer, record = self.codec.decode(value)
        if writer.name != _SCORE:
            raise SchemaError(f"a {writer.name} record, not a {_SCORE}")
        return [score_from_record(record)]

    def refused(self, msg: Message, reason: str) -> Output | None:
        """What to do with a record the runner cannot hand on (undecodable, or rejected by
        the sink): its dead letter (RegistryUnavailable when the dead-letter schema cannot be
        registered now); None when the record is only logged and counted."""
        return self._dead_letter(msg, reason)

    # -- the stages ----------------------------------------------------------------------

    async def _in_thread(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Run `fn` in a thread; a cancelled caller leaves it running, and `run` waits for it
        before it closes the consumer."""
        future = asyncio.ensure_future(asyncio.to_thread(fn, *args, **kwargs))
        self._threads.add(future)
        future.add_done_callback(self._threads.discard)
        return await asyncio.shield(future)

    async def _pause(self, seconds: float) -> bool:
        """Wait `seconds`, or less if the runner is stopped; True when it is stopping."""
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
        except TimeoutError:
            return False
        return True

    async def _next(self, ready: asyncio.Queue[_Batch], fetching: asyncio.Task[None],
                    sending: set[asyncio.Task[bool]],
                    committing: asyncio.Task[None]) -> _Batch | None:
        """The next decoded batch, or None (stopping, a send or the committer finished, or a
        second passed: look again)."""
        get = asyncio.ensure_future(ready.get())
        stop = asyncio.ensure_future(self._stopping.wait())
        done, _ = await asyncio.wait({get, stop, fetching, committing, *sending}, timeout=1.0,
                                     return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if get in done:
            return get.result()
        get.cancel()  # an item it had not taken stays in the queue
        if fetching in done:
            fetching.result()  # the fetch stage's error (OutageTooLong, a fatal Kafka error)
        return None

    async def _fetch_loop(self, ready: asyncio.Queue[_Batch]) -> None:
        """Stage 1: consume and decode batches, one ahead of the sink. While the next stage
        takes nothing for a while (the sink slow, commits behind), the consumer is kept
        polled with its partitions paused: its rebalances and its membership go on (a
        commit made while the group rejoins waits for them), and nothing more is read."""
        while not self._stopping.is_set():
            if self._replace_for is not None:
                await self._replace_consumer()
            messages = await self._in_thread(self._consume)
            self._cursor_catch_up()
            if not messages:
                continue
            batch = await self._decoded(messages)
            if batch is None:
                return
            self._stall.fed()  # a registry outage waited out in decoding is no stall
            batch.seq = self._ledger.open(batch.ends)
            put = asyncio.ensure_future(ready.put(batch))
            done, _ = await asyncio.wait({put}, timeout=_HOLD_BEFORE_PAUSING)
            while not done:
                if self._stopping.is_set():
                    put.cancel()
                    return
                await self._in_thread(self._poll_paused)
                done, _ = await asyncio.wait({put}, timeout=0)

    def _poll_paused(self) -> None:
        """Poll the consumer with every assigned partition paused (see `_fetch_loop`);
        `_consume` resumes them. Records it is handed anyway (a partition that came with a
        rebalance unpaused) are held for `_consume` to hand on first, and their partitions
        paused: seeking back instead could fail (the partition's fetch state in flux during
        a broker outage) and would then skip them."""
        consumer = self.consumer
        try:
            if not self._paused:
                consumer.pause(consumer.assignment())
                self._paused = True
                self.stats.paused += 1
        except KafkaException as exc:
            self._on_consume_exception(exc)
            return
        messages = [m for m in self._consumed(0.2) if m.error() is None]
        self._held += messages
        unpaused = {(m.topic() or "", m.partition() or 0) for m in messages}
        if unpaused:
            try:
                consumer.pause([TopicPartition(t, p) for t, p in unpaused])
            except KafkaException as exc:  # revoked in between: _consume drops its records
                log.info("no pause of %s (%s)", sorted(unpaused), exc)

    def _consume(self) -> list[Message]:
        self.turned_at = time.monotonic()
        if self._paused:
            self.consumer.resume(self.consumer.assignment())
            self._paused = False
            self._stall.fed()  # held back by the sink, not by the consumer
        self.lag.update(self.consumer)  # every turn, held records or not
        if self._held:
            # What a paused poll was handed, of partitions still assigned, before anything
            # fetched after them.
            assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
            held = [m for m in self._held
                    if (m.topic() or "", m.partition() or 0) in assigned]
            self._held = []
            if held:
                self._stall.fed()
                return held
        messages = self._consumed(self.batch_wait)
        good: list[Message] = []
        for msg in messages:
            error = msg.error()
            if error is not None:
                self._note_consume_error(error, error)
                continue
            good.append(msg)
        if good:
            self._stall.fed()
        elif self._replace_for is None:
            try:
                owned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
            except (KafkaException, RuntimeError):  # no member now: looked at next time
                return good
            if self._stall.stalled(self.consumer, owned):
                self._replace_for = self._stall.describe(owned)  # the fetch stage does it
        return good

    def _consumed(self, timeout: float) -> list[Message]:
        """One `consume` call; a consume error is a wait (no records), a fatal one ends the
        runner."""
        try:
            return self.consumer.consume(self.batch_size, timeout)
        except KafkaException as exc:
            self._on_consume_exception(exc)
            return []

    def _on_consume_exception(self, exc: KafkaException) -> None:
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError) and error.fatal():
            raise exc
        self._note_consume_error(error if isinstance(error, KafkaError) else None, exc)
        time.sleep(0.2)

    def _note_consume_error(self, error: KafkaError | None, shown: object) -> None:
        """Log a consume error, the same one at most every 30 s (librdkafka reports a broker
        that is away on every poll): they are waits, the consumer reconnects by itself."""
        code = error.code() if error is not None else -1
        now = time.monotonic()
        last, suppressed = self._consume_errors.get(code, (0.0, 0))
        if now - last >= _LOG_EVERY:
            log.warning("consume error: %s%s", shown,
                        f" ({suppressed} more like it since)" if suppressed else "")
            self._consume_errors[code] = (now, 0)
        else:
            self._consume_errors[code] = (last, suppressed + 1)

    async def _decoded(self, messages: list[Message]) -> _Batch | None:
        """The batch decoded; while the registry is away, wait and decode it again (None if
        the runner stops meanwhile).

        Decoding is Python work, so it runs on the event loop in slices of `_SLICE` records,
        letting the sink's HTTP answers in between: in a thread it would only contend for the
        GIL and hold those answers back by up to a switch interval each.
        """
        while True:
            batch = _Batch(records=len(messages))
            try:
                # A schema id not seen yet is fetched from the registry in a thread (blocking
                # HTTP, slow or failing in an outage), never on the event loop.
                new = {_schema_id(v) for m in messages
                       if (v := m.value()) is not None and len(v) >= 5} - self._known_ids
                for schema_id in new:
                    await self._in_thread(self._writer_or_none, schema_id)
                    self._known_ids.add(schema_id)
                for start in range(0, len(messages), _SLICE):
                    self._decode(batch, messages[start:start + _SLICE])
                    await asyncio.sleep(0)
            except RegistryUnavailable as exc:
                pause = self._registry.waiting(str(exc))
                if await self._pause(pause):
                    return None
                continue
            self._registry.over()
            return batch

    def _writer_or_none(self, schema_id: int) -> None:
        """Fetch (and cache) a writer schema; an id the registry does not know is
        remembered, and the decode dead-letters its records without asking again."""
        try:
            self.codec.writer(schema_id)
        except SchemaError as exc:
            self._unknown_ids[schema_id] = str(exc)

    def _decode(self, batch: _Batch, messages: list[Message]) -> None:
        """Add the scores of the messages to the batch (`scores_of`: fastavro, writer schemas
        cached per id), undecodable ones as `refused` says (dead letters). Raises
        RegistryUnavailable when a schema cannot be fetched now."""
        scores_of = self.scores_of
        unknown = self._unknown_ids
        scores, origin, ends = batch.scores, batch.origin, batch.ends
        positions = batch.positions
        for msg in messages:
            topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
            ends[(topic, partition)] = offset + 1
            value = msg.value()
            try:
                if value is None:
                    raise SchemaError("the record has no value")
                if unknown and len(value) >= 5 and _schema_id(value) in unknown:
                    raise SchemaError(unknown[_schema_id(value)])
                got = scores_of(msg, value)
            except RegistryUnavailable:
                raise
            except (SchemaError, KeyError, TypeError, ValueError, AttributeError) as exc:
                batch.undecodable += 1
                dead = self.refused(msg, f"{self.undecodable_reason}: {exc}")
                if dead is not None:
                    batch.dead.append(dead)
                continue
            for score in got:
                scores.append(score)
                positions.append(((topic, partition), offset))
                origin[score.id] = msg

    async def _send(self, batch: _Batch) -> bool:
        """Stage 2: hand the batch to the sink, deliver its dead letters, accept it in the
        ledger. False when the runner was stopped before the sink took it."""
        if self.store is not None:
            return await self._send_stored(batch, self.store)
        rejected: list[Rejected] | None = []
        if batch.scores:
            # The sink's delivery is a span continuing the scores' trace context (the
            # feedback's, copied onto them by the mirror); see streams.adapters.tracing.
            traced = list(batch.origin.values()) if tracing_enabled() else []
            with batch_span(traced, group=self.group,
                            attributes={"streams.sink": self.identity,
                                        "streams.scores": len(batch.scores)}):
                rejected = await self._record(batch.scores)
        if rejected is None:
            return False
        dead = batch.dead
        if rejected:
            made = await self._with_registry(lambda: [
                letter for letter in (
                    self.refused(batch.origin[item.score.id],
                                 f"rejected by {self.identity}: {item.reason}")
                    for item in rejected)
                if letter is not None])
            if made is None:
                return False
            dead = dead + made
        if dead:
            await self.delivery.deliver(dead)
        self._accepted(batch, len(rejected))
        return True

    async def _send_stored(self, batch: _Batch, store: OffsetStoringSink) -> bool:
        """Stage 2 for a sink that stores its offsets: dead letters first (a crash after
        them sends them again; after the write it would lose them), then the rows and the
        offsets after the batch in one `write`. False when the runner was stopped first."""
        if batch.dead:
            await self.delivery.deliver(batch.dead)
        scores = batch.scores
        if not self.replay and self._applied:
            again = set(already_applied(batch.positions, self._applied))
            if again:
                self.stats.already_applied += len(again)
                scores = [s for i, s in enumerate(scores) if i not in again]
        traced = list(batch.origin.values()) if scores and tracing_enabled() else []
        with batch_span(traced, group=self.group,
                        attributes={"streams.sink": self.identity,
                                    "streams.scores": len(scores)}):
            written = await self._retried(lambda: store.write(scores, batch.ends,
                                                              group=self.group))
        if written is None:
            return False
        for tp, end in batch.ends.items():
            self._applied[tp] = max(self._applied.get(tp, -1), end)
        batch.scores = scores
        self._accepted(batch, 0)
        return True

    def _accepted(self, batch: _Batch, rejected: int) -> None:
        """Count a batch the sink took and accept it in the ledger (the commit may follow)."""
        stats = self.stats
        stats.records += batch.records
        stats.undecodable += batch.undecodable
        stats.rejected += rejected
        stats.scores += len(batch.scores)
        per_tenant = stats.per_tenant
        for score in batch.scores:
            tenant = score.source.tenant
            per_tenant[tenant] = per_tenant.get(tenant, 0) + 1
        if self.on_delays is not None and batch.scores:
            now = time.time()
            self.on_delays(self.label, [now - s.timestamp.timestamp() for s in batch.scores])
        stats.batches += 1
        self._ledger.accept(batch.seq)
        self._commit_wanted.set()

    async def _with_registry(self, make: Callable[[], _T]) -> _T | None:
        """`make()`, waited out while the registry is away (None if the runner stops)."""
        while True:
            try:
                made = make()
            except RegistryUnavailable as exc:
                if await self._pause(self._registry.waiting(str(exc))):
                    return None
                continue
            self._registry.over()
            return made

    async def _record(self, scores: list[Score]) -> list[Rejected] | None:
        return await self._retried(lambda: self.sink.record(scores))

    async def _retried(self, call: Callable[[], Awaitable[Sequence[Rejected] | None]]
                       ) -> list[Rejected] | None:
        """`call()` (the sink's record or write) until it does not raise SinkError, with
        backoff; what it refused, or None when the runner was stopped meanwhile."""
        backoff = 0.2
        while True:
            try:
                return rejected_of(await call())
            except SinkError as exc:
                self.stats.retries += 1
                trace.get_current_span().add_event("sink failed; retrying",
                                                   {"exception.message": str(exc)[:500]})
                log.warning("sink failed, retrying in %.1fs (cursor stays): %s", backoff, exc)
                if await self._pause(backoff):
                    return None
                backoff = min(backoff * 2, self.max_backoff)

    async def _commit_loop(self) -> None:
        """Stage 3: whenever batches were accepted, commit what the ledger releases; one
        commit at a time, so they happen in order, and the commits of batches accepted
        while one was under way go together. Ends once the runner is stopping and has
        committed what it could."""
        while True:
            await self._commit_wanted.wait()
            self._commit_wanted.clear()
            await self._commit(self._ledger.ready())
            if (self._draining or self._stopping.is_set()) and not self._commit_wanted.is_set():
                return

    async def _commit(self, ends: Mapping[Partition, int]) -> None:
        """Commit the offsets after handed-on batches, retrying while the broker is away."""
        if not self.cursor:
            return
        offsets = [
            TopicPartition(topic, partition, offset, metadata=self.identity)
            for (topic, partition), offset in ends.items()
            if offset > self._replay_floor.get((topic, partition), -1)
        ]
        if not offsets:
            return
        rejoin_until: float | None = None
        while True:
            generation = self._generation
            try:
                await self._committed_within(offsets)
            except _CommitUnanswered as exc:
                pause = self._broker.waiting(str(exc))
                if await self._wedged(str(exc), generation):
                    return  # the new consumer hands these on again (see _wedged)
                if await self._pause(pause):
                    return  # stopping: left uncommitted, sent again after a restart
                continue
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                code = error.code() if isinstance(error, KafkaError) else None
                if code == KafkaError.REBALANCE_IN_PROGRESS and self._stopping.is_set():
                    # Stopping while another member leaves too (two mirrors of one cursor
                    # stopped together): nobody polls for this member any more, so the
                    # rebalance would never end and its last commit would be lost. Poll it
                    # through the rebalance (what comes is not handed on) and commit again.
                    now = time.monotonic()
                    rejoin_until = rejoin_until or now + self.settings.session_timeout
                    if now < rejoin_until:
                        await self._in_thread(self.consumer.poll, 0.2)
                        continue
                if code in _MOVED:
                    log.info("commit skipped (%s): the partitions moved; their next owner "
                             "starts from the last commit", error)
                    return
                transient = code in _TRANSIENT or (isinstance(error, KafkaError)
                                                   and error.retriable())
                if not transient:
                    raise
                pause = self._broker.waiting(f"commit failed: {error}")
                if await self._wedged(f"commit failed: {error}", generation):
                    return  # the new consumer hands these on again (see _wedged)
                if await self._pause(pause):
                    return  # stopping: left uncommitted, sent again after a restart
                continue
            self._broker.over()
            self.stats.commits += 1
            return

    async def _wedged(self, problem: str, generation: int) -> bool:
        """Whether the consumer is wedged: its commits have failed for the stall timeout
        (STREAMS_CONSUMER_STALL_TIMEOUT) while a new client reaches the brokers, as a
        librdkafka consumer can after a broker restart (it never finds its coordinator
        again: ci64). Then the fetch stage is asked to replace it, and True: the commit is
        dropped, and the new member starts from the committed offsets (or the file's), so
        what it covered is handed on again, and the sink takes it once (stored offsets, or
        replacement by score id). A failure of a consumer replaced since (`generation`) is
        dropped the same way, without another replacement."""
        if self._replace_for is not None or generation != self._generation:
            return True
        since = self._broker.since
        failing = time.monotonic() - since if since is not None else 0.0
        if failing < self.settings.consumer_stall_timeout:
            return False
        if not await asyncio.to_thread(self.runtime.broker_answers):
            return False
        self._replace_for = (f"could not commit for {failing:.0f} s while the brokers "
                             f"answered a new client ({problem})")
        return True

    async def _replace_consumer(self) -> None:
        """Close the wedged consumer (on a thread of its own, waiting at most
        STREAMS_ADMIN_TIMEOUT: a wedged one may never close) and subscribe a new one."""
        why, self._replace_for = self._replace_for, None
        self._generation += 1
        self._broker.restart()  # the new consumer's failures are its own
        self._stall.reset()
        self.stats.consumers_replaced += 1
        log.error("the sink's consumer %s: replacing it with a new one", why,
                  extra={"event": "consumer_replaced", "cursor": self.name})
        old, self._consumer = self._consumer, None
        self._stuck_commit = None  # a commit of the old consumer: nobody waits for it now
        self._paused, self._held = False, []
        self._forget_cursor_behind()  # the new consumer's assignment notes its own
        if old is not None:
            closing = _in_daemon_thread(old.close)
            try:
                await asyncio.wait_for(asyncio.shield(closing),
                                       timeout=self.settings.admin_timeout)
            except TimeoutError:
                log.error("the replaced consumer did not close within %g s; left to its "
                          "thread (the group expels it after its session timeout)",
                          self.settings.admin_timeout)
            except (KafkaException, RuntimeError) as exc:
                log.warning("closing the replaced consumer failed (%s)", exc)
        self.consumer.subscribe(self.subscription(), on_assign=self._on_assign,
                                on_lost=self._on_lost)

    async def _committed_within(self, offsets: list[TopicPartition]) -> None:
        """A synchronous commit of `offsets`, each wait at most STREAMS_ADMIN_TIMEOUT.

        librdkafka's synchronous commit has no timeout of its own: with the broker gone at
        the wrong moment it can wait for ever (one did for 55 minutes, so SIGTERM never
        ended its process). It runs in a daemon thread, which an exiting process does not
        wait for; a commit that does not answer in time raises _CommitUnanswered, and the
        next try waits on that same call before it makes a new one, so commits stay one at
        a time and in order."""
        earlier = self._stuck_commit
        if earlier is not None and self._stopping.is_set() and not earlier.done():
            # Stopping: one timeout already passed on it; waiting another would only delay
            # the exit (its offsets are handed on again after a restart).
            raise _CommitUnanswered("stopping with an earlier commit still unanswered")
        if earlier is not None:
            # Its outcome does not matter: the commit below covers its offsets too.
            with contextlib.suppress(KafkaException):
                await self._answered(earlier)
        consumer = self.consumer  # this one's, even if it is replaced meanwhile
        self._stuck_commit = _in_daemon_thread(
            lambda: consumer.commit(offsets=offsets, asynchronous=False))
        await self._answered(self._stuck_commit)

    async def _answered(self, call: asyncio.Future[None]) -> None:
        """Wait for a commit call (its error raised); _CommitUnanswered past the timeout."""
        try:
            await asyncio.wait_for(asyncio.shield(call), timeout=self.settings.admin_timeout)
        except TimeoutError:
            raise _CommitUnanswered(
                f"commit did not answer within {self.settings.admin_timeout:g}s "
                "(STREAMS_ADMIN_TIMEOUT)") from None
        finally:
            if call.done():
                self._stuck_commit = None

    # -- dead letters --------------------------------------------------------------------

    def _dead_letter(self, msg: Message, reason: str) -> Output:
        """A DeadLetter of a consumed record, for its tenant (RegistryUnavailable when the
        dead-letter schema cannot be registered now)."""
        topic = msg.topic() or ""
        letters = dead_letter_topic(self.settings.topic_prefix, topic)
        writer = letter_writer(self.codec, letters)
        record = dead_letter_record(topic=topic, partition=msg.partition() or 0,
                                    offset=msg.offset() or 0, key=msg.key(), value=msg.value(),
                                    reason=reason, stage=f"sink:{self.cursor or '-'}",
                                    time=int(time.time() * 1000))
        return Output(letters, msg.key(), self.codec.encode(writer, record),
                      reason_headers(reason))


def serve_sink(runner: SinkRunner) -> HealthServer | None:
    """Watch a sink runner in the process's metrics and serve its health (None when
    STREAMS_HEALTH_PORT is 0 or the port is taken). Call before the runner starts."""
    runner.runtime.metrics.watch_sink(runner)
    runner.on_delays = runner.runtime.metrics.sink_delays
    return serve_health(runner.settings, [runner], runner.runtime.server_checks())
