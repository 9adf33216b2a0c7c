"""A tenant's index topic: the shared, compacted view of what exists in its events topic.

`<prefix>.<tenant>.index` holds one record per key (see `streams.core.view`): `run:<id>`,
`firing:<id>`, `chain:<id>`, `event:<id>` and `last:<chain>`, each the location (workspace,
chain, event, trace, events partition and offset) of the event it names, plus, alone in index
partition 0, one `cursor:<p>` per events partition: every event of partition `p` below the
cursor has all its entries in the index. Every entry is produced to the partition
`index_partition(key)` names, so a look-up reads one index partition, from where this process
last stopped, never the events topic.

Who writes it:

- the workers' rules loop (`IndexWriter`): the entries of every event it reads, with the
  offsets its consumer gave them, and the cursors of its partitions before each commit;
- the workspace handle, for each event it appends that creates a target (a chain head, a run,
  a firing), right after the broker acknowledged it (the entry needs its offset), through the
  same producer, without a wait;
- `streams index build` (`TenantIndex.build`) and a *catch-up* (`TenantIndex.catch_up`, run by
  a reader whose look-up missed, bounded by STREAMS_INDEX_CATCH_UP_LIMIT): they read the
  events topic from the cursors to the current end, produce the entries, and advance the
  cursors in steps once the entries below them are delivered.

So a miss costs the events written since the cursors, not the log. What a process reads of
the index is kept in a local store (`streams.adapters.kafka.index_store`), so the next
process on the machine reads only the delta.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_END,
    Consumer,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from streams.adapters.avro.fast import FastCodec
from streams.adapters.kafka.config import reader_config
from streams.adapters.kafka.index_store import IndexStore
from streams.adapters.kafka.log import WRITTEN_ENDS, ends, reached_end, watermarks
from streams.core.errors import IndexBehind, KafkaUnavailable, SchemaError, ValidationFailed
from streams.core.events import Envelope
from streams.core.targets import ChainTarget, FiringTarget, RunTarget
from streams.core.tenancy import index_topic, reader_group
from streams.core.view import (
    CURSOR_PARTITION,
    IndexEntry,
    Located,
    cursor_key,
    event_key,
    index_entries,
    index_partition,
    located_or_refused,
    merge_entry,
    record_entries_encoded,
    target_key,
)
from streams.settings import Settings

__all__ = ["OWN_ENTRIES", "EntriesOf", "IndexBehind", "IndexRun", "IndexWriter", "TenantIndex",
           "fast_entries"]

log = logging.getLogger(__name__)

EntriesOf = Callable[[Message], "list[tuple[str, bytes]] | None"]
"""The index entries of an events-topic record, encoded (None: not an event envelope)."""

# How many of its own entries a process remembers (read-your-writes until they are read back).
OWN_ENTRIES = 100_000

# librdkafka prefetches up to 64 MB per partition by default; these readers read one
# partition to its end and stop, so less keeps them as fast and the process smaller. They
# never wait for new records either: a broker answers one connection's requests in order, so
# a fetch long-polling at a partition's end (fetch.wait.max.ms, 500 ms by default) held back
# the next lookup's watermark query by that long (every index miss took 0.5 s).
_SMALL_PREFETCH = {"queued.max.messages.kbytes": 16384, "fetch.wait.max.ms": 10}

# Records asked of one consume() call when reading a partition through.
_READ_BATCH = 5000

# The longest span of a partition read through for the records at several of its offsets
# (message_at's shared reads): places further apart are read in spans of their own.
_SPAN = 500


@contextlib.contextmanager
def _reading(consumer: Consumer, topic: str) -> Iterator[None]:
    """Around a read of `topic` by a consumer assigned inside: a librdkafka error becomes
    KafkaUnavailable, and the consumer is unassigned however the read ends."""
    try:
        yield
    except KafkaException as exc:
        raise KafkaUnavailable(f"reading {topic} failed: {exc}") from exc
    finally:
        with contextlib.suppress(KafkaException):
            consumer.unassign()


def _spans(offsets: list[int]) -> list[tuple[int, int, set[int]]]:
    """Sorted offsets as spans [start, stop) of at most _SPAN records, with the offsets each
    holds."""
    spans: list[tuple[int, int, set[int]]] = []
    for offset in offsets:
        if spans and offset - spans[-1][0] < _SPAN:
            start, _stop, held = spans[-1]
            held.add(offset)
            spans[-1] = (start, offset + 1, held)
        else:
            spans.append((offset, offset + 1, {offset}))
    return spans

# Keys whose first value stays (a run recorded again keeps its first place: merge_entry).
_KEEP_FIRST = (b"run:",)

# How long one consume() call waits: a compacted partition has gaps, so its last batch may
# be short of what was asked for, and waits this long.
_WAIT = 0.05


@dataclass
class IndexRun:
    """What one pass over the events topic's unindexed tail did (a catch-up, a build)."""

    total: int = 0
    """Events between the cursors and the ends when it started."""
    events: int = 0
    """Events read (and indexed, when they decoded)."""
    entries: int = 0
    """Index entries produced."""
    skipped: int = 0
    """Records that are not event envelopes (the mirror dead-letters them)."""
    steps: int = 0
    """Times the cursors were advanced."""
    reached: dict[int, int] = field(default_factory=dict)
    """The cursors at the end."""


def fast_entries(codec: FastCodec) -> EntriesOf:
    """The index entries of an events-topic record, decoded with fastavro to a plain record
    (`streams.core.view.record_entries`: no Envelope); None for a record that is no event
    envelope. RegistryUnavailable propagates: skipping a record for an outage would leave
    its entries out below a cursor."""

    def entries_of(msg: Message) -> list[tuple[str, bytes]] | None:
        try:
            _writer, record = codec.decode(msg.value() or b"")
            return record_entries_encoded(record, msg.partition() or 0, msg.offset() or 0)
        except (SchemaError, ValidationFailed):
            return None

    return entries_of


