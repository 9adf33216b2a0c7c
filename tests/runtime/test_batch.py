"""The batch loop's commit protocol, in memory: a fake consumer and producer stand in for the
broker (tests/integration/test_batch_loop.py and tests/faults/test_exactly_once.py run it on
a real one), so each failure of a transaction can be made to happen exactly where wanted.

With exactly_once, outputs and the offsets that pass their inputs become visible together,
or not at all; a failed transaction is aborted (or its producer replaced when fenced) and
redone from the committed offsets; at_least_once keeps its flush-then-commit."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from streams.adapters.kafka.outputs import Output
from streams.core.errors import ConfigError
from streams.runtime import batch
from streams.runtime.batch import BatchLoop, abort_reason
from streams.runtime.root import Runtime
from streams.settings import Settings
from tests.kafka_fakes import FakeMessage

TOPIC = "fs.acme.events"


@dataclass
class Broker:
    """The state both fakes share: the input log, committed offsets, visible outputs."""

    log: dict[int, list[bytes]]
    committed: dict[int, int] = field(default_factory=dict)
    visible: list[bytes] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    generation: int = 1
    # Errors to raise, by call name ("commit_transaction", ...), consumed in order; an Event
    # instead wedges the call until it is set (a librdkafka call ignoring its timeout).
    failures: dict[str, list[KafkaException | threading.Event]] = field(default_factory=dict)
    producers: list[FakeProducer] = field(default_factory=list)
    committers: list[FakeProducer] = field(default_factory=list)  # by commit, in order
    # Consumers that stop handing on records after so many (librdkafka #4916), in the order
    # they are made; None: a healthy one. "lost": loses its partitions and never rejoins;
    # "offsets": once it has handed on records, its reads of the committed offsets time out,
    # for good.
    stalls: list[int | str | None] = field(default_factory=list)
    down_until: float = 0.0  # the broker answers nobody until this time.monotonic()
    stalled_close_fails: bool = False  # a stalled consumer's close raises, revoking nothing
    # A stalled consumer's close waits for this before it revokes (a close that outlives the
    # loop's bound and calls back late, on its own thread).
    stalled_close_hangs: threading.Event | None = None
    # Where a partition the application assigns without an offset starts: its committed
    # offset, or (True) the beginning, as librdkafka's lookup does when the assignment
    # changed while an open transaction held the offset.
    lookup_resets: bool = False
    consumers: list[FakeConsumer] = field(default_factory=list)
    looks: int = 0  # ListOffsets requests for the owned partitions' offsets (stall looks)
    # The first `wedged` producers made time out every offsets they send, for good, while
    # everything else works (seen after a one-broker restart); later producers are healthy.
    wedged: int = 0

    def fail(self, call: str) -> None:
        queue = self.failures.get(call)
        if queue:
            failure = queue.pop(0)
            if isinstance(failure, threading.Event):
                failure.wait()
                return
            raise failure


class FakeConsumer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.at: dict[int, int] = {}
        self.callbacks: dict[str, Callable[..., None]] = {}
        self.joined = False
        self.generation = 0
        self.stall = broker.stalls.pop(0) if broker.stalls else None
        self.handed = 0
        self.closed = False
        self.close_done = threading.Event()
        broker.consumers.append(self)

    def subscribe(self, _topics: list[str], **callbacks: Callable[..., None]) -> None:
        self.callbacks = callbacks

    def _join(self) -> None:
        if not self.joined:
            self.joined = True
            self.generation = self.broker.generation
            parts = [TopicPartition(TOPIC, p) for p in self.broker.log]
            self.assigned_at: dict[int, int] | None = None
            self.callbacks["on_assign"](self, parts)
            for p in self.broker.log:
                self.at[p] = self._start(p)

    def assign(self, parts: list[TopicPartition]) -> None:
        self._open()
        self.assigned_at = {tp.partition: tp.offset for tp in parts}

    def _start(self, p: int) -> int:
        offset = OFFSET_INVALID if self.assigned_at is None else self.assigned_at[p]
        if offset == OFFSET_BEGINNING or (offset == OFFSET_INVALID and self.broker.lookup_resets):
            return 0
        return offset if offset >= 0 else self.broker.committed.get(p, 0)

    def consume(self, n: int, _timeout: float) -> list[FakeMessage]:
        self._join()
        if self.stall == "lost":
            if self.joined and self.callbacks and self.at:
                parts = [TopicPartition(TOPIC, p) for p in self.broker.log]
                self.at.clear()
                self.callbacks["on_lost"](self, parts)
            return []
        if isinstance(self.stall, int) and self.handed >= self.stall:
            return []  # fetches nothing more, for good
        out: list[FakeMessage] = []
        for p, values in self.broker.log.items():
            while len(out) < n and self.at[p] < len(values):
                at = self.at[p]
                out.append(FakeMessage(TOPIC, p, at, b"k", values[at]))
                self.at[p] = at + 1
        self.handed += len(out)
        if isinstance(self.stall, int) and self.handed > self.stall:  # hand on `stall` only
            extra = self.handed - self.stall
            for msg in out[-extra:]:
                self.at[msg.partition()] = min(self.at[msg.partition()],
                                                     msg.offset())
            out, self.handed = out[:-extra], self.stall
        return out

    def poll(self, timeout: float) -> FakeMessage | None:
        got = self.consume(1, 0)
        if not got:
            time.sleep(min(timeout, 0.01))
        return got[0] if got else None

    def _open(self) -> None:
        if self.closed:  # as confluent-kafka's
            raise RuntimeError("Consumer closed")

    def seek(self, tp: TopicPartition) -> None:
        self._open()
        self.at[tp.partition] = tp.offset

    def committed(self, parts: list[TopicPartition], timeout: float = 0) -> list[TopicPartition]:
        self._open()
        if self.stall == "offsets" and self.handed:  # once it has worked a while
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                            "Failed to get committed offsets: Local: Timed out"))
        self.broker.fail("committed")
        return [TopicPartition(tp.topic, tp.partition, self.broker.committed.get(tp.partition,
                                                                                 -1001))
                for tp in parts]

    def commit(self, offsets: list[TopicPartition], asynchronous: bool = False) -> None:
        self.broker.calls.append("commit")
        for tp in offsets:
            self.broker.committed[tp.partition] = tp.offset

    def consumer_group_metadata(self) -> int:
        return self.generation  # the generation it joined: stale once the group moved on

    def assignment(self) -> list[TopicPartition]:
        return []

    def position(self, parts: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.at.get(tp.partition, -1001))
                for tp in parts]

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float = 0,
                              cached: bool = False) -> tuple[int, int]:
        raise AssertionError("the stall look asks every partition at once, through the "
                             "runtime")

    def list_topics(self, timeout: float = 0) -> object:
        # A wedged consumer reaches the broker for nothing, metadata included.
        if time.monotonic() < self.broker.down_until or self.stall in ("offsets", "lost"):
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        return object()

    def close(self) -> None:
        # Like librdkafka's: the assignment is revoked (the callback runs) before it leaves.
        self.closed = True
        self.closed_at = time.monotonic()
        try:
            if self.stall is not None and self.broker.stalled_close_fails:
                raise RuntimeError("the consumer could not close")
            if self.stall is not None and self.broker.stalled_close_hangs is not None:
                self.broker.stalled_close_hangs.wait(10)
            if self.joined and self.at:
                self.callbacks["on_revoke"](self, [TopicPartition(TOPIC, p) for p in self.at])
        finally:
            self.close_done.set()


class FakeProducer:
    def __init__(self, broker: Broker, config: dict[str, Any]) -> None:
        self.broker = broker
        self.config = config
        self.transactional = "transactional.id" in config
        self.pending: list[bytes] = []
        self.pending_offsets: dict[int, int] = {}
        self.open = False
        self.calls: list[str] = []
        self.wedged = len(broker.producers) < broker.wedged
        broker.producers.append(self)

    def _call(self, name: str) -> None:
        self.broker.calls.append(name)
        self.calls.append(name)
        self.broker.fail(name)

    def init_transactions(self, _timeout: float) -> None:
        self._call("init_transactions")

    def begin_transaction(self) -> None:
        assert not self.open, "a transaction begun twice"
        self._call("begin_transaction")
        self.open = True

    def produce(self, _topic: str, value: bytes, _key: bytes | None = None,
                headers: Any = None) -> None:
        if self.transactional:
            assert self.open, "produced outside a transaction"
            self.pending.append(value)
        else:
            self.broker.visible.append(value)

    def poll(self, _timeout: float) -> int:
        return 0

    def flush(self, _timeout: float) -> int:
        return 0

    def send_offsets_to_transaction(self, offsets: list[TopicPartition], metadata: int,
                                    _timeout: float) -> None:
        self._call("send_offsets_to_transaction")
        if self.wedged:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, txn_requires_abort=True))
        if metadata != self.broker.generation:
            raise KafkaException(KafkaError(KafkaError.ILLEGAL_GENERATION,
                                            txn_requires_abort=True))
        for tp in offsets:
            self.pending_offsets[tp.partition] = tp.offset

    def commit_transaction(self, _timeout: float) -> None:
        self._call("commit_transaction")
        self.broker.committers.append(self)
        self.broker.visible += self.pending
        self.broker.committed.update(self.pending_offsets)
        self.pending, self.pending_offsets, self.open = [], {}, False

    def abort_transaction(self, _timeout: float) -> None:
        self._call("abort_transaction")
        self.pending, self.pending_offsets, self.open = [], {}, False


class FakeRuntime:
    def __init__(self, broker: Broker, guarantee: str) -> None:
        self.broker = broker
        self.settings = Settings(processing_guarantee=guarantee)

    def consumer(self, _group: str) -> FakeConsumer:
        return FakeConsumer(self.broker)

    def broker_answers(self, timeout: float = 5.0) -> bool:
        return time.monotonic() >= self.broker.down_until

    def stable_offsets(self, partitions: Any) -> dict[tuple[str, int], tuple[int, int]]:
        # Every owned partition at once, as the admin client's ListOffsets: one look.
        if time.monotonic() < self.broker.down_until:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        self.broker.looks += 1
        return {(t, p): (0, len(self.broker.log[p])) for t, p in partitions}

    def producer_of_own(self, **extra: Any) -> FakeProducer:
        return FakeProducer(self.broker, extra)

    def transactional_producer(self, transactional_id: str, **extra: Any) -> FakeProducer:
        return FakeProducer(self.broker, {"transactional.id": transactional_id, **extra})


def copy(messages: Sequence[Any]) -> list[Output]:
    return [Output("fs.acme.scores", m.key(), m.value()) for m in messages]


def records(n: int, partitions: int = 2) -> dict[int, list[bytes]]:
    return {p: [f"p{p}-{i}".encode() for i in range(n)] for p in range(partitions)}


def run_until(loop: BatchLoop, done: Callable[[], bool], timeout: float = 10.0) -> None:
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the loop did not get there"
        assert thread.is_alive(), "the loop stopped"
        time.sleep(0.01)
    stop.set()
    thread.join(10)
    assert not thread.is_alive()


def make(broker: Broker, guarantee: str = "exactly_once", **options: Any) -> BatchLoop:
    options = {"step": copy, "commit_every": 1, "commit_interval": 0.01, **options}
    return BatchLoop(cast(Runtime, FakeRuntime(broker, guarantee)), group="fs-feedback-mirror",
                     subscription=[TOPIC], batch_size=5, name="mirror", **options)


def expected(broker: Broker) -> list[bytes]:
    return sorted(v for values in broker.log.values() for v in values)


def all_committed(broker: Broker) -> Callable[[], bool]:
    return lambda: all(broker.committed.get(p) == len(v) for p, v in broker.log.items())


def test_exactly_once_commits_outputs_and_offsets_in_one_transaction() -> None:
    broker = Broker(records(12))
    loop = make(broker)
    began = time.monotonic()
    run_until(loop, all_committed(broker))
    assert loop.stats.commits > 0 and loop.stats.commit_seconds > 0
    assert began < loop.stats.committed_at <= time.monotonic()
    assert sorted(broker.visible) == expected(broker)
    assert len(broker.visible) == len(set(broker.visible))
    # Two transactional producers, initialised before the first batch.
    assert broker.calls[:2] == ["init_transactions", "init_transactions"]
    assert "commit" not in broker.calls  # no offset commit outside a transaction
    first = broker.calls.index("commit_transaction")
    assert broker.calls[2:first + 1] == ["begin_transaction", "send_offsets_to_transaction",
                                         "commit_transaction"]
    assert broker.producers[0].config["transactional.id"].startswith("fs-feedback-mirror.txn.")
    assert loop.stats.commits == broker.calls.count("commit_transaction")
    assert loop.stats.aborts == 0


def test_a_loop_that_has_read_everything_commits_its_transaction_at_once() -> None:
    # Neither the batch count nor the interval is due: the last, short batch (4 of 5
    # records) says the loop has caught up, so the transaction commits now, and a
    # read_committed reader sees its outputs.
    broker = Broker(records(12))
    loop = make(broker, commit_every=1000, commit_interval=3600)
    assert loop.commit_when_caught_up
    run_until(loop, all_committed(broker))
    assert sorted(broker.visible) == expected(broker)
    # The full batches before it shared one transaction.
    assert broker.calls.count("commit_transaction") == 1


def test_without_committing_when_caught_up_the_transaction_waits_for_the_interval() -> None:
    broker = Broker(records(12))
    loop = make(broker, commit_every=1000, commit_interval=3600, commit_when_caught_up=False)
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while loop.stats.records < 24:
        assert time.monotonic() < deadline, "the loop did not read the log"
        time.sleep(0.01)
    time.sleep(0.3)
    assert broker.visible == [] and "commit_transaction" not in broker.calls
    stop.set()  # the loop commits what it holds on the way out
    thread.join(10)
    assert sorted(broker.visible) == expected(broker)


def test_at_least_once_does_not_commit_when_caught_up() -> None:
    # Its outputs are visible when produced: an early commit would only add offset commits.
    loop = make(Broker(records(1)), "at_least_once", commit_when_caught_up=True)
    assert not loop.commit_when_caught_up


def test_the_two_producers_take_turns_a_transaction_each() -> None:
    broker = Broker(records(12))
    loop = make(broker)  # a transaction per batch of 5
    run_until(loop, all_committed(broker))
    first, second = broker.producers
    assert len(broker.committers) == loop.stats.commits >= 4
    assert broker.committers == [(first, second)[i % 2] for i in range(loop.stats.commits)]
    assert sorted(broker.visible) == expected(broker)


@pytest.mark.parametrize(("failing", "error", "reason"), [
    ("commit_transaction", KafkaError(KafkaError._TRANSPORT, txn_requires_abort=True),
     "broker_down"),
    ("send_offsets_to_transaction", KafkaError(KafkaError.NOT_COORDINATOR,
                                               txn_requires_abort=True), "coordinator_moved"),
    ("commit_transaction", KafkaError(KafkaError._TIMED_OUT, txn_requires_abort=True),
     "timed_out"),
])
def test_a_failed_transaction_is_aborted_and_redone_once(
    failing: str, error: KafkaError, reason: str, caplog: pytest.LogCaptureFixture,
) -> None:
    broker = Broker(records(12), failures={failing: [KafkaException(error)]})
    loop = make(broker)
    with caplog.at_level(logging.WARNING, "streams.runtime.batch"):
        run_until(loop, all_committed(broker))
    assert sorted(broker.visible) == expected(broker)  # nothing lost, nothing twice
    assert broker.calls.count("abort_transaction") == 1
    assert loop.stats.aborts == 1 and loop.stats.aborts_by_reason == {reason: 1}
    assert loop.stats.rewinds == 1 and loop.stats.producer_resets == 0
    [line] = [r for r in caplog.records if getattr(r, "event", "") == "transaction_aborted"]
    assert f"transaction aborted ({reason})" in line.getMessage()
    assert cast(Any, line).reason == reason


def test_a_retriable_commit_error_is_retried_not_aborted() -> None:
    broker = Broker(records(6), failures={"commit_transaction": [
        KafkaException(KafkaError(KafkaError._TIMED_OUT, retriable=True))]})
    loop = make(broker)
    run_until(loop, all_committed(broker))
    assert sorted(broker.visible) == expected(broker)
    assert "abort_transaction" not in broker.calls
    assert loop.stats.outage_waits == 1 and loop.stats.aborts == 0


def _timeouts(n: int) -> list[Exception]:
    return [KafkaException(KafkaError(KafkaError._TIMED_OUT, retriable=True))
            for _ in range(n)]


def test_a_transactional_call_failing_past_the_transaction_timeout_is_given_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # After a broker restart the coordinator has aborted the open transaction (its timeout
    # passed while the broker was down) and librdkafka's repeated send_offsets_to_transaction
    # times out, retriably, for good: the loop must not retry it until the outage limit (a
    # worker hung for 600 s, then exit 70), but give it up after the transaction timeout,
    # abort and redo the work.
    # Three timeouts, 0.1 s apart at least (the outage backoff), outlast the 0.2 s: one
    # transaction given up, and the producer kept (its abort went through).
    broker = Broker(records(6), failures={"send_offsets_to_transaction": _timeouts(3)})
    loop = make(broker)
    loop.transaction_timeout = 0.2
    with caplog.at_level(logging.WARNING, "streams.runtime.batch"):
        run_until(loop, all_committed(broker))
    assert sorted(broker.visible) == expected(broker)  # nothing lost, nothing twice
    assert loop.stats.aborts == 1 and loop.stats.aborts_by_reason == {"timed_out": 1}
    assert broker.calls.count("abort_transaction") == 1
    assert loop.stats.producer_resets == 0
    assert any("still failing after" in r.getMessage() for r in caplog.records)


def test_an_abort_failing_past_the_transaction_timeout_replaces_the_producer() -> None:
    # The abort times out for good too: the producer is replaced (the broker aborts the old
    # one's transaction) and the work redone from the committed offsets.
    broker = Broker(records(6), failures={"send_offsets_to_transaction": _timeouts(4),
                                          "abort_transaction": _timeouts(4)})
    loop = make(broker)
    loop.transaction_timeout = 0.2
    run_until(loop, all_committed(broker))
    assert sorted(broker.visible) == expected(broker)
    assert loop.stats.producer_resets >= 1
    assert broker.calls.count("init_transactions") == 2 + loop.stats.producer_resets


def test_transactions_failing_in_a_row_while_the_broker_answers_get_new_producers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Both producers time out every offsets they send while their aborts go through: the
    # second abort in a row, the broker answering, replaces both, and the work is done once.
    broker = Broker(records(6), wedged=2)
    loop = make(broker)
    with caplog.at_level(logging.WARNING, "streams.runtime.batch"):
        run_until(loop, all_committed(broker))
    assert sorted(broker.visible) == expected(broker)  # nothing lost, nothing twice
    assert loop.stats.aborts == 2  # the second in a row replaced them
    assert loop.stats.producer_resets == 1 and len(broker.producers) == 4
    assert set(broker.committers) <= set(broker.producers[2:])
    assert [r for r in caplog.records if getattr(r, "event", "") == "producers_replaced"]


def test_aborts_for_the_group_moving_on_keep_the_producers() -> None:
    # A zombie's commits fail again and again (the group moved on): the producers are not
    # at fault, and are kept however many transactions abort.
    broker = Broker(records(6))

    def step(messages: Sequence[Any]) -> list[Output]:
        broker.generation = 2  # thrown out once it works: its metadata stays stale
        return copy(messages)

    loop = make(broker, step=step)
    run_until(loop, lambda: loop.stats.aborts >= 4)
    assert set(loop.stats.aborts_by_reason) == {"group_moved"}
    assert loop.stats.producer_resets == 0 and len(broker.producers) == 2


def test_transactions_failing_while_the_broker_does_not_answer_keep_their_producers() -> None:
    # The same failures while a fresh client cannot reach the broker are an outage's: the
    # producers are kept however many transactions fail; once it answers, new ones.
    broker = Broker(records(6), wedged=2)
    loop = make(broker)
    answers = threading.Event()
    cast(Any, loop.runtime).broker_answers = lambda timeout=5.0: answers.is_set()
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while loop.stats.aborts < 6:
            assert time.monotonic() < deadline, "the loop did not abort"
            time.sleep(0.01)
        assert loop.stats.producer_resets == 0 and len(broker.producers) == 2
        answers.set()
        while not all_committed(broker)():
            assert time.monotonic() < deadline, "the loop did not recover"
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join(10)
    assert loop.stats.producer_resets == 1
    assert sorted(broker.visible) == expected(broker)


@pytest.mark.parametrize("wedged", ["send_offsets_to_transaction", "commit_transaction",
                                    "init_transactions"])
def test_a_transactional_call_that_never_returns_gives_its_producer_up(
    wedged: str, caplog: pytest.LogCaptureFixture,
) -> None:
    # librdkafka #5456: a transactional call can go on past its own timeout, for good. The
    # loop gives the producer up once the call is hang_grace past its timeout, makes a new
    # one and redoes the batch from the committed offsets; the wedged producer is never
    # called again, so nothing it held can commit later.
    release = threading.Event()
    broker = Broker(records(6), failures={wedged: [release]})
    loop = make(broker, flush_timeout=0.05)
    loop.hang_grace = 0.2
    try:
        with caplog.at_level(logging.WARNING, "streams.runtime.batch"):
            run_until(loop, all_committed(broker))
        assert sorted(broker.visible) == expected(broker)  # nothing lost, nothing twice
        assert loop.stats.producers_abandoned == 1
        assert loop.stats.producer_resets == (0 if wedged == "init_transactions" else 1)
        first = broker.producers[0]
        assert first.calls[-1] == wedged, "the wedged producer was called again"
        if wedged != "init_transactions":
            assert loop.stats.aborts_by_reason == {"hung": 1}
            assert "abort_transaction" not in first.calls
        assert any(getattr(r, "event", "") == "producer_abandoned" for r in caplog.records)
    finally:
        release.set()  # let the wedged call's thread end


def test_a_commit_that_waits_out_an_outage_shows_as_the_longest_commit() -> None:
    # librdkafka retries a commit inside its own timeout: one that waits out a broker
    # outage and then succeeds is no abort and no outage wait of the loop's, only a long
    # commit, and the stats must show it.
    class ThirdOfASecond(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            time.sleep(0.3)
            return True

    broker = Broker(records(6), failures={"commit_transaction": [ThirdOfASecond()]})
    loop = make(broker)
    run_until(loop, all_committed(broker))
    assert sorted(broker.visible) == expected(broker)
    assert loop.stats.aborts == 0 and loop.stats.outage_waits == 0
    assert 0.3 <= loop.stats.longest_commit_seconds <= loop.stats.commit_seconds


def _noting_transactions(broker: Broker, may_block: bool) -> tuple[BatchLoop, list[bool]]:
    """A loop that commits only when it must, and what it noted at each step: whether a
    transaction was open when the step ran."""
    opened: list[bool] = []
    loop: BatchLoop

    def step(messages: Sequence[Any]) -> list[Output]:
        opened.append(loop._in_transaction)
        return copy(messages)

    loop = make(broker, step=step, commit_every=100, commit_interval=100.0,
                step_may_block=lambda messages: may_block)
    return loop, opened


def test_a_step_that_may_block_runs_with_no_transaction_open() -> None:
    # The reactor runs actions inside its step, for as long as they take: a transaction left
    # open across such a step outlived the broker's transaction timeout in CI, was aborted
    # (fenced) and its actions ran again. Before a step that may block, the open
    # transaction is committed; the step's own outputs go into the next one.
    broker = Broker(records(6))
    loop, opened = _noting_transactions(broker, may_block=True)
    run_until(loop, lambda: loop.stats.records == 12)  # stopping commits the last batch
    assert all_committed(broker)()
    assert sorted(broker.visible) == expected(broker)
    assert len(opened) >= 2 and not any(opened), "a step ran inside an open transaction"
    assert loop.stats.commits_before_blocking == len(opened) - 1
    assert loop.stats.aborts == 0


def test_a_step_that_will_not_block_shares_the_open_transaction() -> None:
    loop, opened = _noting_transactions(Broker(records(6)), may_block=False)
    run_until(loop, lambda: len(opened) >= 2)
    assert opened[0] is False and all(opened[1:])
    assert loop.stats.commits_before_blocking == 0


def _faulty(broker: Broker, state: Path, guarantee: str, fault: str) -> BatchLoop:
    """A loop that commits only when stopped, with STREAMS_WORKER_FAULT=`fault`."""
    runtime = FakeRuntime(broker, guarantee)
    runtime.settings = Settings(processing_guarantee=guarantee, state_dir=str(state),
                                worker_fault=fault)
    return BatchLoop(cast(Runtime, runtime), group="g", subscription=[TOPIC], step=copy,
                     batch_size=5, name="mirror", commit_every=100, commit_interval=100.0)


def test_the_stop_in_transaction_fault_stops_once_inside_an_open_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Failure tests pause a worker with its transaction open; the fault fires only when its
    # file is there, once, and only after outputs went into an open transaction.
    signals: list[tuple[bool, int]] = []
    loop: BatchLoop
    monkeypatch.setattr(batch.os, "kill",
                        lambda _pid, sig: signals.append((loop._in_transaction, sig)))
    broker = Broker(records(6))
    loop = _faulty(broker, tmp_path, "exactly_once", "stop_in_transaction")
    (tmp_path / "mirror.stop-in-transaction").touch()
    run_until(loop, lambda: loop.stats.records == 12)
    assert signals == [(True, signal.SIGSTOP)]
    assert not (tmp_path / "mirror.stop-in-transaction").exists()


def test_the_stop_in_transaction_fault_needs_its_setting_and_exactly_once(
    tmp_path: Path,
) -> None:
    def stop_file(guarantee: str, fault: str) -> object:
        return _faulty(Broker(records(1)), tmp_path, guarantee, fault)._stop_file
    assert stop_file("exactly_once", "stop_in_transaction") == \
        tmp_path / "mirror.stop-in-transaction"
    assert stop_file("exactly_once", "") is None
    assert stop_file("at_least_once", "stop_in_transaction") is None


def test_a_fenced_producer_is_replaced_and_its_work_redone() -> None:
    fenced = KafkaError(KafkaError._FENCED, fatal=True)
    broker = Broker(records(12), failures={"commit_transaction": [KafkaException(fenced)]})
    loop = make(broker)
    run_until(loop, all_committed(broker))
    assert sorted(broker.visible) == expected(broker)
    # A fenced producer cannot abort: the broker aborts its transaction; a new one redoes it.
    assert "abort_transaction" not in broker.calls
    assert loop.stats.producer_resets == 1 and loop.stats.aborts_by_reason == {"fenced": 1}
    ids = [p.config["transactional.id"] for p in broker.producers]
    assert len(ids) == 3 and len(set(ids)) == 3  # the two, and the fenced one's successor
    assert broker.calls.count("init_transactions") == 3


def test_a_zombie_cannot_commit_after_the_group_moved_on() -> None:
    broker = Broker(records(6))
    step_calls = []

    def step(messages: Sequence[Any]) -> list[Output]:
        step_calls.append(len(messages))
        if len(step_calls) == 1:
            broker.generation = 2  # thrown out while it worked: its metadata is stale now
        return copy(messages)

    loop = make(broker, step=step)
    run_until(loop, lambda: loop.stats.aborts >= 1)
    assert broker.visible == [] and broker.committed == {}
    assert loop.stats.aborts_by_reason.get("group_moved", 0) >= 1


def test_before_commit_outputs_share_the_transaction() -> None:
    broker = Broker(records(4), failures={"commit_transaction": [
        KafkaException(KafkaError(KafkaError.NOT_COORDINATOR, txn_requires_abort=True))]})
    seen: list[set[tuple[str, int]]] = []

    def before_commit(partitions: set[tuple[str, int]]) -> list[Output]:
        seen.append(partitions)
        return [Output("fs.acme.changelog", b"k", f"cl{len(seen)}".encode())]

    loop = make(broker, before_commit=before_commit)
    run_until(loop, all_committed(broker))
    changelog = [v for v in broker.visible if v.startswith(b"cl")]
    # The first transaction's changelog record was aborted with it; each commit has its own.
    assert b"cl1" not in changelog
    assert len(changelog) == loop.stats.commits  # one per committed transaction
    assert sorted(v for v in broker.visible if not v.startswith(b"cl")) == expected(broker)


def test_assigned_partitions_start_where_the_loop_read_their_committed_offsets() -> None:
    # A killed member's open transaction holds the committed offsets: reading them times out
    # twice. librdkafka's own lookup would start the partitions at the beginning here (the
    # assignment changing meanwhile); the loop waits, then assigns them at those offsets.
    broker = Broker(records(6), committed={0: 4, 1: 2}, lookup_resets=True,
                    failures={"committed": _timeouts(2)})
    loop = make(broker)
    run_until(loop, all_committed(broker))
    assert sorted(broker.visible) == sorted([b"p0-4", b"p0-5", *(b"p1-%d" % i
                                                                 for i in range(2, 6))])
    assert loop.stats.outage_waits == 2


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_an_assignment_hook_chooses_where_partitions_start(guarantee: str) -> None:
    seen: list[list[tuple[int, int]]] = []

    def hook(_consumer: Any, parts: list[TopicPartition]) -> list[TopicPartition]:
        seen.append([(tp.partition, tp.offset) for tp in parts])
        return [TopicPartition(tp.topic, tp.partition, 3) for tp in parts]

    broker = Broker(records(5), committed={0: 1}, lookup_resets=True)
    loop = make(broker, guarantee, on_assigned=hook)
    run_until(loop, all_committed(broker))
    assert loop.stats.committed_at > 0  # when its last commit returned, either guarantee
    # Given the committed offsets (the beginning where there is none), started at its own.
    assert seen == [[(0, 1), (1, OFFSET_BEGINNING)]]
    assert sorted(broker.visible) == [b"p0-3", b"p0-4", b"p1-3", b"p1-4"]


def test_revocation_commits_the_open_transaction_and_loss_aborts_it() -> None:
    broker = Broker(records(3))
    loop = make(broker, commit_every=10**9, commit_interval=10**9)
    consumer = FakeConsumer(broker)
    loop._consumer = cast(Any, consumer)
    loop._producer = cast(Any, FakeRuntime(broker, "exactly_once").transactional_producer("t"))
    consumer.subscribe([], on_assign=loop._on_assign)
    assert loop._process(cast(Any, consumer), cast(Any, consumer.consume(3, 0)))
    assert broker.visible == []
    loop._on_revoke(cast(Any, consumer), [TopicPartition(TOPIC, 0)])
    assert len(broker.visible) == 3 and broker.committed == {0: 3}
    # Lost: the open transaction's outputs are never committed.
    assert loop._process(cast(Any, consumer), cast(Any, consumer.consume(3, 0)))
    loop._on_lost(cast(Any, consumer), [TopicPartition(TOPIC, 1)])
    assert len(broker.visible) == 3 and "abort_transaction" in broker.calls
    assert loop.stats.aborts_by_reason == {"group_moved": 1}


def test_at_least_once_flushes_then_commits_without_transactions() -> None:
    broker = Broker(records(12))
    loop = make(broker, guarantee="at_least_once")
    run_until(loop, all_committed(broker))
    assert sorted(broker.visible) == expected(broker)
    assert "commit" in broker.calls
    assert not {"init_transactions", "begin_transaction", "commit_transaction"} & \
        set(broker.calls)
    assert "transactional.id" not in broker.producers[0].config


def test_the_guarantee_comes_from_the_settings_and_is_checked() -> None:
    broker = Broker(records(1))
    runtime = cast(Runtime, FakeRuntime(broker, "exactly_once"))
    assert BatchLoop(runtime, group="g", subscription=[], step=copy).exactly_once
    assert not BatchLoop(runtime, group="g", subscription=[], step=copy,
                         guarantee="at_least_once").exactly_once
    with pytest.raises(ConfigError, match="STREAMS_PROCESSING_GUARANTEE"):
        BatchLoop(runtime, group="g", subscription=[], step=copy, guarantee="twice")


def test_abort_reasons() -> None:
    assert abort_reason(KafkaError(KafkaError.PRODUCER_FENCED)) == "fenced"
    assert abort_reason(KafkaError(KafkaError._TRANSPORT, fatal=True)) == "fenced"
    assert abort_reason(KafkaError(KafkaError.UNKNOWN_MEMBER_ID)) == "group_moved"
    assert abort_reason(KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE)) == \
        "coordinator_moved"
    assert abort_reason(KafkaError(KafkaError._ALL_BROKERS_DOWN)) == "broker_down"
    assert abort_reason(KafkaError(KafkaError._TIMED_OUT)) == "timed_out"
    assert abort_reason(KafkaError(KafkaError._TIMED_OUT, fatal=True)) == "hung"
    assert abort_reason(KafkaError(KafkaError.UNKNOWN)) == "other"
    assert abort_reason(None) == "other"


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_a_consumer_that_stops_fetching_is_replaced_and_nothing_is_lost_or_repeated(
        guarantee: str) -> None:
    # librdkafka #4916: after a broker restart a consumer can hand on nothing, for good,
    # while records wait on its partitions.
    broker = Broker(records(12), stalls=[7])
    loop = make(broker, guarantee, stall_timeout=0.3)
    run_until(loop, all_committed(broker))
    assert loop.stats.consumers_replaced == 1
    assert broker.consumers[0].closed  # closed, so it left the group
    assert sorted(broker.visible) == expected(broker)  # each output once


def test_a_consumer_with_nothing_waiting_is_never_replaced() -> None:
    broker = Broker(records(3))
    loop = make(broker, stall_timeout=0.3)  # looks at the broker every 0.05 s once idle
    began = time.monotonic()
    run_until(loop, lambda: all_committed(broker)() and time.monotonic() - began > 1.0)
    idle = time.monotonic() - began
    assert loop.stats.consumers_replaced == 0
    assert len(broker.consumers) == 1
    # An idle loop with nothing waiting asks the broker once a stall timeout (here 0.3 s),
    # not at every poll (the fake's poll waits 0.01 s): one request for both partitions.
    looks = broker.looks
    assert 0 < looks <= (idle - 0.3) / 0.3 + 2, looks


def test_a_consumer_that_lost_its_partitions_and_never_rejoins_is_replaced() -> None:
    broker = Broker(records(6), stalls=["lost"])
    loop = make(broker, stall_timeout=0.3)
    run_until(loop, all_committed(broker))
    assert loop.stats.consumers_replaced == 1
    assert sorted(broker.visible) == expected(broker)


@pytest.mark.parametrize("broker_away", [0.0, 0.6])
def test_a_consumer_that_cannot_read_its_committed_offsets_is_replaced_once_the_broker_answers(
        broker_away: float) -> None:
    # After a one-broker restart a consumer's reads of its committed offsets timed out for
    # over 90 s with the broker back, its own metadata requests failing too (a wedged
    # client). The rewind that needs them replaces it after a stall timeout once a fresh
    # client reaches the broker, but not while the broker answers nobody (an outage).
    broker = Broker(records(12), stalls=["offsets"], failures={"commit_transaction": [
        KafkaException(KafkaError(KafkaError._TRANSPORT, txn_requires_abort=True))]})
    broker.down_until = time.monotonic() + broker_away
    loop = make(broker, stall_timeout=0.3)
    run_until(loop, all_committed(broker))
    assert loop.stats.rewinds == 1 and loop.stats.consumers_replaced == 1
    assert broker.consumers[0].closed_at >= broker.down_until
    assert loop.stats.outage_waits > 0
    assert sorted(broker.visible) == expected(broker)  # nothing lost, nothing twice
    assert not loop.in_outage


def test_a_stalled_consumer_that_fails_to_close_has_its_open_transaction_aborted() -> None:
    # The transaction stays open past the stall (no commit when caught up, a long interval);
    # the close revokes nothing, so the loop aborts it itself: the new consumer redoes it.
    broker = Broker(records(12), stalls=[7], stalled_close_fails=True)
    loop = make(broker, stall_timeout=0.2, commit_every=10**9, commit_interval=0.6,
                commit_when_caught_up=False)
    run_until(loop, all_committed(broker))
    assert loop.stats.consumers_replaced == 1
    assert loop.stats.aborts_by_reason == {"consumer_stalled": 1}
    assert sorted(broker.visible) == expected(broker)


def test_a_replaced_consumers_rebalance_callbacks_are_ignored() -> None:
    # A stalled consumer that outlived its bounded close may still call back: its callbacks
    # neither act nor touch the flag that a live callback may hold meanwhile.
    broker = Broker(records(3))
    loop = make(broker, commit_every=10**9, commit_interval=10**9)
    live, stale = FakeConsumer(broker), FakeConsumer(broker)
    loop._consumer = cast(Any, live)
    loop._in_callback = True  # a live callback in progress
    before = loop._rebalances
    for callback in (loop._on_assign, loop._on_revoke, loop._on_lost):
        callback(cast(Any, stale), [TopicPartition(TOPIC, 0)])
    assert loop._rebalances == before and loop._in_callback
    assert stale.assignment() == [] and broker.calls == []


def test_a_stalled_consumers_late_callback_is_ignored_once_its_close_timed_out() -> None:
    # Its close outlives the loop's bound, then revokes on its own thread while the loop
    # still clears the stalled consumer's work, before a new consumer is subscribed: that
    # late callback must neither commit, abort nor hand partitions back a second time.
    release = threading.Event()
    broker = Broker(records(12), stalls=[7], stalled_close_hangs=release)
    loop = make(broker, stall_timeout=0.2, flush_timeout=0.2)
    loop.hang_grace = 0.1
    late: list[tuple[int, int]] = []

    def on_revoked(_parts: list[TopicPartition]) -> None:
        stalled = broker.consumers[0]
        if stalled.closed and not release.is_set():  # the loop gave its close up
            rebalances, calls = loop._rebalances, len(broker.calls)
            release.set()
            assert stalled.close_done.wait(5)
            late.append((loop._rebalances - rebalances, len(broker.calls) - calls))

    loop.on_revoked = on_revoked
    run_until(loop, all_committed(broker))
    assert late == [(0, 0)]
    assert loop.stats.consumers_replaced == 1
    assert sorted(broker.visible) == expected(broker)  # each output once


def test_a_live_rebalance_callback_runs_with_the_flag_set() -> None:
    broker = Broker(records(3))
    loop = make(broker)
    consumer = FakeConsumer(broker)
    loop._consumer = cast(Any, consumer)
    seen: list[bool] = []
    loop.on_revoked = lambda _parts: seen.append(loop._in_callback)
    loop._on_revoke(cast(Any, consumer), [TopicPartition(TOPIC, 0)])
    assert seen == [True] and not loop._in_callback
