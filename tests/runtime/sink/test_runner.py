"""The sink runner's ordering rule, outage bookkeeping and commits refused by a rebalance
(no broker needed)."""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streams.core.sinks.memory import InMemoryScoreSink
from streams.runtime.root import Runtime
from streams.runtime.sink import runner as sink_runner
from streams.runtime.sink.runner import OffsetLedger, OutageTooLong, SinkRunner, SinkStats
from streams.settings import Settings
from tests.runtime.sink.fakes import PausingConsumer, fake_runner, until


def test_a_later_batch_accepted_first_is_not_committed_before_the_earlier_one() -> None:
    ledger = OffsetLedger()
    first = ledger.open({("s", 0): 10, ("s", 1): 5})
    second = ledger.open({("s", 0): 20})
    ledger.accept(second)
    assert ledger.ready() == {}  # batch 1 is not accepted: nothing may be committed
    assert ledger.pending == 2
    ledger.accept(first)
    assert ledger.ready() == {("s", 0): 20, ("s", 1): 5}
    assert ledger.pending == 0
    assert ledger.ready() == {}


def test_only_the_accepted_prefix_is_released() -> None:
    ledger = OffsetLedger()
    a = ledger.open({("s", 0): 3})
    b = ledger.open({("s", 1): 7})
    c = ledger.open({("s", 0): 9})
    ledger.accept(a)
    ledger.accept(c)
    assert ledger.ready() == {("s", 0): 3}  # c waits for b
    ledger.accept(b)
    assert ledger.ready() == {("s", 1): 7, ("s", 0): 9}


def test_accepting_a_batch_twice_or_one_never_opened_is_refused() -> None:
    ledger = OffsetLedger()
    seq = ledger.open({("s", 0): 1})
    ledger.accept(seq)
    assert ledger.ready() == {("s", 0): 1}
    with pytest.raises(ValueError, match="not open"):
        ledger.accept(seq)
    with pytest.raises(ValueError, match="not open"):
        ledger.accept(99)


def test_a_batch_left_unaccepted_holds_back_every_later_commit() -> None:
    # A batch caught in an outage when the runner stops is never accepted.
    ledger = OffsetLedger()
    stuck = ledger.open({("s", 0): 4})
    for end in (8, 12, 16):
        ledger.accept(ledger.open({("s", 0): end}))
    assert ledger.ready() == {}
    assert stuck == 0 and ledger.pending == 4


@pytest.mark.parametrize("seed", range(20))
def test_any_acceptance_order_commits_in_consumption_order(seed: int) -> None:
    # Batches of two partitions, accepted in a random order, with a commit attempt after
    # each acceptance: every commit is the accepted prefix, and offsets never go back.
    rng = random.Random(seed)
    ledger = OffsetLedger()
    position = {("s", 0): 0, ("s", 1): 0}
    batches: list[tuple[int, dict[tuple[str, int], int]]] = []
    for _ in range(30):
        ends = {}
        for tp in position:
            if rng.random() < 0.7:
                position[tp] += rng.randint(1, 50)
                ends[tp] = position[tp]
        batches.append((ledger.open(ends), ends))
    order = list(range(len(batches)))
    rng.shuffle(order)
    accepted: set[int] = set()
    committed: dict[tuple[str, int], int] = {}
    for seq in order:
        ledger.accept(seq)
        accepted.add(seq)
        released = ledger.ready()
        prefix = 0
        while prefix in accepted:
            prefix += 1
        # What may be committed: the highest end of each partition within the prefix.
        allowed: dict[tuple[str, int], int] = {}
        for _seq, ends in batches[:prefix]:
            for tp, end in ends.items():
                allowed[tp] = max(allowed.get(tp, 0), end)
        for tp, offset in released.items():
            assert offset <= allowed[tp], "a commit passed a batch not accepted yet"
            assert offset > committed.get(tp, -1), "a commit went back"
            committed[tp] = offset
        assert {tp: committed[tp] for tp in allowed} == allowed
    assert committed == position and ledger.pending == 0


def test_an_outage_waits_until_the_limit_and_logs_boundedly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(sink_runner.time, "monotonic", lambda: now[0])
    stats = SinkStats()
    outage = sink_runner._Outage("kafka broker", 60.0, stats)
    caplog.set_level(logging.WARNING, logger="streams.runtime.sink.runner")
    pauses = []
    for _ in range(59):  # one try a second for 59 s: a wait, not a failure
        pauses.append(outage.waiting("commit failed: Local: Waiting for coordinator"))
        now[0] += 1.0
    assert stats.outage_waits == 59
    assert pauses[0] == pytest.approx(0.2) and max(pauses) == 5.0
    assert pauses == sorted(pauses)
    # The first try, then one line per 30 s: not one line per retry.
    assert len(caplog.records) == 2
    outage.over()
    assert "available again" in caplog.records[-1].getMessage()
    # A new outage starts its own clock; past the limit it raises, saying what to do.
    outage.waiting("commit failed")
    now[0] += 61.0
    with pytest.raises(OutageTooLong, match="STREAMS_OUTAGE_LIMIT"):
        outage.waiting("commit failed")