class TenantIndex:
    """One process's reader and writer of a tenant's index topic.

    Thread-safe; every method blocks (the workspace handle calls them in a worker thread).
    What it reads of the index partitions (the partition of each key looked up: 1/31 of the
    index with the default 32 partitions) goes to a local store (`IndexStore`: SQLite under
    `Settings.state_path("index", ...)`) with the offset each was read to, so the next
    process on this machine reads only what was written since; it also keeps the entries of
    its own appends, so its own writes are read back at once.
    """

    def __init__(self, settings: Settings, tenant: str, producer: Producer,
                 events_topic: str, entries_of: EntriesOf,
                 ensure_topic: Callable[[], object] | None = None,
                 store: IndexStore | None = None, *, reports_each: bool = True) -> None:
        self.settings = settings
        self.tenant = tenant
        self.topic = index_topic(tenant, settings.topic_prefix)
        self.events_topic = events_topic
        self._producer = producer
        # Whether each entry asks the producer for its own delivery report (a producer shared
        # with writers that want theirs); False: the producer reports failures only, to
        # `delivery_failed` (a worker's index writer: a report per entry cost it 3.7 µs of
        # its loop's CPU per event read).
        self._reports_each = reports_each
        self._entries_of = entries_of
        self._ensure_topic = ensure_topic
        self._consumer: Consumer | None = None
        self._ends: Consumer | None = None
        # Asks where index partitions end (never assigned: see _partition_ends).
        self._index_ends: Consumer | None = None
        # Partitions look-ups waiting for the lock will read: the next read takes them too.
        self._wanted: set[int] = set()
        # The reader of events by place (chain_events, message_at): made once, one read at a
        # time (a consumer made per read cost more than the read).
        self._events_reader: Consumer | None = None
        self._events_lock = threading.Lock()
        # Places (partition, offset) message_at callers wait for: the next read takes them.
        self._places: list[tuple[tuple[int, int], Future[Message | None]]] = []
        # The reader of the events topic's unindexed tail (catch-ups), made once.
        self._tail_reader: Consumer | None = None
        self._partitions = 0
        self.store = store if store is not None else IndexStore(
            settings.state_path("index", f"{self.topic}.sqlite"))
        # Per partition read to its end by this process, when (time.monotonic) the last such
        # read began: a look-up asked before then is answered by that read (it fetched the
        # end after the ask).
        self._read_began: dict[int, float] = {}
        # When the last catch-up began (the same reasoning for catch-ups).
        self._caught_up_began = float("-inf")
        # Per partition: the offset this process has read to, and what it read that the
        # store does not have yet (a background thread writes it there).
        self._read_to: dict[int, int] = {}
        self._pending: dict[int, dict[bytes, bytes | None]] = {}
        self._queue: queue.Queue[tuple[int, list[tuple[bytes, bytes | None]], int]] = \
            queue.Queue()
        self._writer: threading.Thread | None = None
        self._cursors: dict[int, int] = {}
        self._own: dict[str, IndexEntry] = {}
        self._found: dict[str, IndexEntry] = {}
        self._lock = threading.RLock()
        self._own_lock = threading.Lock()
        self._catch_up_lock = threading.Lock()
        self._failed = 0
        self.index_records_read = 0
        self.event_records_read = 0
        self.catch_ups = 0

    # -- reading ------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        """Whether the index topic has been found (and its partitions counted)."""
        return self._consumer is not None

    @property
    def partitions(self) -> int:
        """The index topic's partition count (0 before `open`)."""
        return self._partitions

    def open(self) -> None:
        """Find the index topic (creating it for a tenant that has none) before first use."""
        with self._lock:
            self._open()

    def _open(self) -> Consumer:
        if self._consumer is not None:
            return self._consumer
        group = reader_group(self.topic, "index", self.settings.topic_prefix)
        consumer = Consumer(reader_config(self.settings, group, **_SMALL_PREFETCH))
        try:
            info = consumer.list_topics(self.topic, timeout=self.settings.admin_timeout
                                        ).topics.get(self.topic)
            if (info is None or info.error is not None) and self._ensure_topic is not None:
                self._ensure_topic()  # a tenant created before the index existed
            found = watermarks(consumer, self.topic, timeout=self.settings.admin_timeout,
                               settings=self.settings)
        except KafkaException as exc:
            consumer.close()
            raise KafkaUnavailable(f"cannot read {self.topic}: {exc}; check that the brokers "
                                   "are up") from exc
        except Exception:
            consumer.close()
            raise
        self._partitions = len(found)
        self._consumer = consumer
        return consumer

    def _read_partition(self, partition: int) -> None:
        """Read one index partition to its current end (`_read_partitions`)."""
        self._read_partitions([partition])

    def _read_partitions(self, partitions: list[int]) -> None:
        """Read index partitions from where this process (or, before it, the local store)
        stopped to their current ends, in one pass: one request for all their ends, one
        assignment. What is read is answered from memory at once and written to the store by
        a background thread (a cold partition of a million-envelope tenant is about 75,000
        records: reading them takes 0.3 s, storing them 1-2 s)."""
        consumer = self._open()
        store = self.store
        began = time.monotonic()
        starts: dict[int, int] = {}
        for partition in partitions:
            start = self._read_to.get(partition)
            starts[partition] = store.position(partition) if start is None else start
        read: dict[int, list[tuple[bytes, bytes | None]]] = {p: [] for p in partitions}
        try:
            highs = self._partition_ends(partitions)
            for partition, high in highs.items():
                if starts[partition] > high:  # the topic was made again since the store read it
                    store.drop_partition(partition)
                    self._pending.pop(partition, None)
                    starts[partition] = 0
            todo = {p: high for p, high in highs.items() if starts[p] < high}
            if todo:
                consumer.assign([TopicPartition(self.topic, p, starts[p]) for p in todo])
                at = {p: starts[p] for p in todo}
                while todo:
                    # consume() waits until it has as many records as asked or the timeout
                    # passes: ask for what is left, so the last batch returns at once.
                    left = sum(high - at[p] for p, high in todo.items())
                    batch = consumer.consume(min(_READ_BATCH, left), _WAIT)
                    if not batch:
                        for now in consumer.position(
                                [TopicPartition(self.topic, p) for p in todo]):
                            if now.offset >= todo[now.partition]:
                                del todo[now.partition]
                        continue
                    for msg in batch:
                        if msg.error():
                            raise KafkaUnavailable(
                                f"reading {self.topic} failed: {msg.error()}")
                        partition, offset = msg.partition() or 0, msg.offset() or 0
                        if partition not in todo or offset >= todo[partition]:
                            continue  # past the end this read is for
                        at[partition] = offset + 1
                        self.index_records_read += 1
                        key, value = msg.key() or b"", msg.value()
                        read[partition].append((key, value))
                        pending = self._pending.setdefault(partition, {})
                        if not (key.startswith(_KEEP_FIRST) and key in pending):
                            pending[key] = value
                    for partition in [p for p in todo if at[p] >= todo[p]]:
                        del todo[partition]
                consumer.unassign()
        except KafkaException as exc:
            raise KafkaUnavailable(f"reading {self.topic} failed: {exc}; check that the "
                                   "brokers are up") from exc
        for partition in partitions:
            high = max(starts[partition], highs[partition])
            self._pending.setdefault(partition, {})
            self._read_to[partition] = high
            if read[partition] or starts[partition] < high:
                self._persist(partition, read[partition], high)
            self._read_began[partition] = began
        if CURSOR_PARTITION in read:
            found = store.with_prefix(b"cursor:")
            found.update({k: v for k, v in self._pending[CURSOR_PARTITION].items()
                          if k.startswith(b"cursor:") and v is not None})
            for key, value in found.items():
                try:
                    self._cursors[int(key[7:])] = int(value)
                except ValueError:
                    log.warning("skipping a malformed cursor in %s: %r", self.topic, key)

    def _partition_ends(self, partitions: list[int]) -> dict[int, int]:
        """The current end of each index partition (its last stable offset), all in one
        request, by a client that never fetches: a request on the reading consumer's
        connection waits behind its fetch in flight (up to fetch.wait.max.ms), which made
        each look-up's end cost 5-6 ms under load."""
        with self._own_lock:
            if self._index_ends is None:
                self._index_ends = Consumer(reader_config(
                    self.settings, reader_group(self.topic, "index-ends",
                                                self.settings.topic_prefix)))
            ends = self._index_ends
        found = ends.offsets_for_times(
            [TopicPartition(self.topic, p, OFFSET_END) for p in partitions],
            timeout=self.settings.admin_timeout)
        failed = [tp for tp in found if tp.error is not None or tp.offset < 0]
        if failed:
            raise KafkaUnavailable(f"the end of {self.topic} partition {failed[0].partition} "
                                   f"is not known ({failed[0].error}); check that the brokers "
                                   "are up")
        return {tp.partition: tp.offset for tp in found}

    def _get(self, key: bytes, partition: int) -> bytes | None:
        """A key's value: read by this process and not yet stored, or in the store (a run's
        first place is the stored one when both have it)."""
        pending = self._pending.get(partition, {})
        if key in pending and not key.startswith(_KEEP_FIRST):
            return pending[key]
        found = self.store.get(key)
        return found if found is not None else pending.get(key)

    def _persist(self, partition: int, records: list[tuple[bytes, bytes | None]],
                 next_offset: int) -> None:
        self._queue.put((partition, records, next_offset))
        if self._writer is None or not self._writer.is_alive():
            self._writer = threading.Thread(target=self._write_store, daemon=True,
                                            name=f"index-store {self.topic}")
            self._writer.start()

    def _write_store(self) -> None:
        while True:
            try:
                partition, records, next_offset = self._queue.get(timeout=1.0)
            except queue.Empty:
                return
            try:
                self.store.apply(partition, records, next_offset, keep_first=_KEEP_FIRST)
                with self._lock:  # stored: memory need not hold them any more
                    pending = self._pending.get(partition, {})
                    for key, value in records:
                        if key in pending and pending[key] is value:
                            del pending[key]
            except Exception:  # the store is a cache: what it misses is read again
                log.exception("writing the index store %s failed", self.store.path)
            finally:
                self._queue.task_done()

    def flush_store(self, timeout: float = 30.0) -> None:
        """Wait until what this process read is in the local store (at most `timeout`)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)

    def _decoded(self, key: str, value: bytes | None) -> IndexEntry | None:
        if value is None:
            return None
        try:
            return IndexEntry.decode(value)
        except ValidationFailed:
            log.warning("skipping a malformed record in %s: key %r", self.topic, key)
            return None

    def cached(self, key: str) -> IndexEntry | None:
        """The entry under `key` if this process already has it (its own writes, a look-up's
        answer, or the local store), without asking the broker. Entries never change once
        written (a repeated run keeps its first place), so a stored one is current."""
        with self._own_lock:
            own = self._own.get(key) or self._found.get(key)
        if own is not None:
            return own
        if key.startswith("last:"):
            return None
        # Called on event loops: never wait for a look-up that is reading a partition (the
        # caller then looks up in a thread).
        if not self._lock.acquire(blocking=False):
            return None
        try:
            value = self._get(key.encode(), index_partition(key, self._partitions))
        finally:
            self._lock.release()
        return self._keep(key, self._decoded(key, value))

    def _keep(self, key: str, found: IndexEntry | None) -> IndexEntry | None:
        # Entries never change once written (last: entries excepted): keep the ones found,
        # so a process that looks up many targets does not ask the store again for them.
        if found is not None and not key.startswith("last:"):
            with self._own_lock:
                self._found[key] = found
                while len(self._found) > OWN_ENTRIES:
                    del self._found[next(iter(self._found))]
        return found

    def lookup(self, key: str) -> IndexEntry | None:
        """The entry under `key`: this process's own writes, then the key's index partition
        read (into the local store) to its current end."""
        asked = time.monotonic()
        with self._own_lock:
            own = self._own.get(key)
            if self._partitions:  # the read this one waits for may take its partition too
                self._wanted.add(index_partition(key, self._partitions))
        with self._lock:
            with self._own_lock:  # found meanwhile by a look-up this one waited for
                kept = self._found.get(key)
            if kept is not None:
                return kept if own is None else merge_entry(key, kept, own)
            self._open()
            partition = index_partition(key, self._partitions)
            # Concurrent look-ups share reads: one that began after this call did (while
            # this one waited for the lock) read everything written before it, so it is not
            # read again; and a read takes every partition waiting look-ups want, in one
            # pass, rather than each look-up reading its own in turn.
            if self._read_began.get(partition, float("-inf")) <= asked:
                with self._own_lock:
                    wanted, self._wanted = self._wanted, set()
                self._read_partitions(sorted(wanted | {partition}))
            value = self._get(key.encode(), partition)
        found = self._decoded(key, value)
        if own is not None:
            found = own if found is None else merge_entry(key, found, own)
        return self._keep(key, found)

    def locate(self, target: RunTarget | FiringTarget | ChainTarget,
               workspace: str) -> Located | None:
        """Where a target is in `workspace`, or None; ValidationFailed for a chain target
        that names an event other than its chain's first.

        Looks the key up in the index; on a miss, catches the index up with the events
        topic's unindexed tail and looks again, so anything acknowledged before the call is
        found.
        """
        key = target_key(target)
        for attempt in (0, 1):
            found = self.lookup(key)
            as_event = None
            if found is None and isinstance(target, ChainTarget):
                as_event = self.lookup(event_key(target.correlation_id))
            if found is not None or as_event is not None or attempt:
                return located_or_refused(target, found, as_event, workspace)
            self.catch_up()
        return None

    # -- writing ------------------------------------------------------------------------------

    def _produce(self, key: str, value: bytes, *, wait: bool = True) -> None:
        partition = index_partition(key, self._partitions)
        produce = self._producer.produce
        while True:
            try:
                # Positional: keyword arguments cost the client 0.45 µs a call to parse, and
                # a worker writes one to three entries per event it reads.
                if self._reports_each:
                    produce(self.topic, value, key.encode(), partition, self.delivery_failed)
                else:
                    produce(self.topic, value, key.encode(), partition)
                return
            except BufferError:
                if not wait:  # in a delivery report: no poll; the next catch-up writes it
                    log.warning("producer queue full: index entry %r left to a catch-up", key)
                    return
                self._producer.poll(0.05)
            except KafkaException as exc:
                raise KafkaUnavailable(f"writing {self.topic} failed: {exc}") from exc

    def delivery_failed(self, err: Any, msg: Message) -> None:
        """The delivery report of one of this index's entries (a failure when `err`)."""
        # An index entry that did not land is found again by the next catch-up (its event is
        # above the cursor until a catch-up indexed it), so a failure is logged, not raised;
        # counted, so no cursor is advanced over it.
        if err is not None:
            self._failed += 1
            log.warning("index entry %r not written: %s", msg.key(), err)

    def appended(self, envelope: Envelope, partition: int, offset: int) -> None:
        """Record an acknowledged append: remember and produce the entries of the targets it
        creates (a chain, a run, a firing), without waiting for their delivery.

        Only those: the `event:` entry of every event, and the `last:` of a chain's later
        events, are written by the workers' index step and catch-ups (a look-up that
        misses one catches up first; a chain's events past its last indexed one are read
        from its partition's unindexed tail), so a piece of feedback costs no index write
        here. What is remembered is bounded (OWN_ENTRIES, oldest dropped first): by then it
        is in the index topic.
        """
        entries = [(k, e) for k, e in index_entries(envelope, partition, offset)
                   if not k.startswith(("last:", "event:"))]
        if not entries:
            return
        with self._own_lock:
            own = self._own
            for key, entry in entries:
                own[key] = merge_entry(key, own.get(key), entry)
            while len(own) > OWN_ENTRIES:
                del own[next(iter(own))]
        for key, entry in entries:
            self._produce(key, entry.encode(), wait=False)

    def publish(self, envelope: Envelope, partition: int, offset: int) -> None:
        """Produce the index entries of an event at `partition`/`offset` without keeping them
        (a bulk loader's or a migration's write)."""
        self.publish_entries([(k, e.encode()) for k, e in
                              index_entries(envelope, partition, offset)])

    def publish_entries(self, entries: list[tuple[str, bytes]]) -> None:
        """Produce encoded entries (`record_entries_encoded`, or `index_entries` encoded)
        without keeping them; the topic must be open."""
        for key, value in entries:
            self._produce(key, value)

    def cursors(self, *, fresh: bool = True) -> dict[int, int]:
        """The cursors (events partition -> offset below which every event is indexed), read
        to the cursor partition's current end (`fresh`) or as this process last saw them."""
        with self._lock:
            self._open()
            if fresh or CURSOR_PARTITION not in self._read_began:
                self._read_partition(CURSOR_PARTITION)
            return dict(self._cursors)

    def delivered(self) -> bool:
        """Flush the producer; whether every index entry produced since the last call
        landed."""
        remaining = self._producer.flush(self.settings.flush_timeout)
        failed, self._failed = self._failed, 0
        return not remaining and not failed

    def advance_cursors(self, reached: dict[int, int]) -> None:
        """Declare every event below `reached[p]` of each events partition indexed. Call it
        only once their entries are on the broker (`delivered()` first)."""
        with self._lock:
            self._open()
            for p, offset in reached.items():
                self._produce(cursor_key(p), str(offset).encode())
                self._cursors[p] = max(offset, self._cursors.get(p, 0))

    def behind(self) -> tuple[dict[int, int], dict[int, int]]:
        """The cursors and the events topic's current ends (what a catch-up would read)."""
        start = self.cursors()
        # Every record written before now, open transactions waited for (WRITTEN_ENDS): a
        # read_committed consumer's own ends would stop short of them.
        return start, ends(self._written_ends(), self.events_topic, settings=self.settings)

    def catch_up(self, *, limit: int | None = None, asked: float | None = None) -> IndexRun:
        """Index the events appended since the cursors (by handles that died before writing
        their entries, producers other than this project's, or while no worker ran the
        index step), then advance the cursors.

        Reads only the events topic's unindexed tail. Concurrent calls share catch-ups: a
        call that waited for another's catch-up returns when that one began after it was
        made (it read every event acknowledged before the call), and catches up again
        otherwise. `asked` (time.monotonic(), default now) is when the call was made, for a
        caller that hopped to a thread to make it. IndexBehind, before anything is read, when
        that tail is longer than `limit` events (default STREAMS_INDEX_CATCH_UP_LIMIT, a
        look-up's bound; `build` has none).
        """
        if limit is None:
            limit = self.settings.index_catch_up_limit or None
        if asked is None:
            asked = time.monotonic()
        with self._catch_up_lock:
            if self._caught_up_began > asked:
                return IndexRun()
            began = time.monotonic()
            self.catch_ups += 1
            run = self._index_tail(limit=limit)
            self._caught_up_began = began  # only a catch-up that finished answers others
            return run

    def build(self, *, step: int = 50_000,
              progress: Callable[[IndexRun], None] | None = None) -> IndexRun:
        """`streams index build`: index the events topic from the cursors to its current
        end, advancing the cursors every `step` events (so a build killed midway resumes
        from its last step, and one run again over an indexed log writes nothing);
        `progress` is called after every read batch."""
        with self._catch_up_lock:
            return self._index_tail(step=step, progress=progress)

    def _index_tail(self, *, limit: int | None = None, step: int = 50_000,
                    progress: Callable[[IndexRun], None] | None = None) -> IndexRun:
        start, ends = self.behind()
        todo = {p: e for p, e in ends.items() if start.get(p, 0) < e}
        run = IndexRun(total=sum(e - start.get(p, 0) for p, e in todo.items()),
                       reached={p: start.get(p, 0) for p in ends})
        if limit is not None and run.total > limit:
            raise IndexBehind(
                f"the index of tenant {self.tenant} is {run.total} events behind its events "
                f"topic, more than a look-up catches up (STREAMS_INDEX_CATCH_UP_LIMIT="
                f"{limit}): run `streams index build --tenant {self.tenant}` (workers running "
                "rules keep it current from then on)")
        if not todo:
            return run
        last: dict[str, bytes] = {}
        since = 0
        # Cursors as of the last step: a step only writes those that moved.
        written = dict(run.reached)

        def checkpoint() -> None:
            for key, value in last.items():
                self._produce(key, value)
            run.entries += len(last)
            last.clear()
            # The cursors go out only once every entry below them is on the broker.
            if not self.delivered():
                raise KafkaUnavailable(
                    f"index entries of {self.events_topic} not acknowledged within "
                    f"{self.settings.flush_timeout:g} s; check that the brokers are up")
            moved = {p: o for p, o in run.reached.items() if o > written.get(p, 0)}
            if moved:
                self.advance_cursors(moved)
                written.update(moved)
                if self._producer.flush(self.settings.flush_timeout):
                    raise KafkaUnavailable(f"the cursors of {self.topic} not acknowledged "
                                           f"within {self.settings.flush_timeout:g} s")
                run.steps += 1

        # Closed here, with the catch-up lock held, if this stops midway: the generator's
        # cleanup drops the kept reader, which must not wait for garbage collection.
        with contextlib.closing(self._read_events_tail(start, todo)) as tail:
            for batch in tail:
                for msg in batch:
                    p, o = msg.partition() or 0, msg.offset() or 0
                    run.reached[p] = o + 1
                    run.events += 1
                    entries = self._entries_of(msg)
                    if entries is None:
                        run.skipped += 1
                        continue
                    for key, value in entries:
                        if key.startswith("last:"):
                            # Only a chain's latest within a step matters (merge_entry): the
                            # tail is read in offset order per partition, a chain's one.
                            last[key] = value
                            continue
                        self._produce(key, value)
                        run.entries += 1
                since += len(batch)
                if since >= step:
                    checkpoint()
                    since = 0
                if progress is not None:
                    progress(run)
        checkpoint()
        if progress is not None:
            progress(run)
        return run

    def _read_events_tail(self, start: dict[int, int],
                          todo: dict[int, int]) -> Generator[list[Message], None, None]:
        """The events topic's records from `start` to `todo`'s ends, in batches. Through one
        reader kept between catch-ups (they take turns: `_catch_up_lock`): making a consumer
        per catch-up cost more than a short tail's read."""
        consumer = self._tail_reader
        if consumer is None:
            consumer = self._tail_reader = Consumer(reader_config(
                self.settings, reader_group(self.topic, "index-tail",
                                            self.settings.topic_prefix)))
        todo = dict(todo)
        at = {p: start.get(p, 0) for p in todo}
        done = False
        try:
            consumer.assign([TopicPartition(self.events_topic, p, at[p]) for p in todo])
            while todo:
                left = sum(todo[p] - at[p] for p in todo)
                out = []
                batch = consumer.consume(max(1, min(_READ_BATCH, left)), _WAIT)
                if not batch:
                    # What is left may be transaction markers or aborted records.
                    for p in [p for p, e in todo.items()
                              if reached_end(consumer, self.events_topic, p, e)]:
                        del todo[p]
                for msg in batch:
                    if msg.error():
                        raise KafkaUnavailable(
                            f"reading {self.events_topic} failed: {msg.error()}")
                    p, o = msg.partition() or 0, msg.offset() or 0
                    if p not in todo or o >= todo[p]:
                        continue
                    self.event_records_read += 1
                    at[p] = o + 1
                    if o + 1 >= todo[p]:
                        del todo[p]
                    out.append(msg)
                if out:
                    yield out
            consumer.unassign()
            done = True
        except KafkaException as exc:
            raise KafkaUnavailable(f"reading {self.events_topic} failed: {exc}") from exc
        finally:
            if not done:  # failed or abandoned midway: the next catch-up starts afresh
                self._tail_reader = None
                consumer.close()

    def chain_messages(self, head: IndexEntry) -> list[Message]:
        """The events-topic records of the chain `head` starts, in log order.

        A chain's events share its key, so one partition holds them all. Read are: the
        partition from the head's offset to the chain's last indexed event (`last:<chain>`;
        a chain without one has no indexed event past its head, which writes none), and the
        partition's unindexed tail (from its cursor to the current end), where events
        no one has indexed yet (a worker's) may be; records of other chains are skipped by
        key, without decoding.
        """
        # The cursor first: every `last:` of an event below a cursor was delivered before
        # that cursor was written, so the `last:` read next is at least as new as the
        # cursor (read the other way round, a checkpoint in between would leave out the
        # chain's events between the two).
        cursor = self.cursors().get(head.partition, 0)
        last = self.lookup(f"last:{head.located.correlation_id}")
        upto = head.offset + 1 if last is None else max(head.offset, last.offset) + 1
        ranges: list[tuple[int, int | None]] = [(head.offset, upto), (max(cursor, upto), None)]
        chain = head.located.correlation_id.encode()
        return [m for m in self._read_events(head.partition, ranges) if m.key() == chain]

    def message_at(self, entry: IndexEntry) -> Message | None:
        """The one events-topic record at an entry's place (None if it is not there)."""
        return self.messages_at([entry])[0]

    def messages_at(self, entries: Sequence[IndexEntry]) -> list[Message | None]:
        """The events-topic records at entries' places, in their order (None where one is
        not there).

        Concurrent calls share reads: the caller that gets the reader reads every place
        asked for meanwhile, every partition at once (a fetch round trip for them all, where
        each call read its own in turn, a round trip each)."""
        asked: list[Future[Message | None]] = [Future() for _ in entries]
        with self._own_lock:
            self._places.extend(((e.partition, e.offset), waiting)
                                for e, waiting in zip(entries, asked, strict=True))
        with self._events_lock:
            if not all(waiting.done() for waiting in asked):  # none taken by another read
                with self._own_lock:
                    taken, self._places = self._places, []
                try:
                    found = self._read_places(self._events_consumer(),
                                              {place for place, _ in taken})
                except BaseException as exc:
                    for _place, waiting in taken:
                        waiting.set_exception(exc)
                    raise
                for place, waiting in taken:
                    waiting.set_result(found.get(place))
        return [waiting.result() for waiting in asked]

    def _events_consumer(self) -> Consumer:
        """The reader of events by place (call with `_events_lock` held)."""
        if self._events_reader is None:
            self._events_reader = Consumer(reader_config(
                self.settings, reader_group(self.topic, "chain", self.settings.topic_prefix),
                **_SMALL_PREFETCH))
        return self._events_reader

    def _read_places(self, consumer: Consumer,
                     places: set[tuple[int, int]]) -> dict[tuple[int, int], Message]:
        """The records at `places` (partition, offset) of the events topic, by place. Each
        partition's offsets are read through in spans of at most _SPAN records; every
        partition's next span is read in one round (one assignment)."""
        by_partition: dict[int, list[int]] = {}
        for partition, offset in sorted(places):
            by_partition.setdefault(partition, []).append(offset)
        spans = {p: _spans(offsets) for p, offsets in by_partition.items()}
        found: dict[tuple[int, int], Message] = {}
        while spans:
            found.update(self._read_round(consumer, {p: s[0] for p, s in spans.items()}))
            spans = {p: s[1:] for p, s in spans.items() if len(s) > 1}
        return found

    def _read_round(self, consumer: Consumer, round_: dict[int, tuple[int, int, set[int]]],
                    ) -> dict[tuple[int, int], Message]:
        """One span per partition, [start, stop), keeping the records at its offsets."""
        topic = self.events_topic
        todo = {p: stop for p, (_start, stop, _wanted) in round_.items()}
        at = {p: start for p, (start, _stop, _wanted) in round_.items()}
        out: dict[tuple[int, int], Message] = {}
        checked = False
        with _reading(consumer, topic):
            consumer.assign([TopicPartition(topic, p, start) for p, start in at.items()])
            while todo:
                # consume() waits until it has as many records as asked or the timeout
                # passes: ask for what is left, so the last batch returns at once.
                left = sum(stop - at[p] for p, stop in todo.items())
                batch = consumer.consume(max(1, min(1000, left)), _WAIT)
                if not batch:
                    for p in [p for p, e in todo.items() if reached_end(consumer, topic, p, e)]:
                        del todo[p]  # the rest is transaction markers or aborted records
                    if todo and not checked:  # a place past the topic's end, if any
                        checked = True
                        written = ends(self._written_ends(), topic, self.settings.admin_timeout,
                                       self.settings)
                        for p in list(todo):
                            todo[p] = min(todo[p], written.get(p, 0))
                            if round_[p][0] >= todo[p]:
                                del todo[p]
                    continue
                for msg in batch:
                    if msg.error():
                        raise KafkaUnavailable(f"reading {topic} failed: {msg.error()}")
                    p, o = msg.partition() or 0, msg.offset() or 0
                    if p not in todo or o >= todo[p] or o < round_[p][0]:
                        continue  # before the span: a place past the end reset the reader
                    at[p] = o + 1
                    self.event_records_read += 1
                    if o in round_[p][2]:
                        out[(p, o)] = msg
                    if o + 1 >= todo[p]:
                        del todo[p]
        return out

    def _read_events(self, partition: int,
                     ranges: list[tuple[int, int | None]]) -> list[Message]:
        """The records of one events partition in each [start, end) range (end None: the
        partition's current end)."""
        with self._events_lock:
            return self._read_events_with(self._events_consumer(), partition, ranges)

    def _read_events_with(self, consumer: Consumer, partition: int,
                          ranges: list[tuple[int, int | None]]) -> list[Message]:
        out: list[Message] = []
        tp = TopicPartition(self.events_topic, partition)

        def written_end() -> int:
            # Every record written before now, open transactions waited for (WRITTEN_ENDS).
            _low, high = self._written_ends().get_watermark_offsets(
                tp, timeout=self.settings.admin_timeout)
            return int(high)

        with _reading(consumer, self.events_topic):
            # Asked only when a range is open-ended: a bounded one (a record at an index
            # entry's place, written before its entry) asks only if it comes up short.
            high = written_end() if any(stop is None for _start, stop in ranges) else None
            for start, stop in ranges:
                end = high if stop is None else stop if high is None else min(stop, high)
                assert end is not None
                if start >= end:
                    continue
                consumer.assign([TopicPartition(self.events_topic, partition, start)])
                position = start
                while position < end:
                    batch = consumer.consume(min(1000, end - position), _WAIT)
                    if not batch and reached_end(consumer, self.events_topic, partition, end):
                        break  # the rest is transaction markers or aborted records
                    if not batch and high is None:  # past the topic's end, if anywhere
                        high = written_end()
                        end = min(end, high)
                    for msg in batch:
                        if msg.error():
                            raise KafkaUnavailable(
                                f"reading {self.events_topic} failed: {msg.error()}")
                        position = (msg.offset() or 0) + 1
                        self.event_records_read += 1
                        # A start past the partition's end resets the reader to its
                        # beginning (auto.offset.reset): nothing before `start` is kept.
                        if start < position <= end:
                            out.append(msg)
        return out

    def _written_ends(self) -> Consumer:
        """A consumer that only asks where the events topic's records end, open
        transactions included (made once)."""
        with self._lock:
            if self._ends is None:
                self._ends = Consumer(reader_config(
                    self.settings, reader_group(self.topic, "ends", self.settings.topic_prefix),
                    **WRITTEN_ENDS))
            return self._ends

    def close(self) -> None:
        """Leave the broker, once what was read is in the local store (waiting up to 10 s:
        what is not is read again by the next process)."""
        self.flush_store(10.0)
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None
            if self._ends is not None:
                self._ends.close()
                self._ends = None
            if self._index_ends is not None:
                self._index_ends.close()
                self._index_ends = None
        with self._events_lock:
            if self._events_reader is not None:
                self._events_reader.close()
                self._events_reader = None
        with self._catch_up_lock:
            if self._tail_reader is not None:
                self._tail_reader.close()
                self._tail_reader = None


