"""A tenant's index topic: the shared, compacted view of what exists in its events topic.

`<prefix>.<tenant>.index` holds one record per key (see `streams.core.view`): `run:<id>`,
`firing:<id>`, `chain:<id>`, `event:<id>` and `last:<chain>`, each the location (workspace,
chain, event, trace, events partition and offset) of the event it names, plus, alone in index
partition 0, one `cursor:<p>` per events partition: every event of partition `p` below the
cursor has all its entries in the index. Every entry is produced to the partition
`index_partition(key)` names, so a look-up reads one index partition, from where this process
last stopped, never the events topic.

Who writes it:

- the workspace handle, for each event it appends that creates a target (a chain head, a run,
  a firing), right after the broker acknowledged it (the entry needs its offset), through the
  same producer, without a wait;
- a *catch-up*, run by any reader whose look-up missed: it reads the events topic from the
  cursors to the current end (what nobody has indexed yet: a worker's runs and firings, the
  `event:` and `last:` entries of every event, a handle's entry lost with its process),
  produces their entries, flushes, then writes the advanced cursors.

So a miss costs the events written since the last catch-up, not the log.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from streams.adapters.kafka.config import reader_config
from streams.adapters.kafka.log import WRITTEN_ENDS, reached_end, watermarks
from streams.core.errors import KafkaUnavailable, ValidationFailed
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
    target_key,
)
from streams.settings import Settings

__all__ = ["LOADED_PARTITIONS", "OWN_ENTRIES", "TenantIndex"]

log = logging.getLogger(__name__)

Decode = Callable[[Message], Envelope | None]

# How many of its own entries a process remembers (read-your-writes until they are read back).
OWN_ENTRIES = 100_000

# librdkafka prefetches up to 64 MB per partition by default; these readers read one
# partition to its end and stop, so less keeps them as fast and the process smaller. They
# never wait for new records either: a broker answers one connection's requests in order, so
# a fetch long-polling at a partition's end (fetch.wait.max.ms, 500 ms by default) held back
# the next lookup's watermark query by that long (every index miss took 0.5 s).
_SMALL_PREFETCH = {"queued.max.messages.kbytes": 16384, "fetch.wait.max.ms": 10}

# How many index partitions a process keeps in memory (about 35 MB each on a tenant of a
# million envelopes); the cursor partition is tiny and counts as one.
LOADED_PARTITIONS = 4

# How long one consume() call waits: a compacted partition has gaps, so its last batch may
# be short of what was asked for, and waits this long.
_WAIT = 0.05


class TenantIndex:
    """One process's reader and writer of a tenant's index topic.

    Thread-safe; every method blocks (the workspace handle calls them in a worker thread).
    It keeps the raw entries of the index partitions it has read (the partition of each key
    looked up: 1/31 of the index with the default 32 partitions) and the entries of its own
    appends, so its own writes are read back at once.
    """

    def __init__(self, settings: Settings, tenant: str, producer: Producer,
                 events_topic: str, decode: Decode,
                 ensure_topic: Callable[[], object] | None = None) -> None:
        self.settings = settings
        self.topic = index_topic(tenant, settings.topic_prefix)
        self.events_topic = events_topic
        self._producer = producer
        self._decode = decode
        self._ensure_topic = ensure_topic
        self._consumer: Consumer | None = None
        self._ends: Consumer | None = None
        self._partitions = 0
        self._positions: dict[int, int] = {}
        # Raw key and value bytes per loaded partition: decoded only when looked up, so a
        # partition of tens of thousands of entries costs a few megabytes.
        # At most LOADED_PARTITIONS of them, the least recently used dropped first (and read
        # again from the start when next needed).
        self._entries: OrderedDict[int, dict[bytes, bytes]] = OrderedDict()
        self._cursors: dict[int, int] = {}
        self._own: dict[str, IndexEntry] = {}
        self._found: dict[str, IndexEntry] = {}
        self._lock = threading.RLock()
        self._own_lock = threading.Lock()
        self._catch_up_lock = threading.Lock()
        self.index_records_read = 0
        self.event_records_read = 0
        self.catch_ups = 0

    # -- reading ------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        """Whether the index topic has been found (and its partitions counted)."""
        return self._consumer is not None

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

    def _read_partition(self, partition: int) -> dict[bytes, bytes]:
        """Read one index partition from where this process stopped to its current end."""
        consumer = self._open()
        entries = self._entries.get(partition)
        if entries is None:
            entries = self._entries[partition] = {}
            self._positions.pop(partition, None)
            while len(self._entries) > LOADED_PARTITIONS:
                dropped, _ = self._entries.popitem(last=False)
                self._positions.pop(dropped, None)
        else:
            self._entries.move_to_end(partition)
        start = self._positions.get(partition, 0)
        tp = TopicPartition(self.topic, partition)
        try:
            _low, high = consumer.get_watermark_offsets(tp, timeout=self.settings.admin_timeout)
            if start >= high:
                return entries
            consumer.assign([TopicPartition(self.topic, partition, start)])
            position = start
            while position < high:
                # consume() waits until it has as many records as asked or the timeout
                # passes: ask for what is left, so the last batch returns at once.
                batch = consumer.consume(min(1000, high - position), _WAIT)
                if not batch:
                    [now] = consumer.position([tp])
                    if now.offset >= high:
                        break
                    continue
                for msg in batch:
                    if msg.error():
                        raise KafkaUnavailable(f"reading {self.topic} failed: {msg.error()}")
                    position = (msg.offset() or 0) + 1
                    self.index_records_read += 1
                    self._fold(partition, entries, msg)
            self._positions[partition] = max(position, high)
            consumer.unassign()
        except KafkaException as exc:
            raise KafkaUnavailable(f"reading {self.topic} failed: {exc}; check that the "
                                   "brokers are up") from exc
        return entries

    def _fold(self, partition: int, entries: dict[bytes, bytes], msg: Message) -> None:
        key = msg.key() or b""
        value = msg.value()
        if key.startswith(b"cursor:"):
            if value:
                self._cursors[int(key[7:])] = int(value)
            return
        if not value:  # a tombstone
            entries.pop(key, None)
            return
        if key.startswith(b"run:") and key in entries:
            return  # a run recorded again keeps its first place (see merge_entry)
        entries[key] = value

    def _decoded(self, key: str, value: bytes | None) -> IndexEntry | None:
        if value is None:
            return None
        try:
            return IndexEntry.decode(value)
        except ValidationFailed:
            log.warning("skipping a malformed record in %s: key %r", self.topic, key)
            return None

    def cached(self, key: str) -> IndexEntry | None:
        """The entry under `key` if this process already has it (its own writes, or an index
        partition it read), without asking the broker. Entries never change once written
        (a repeated run keeps its first place), so a cached one is current."""
        with self._own_lock:
            own = self._own.get(key) or self._found.get(key)
        if own is not None:
            return own
        if not self._partitions:
            return None
        # Called on event loops: never wait for a look-up that is reading a partition (the
        # caller then looks up in a thread).
        if not self._lock.acquire(blocking=False):
            return None
        try:
            loaded = self._entries.get(index_partition(key, self._partitions))
            value = None if loaded is None else loaded.get(key.encode())
        finally:
            self._lock.release()
        return self._keep(key, self._decoded(key, value))

    def _keep(self, key: str, found: IndexEntry | None) -> IndexEntry | None:
        # Entries never change once written (last: entries excepted): keep the ones found,
        # so a process that looks up more targets than LOADED_PARTITIONS partitions hold
        # (a server giving feedback on many runs) does not read partitions again for them.
        if found is not None and not key.startswith("last:"):
            with self._own_lock:
                self._found[key] = found
                while len(self._found) > OWN_ENTRIES:
                    del self._found[next(iter(self._found))]
        return found

    def lookup(self, key: str) -> IndexEntry | None:
        """The entry under `key`: this process's own writes, then the key's index partition
        read to its current end."""
        with self._own_lock:
            own = self._own.get(key)
        with self._lock:
            with self._own_lock:  # found meanwhile by a look-up this one waited for
                kept = self._found.get(key)
            if kept is not None:
                return kept if own is None else merge_entry(key, kept, own)
            self._open()
            value = self._read_partition(index_partition(key, self._partitions)).get(
                key.encode())
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
        while True:
            try:
                self._producer.produce(self.topic, value=value, key=key.encode(),
                                       partition=partition, on_delivery=_log_failure)
                return
            except BufferError:
                if not wait:  # in a delivery report: no poll; the next catch-up writes it
                    log.warning("producer queue full: index entry %r left to a catch-up", key)
                    return
                self._producer.poll(0.05)
            except KafkaException as exc:
                raise KafkaUnavailable(f"writing {self.topic} failed: {exc}") from exc

    def appended(self, envelope: Envelope, partition: int, offset: int) -> None:
        """Record an acknowledged append: remember and produce the entries of the targets it
        creates (a chain, a run, a firing), without waiting for their delivery.

        Only those: the `event:` and `last:` entries of every event are left to catch-ups
        (a look-up that misses one catches up first; a chain's events past its last indexed
        one are read from its partition's unindexed tail), so a piece of feedback costs no
        index write at all. What is remembered is bounded (OWN_ENTRIES, oldest dropped
        first): by then it is in the index topic.
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
        for key, entry in index_entries(envelope, partition, offset):
            self._produce(key, entry.encode())

    def advance_cursors(self, reached: dict[int, int]) -> None:
        """Declare every event below `reached[p]` of each events partition indexed. Call it
        only once their entries are on the broker (flush first)."""
        with self._lock:
            self._open()
            for p, offset in reached.items():
                self._produce(cursor_key(p), str(offset).encode())
                self._cursors[p] = max(offset, self._cursors.get(p, 0))

    def catch_up(self) -> None:
        """Index the events appended since the cursors (by workers, or by handles that died
        before writing their entries), then advance the cursors.

        Reads only the events topic's unindexed tail; a process that finds another catching
        up waits for it rather than reading the same tail.
        """
        if not self._catch_up_lock.acquire(blocking=False):
            with self._catch_up_lock:
                return
        try:
            self.catch_ups += 1
            with self._lock:
                self._open()
                self._read_partition(CURSOR_PARTITION)
                start = dict(self._cursors)
            reached = dict(start)
            for msg in self._read_events_tail(start):
                p, o = msg.partition() or 0, msg.offset() or 0
                reached[p] = o + 1
                envelope = self._decode(msg)
                if envelope is None:
                    continue
                entries = index_entries(envelope, p, o)
                with self._lock:
                    for key, entry in entries:
                        part = index_partition(key, self._partitions)
                        loaded = self._entries.get(part)
                        value = entry.encode()
                        if loaded is not None and not (
                                key.startswith("run:") and key.encode() in loaded):
                            loaded[key.encode()] = value
                        self._produce(key, value)
            # The cursors go out only once every entry below them is on the broker.
            if self._producer.flush(self.settings.flush_timeout):
                raise KafkaUnavailable(f"index entries of {self.events_topic} not "
                                       f"acknowledged within {self.settings.flush_timeout:g} s")
            with self._lock:
                for p, offset in reached.items():
                    if offset > start.get(p, 0):
                        self._produce(cursor_key(p), str(offset).encode())
                        self._cursors[p] = offset
        finally:
            self._catch_up_lock.release()

    def _read_events_tail(self, start: dict[int, int]) -> Iterator[Message]:
        consumer = Consumer(reader_config(self.settings,
                                          reader_group(self.topic, "index-tail",
                                                       self.settings.topic_prefix),
                                          **_SMALL_PREFETCH))
        try:
            ends = {p: high for p, (_low, high) in
                    watermarks(self._written_ends(), self.events_topic).items()}
            todo = {p: e for p, e in ends.items() if start.get(p, 0) < e}
            if not todo:
                return
            consumer.assign([TopicPartition(self.events_topic, p, start.get(p, 0))
                             for p in todo])
            at = {p: start.get(p, 0) for p in todo}
            while todo:
                left = sum(todo[p] - at[p] for p in todo)
                batch = consumer.consume(max(1, min(1000, left)), _WAIT)
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
                    if p not in todo:
                        continue
                    self.event_records_read += 1
                    at[p] = o + 1
                    if o + 1 >= todo[p]:
                        del todo[p]
                    yield msg
        except KafkaException as exc:
            raise KafkaUnavailable(f"reading {self.events_topic} failed: {exc}") from exc
        finally:
            consumer.close()

    def chain_messages(self, head: IndexEntry) -> list[Message]:
        """The events-topic records of the chain `head` starts, in log order.

        A chain's events share its key, so one partition holds them all. Read are: the
        partition from the head's offset to the chain's last indexed event (`last:<chain>`),
        and the partition's unindexed tail (from its cursor to the current end), where events
        no one has indexed yet (a worker's) may be; records of other chains are skipped by
        key, without decoding.
        """
        last = self.lookup(f"last:{head.located.correlation_id}")
        with self._lock:
            self._read_partition(CURSOR_PARTITION)
            cursor = self._cursors.get(head.partition, 0)
        upto = head.offset + 1 if last is None else last.offset + 1
        ranges: list[tuple[int, int | None]] = [(head.offset, upto), (max(cursor, upto), None)]
        chain = head.located.correlation_id.encode()
        return [m for m in self._read_events(head.partition, ranges) if m.key() == chain]

    def message_at(self, entry: IndexEntry) -> Message | None:
        """The one events-topic record at an entry's place."""
        found = self._read_events(entry.partition, [(entry.offset, entry.offset + 1)])
        return found[0] if found else None

    def _read_events(self, partition: int,
                     ranges: list[tuple[int, int | None]]) -> list[Message]:
        """The records of one events partition in each [start, end) range (end None: the
        partition's current end)."""
        consumer = Consumer(reader_config(self.settings,
                                          reader_group(self.topic, "chain",
                                                       self.settings.topic_prefix),
                                          **_SMALL_PREFETCH))
        out: list[Message] = []
        try:
            tp = TopicPartition(self.events_topic, partition)
            # Every record written before now, open transactions waited for (WRITTEN_ENDS).
            _low, high = self._written_ends().get_watermark_offsets(
                tp, timeout=self.settings.admin_timeout)
            for start, stop in ranges:
                end = high if stop is None else min(stop, high)
                if start >= end:
                    continue
                consumer.assign([TopicPartition(self.events_topic, partition, start)])
                position = start
                while position < end:
                    batch = consumer.consume(min(1000, end - position), _WAIT)
                    if not batch and reached_end(consumer, self.events_topic, partition, end):
                        break  # the rest is transaction markers or aborted records
                    for msg in batch:
                        if msg.error():
                            raise KafkaUnavailable(
                                f"reading {self.events_topic} failed: {msg.error()}")
                        position = (msg.offset() or 0) + 1
                        self.event_records_read += 1
                        if position <= end:
                            out.append(msg)
                consumer.unassign()
        except KafkaException as exc:
            raise KafkaUnavailable(f"reading {self.events_topic} failed: {exc}") from exc
        finally:
            consumer.close()
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
        """Leave the broker."""
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None
            if self._ends is not None:
                self._ends.close()
                self._ends = None


def _log_failure(err: Any, msg: Message) -> None:
    # An index entry that did not land is found again by the next catch-up (its event is
    # above the cursor until a catch-up indexed it), so a failure is logged, not raised.
    if err is not None:
        log.warning("index entry %r not written: %s", msg.key(), err)