class _RebalancingConsumer:
    """Refuses `refusals` commits with REBALANCE_IN_PROGRESS, then takes them; counts polls."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.polls = 0
        self.committed: list[list[TopicPartition]] = []

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> None:
        if self.refusals:
            self.refusals -= 1
            raise KafkaException(KafkaError(KafkaError.REBALANCE_IN_PROGRESS))
        self.committed.append(offsets)

    def poll(self, _timeout: float) -> None:
        self.polls += 1


async def test_a_stopping_runner_polls_through_a_rebalance_to_make_its_last_commit() -> None:
    # Two members of one cursor stopped together: the first to leave starts a rebalance, and
    # the other's last commit is refused until it takes part in it. It must not give up the
    # commit (its partitions' next owner is stopping too, so nobody would commit them).
    runner = SinkRunner(Runtime(Settings(topic_prefix="fs")), InMemoryScoreSink(),
                        cursor="shared")
    consumer = _RebalancingConsumer(refusals=2)
    runner._consumer = cast(Any, consumer)
    runner._stopping.set()
    await runner._commit({("fs.acme.scores", 0): 5})
    assert consumer.polls == 2
    assert [[(tp.topic, tp.partition, tp.offset) for tp in c] for c in consumer.committed] == \
        [[("fs.acme.scores", 0, 5)]]


async def test_a_running_runner_leaves_a_commit_refused_by_a_rebalance_to_the_next_owner() -> None:
    runner = SinkRunner(Runtime(Settings(topic_prefix="fs")), InMemoryScoreSink(),
                        cursor="shared")
    consumer = _RebalancingConsumer(refusals=1)
    runner._consumer = cast(Any, consumer)
    await runner._commit({("fs.acme.scores", 0): 5})
    assert consumer.polls == 0 and consumer.committed == []


def test_the_consumer_counts_the_brokers_going_away_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runner = SinkRunner(Runtime(Settings(topic_prefix="fs")), InMemoryScoreSink(),
                        cursor="shared")
    configs: list[dict[str, Any]] = []
    monkeypatch.setattr(runner.runtime, "consumer", lambda group, **extra: configs.append(
        runner.runtime.consumer_config(group, **extra)) or "consumer")
    assert runner.consumer == "consumer"
    error_cb = configs[0]["error_cb"]
    error_cb(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    error_cb(KafkaError(KafkaError._TRANSPORT))
    error_cb(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert runner.stats.broker_errors == 2
    assert "on_error" not in configs[0]  # a keyword of ours, not a librdkafka property


class _UnansweredCommitConsumer(PausingConsumer):
    """Its commits block until `answer` is set: librdkafka's synchronous commit with the
    broker gone at the wrong moment (it has no timeout)."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = threading.Event()
        self.commits = 0
        self.closed = False

    def subscribe(self, topics: list[str], on_assign: Any, on_lost: Any = None) -> None:
        on_assign(self, self.assignment())

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.commits += 1
        self.answer.wait()

    def close(self) -> None:
        self.closed = True


async def test_a_runner_stopped_while_its_commit_never_answers_still_stops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # In CI a DuckDB sink waited 55 minutes in such a commit after its SIGTERM.
    consumer = _UnansweredCommitConsumer()
    runner = fake_runner(consumer, Settings(topic_prefix="fs", admin_timeout=0.2))
    running = asyncio.ensure_future(runner.run())
    try:
        await until(lambda: consumer.commits >= 1, "a commit")
        # Unanswered past the timeout it counts as an outage, and no second commit is
        # made beside the first: commits stay one at a time, in order.
        await until(lambda: runner.in_outage, "the commit to count as an outage")
        assert consumer.commits == 1
        runner.stop()
        began = time.monotonic()
        stats = await asyncio.wait_for(running, timeout=10)
        assert time.monotonic() - began < 5
        assert stats.commits == 0 and not consumer.closed  # closing would wait on it too
        assert "commit unanswered" in caplog.text
    finally:
        consumer.answer.set()  # the daemon thread ends


async def test_a_commit_that_answers_late_is_followed_by_one_of_the_newer_offsets() -> None:
    consumer = _UnansweredCommitConsumer()
    runner = fake_runner(consumer, Settings(topic_prefix="fs", admin_timeout=0.2))
    runner._broker.waiting = lambda problem: 0.0  # type: ignore[method-assign]
    committing = asyncio.ensure_future(runner._commit({("fs.acme.scores", 0): 5}))
    await until(lambda: runner._stuck_commit is not None and consumer.commits == 1, "a commit")
    await asyncio.sleep(0.5)  # past two timeouts: still the one call
    assert consumer.commits == 1 and not committing.done()
    consumer.answer.set()
    await asyncio.wait_for(committing, timeout=5)
    # The late answer is not taken for the retry's: the retry commits again.
    assert consumer.commits == 2 and runner.stats.commits == 1
    assert runner._stuck_commit is None