class IndexWriter:
    """A worker's index writes: the entries of every event its loop consumed, with the
    offsets the consumer gave them, and the cursors of its partitions advanced as it goes.

    The worker's rule firings and runs go out through its batch loop's producer (error-only
    delivery reports: no offsets) or the decider's delivery; the loop reads them back a batch
    later with their offsets, as it reads every other event, so writing entries on
    consumption indexes everything the tenant's events topic holds (a worker's records, a
    handle's, another producer's) in one place, exactly once per consumer group.

    Cursors (`checkpoint`, before each commit of the loop): a partition's cursor moves to
    the offset after the last event indexed, once every entry produced so far is on the
    broker, and only when the index was already complete below the first offset this
    assignment indexed (the current cursor is at or past it; otherwise `streams index
    build`, or any catch-up, closes the gap first and the cursor moves from the next
    checkpoint on). Not thread-safe: the loop's thread calls it.
    """

    def __init__(self, index_of: Callable[[str, Producer], TenantIndex],
                 tenant_of: Callable[[str], str | None],
                 producer_of: Callable[[Callable[[Any, Message], None]], Producer],
                 flush_timeout: float = 30.0) -> None:
        self._index_of = index_of
        self._flush_timeout = flush_timeout
        self._tenant_of = tenant_of
        # The entries go out through a producer of the writer's own that reports failed
        # deliveries only (`producer_of(callback)` makes it, on the first index opened: no
        # client is made at construction), each to the index whose topic it was for.
        self._producer_of = producer_of
        self._producer: Producer | None = None
        self._by_index_topic: dict[str, TenantIndex] = {}
        self._indexes: dict[str, TenantIndex | None] = {}
        self._from: dict[tuple[str, int], int] = {}
        self._upto: dict[tuple[str, int], int] = {}
        self._written: dict[tuple[str, int], int] = {}
        self._complete: set[tuple[str, int]] = set()
        # Per partition, the `last:` entries (offset, bytes) of the chains read since its
        # last checkpoint.
        self._last: dict[tuple[str, int], dict[str, tuple[int, bytes]]] = {}
        self.entries = 0
        self.cursor_writes = 0

    def _index(self, topic: str) -> TenantIndex | None:
        if topic in self._indexes:
            return self._indexes[topic]
        tenant = self._tenant_of(topic)
        index = None
        if tenant is not None:
            if self._producer is None:
                self._producer = self._producer_of(self._undelivered)
            index = self._index_of(tenant, self._producer)
            try:
                index.open()
            except BaseException:
                index.store.close()  # not kept: the next event of the topic tries again
                raise
            self._by_index_topic[index.topic] = index
        self._indexes[topic] = index
        return index

    def _undelivered(self, err: Any, msg: Message) -> None:
        # The producer's only delivery reports, failures, served inside its flush (the
        # checkpoint's `delivered`) or a poll while its queue is full.
        index = self._by_index_topic.get(msg.topic() or "")
        if index is not None:
            index.delivery_failed(err, msg)
        elif err is not None:
            log.warning("index entry %r for %s not written: %s", msg.key(), msg.topic(), err)

    def index(self, msg: Message, envelope: Envelope | None = None, *,
              record: Mapping[str, Any] | None = None) -> None:
        """Produce the entries of one consumed events record: from its plain record or its
        envelope when the caller decoded one already (the plain record first: cheaper),
        else decoded here."""
        topic = msg.topic() or ""
        index = self._index(topic)
        if index is None:
            return
        p, o = msg.partition() or 0, msg.offset() or 0
        entries: list[tuple[str, bytes]] | None
        if record is not None:
            try:
                entries = record_entries_encoded(record, p, o)
            except ValidationFailed:
                entries = None  # no event envelope: it has no entries
        elif envelope is not None:
            entries = [(k, e.encode()) for k, e in index_entries(envelope, p, o)]
        else:
            entries = index._entries_of(msg)
        tp = (topic, p)
        if entries:
            key, value = entries[1]  # `event:` first, then `chain:` or `last:`
            if key.startswith("last:"):
                # A chain's newest event, kept until the checkpoint, which writes it once for
                # all the chain's events read by then (what is past the cursor is read from
                # the partition's tail anyway). The highest offset: after a rewind the
                # events come again, and an older one must not replace it.
                chains = self._last.get(tp)
                if chains is None:
                    chains = self._last[tp] = {}
                kept = chains.get(key)
                if kept is None or o > kept[0]:
                    chains[key] = (o, value)
                entries = [entries[0], *entries[2:]]
            index.publish_entries(entries)
            self.entries += len(entries)
        self._from.setdefault(tp, o)
        if o + 1 > self._upto.get(tp, 0):
            self._upto[tp] = o + 1

    def forget(self, partitions: list[tuple[str, int]]) -> None:
        """Partitions assigned afresh or revoked: what this assignment indexed says nothing
        about the next one's start."""
        for tp in partitions:
            # Their chains' `last:` entries were written by the checkpoint before the commit
            # of a revocation; on a loss they are not: the partitions' new owner writes them.
            self._last.pop(tp, None)
            self._from.pop(tp, None)
            self._upto.pop(tp, None)
            self._written.pop(tp, None)
            self._complete.discard(tp)

    def checkpoint(self, partitions: set[tuple[str, int]]) -> None:
        """Advance the cursors of `partitions` (those the loop is about to commit) over what
        was indexed, once it is on the broker; the cursors are delivered before returning,
        so a cursor is never behind a committed offset because its write was lost. The
        `last:` entries kept for these partitions since their last checkpoint go out first,
        but those a cursor has passed (`_publish_last`)."""
        moved: dict[str, dict[int, int]] = {}
        kept: dict[str, dict[int, dict[str, tuple[int, bytes]]]] = {}
        for tp in partitions:
            chains = self._last.pop(tp, None)
            if chains:
                kept.setdefault(tp[0], {})[tp[1]] = chains
            upto = self._upto.get(tp)
            if upto is not None and upto > self._written.get(tp, -1):
                moved.setdefault(tp[0], {})[tp[1]] = upto
        for topic in moved.keys() | kept.keys():
            index = self._indexes.get(topic)
            if index is None:
                continue
            cursors = index.cursors()
            self._publish_last(index, kept.get(topic, {}), cursors)
            reached = moved.get(topic)
            if not reached:
                continue
            if not index.delivered():
                # An entry did not land: no cursor over it; this assignment starts again
                # from here (a catch-up or a build covers what came before).
                log.warning("index entries of %s not all delivered: cursors held back", topic)
                for p in reached:
                    tp = (topic, p)
                    self._from[tp] = self._upto[tp]
                    self._complete.discard(tp)
                continue
            ready: dict[int, int] = {}
            for p, upto in reached.items():
                tp = (topic, p)
                if tp not in self._complete and cursors.get(p, 0) >= self._from[tp]:
                    self._complete.add(tp)
                if tp in self._complete and upto > cursors.get(p, 0):
                    ready[p] = upto
            if ready:
                index.advance_cursors(ready)
                if not index.delivered():
                    log.warning("cursors of %s not delivered; the next checkpoint writes them",
                                topic)
                    continue
                self.cursor_writes += len(ready)
                for p, upto in ready.items():
                    self._written[(topic, p)] = upto

    def _publish_last(self, index: TenantIndex,
                      kept: dict[int, dict[str, tuple[int, bytes]]],
                      cursors: dict[int, int]) -> None:
        """Produce the kept `last:` entries of an index's partitions, but those of events
        below the partition's cursor: whoever moved the cursor past one (another worker
        that took the partition over while this one was stalled, a catch-up) wrote the
        chain's `last:` before it, as new as this one or newer, and readers keep the
        latest write of a key (compaction too), so writing this one now would move the
        chain's end back."""
        for p, chains in kept.items():
            below = cursors.get(p, 0)
            fresh = [(key, value) for key, (offset, value) in chains.items() if offset >= below]
            if fresh:
                index.publish_entries(fresh)
                self.entries += len(fresh)

    def close(self) -> None:
        """Leave the broker: entries still queued get `flush_timeout` to land (one not
        written is found again by the next catch-up)."""
        for index in self._indexes.values():
            if index is not None:
                index.close()
                index.store.close()
        # The indexes hold the producer too: dropped with it, so its threads end now.
        self._indexes.clear()
        self._by_index_topic.clear()
        if self._producer is not None:
            remaining = self._producer.flush(self._flush_timeout)
            if remaining:
                log.warning("%d index entries not written at close; the next catch-up "
                            "indexes their events", remaining)
            self._producer = None
