"""The index reader's sharing of reads between concurrent callers (no broker: its reads are
stand-ins that block until released). A call is answered by another's read or catch-up only
when that one began after the call was made; otherwise it reads again. On the real broker:
tests/integration/test_workspace_index.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, cast

from confluent_kafka import TopicPartition

from streams.adapters.kafka.index import IndexRun, TenantIndex
from streams.adapters.kafka.index_store import IndexStore
from streams.core.errors import KafkaUnavailable
from streams.core.view import IndexEntry, Located, index_partition
from streams.settings import Settings
from tests.kafka_fakes import FakeMessage


class Blocking:
    """A stand-in read: counts calls, and the first one waits for `release`."""

    def __init__(self) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, *_args: Any, **_kw: Any) -> IndexRun:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            assert self.release.wait(10)
        return IndexRun()


def index_of(tmp_path: Path) -> TenantIndex:
    return TenantIndex(Settings(state_dir=str(tmp_path)), "acme", producer=None,  # type: ignore[arg-type]
                       events_topic="fs.acme.events", entries_of=lambda *_a: [],
                       store=IndexStore(tmp_path / "index.sqlite"))


def waiting_threads(call: Any, n: int) -> list[threading.Thread]:
    threads = [threading.Thread(target=call) for _ in range(n)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)  # both are made, and wait for the lock, while the first read runs
    return threads


def test_calls_made_during_a_catch_up_share_one_catch_up_after_it(tmp_path: Path) -> None:
    index = index_of(tmp_path)
    tail = Blocking()
    index._index_tail = tail  # type: ignore[method-assign]
    first = threading.Thread(target=index.catch_up)
    first.start()
    assert tail.entered.wait(10)
    # Made after the running catch-up fetched the ends: it may not have their events. They
    # wait, then one of them catches up again, and that one answers the other.
    waiting = waiting_threads(index.catch_up, 2)
    tail.release.set()
    for thread in [first, *waiting]:
        thread.join(10)
    assert tail.calls == 2 and index.catch_ups == 2
    index.catch_up()  # made after every catch-up began: reads again
    assert tail.calls == 3


def test_a_call_made_before_a_catch_up_began_shares_it_though_it_waited_for_a_thread(
    tmp_path: Path,
) -> None:
    # An async caller takes the call's time before its hop to a thread: queued behind the
    # pool's busy threads while another catch-up began and ended, it needs no catch-up of
    # its own; a call made after that one began reads again.
    index = index_of(tmp_path)
    tail = Blocking()
    tail.release.set()
    index._index_tail = tail  # type: ignore[method-assign]
    asked = time.monotonic()
    index.catch_up()
    assert tail.calls == 1
    index.catch_up(asked=asked)
    assert tail.calls == 1 and index.catch_ups == 1
    index.catch_up(asked=time.monotonic())
    assert tail.calls == 2 and index.catch_ups == 2


class BlockingEnds:
    """A stand-in index consumer for the real `_read_partition`: every partition is empty,
    and the first end asked for waits for `release`."""

    def __init__(self) -> None:
        self.asked = 0
        self.partitions_asked: list[list[int]] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def offsets_for_times(self, partitions: list[TopicPartition],
                          **_kw: Any) -> list[TopicPartition]:
        self.asked += 1
        self.partitions_asked.append([tp.partition for tp in partitions])
        if self.asked == 1:
            self.entered.set()
            assert self.release.wait(10)
        return [TopicPartition(tp.topic, tp.partition, 0) for tp in partitions]


def test_look_ups_made_during_a_partitions_read_share_one_read_after_it(
        tmp_path: Path) -> None:
    index = index_of(tmp_path)
    consumer = BlockingEnds()
    index._consumer = consumer  # type: ignore[assignment]  # the real read, on a stand-in
    index._index_ends = consumer  # type: ignore[assignment]
    index._partitions = 1
    first = threading.Thread(target=index.lookup, args=("event:e1",))
    first.start()
    assert consumer.entered.wait(10)
    waiting = waiting_threads(lambda: index.lookup("event:e2"), 2)
    consumer.release.set()
    for thread in [first, *waiting]:
        thread.join(10)
    assert consumer.asked == 2  # the first read, then one read for both waiters
    index.lookup("event:e3")
    assert consumer.asked == 3


def test_look_ups_of_different_partitions_waiting_for_a_read_share_the_next_one(
        tmp_path: Path) -> None:
    # Waiting look-ups of four other partitions: one read of all four after the first, not
    # a read each in turn (their ends asked for in one request).
    index = index_of(tmp_path)
    consumer = BlockingEnds()
    index._consumer = consumer  # type: ignore[assignment]
    index._index_ends = consumer  # type: ignore[assignment]
    index._partitions = 32
    keys = {index_partition(f"event:e{i}", 32): f"event:e{i}" for i in range(40)}
    first, *others = list(keys.values())[:5]
    reader = threading.Thread(target=index.lookup, args=(first,))
    reader.start()
    assert consumer.entered.wait(10)
    waiting = [threading.Thread(target=index.lookup, args=(key,)) for key in others]
    for thread in waiting:
        thread.start()
    time.sleep(0.2)  # all wait for the lock while the first read runs
    consumer.release.set()
    for thread in [reader, *waiting]:
        thread.join(10)
    assert consumer.asked == 2
    assert consumer.partitions_asked[1] == sorted(index_partition(k, 32) for k in others)


def test_a_catch_up_that_failed_answers_no_one(tmp_path: Path) -> None:
    index = index_of(tmp_path)
    calls: list[str] = []
    entered, release = threading.Event(), threading.Event()

    def tail(**_kw: Any) -> IndexRun:
        calls.append("tail")
        if len(calls) == 1:
            entered.set()
            assert release.wait(10)
            raise KafkaUnavailable("the brokers went away")
        return IndexRun()

    index._index_tail = tail  # type: ignore[method-assign, assignment]
    failed: list[BaseException] = []

    def first_call() -> None:
        try:
            index.catch_up()
        except KafkaUnavailable as exc:
            failed.append(exc)

    first = threading.Thread(target=first_call)
    first.start()
    assert entered.wait(10)
    waiting = waiting_threads(index.catch_up, 1)
    release.set()
    for thread in [first, *waiting]:
        thread.join(10)
    assert len(failed) == 1 and calls == ["tail", "tail"]  # the waiter caught up itself


class EventsLog:
    """A stand-in events reader (and ends consumer) over an in-memory log: `assign`,
    `consume` in offset order per partition, `position`; counts its assignments. The first
    assignment waits for `release` once `entered` is set."""

    def __init__(self, log: dict[int, int], topic: str = "fs.acme.events") -> None:
        self.log = {p: [FakeMessage(topic, p, o, b"k", f"{p}:{o}".encode()) for o in range(n)]
                    for p, n in log.items()}
        self.topic = topic
        self.at: dict[int, int] = {}
        self.assignments: list[dict[int, int]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.at = {tp.partition: tp.offset for tp in partitions}
        self.assignments.append(dict(self.at))
        if len(self.assignments) == 1:
            self.entered.set()
            assert self.release.wait(10)

    def unassign(self) -> None:
        self.at = {}

    def consume(self, n: int, _timeout: float) -> list[FakeMessage]:
        out: list[FakeMessage] = []
        for p in self.at:
            while len(out) < n and self.at[p] < len(self.log[p]):
                out.append(self.log[p][self.at[p]])
                self.at[p] += 1
        return out

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.at.get(tp.partition, -1001))
                for tp in partitions]

    def list_topics(self, topic: str, timeout: float) -> Any:
        parts = {p: object() for p in self.log}
        return type("M", (), {"topics": {topic: type("T", (), {"error": None,
                                                               "partitions": parts})()}})()

    def offsets_for_times(self, partitions: list[TopicPartition],
                          timeout: float) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, len(self.log[tp.partition]))
                for tp in partitions]


def entry(partition: int, offset: int) -> IndexEntry:
    return IndexEntry(partition=partition, offset=offset,
                      located=Located(workspace="prod", correlation_id="c", event_id="e",
                                      trace_id=None))


def test_records_asked_for_by_place_meanwhile_are_read_in_one_round(tmp_path: Path) -> None:
    # The first caller holds the reader; five others wait meanwhile: one round reads all
    # their places (two partitions at once, each read through from its first place), and a
    # place past a partition's end is None, not a wait.
    index = index_of(tmp_path)
    log = EventsLog({0: 50, 1: 50})
    log.release.clear()
    index._events_reader = log  # type: ignore[assignment]
    index._ends = log  # type: ignore[assignment]
    got: dict[tuple[int, int], Any] = {}

    def read(p: int, o: int) -> None:
        found = index.message_at(entry(p, o))
        got[(p, o)] = None if found is None else found.value()

    first = threading.Thread(target=read, args=(0, 3))
    first.start()
    assert log.entered.wait(10)
    places = [(0, 10), (0, 12), (1, 7), (1, 40), (1, 99)]
    waiting = [threading.Thread(target=read, args=place) for place in places]
    for thread in waiting:
        thread.start()
    time.sleep(0.2)
    log.release.set()
    for thread in [first, *waiting]:
        thread.join(10)
    assert got == {(0, 3): b"0:3", (0, 10): b"0:10", (0, 12): b"0:12", (1, 7): b"1:7",
                   (1, 40): b"1:40", (1, 99): None}
    assert log.assignments == [{0: 3}, {0: 10, 1: 7}]


def test_places_far_apart_in_one_partition_are_read_in_spans_of_their_own(
        tmp_path: Path) -> None:
    index = index_of(tmp_path)
    log = EventsLog({0: 2000})
    index._events_reader = log  # type: ignore[assignment]
    found = index._read_places(cast(Any, log), {(0, 5), (0, 300), (0, 1500)})
    assert {place: m.value() for place, m in found.items()} == {
        (0, 5): b"0:5", (0, 300): b"0:300", (0, 1500): b"0:1500"}
    assert log.assignments == [{0: 5}, {0: 1500}]  # 5-300 read through; 1500 on its own


def test_one_callers_records_by_place_are_read_in_one_round_in_its_order(
        tmp_path: Path) -> None:
    index = index_of(tmp_path)
    log = EventsLog({0: 20, 1: 20})
    index._events_reader = log  # type: ignore[assignment]
    index._ends = log  # type: ignore[assignment]
    found = index.messages_at([entry(1, 4), entry(0, 9), entry(1, 2), entry(0, 25)])
    assert [None if m is None else m.value() for m in found] == [b"1:4", b"0:9", b"1:2", None]
    assert log.assignments == [{0: 9, 1: 2}]
    assert index.messages_at([]) == []


class RecordingProducer:
    """Records what is produced; `failed` is the failure-only report callback it was made
    with (a worker's index writer's own producer)."""

    def __init__(self, failed: Any = None) -> None:
        self.failed = failed
        self.produced: list[tuple[Any, ...]] = []
        self.flushes = 0

    def produce(self, *args: Any) -> None:
        self.produced.append(args)

    def flush(self, _timeout: float) -> int:
        self.flushes += 1
        return 0


def test_an_index_on_a_shared_producer_asks_a_report_per_entry_and_on_its_own_none(
    tmp_path: Path,
) -> None:
    for reports_each in (True, False):
        producer = RecordingProducer()
        index = TenantIndex(Settings(state_dir=str(tmp_path)), "acme",
                            producer=cast(Any, producer), events_topic="fs.acme.events",
                            entries_of=lambda *_a: [], reports_each=reports_each,
                            store=IndexStore(tmp_path / f"index-{reports_each}.sqlite"))
        index._partitions = 32
        index.publish_entries([("event:e1", b"{}")])
        [args] = producer.produced
        assert args[:4] == (index.topic, b"{}", b"event:e1", index_partition("event:e1", 32))
        assert args[4:] == ((index.delivery_failed,) if reports_each else ())


def test_the_index_writers_failed_entry_reaches_its_index_and_holds_its_cursors_back(
    tmp_path: Path, monkeypatch: Any,
) -> None:
    from streams.adapters.kafka.index import IndexWriter

    monkeypatch.setattr(TenantIndex, "open", lambda self: None)
    made: list[RecordingProducer] = []

    def producer_of(failed: Any) -> Any:
        made.append(RecordingProducer(failed))
        return made[-1]

    def index_of(tenant: str, producer: Any) -> TenantIndex:
        return TenantIndex(Settings(state_dir=str(tmp_path)), tenant, producer=producer,
                           events_topic=f"fs.{tenant}.events", entries_of=lambda *_a: [],
                           reports_each=False, store=IndexStore(tmp_path / f"{tenant}.sqlite"))

    writer = IndexWriter(index_of, lambda topic: topic.split(".")[1], producer_of)
    assert made == []  # no client made before the first index is needed
    acme, globex = writer._index("fs.acme.events"), writer._index("fs.globex.events")
    assert acme is not None and globex is not None and len(made) == 1
    made[0].failed("broker said no", FakeMessage(topic_=globex.topic, key_=b"event:e1"))
    made[0].failed(None, FakeMessage(topic_=acme.topic))  # not a failure
    assert globex.delivered() is False  # no cursor is advanced over the lost entry
    assert acme.delivered() is True
    assert globex.delivered() is True  # counted once
    writer.close()
    assert made[0].flushes == 4  # three delivered() and the close


def test_the_index_writer_keeps_a_chains_last_entry_until_the_checkpoint(
    tmp_path: Path, monkeypatch: Any,
) -> None:
    from streams.adapters.kafka.index import IndexWriter
    from streams.core.actors import UserActor
    from streams.core.events import AppEvent, Envelope

    producer = RecordingProducer()
    cursors = {0: 0, 1: 0}  # what the index topic's cursor partition holds
    monkeypatch.setattr(TenantIndex, "open", lambda self: None)
    monkeypatch.setattr(TenantIndex, "cursors", lambda self, fresh=True: dict(cursors))

    def advance(_self: TenantIndex, reached: dict[int, int]) -> None:
        producer.produced.append(("cursors", dict(reached)))  # in one sequence with entries
        cursors.update(reached)

    monkeypatch.setattr(TenantIndex, "advance_cursors", advance)

    def index_of(tenant: str, made: Any) -> TenantIndex:
        index = TenantIndex(Settings(state_dir=str(tmp_path)), tenant, producer=made,
                            events_topic=f"fs.{tenant}.events", entries_of=lambda *_a: [],
                            reports_each=False, store=IndexStore(tmp_path / "acme.sqlite"))
        index._partitions = 8
        return index

    writer = IndexWriter(index_of, lambda topic: topic.split(".")[1], lambda _f: producer)
    actor = UserActor(id="app")
    head = Envelope.new(AppEvent(name="ops:a"), tenant="acme", workspace="prod", actor=actor)
    chain = [head, head.follow(AppEvent(name="ops:b")), head.follow(AppEvent(name="ops:c"))]
    alone = Envelope.new(AppEvent(name="ops:d"), tenant="acme", workspace="prod", actor=actor)
    topic = "fs.acme.events"
    last_key = f"last:{head.event_id}".encode()

    def read(envelope: Envelope, partition: int, offset: int) -> None:
        writer.index(FakeMessage(topic_=topic, partition_=partition, offset_=offset), envelope)

    def written() -> list[Any]:
        out = [args if args[0] == "cursors" else args[2] for args in producer.produced]
        producer.produced.clear()
        return out

    for offset, envelope in enumerate(chain):
        read(envelope, 0, offset)
    read(alone, 1, 0)
    # Each event's own entry at once, and the chains' heads (no `last:` of their own).
    assert sorted(written()) == sorted(  # type: ignore[type-var]
        [f"event:{e.event_id}".encode() for e in [*chain, alone]]
        + [f"chain:{e.event_id}".encode() for e in (head, alone)])
    writer.checkpoint({(topic, 0)})
    # The chain's newest event, once, before its partition's cursor moves over it.
    produced = list(producer.produced)
    assert written() == [last_key, ("cursors", {0: 3})]
    assert IndexEntry.decode(produced[0][1]).offset == 2
    writer.checkpoint({(topic, 0)})  # nothing new since
    assert written() == []

    # Read again after a rewind (the first event after the cursor, then an older one): the
    # newest stays the chain's `last:`.
    later = head.follow(AppEvent(name="ops:e"))
    read(later, 0, 9)
    read(chain[1], 0, 4)
    written()
    writer.checkpoint({(topic, 0)})
    produced = list(producer.produced)
    assert written() == [last_key, ("cursors", {0: 10})]
    assert IndexEntry.decode(produced[0][1]).offset == 9

    # A stalled worker's: another took the partition over and moved its cursor past the
    # event meanwhile (having written a newer `last:`): this one's is not written.
    read(head.follow(AppEvent(name="ops:f")), 0, 12)
    written()
    cursors[0] = 20
    writer.checkpoint({(topic, 0)})
    assert written() == []

    # Lost partitions: their new owner writes the chain's newest.
    read(head.follow(AppEvent(name="ops:g")), 0, 21)
    writer.forget([(topic, 0)])
    writer.checkpoint({(topic, 0)})
    assert [k for k in written() if k == last_key] == []


def test_a_chains_read_spans_its_head_to_its_last_indexed_event_then_the_tail(
    tmp_path: Path, monkeypatch: Any,
) -> None:
    index = index_of(tmp_path)
    calls: list[Any] = []
    lasts: dict[str, IndexEntry] = {}

    def cursors(_self: TenantIndex, *, fresh: bool = True) -> dict[int, int]:
        calls.append(("cursors", fresh))
        return {2: 40}

    def lookup(_self: TenantIndex, key: str) -> IndexEntry | None:
        calls.append(("lookup", key))
        return lasts.get(key)

    def read_events(_self: TenantIndex, partition: int,
                    ranges: list[tuple[int, int | None]]) -> list[Any]:
        calls.append(("read", partition, ranges))
        return [FakeMessage(topic_="fs.acme.events", partition_=2, offset_=11, key_=b"c"),
                FakeMessage(topic_="fs.acme.events", partition_=2, offset_=12, key_=b"x")]

    monkeypatch.setattr(TenantIndex, "cursors", cursors)
    monkeypatch.setattr(TenantIndex, "lookup", lookup)
    monkeypatch.setattr(TenantIndex, "_read_events", read_events)
    head = IndexEntry(Located("prod", "c", "c", None), 2, 10)
    # No `last:` (a chain's head writes none): the indexed span is the head alone. The
    # cursor is read before the `last:`, so a checkpoint in between cannot leave a gap.
    [found] = index.chain_messages(head)  # the other chain's record skipped by key
    assert found.offset() == 11
    assert calls == [("cursors", True), ("lookup", "last:c"),
                     ("read", 2, [(10, 11), (40, None)])]
    calls.clear()
    lasts["last:c"] = IndexEntry(Located("prod", "c", "e9", None), 2, 30)
    index.chain_messages(head)
    assert calls[-1] == ("read", 2, [(10, 31), (40, None)])
    calls.clear()
    lasts["last:c"] = IndexEntry(Located("prod", "c", "e0", None), 2, 5)  # older than its head
    index.chain_messages(head)
    assert calls[-1] == ("read", 2, [(10, 11), (40, None)])