async def test_a_stopping_runner_does_not_wait_again_on_a_commit_that_never_answered() -> None:
    consumer = _UnansweredCommitConsumer()
    runner = fake_runner(consumer, Settings(topic_prefix="fs", admin_timeout=0.2))
    try:
        with pytest.raises(sink_runner._CommitUnanswered):
            await runner._committed_within([TopicPartition("fs.acme.scores", 0, 5)])
        runner.settings = Settings(topic_prefix="fs", admin_timeout=600.0)
        runner._stopping.set()
        # A second full wait would take ten minutes.
        with pytest.raises(sink_runner._CommitUnanswered, match="still unanswered"):
            await asyncio.wait_for(
                runner._committed_within([TopicPartition("fs.acme.scores", 0, 9)]), 5)
        assert consumer.commits == 1
    finally:
        consumer.answer.set()


class _CoordinatorlessConsumer(PausingConsumer):
    """A consumer wedged after a broker restart (ci64): every commit fails with
    `Waiting for coordinator`, however long the brokers have been back."""

    def __init__(self) -> None:
        super().__init__()
        self.commits = 0
        self.closed = False
        self.subscribed = 0

    def subscribe(self, topics: list[str], on_assign: Any, on_lost: Any = None) -> None:
        self.subscribed += 1
        on_assign(self, self.assignment())

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.commits += 1
        raise KafkaException(KafkaError(KafkaError._WAIT_COORD))

    def close(self) -> None:
        self.closed = True


class _CommittingConsumer(_CoordinatorlessConsumer):
    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.commits += 1


@pytest.mark.parametrize("brokers_answer", [True, False])
async def test_a_consumer_that_cannot_commit_while_the_brokers_answer_is_replaced(
    brokers_answer: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    wedged, fresh = _CoordinatorlessConsumer(), _CommittingConsumer()
    runner = fake_runner(wedged, Settings(topic_prefix="fs", consumer_stall_timeout=0.3))
    monkeypatch.setattr(runner.runtime, "broker_answers", lambda: brokers_answer)
    monkeypatch.setattr(runner.runtime, "consumer", lambda group, **extra: fresh)
    running = asyncio.ensure_future(runner.run())
    try:
        if brokers_answer:
            # The stall timeout passes with the brokers answering a new client: the fetch
            # stage closes the wedged consumer and subscribes a new one, whose commits land.
            await until(lambda: runner.stats.commits >= 1, "a commit by the new consumer")
            assert wedged.closed and fresh.subscribed == 1 and fresh.commits >= 1
            assert runner.stats.consumers_replaced == 1 and not runner.in_outage
        else:
            # The brokers do not answer anyone: an outage, waited out with the same consumer.
            await until(lambda: wedged.commits >= 4, "commits retried through the outage")
            assert runner.in_outage and runner.stats.consumers_replaced == 0
            assert not wedged.closed and fresh.subscribed == 0
    finally:
        runner.stop()
        await asyncio.wait_for(running, timeout=10)


class _FetchlessConsumer(_CommittingConsumer):
    """A consumer that stopped fetching after a broker restart (ci69: no score reached the
    sink for 300 s after the broker came back): records wait past its positions, it hands
    on none. `answers`: whether the broker answers its offset look-ups (an outage if not)."""

    def __init__(self, answers: bool) -> None:
        super().__init__()
        self.answers = answers

    def consume(self, n: int, timeout: float) -> list[Any]:
        time.sleep(min(timeout, 0.01))
        return []

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float = 0.0,
                              cached: bool = False) -> tuple[int, int]:
        if not self.answers:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        return 0, 100


@pytest.mark.parametrize("answers", [True, False])
async def test_a_consumer_that_stops_fetching_while_records_wait_is_replaced(
    answers: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    stuck, fresh = _FetchlessConsumer(answers), _CommittingConsumer()
    runner = fake_runner(stuck, Settings(topic_prefix="fs", consumer_stall_timeout=0.3))
    monkeypatch.setattr(runner.runtime, "consumer", lambda group, **extra: fresh)
    # The look asks the brokers for every owned partition's offsets at once: here, the
    # double's (no broker runs in this test).
    monkeypatch.setattr(runner._stall, "offsets", lambda owned: {
        key: stuck.get_watermark_offsets(TopicPartition(*key)) for key in owned})
    running = asyncio.ensure_future(runner.run())
    try:
        if answers:
            # No record for the stall timeout while 100 wait on each partition, unchanged
            # across two looks: the fetch stage closes it and a new one reads them all.
            await until(lambda: fresh.positions == {0: 100, 1: 100}, "the new consumer's reads")
            assert stuck.closed and fresh.subscribed == 1
            assert runner.stats.consumers_replaced == 1
        else:
            # The broker answers no offset look-up: an outage, never taken for a stall.
            await asyncio.sleep(1.0)
            assert not stuck.closed and fresh.subscribed == 0
            assert runner.stats.consumers_replaced == 0
    finally:
        runner.stop()
        await asyncio.wait_for(running, timeout=10)
