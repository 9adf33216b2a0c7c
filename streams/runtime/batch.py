"""The batch data path: consume a batch, hand it to a step, produce its outputs, and commit
only offsets whose outputs the broker acknowledged.

Faust's per-event stream machinery costs ~150 µs per event here, more than the mirror's work,
so the hot path is this loop over a confluent-kafka consumer in the consumer group that is
the cursor, run by the worker in a thread (Faust keeps the application: lifecycle, signals,
timers). Per batch of up to `batch_size` records:

1. `consume` a batch; the step turns it into outputs (scores, dead letters, forwards);
2. `produce` every output through one idempotent producer, without a callback per record
   (delivery reports are error-only);
3. remember, per partition, the offset after the batch as "done but not committed";
4. every `commit_every` batches (or `commit_interval` seconds), `flush` the producer; if every
   output is acknowledged, commit the remembered offsets; if any failed, seek every partition
   back to its committed offset and do the work again (ids are derived, so a repeat replaces
   and never duplicates).

With `guarantee="exactly_once"` (STREAMS_PROCESSING_GUARANTEE) step 4 is one Kafka
transaction instead: the loop's producer is transactional (`init_transactions` once), a
transaction is begun before a batch's outputs are produced and stays open until the loop has
read all there is (`commit_when_caught_up`, STREAMS_COMMIT_WHEN_CAUGHT_UP: a batch smaller
than `batch_size`), or, while the loop is behind, for `commit_every` batches or the commit
interval; the commit sends the done offsets into it with the consumer's group metadata
(`send_offsets_to_transaction`, KIP-447) and commits it, so the outputs and the offsets that
pass their inputs become visible to read_committed readers together, or not at all. A
transaction that fails (an output not delivered, the group moved on, the coordinator moved,
the broker down past the flush timeout, the producer fenced) is aborted, or, when the
producer can no longer abort, the producer is replaced by a new one, and the loop seeks back
to the committed offsets and does the work again: never skipped, never committed twice. Each
abort logs one line `transaction aborted (<reason>)` (its `reason` also in the record's
`extra`) and counts in `BatchStats.aborts` (the `streams.loop.transaction_aborts` metric).
A second abort in a row, with no commit between, while the broker answers a client made for
the asking, replaces both transactional producers (`producer_resets`): after a one-broker
restart a producer was seen failing every transaction for good while its aborts succeeded.

Two transactional producers take turns, a transaction each: a transaction's commit returns
once its coordinator has logged the decision, but the coordinator then writes the commit
markers, and refuses the same producer's next offsets until they are written
(CONCURRENT_TRANSACTIONS, retried after the backoff). The other producer's next transaction
does not wait for them: back-to-back transactions took p50 8.3-11.3 ms instead of 19.5-25.7
ms (`python -m bench.transaction_cycle --backoffs 5 --producers 1,2,1,2`), which is what a
light stream's outputs wait for when the loop commits as soon as it has caught up.
Transactions never overlap (the next begins after the last commit returned), so the records
and the offsets keep their order: the group coordinator keeps the newest offset commit by
its position in `__consumer_offsets` whichever transaction's markers land first, and a
read_committed reader is handed nothing past an earlier open transaction.

Why a fresh transactional.id per producer (`streams.core.tenancy.transactional_id`, random)
rather than a stable one: fencing follows the consumer group's generation (the offsets are
committed through the group coordinator with the member's generation), so a zombie, a member
paused past its session timeout, cannot commit over the new owner's work whatever its id; a
stable id would also abort a dead predecessor's open transaction at once, but needs a
process identity that is unique among live workers, which nothing here provides. The cost:
a killed member's open transaction holds its partitions' committed offsets (and the output
partitions' last stable offset) until the broker aborts it, `transaction_timeout` seconds
(STREAMS_TRANSACTION_TIMEOUT, 10 s) after it began.

On a rebalance the revoked partitions' work is flushed and committed before they move, and
never past an undelivered output; with exactly_once the open transaction is committed
(every partition's work in it, the kept partitions' too: committing early is harmless, and
the transaction cannot be split), and if that fails it is aborted and the new owner redoes
the work. Lost partitions (the member was thrown out of the group) abort the open
transaction: its new owner may already be redoing it.

Outages are waits, not failures: a registry that cannot be reached makes the loop seek back
to the batch and retry with backoff; a commit that fails because the coordinator is moving
is retried; a transactional call (sending the offsets, committing, aborting) that keeps
failing with retriable errors is retried for `transaction_timeout` seconds only: by then the
broker has aborted the transaction (a broker restart does so on load, bumping the producer's
epoch, and librdkafka's repeated call then times out for good), so the loop aborts and redoes
it, replacing the producer when the abort fails too; only an outage longer than
`outage_limit` seconds ends the loop with
`OutageTooLong`.

Assigned partitions start where the loop itself read their committed offsets
(`_committed_starts`), never where librdkafka's own lookup would: that lookup, retried while
an open transaction of a killed member holds the offsets, starts a partition at the
beginning when the assignment changes before the transaction ends (the next member joining),
and every committed record would be done again.

A consumer that stops handing on records is replaced: librdkafka can leave a consumer that
fetches nothing after a broker restart, for good (its open issue #4916; a restart of the
process cured it). When the loop has been handed no record for `stall_timeout` seconds
(STREAMS_CONSUMER_STALL_TIMEOUT, 60 s) it asks the broker for the read_committed end of each
partition it owns; if records wait past its position there, and still wait unchanged a few
seconds later, or if the consumer lost its partitions and has not rejoined the group within
that time, the loop closes it (which revokes its partitions, committing or aborting the open
transaction as any revocation does) and subscribes a new one: the work is redone from the
committed offsets, never skipped, never committed twice (`consumers_replaced` in the stats).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial, wraps
from pathlib import Path
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

from streams.adapters.avro.fast import RegistryUnavailable
from streams.adapters.kafka.lag import LagTracker
from streams.adapters.kafka.outputs import Output
from streams.adapters.kafka.stall import StallWatch
from streams.adapters.tracing import batch_span
from streams.core.errors import ConfigError, KafkaUnavailable
from streams.core.tenancy import transactional_id
from streams.runtime.root import Runtime

__all__ = ["AT_LEAST_ONCE", "EXACTLY_ONCE", "GUARANTEES", "BatchLoop", "BatchStats",
           "BeforeCommit", "OnAssigned", "OnRevoked", "OutageTooLong", "Step", "abort_reason"]

EXACTLY_ONCE = "exactly_once"
AT_LEAST_ONCE = "at_least_once"
GUARANTEES = (EXACTLY_ONCE, AT_LEAST_ONCE)

log = logging.getLogger(__name__)

Step = Callable[[Sequence[Message]], list[Output]]
"""A batch of consumed messages in, the records to produce out (may raise
RegistryUnavailable, having produced nothing)."""

OnAssigned = Callable[[Consumer, list[TopicPartition]], list[TopicPartition] | None]
"""Called when partitions are assigned, before the loop reads them, with each partition at
its committed offset (OFFSET_BEGINNING where the group has none): a stateful step restores
its state here and returns the partitions at the offsets it starts from (its state's own
position); None starts them at the committed offsets."""

OnRevoked = Callable[[list[TopicPartition]], None]
"""Called after revoked (or lost) partitions' work was committed (or dropped): a stateful
step forgets their state."""

BeforeCommit = Callable[[set[tuple[str, int]]], list[Output]]
"""Called once the outputs of the partitions about to be committed are delivered, before
their offsets are committed: what it returns (a stateful step's changelog and its position)
is produced and delivered before the commit, so state is never behind its outputs."""


class OutageTooLong(KafkaUnavailable):
    """The registry or broker stayed unreachable longer than the configured limit."""


# Errors that mean the group moved on without this member: its offsets cannot be committed.
_GROUP_MOVED = (KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
                KafkaError.REBALANCE_IN_PROGRESS, KafkaError.FENCED_INSTANCE_ID,
                KafkaError._NO_OFFSET)
_FENCED = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH,
           KafkaError.INVALID_PRODUCER_ID_MAPPING, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
_COORDINATOR = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError._WAIT_COORD)
_DOWN = (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._MSG_TIMED_OUT,
         KafkaError.REQUEST_TIMED_OUT, KafkaError.NOT_ENOUGH_REPLICAS,
         KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
# Delivery reports of the records an abort purges: the abort's own doing, not a failure.
_PURGED = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)
# Aborted transactions in a row, none committed between them, after which the loop makes
# new transactional producers if the broker answers (see BatchLoop._abort): aborts for the
# reasons a stuck producer gives, not for a rebalance's.
ABORTS_BEFORE_NEW_PRODUCERS = 2
_PRODUCER_FAILURES = frozenset({"timed_out", "delivery_failed"})


def abort_reason(error: KafkaError | None) -> str:
    """Why a transaction failed, as the one word its log line and metric carry: `fenced`
    (a newer producer or the broker's timeout took the transaction over), `group_moved`
    (the consumer group's generation moved on: a zombie's commit), `coordinator_moved`,
    `broker_down`, `timed_out`, `hung` (a transactional call outlived its own timeout and
    its producer was given up), `delivery_failed` (an output was refused) or `other`."""
    if error is None:
        return "other"
    code = error.code()
    if code == KafkaError._TIMED_OUT and error.fatal():
        return "hung"
    if code in _FENCED or error.fatal():
        return "fenced"
    if code in _GROUP_MOVED:
        return "group_moved"
    if code in _COORDINATOR:
        return "coordinator_moved"
    if code in _DOWN:
        return "broker_down"
    if code == KafkaError._TIMED_OUT:
        return "timed_out"
    return "other"


def _named(partitions: Sequence[TopicPartition]) -> str:
    """Partitions for a log line: `topic[0,1,2]` per topic, in order."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return " ".join(f"{t}{sorted(ps)}" for t, ps in sorted(by_topic.items())) or "nothing"


def _on_own_thread(name: str, call: Callable[[], object],
                   timeout: float) -> tuple[bool, BaseException | None]:
    """Run `call()` on a thread of its own (named `name`) and wait up to `timeout` seconds:
    (whether it returned in time, what it raised). A call that did not return keeps its
    thread; the caller decides what to give up."""
    outcome: list[BaseException | None] = []
    finished = threading.Event()

    def attempt() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # handed over to the caller's thread
            outcome.append(exc)
        finally:
            finished.set()

    threading.Thread(target=attempt, name=name, daemon=True).start()
    if not finished.wait(timeout):
        return False, None
    return True, outcome[0]


def _error_of(exc: KafkaException) -> KafkaError | None:
    error = exc.args[0] if exc.args else None
    return error if isinstance(error, KafkaError) else None


@dataclass
class BatchStats:
    """What a loop has done: batches, records in, outputs out, commits and repeats; with
    exactly_once, `commits` counts committed transactions, `aborts` the aborted ones (each
    redone from the committed offsets), `aborts_by_reason` them by `abort_reason`, and
    `producer_resets` the transactional producers replaced after being fenced (or given up
    as wedged: `producers_abandoned`); `commit_seconds` is the time spent committing
    (delivery and offsets, or the transaction's offsets and commit), aborts included, and
    `longest_commit_seconds` the longest single commit (one that waited out a broker outage
    inside librdkafka's own retries shows here, not in `outage_waits`); `committed_at` is
    the monotonic clock when the last commit returned (0.0 before the first)."""

    batches: int = 0
    records: int = 0
    outputs: int = 0
    commits: int = 0
    delivery_failures: int = 0
    rewinds: int = 0
    outage_waits: int = 0
    aborts: int = 0
    producer_resets: int = 0
    producers_abandoned: int = 0
    consumers_replaced: int = 0
    commits_before_blocking: int = 0
    commit_seconds: float = 0.0
    longest_commit_seconds: float = 0.0
    committed_at: float = 0.0
    aborts_by_reason: dict[str, int] = field(default_factory=dict)


_RebalanceCallback = Callable[["BatchLoop", Consumer, list[TopicPartition]], None]


def _rebalance_callback(body: _RebalanceCallback) -> _RebalanceCallback:
    """A rebalance callback of the loop's consumer: ignored for a consumer the loop has
    replaced or given up (a stalled one that outlived its bounded close: from the moment the
    close timed out, before the new consumer is subscribed too), and run with
    `_in_callback` set (no producer is made inside one: init_transactions can wait out an
    outage)."""

    @wraps(body)
    def callback(loop: BatchLoop, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if (loop._consumer is not None and consumer is not loop._consumer) \
                or any(consumer is given_up for given_up in loop._given_up):
            return
        loop._in_callback = True
        try:
            body(loop, consumer, partitions)
        finally:
            loop._in_callback = False

    return callback


class BatchLoop:
    """Runs one step over a consumer group's partitions in batches, at least once or
    exactly once (`guarantee`, default the settings' `processing_guarantee`).

    Its consumer (a member of `group`) and its producer (one of its own, `producer_extra`
    added to its configuration; transactional with exactly_once) come from the runtime.
    Construction does no I/O; `run` makes them, subscribes and loops until `stop` is set.
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        group: str,
        producer_extra: dict[str, Any] | None = None,
        subscription: list[str],
        step: Step,
        batch_size: int = 1000,
        poll_timeout: float = 0.1,
        commit_every: int = 10,
        commit_interval: float = 1.0,
        commit_when_caught_up: bool | None = None,
        flush_timeout: float = 30.0,
        outage_limit: float = 600.0,
        name: str = "batch-loop",
        on_assigned: OnAssigned | None = None,
        on_revoked: OnRevoked | None = None,
        before_commit: BeforeCommit | None = None,
        guarantee: str | None = None,
        step_may_block: Callable[[Sequence[Message]], bool] | None = None,
        stall_timeout: float | None = None,
    ) -> None:
        self.runtime = runtime
        self.guarantee = guarantee or runtime.settings.processing_guarantee
        if self.guarantee not in GUARANTEES:
            raise ConfigError(f"unknown processing guarantee {self.guarantee!r}: "
                              f"STREAMS_PROCESSING_GUARANTEE is one of {list(GUARANTEES)}")
        self.exactly_once = self.guarantee == EXACTLY_ONCE
        # Whether a transaction is open (exactly_once): begun before a batch's outputs are
        # produced, ended by the commit or an abort.
        self._in_transaction = False
        # Transactions aborted since the last commit for a producer's failures (see _abort).
        self._aborts_in_row = 0
        # Inside a rebalance callback: no producers are made there (init_transactions can
        # wait out an outage), the next abort outside one does it.
        self._in_callback = False
        # Stalled consumers whose close timed out: their late callbacks are ignored.
        self._given_up: list[Consumer] = []
        # Counts rebalance callbacks, so a batch fetched across one can be checked.
        self._rebalances = 0
        self.group = group
        self.producer_extra = {
            **(producer_extra or {}),
            "delivery.report.only.error": True,
            "on_delivery": self._on_delivery,
        }
        self.subscription = subscription
        self.step = step
        self.batch_size = batch_size
        self.poll_timeout = poll_timeout
        self.commit_every = commit_every
        self.commit_interval = commit_interval
        # Exactly once, a transaction's outputs are invisible to read_committed readers until
        # it commits: a loop that has read all there is commits at once rather than holding
        # a light stream's outputs for the interval (at least once they are visible when
        # produced, so there it would only add offset commits).
        self.commit_when_caught_up = self.exactly_once and (
            runtime.settings.commit_when_caught_up if commit_when_caught_up is None
            else commit_when_caught_up)
        self.flush_timeout = flush_timeout
        self.outage_limit = outage_limit
        # How long a transactional call is retried on retriable errors: past the broker's
        # transaction timeout the transaction is aborted anyway (see the module).
        self.transaction_timeout = runtime.settings.transaction_timeout
        # How long past its own timeout a transactional call may go on before its producer
        # is given up as wedged (librdkafka #5456: a call that does not honour its timeout).
        self.hang_grace = max(5.0, self.transaction_timeout)
        self.name = name
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.before_commit = before_commit
        # Whether the step may take long on a batch (the reactor runs actions in it): with
        # exactly_once the open transaction is committed first, or one older than the
        # transaction timeout would be aborted by the broker and its work, actions included,
        # redone.
        self.step_may_block = step_may_block
        self._group = group
        # The `stop_in_transaction` failure-test fault (see Settings.worker_fault).
        self._stop_file = runtime.settings.state_path(f"{name}.stop-in-transaction") \
            if self.exactly_once and runtime.settings.worker_fault == "stop_in_transaction" \
            else None
        # How long the consumer may hand on nothing while records wait (see the module).
        self.stall_timeout = runtime.settings.consumer_stall_timeout \
            if stall_timeout is None else stall_timeout
        self._stall = StallWatch(self.stall_timeout, lambda: runtime.broker_answers(),
                                 runtime.stable_offsets)
        self.stats = BatchStats()
        self.assigned: set[tuple[str, int]] = set()
        self._done: dict[tuple[str, int], int] = {}
        self._failed = 0
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        # exactly_once: a second transactional producer; the two take turns, a transaction
        # each (see the module).
        self._spare: Producer | None = None
        self._outage_since: float | None = None
        self._ready = threading.Event()
        # What the metrics and health endpoints read (from another thread): written here only.
        self.lag = LagTracker(group)
        self.records_per_topic: dict[str, int] = {}
        self.topics_seen: set[str] = set()
        self.turned_at = time.monotonic()
        self.running = False

    # -- delivery ------------------------------------------------------------------------

    def _on_delivery(self, err: KafkaError | None, _msg: Message) -> None:
        # Called only for failures (delivery.report.only.error); runs inside poll/flush.
        # An abort purges its records: their reports are no new failure.
        if err is not None and not (self.exactly_once and err.code() in _PURGED):
            self._failed += 1
            self.stats.delivery_failures += 1
            log.warning("%s: an output failed delivery: %s", self.name, err)

    def _produce(self, producer: Producer, outputs: Sequence[Output]) -> None:
        produce = producer.produce
        for topic, key, value, headers, partition in outputs:
            while True:
                try:
                    # Positional arguments only where it can: a keyword argument costs
                    # 0.38 µs a call in the client's argument parsing, 60% of a produce.
                    if partition is not None:  # a changelog record: its input's partition
                        produce(topic, value, key, partition, headers=headers)
                    elif headers is not None:
                        produce(topic, value, key, headers=headers)
                    else:
                        produce(topic, value, key)
                    break
                except BufferError:  # the local queue is full: let deliveries drain
                    producer.poll(0.05)
        producer.poll(0)

    # -- commits -------------------------------------------------------------------------

    def _delivered(self, producer: Producer) -> bool:
        """Flush; True when every output produced so far is acknowledged."""
        remaining = producer.flush(self.flush_timeout)
        if remaining or self._failed:
            log.warning("%s: %d outputs undelivered, %d failed; redoing from the committed "
                        "offsets", self.name, remaining, self._failed)
            return False
        return True

    def _commit(self, consumer: Consumer, producer: Producer,
                partitions: set[tuple[str, int]] | None = None) -> bool:
        """Commit done offsets (of `partitions`, or all) once their outputs are delivered;
        on a failed delivery, rewind instead. Returns whether it committed. With
        exactly_once, commit the open transaction (every partition's work: see the module).
        The time it takes goes to `stats.commit_seconds`."""
        began = time.perf_counter()
        try:
            return self._commit_now(consumer, producer, partitions)
        finally:
            took = time.perf_counter() - began
            self.stats.commit_seconds += took
            if took > self.stats.longest_commit_seconds:
                self.stats.longest_commit_seconds = took

    def _commit_now(self, consumer: Consumer, producer: Producer,
                    partitions: set[tuple[str, int]] | None) -> bool:
        if self.exactly_once:
            return self._commit_transaction(consumer)
        chosen = {tp: o for tp, o in self._done.items()
                  if partitions is None or tp in partitions}
        if not chosen:
            return True
        if not self._delivered(producer):
            self._rewind(consumer)
            return False
        if self.before_commit is not None:
            extra = self.before_commit(set(chosen))
            if extra:
                self._produce(producer, extra)
                if not self._delivered(producer):
                    self._rewind(consumer)
                    return False
        offsets = [TopicPartition(t, p, o) for (t, p), o in chosen.items()]
        while True:
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
                break
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                code = error.code() if isinstance(error, KafkaError) else None
                if code in (KafkaError._NO_OFFSET, KafkaError.REBALANCE_IN_PROGRESS,
                            KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID):
                    # The partitions moved on; their new owner redoes the work from the
                    # last commit, which is safe.
                    log.info("%s: commit skipped (%s)", self.name, error)
                    break
                self._wait_outage(f"commit failed: {error}")
        for tp in chosen:
            self._done.pop(tp, None)
        self.stats.commits += 1
        self.stats.committed_at = time.monotonic()
        return True

    # -- transactions (exactly_once) ---------------------------------------------------------

    def _make_producer(self) -> Producer:
        """The loop's producer: with exactly_once a transactional one with a fresh id, its
        transactions initialised (an unreachable broker is waited out)."""
        if not self.exactly_once:
            return self.runtime.producer_of_own(**self.producer_extra)
        while True:
            producer = self.runtime.transactional_producer(transactional_id(self.group),
                                                           **self.producer_extra)
            while True:
                try:
                    self._watched("initialising transactions",
                                  partial(producer.init_transactions, self.flush_timeout))
                    self._outage_over()
                    return producer
                except KafkaException as exc:
                    error = _error_of(exc)
                    self._wait_outage(
                        f"initialising transactions failed: {exc} (exactly_once needs "
                        "brokers with transactions: a cluster with fewer brokers than its "
                        "transaction.state.log.replication.factor, 3 by default, never has a "
                        "transaction coordinator; lower it to the broker count, or set "
                        "STREAMS_PROCESSING_GUARANTEE=at_least_once)")
                    if error is not None and not error.retriable():
                        break  # this producer is done for: make another

    def _begin(self, producer: Producer) -> Producer:
        """Make sure a transaction is open (exactly_once); returns the producer it is open
        on (a new one if the old one could not begin any more)."""
        if not self.exactly_once or self._in_transaction:
            return producer
        try:
            producer.begin_transaction()
        except KafkaException as exc:  # fatal: the producer was fenced while idle
            log.warning("%s: cannot begin a transaction (%s); replacing the producer",
                        self.name, exc)
            producer = self._reset_producer()
            producer.begin_transaction()
        self._in_transaction = True
        return producer

    def _reset_producer(self) -> Producer:
        """Replace a fenced or failed transactional producer with a new one (a new id)."""
        self.stats.producer_resets += 1
        self._in_transaction = False
        self._aborts_in_row = 0
        producer = self._producer = self._make_producer()
        return producer

    def _watched(self, what: str, call: Callable[[], None]) -> None:
        """`call()`, a transactional call bounded by `flush_timeout`, on a thread of its own;
        given up when it has not returned `hang_grace` seconds past that timeout, by raising
        a fatal KafkaException (reason `hung`): the producer is replaced and the batch redone
        from the committed offsets, instead of the loop waiting on a wedged call for good.

        The wedged call keeps its thread and its producer, and nothing calls that producer
        again, so no late commit can follow a redo: a call wedged before the commit leaves
        no commit to come (the broker aborts the transaction after its timeout), and a commit
        wedged after its offsets were sent leaves them pending, which the rewind's read of
        the committed offsets waits out (a read_committed consumer asks for stable offsets,
        KIP-447)."""
        returned, raised = _on_own_thread(f"{self.name}: {what}", call,
                                          self.flush_timeout + self.hang_grace)
        if not returned:
            self.stats.producers_abandoned += 1
            log.error("%s: %s did not return within %.0f s (its timeout is %.0f s): giving "
                      "its producer up and redoing the batch with a new one", self.name, what,
                      self.flush_timeout + self.hang_grace, self.flush_timeout,
                      extra={"event": "producer_abandoned", "loop": self.name})
            raise KafkaException(KafkaError(
                KafkaError._TIMED_OUT, f"{what} did not return within its timeout",
                fatal=True))
        if raised is not None:
            raise raised

    def _retrying(self, what: str, call: Callable[[], None]) -> None:
        """Call a transactional API, again while it fails with a retriable error (a timeout,
        a coordinator on its way): librdkafka says such a call may simply be repeated. Not
        for longer than `transaction_timeout` seconds, though: the broker has aborted the
        transaction by then, and the call's error is raised for the caller to abort. Each
        attempt is `_watched`."""
        first: float | None = None
        while True:
            try:
                self._watched(what, call)
                self._outage_over()
                return
            except KafkaException as exc:
                error = _error_of(exc)
                if error is None or not error.retriable() or error.txn_requires_abort():
                    raise
                now = time.monotonic()
                first = now if first is None else first
                if now - first >= self.transaction_timeout:
                    log.warning("%s: %s still failing after %.0f s (%s): the broker has "
                                "aborted the transaction by now; giving it up", self.name,
                                what, now - first, error)
                    raise
                self._wait_outage(f"{what} failed: {error}")

    def _commit_transaction(self, consumer: Consumer) -> bool:
        """Put the done offsets into the open transaction (with the group's metadata, so a
        member the group moved past cannot commit) and commit it; on any failure, abort and
        redo from the committed offsets. Returns whether it committed."""
        if not self._in_transaction:
            return True
        producer = self._producer
        assert producer is not None
        if self._failed:
            self._abort(consumer, "delivery_failed", None)
            return False
        chosen = dict(self._done)
        try:
            if self.before_commit is not None and chosen:
                extra = self.before_commit(set(chosen))
                if extra:
                    self._produce(producer, extra)
            if chosen:
                offsets = [TopicPartition(t, p, o) for (t, p), o in chosen.items()]
                metadata = consumer.consumer_group_metadata()
                self._retrying("sending the offsets to the transaction",
                               lambda: producer.send_offsets_to_transaction(
                                   offsets, metadata, self.flush_timeout))
            self._retrying("committing the transaction",
                           lambda: producer.commit_transaction(self.flush_timeout))
        except KafkaException as exc:
            error = _error_of(exc)
            self._abort(consumer, "delivery_failed" if self._failed and error is not None
                        and not error.fatal() else abort_reason(error), exc)
            return False
        self._in_transaction = False
        self._aborts_in_row = 0
        for tp in chosen:
            self._done.pop(tp, None)
        self.stats.commits += 1
        self.stats.committed_at = time.monotonic()
        if self._spare is not None:
            # The next transaction on the other producer: this one's coordinator is still
            # writing the markers of the one just committed, and would refuse its next
            # offsets until then (CONCURRENT_TRANSACTIONS, a retry later).
            self._producer, self._spare = self._spare, producer
        return True

    def _abort(self, consumer: Consumer | None, reason: str, exc: BaseException | None,
               why: str = "an output failed delivery") -> None:
        """Abort the open transaction (or, when the producer cannot, replace it: the broker
        aborts the old one), then seek `consumer` back to the committed offsets to redo its
        work (None: a consumer that is gone; its successor starts from them anyway)."""
        producer = self._producer
        fatal = False
        if isinstance(exc, KafkaException):
            error = _error_of(exc)
            fatal = error is not None and (error.fatal() or error.code() in _FENCED)
        if producer is not None and self._in_transaction and not fatal:
            try:
                self._retrying("aborting the transaction",
                               lambda: producer.abort_transaction(self.flush_timeout))
            except KafkaException as abort_exc:
                log.warning("%s: the abort failed too (%s)", self.name, abort_exc)
                fatal = True
        self._in_transaction = False
        self.stats.aborts += 1
        self.stats.aborts_by_reason[reason] = self.stats.aborts_by_reason.get(reason, 0) + 1
        log.warning("%s: transaction aborted (%s): %s; redoing from the committed offsets",
                    self.name, reason, exc if exc is not None else why,
                    extra={"event": "transaction_aborted", "reason": reason,
                           "loop": self.name})
        if reason in _PRODUCER_FAILURES:
            self._aborts_in_row += 1
        if fatal and producer is not None:
            self._reset_producer()
        elif producer is not None and self._aborts_in_row >= ABORTS_BEFORE_NEW_PRODUCERS \
                and not self._in_callback and self.runtime.broker_answers():
            # Transactions keep failing while the broker answers a client made for the
            # asking: after a one-broker restart a producer was seen whose every transaction
            # failed (its records timed out, its offsets never reached the coordinator) while
            # its aborts went through and the broker served everyone else, for good. New
            # producers (a new id each) start clean; the old ones hold nothing open.
            log.warning("%s: %d transactions in a row failed while the broker answers; "
                        "replacing the transactional producers", self.name,
                        self._aborts_in_row, extra={"event": "producers_replaced",
                                                    "loop": self.name})
            self._reset_producer()
            if self._spare is not None:
                self._spare = self._make_producer()
        if consumer is None:
            self._failed = 0
            self._done.clear()
        else:
            self._rewind(consumer)

    def _rewind(self, consumer: Consumer) -> None:
        """Seek every assigned partition back to its committed offset: its work is redone.

        A consumer that cannot read those offsets for `stall_timeout` while the broker
        answers a fresh client is replaced instead; the new one starts from them (after a
        one-broker restart a consumer was seen unable to reach the broker for good, its
        requests never sent, while the broker answered other clients)."""
        self._failed = 0
        self._done.clear()
        self.stats.rewinds += 1
        assigned = [TopicPartition(t, p) for t, p in self.assigned]
        if not assigned:
            return
        began = time.monotonic()
        while True:
            # A flush that timed out usually means the broker is down: reading the committed
            # offsets then fails too, and is an outage to wait out, not a reason to exit.
            try:
                committed = consumer.committed(assigned, timeout=30.0)
                break
            except KafkaException as exc:
                failing = time.monotonic() - began
                if failing >= self.stall_timeout and self.runtime.broker_answers():
                    self._outage_over()
                    self._replace_consumer(consumer, f"could not read its committed offsets "
                                           f"for {failing:.0f} s while the broker answered "
                                           f"({exc})")
                    return
                self._wait_outage(f"reading committed offsets failed: {exc}")
        self._outage_over()
        for tp in committed:
            offset = tp.offset if tp.offset >= 0 else 0
            try:
                consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
            except KafkaException as exc:
                # Not assigned any more (a rebalance under way): its next owner starts at
                # the committed offset anyway.
                log.info("%s: no seek of %s/%d (%s)", self.name, tp.topic, tp.partition, exc)

    # -- outages -------------------------------------------------------------------------

    @property
    def in_outage(self) -> bool:
        """Whether the loop is waiting out an unreachable broker or registry now."""
        return self._outage_since is not None

    def _wait_outage(self, problem: str) -> None:
        now = self.turned_at = time.monotonic()
        if self._outage_since is None:
            self._outage_since = now
            log.warning("%s: %s; waiting and retrying (limit %.0f s)", self.name, problem,
                        self.outage_limit)
        elif now - self._outage_since > self.outage_limit:
            raise OutageTooLong(f"{self.name}: {problem} for over {self.outage_limit:.0f} s")
        self.stats.outage_waits += 1
        waited = now - self._outage_since
        time.sleep(min(5.0, 0.1 * 2 ** min(self.stats.outage_waits, 6), max(0.1, waited)))

    def _outage_over(self) -> None:
        if self._outage_since is not None:
            log.warning("%s: recovered after %.1f s", self.name,
                        time.monotonic() - self._outage_since)
            self._outage_since = None

    # -- rebalances ----------------------------------------------------------------------

    @_rebalance_callback
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._rebalances += 1
        log.info("%s: assigned %s", self.name, _named(partitions))
        starts = self._committed_starts(consumer, partitions)
        chosen = self.on_assigned(consumer, starts) if self.on_assigned is not None else None
        consumer.assign(starts if chosen is None else chosen)
        # The stall clock starts once assigned: reading the offsets may wait out a hold.
        self._stall.assigned()
        self.assigned |= {(tp.topic, tp.partition) for tp in partitions}
        self.topics_seen |= {tp.topic for tp in partitions}
        self._ready.set()

    def _committed_starts(self, consumer: Consumer,
                          partitions: list[TopicPartition]) -> list[TopicPartition]:
        """`partitions` at their committed offsets, OFFSET_BEGINNING where the group has none
        (auto.offset.reset=earliest). The loop reads them itself and assigns them explicitly
        instead of leaving the lookup to librdkafka: an offset held by an open transaction
        (a member killed mid-transaction, until the broker aborts it) makes librdkafka's
        lookup retry, and if the assignment changes meanwhile (the next member joining) it
        starts the partition at auto.offset.reset instead, the beginning: every committed
        record done again (the repeated-SIGKILL failure test caught it).
        `committed()` waits such an offset out (KIP-447's require_stable), failing with a
        timeout while it is held; that, and an unreachable coordinator, is waited out
        like any outage (`outage_limit`)."""
        if not partitions:
            return []
        asked = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
        while True:
            try:
                committed = consumer.committed(asked, timeout=self.runtime.settings.admin_timeout)
                failed = [tp for tp in committed if tp.error is not None]
                if not failed:
                    break
                problem = "; ".join(f"{tp.topic}[{tp.partition}]: {tp.error}" for tp in failed)
            except KafkaException as exc:
                problem = str(exc)
            self._wait_outage(
                f"reading the committed offsets of {_named(asked)} failed ({problem}); an "
                "open transaction of a member that stopped holds them until the broker aborts "
                "it, transaction.timeout.ms after it began")
        self._outage_over()
        return [tp if tp.offset >= 0 else TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING)
                for tp in committed]

    @_rebalance_callback
    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._rebalances += 1
        log.info("%s: revoked %s", self.name, _named(partitions))
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        if self._producer is not None:
            # exactly_once: the whole open transaction (an abort, if it fails, rewinds).
            self._commit(consumer, self._producer, revoked)
        self.assigned -= revoked
        for tp in revoked:
            self._done.pop(tp, None)
        if self.on_revoked is not None:
            self.on_revoked(partitions)

    @_rebalance_callback
    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Lost, not revoked: another member may own them already; committing would be wrong.
        self._rebalances += 1
        self._stall.lost()
        log.warning("%s: lost %s", self.name, _named(partitions))
        lost = {(tp.topic, tp.partition) for tp in partitions}
        self.assigned -= lost
        for tp in lost:
            self._done.pop(tp, None)
        if self.exactly_once and self._in_transaction:
            # The open transaction holds the lost partitions' outputs, which their new owner
            # is redoing: abort it, and redo the kept partitions' share of it.
            self._abort(consumer, "group_moved", None,
                        why="partitions lost (the session timed out, or the member was "
                            "thrown out of the group)")
        if self.on_revoked is not None:
            self.on_revoked(partitions)

    # -- the loop ------------------------------------------------------------------------

    def wait_assigned(self, timeout: float) -> bool:
        """Block until the loop has been assigned partitions at least once."""
        return self._ready.wait(timeout)

    def run(self, stop: threading.Event) -> None:
        """Subscribe and process batches until `stop` is set; commits what is delivered on
        the way out. Raises OutageTooLong after an outage longer than the limit."""
        self._consumer = self._subscribed()
        self._producer = self._make_producer()
        if self.exactly_once:
            self._spare = self._make_producer()
        batches_since_commit = 0
        last_commit = time.monotonic()
        self.running = True
        try:
            while not stop.is_set():
                consumer = self._consumer  # a stalled one is replaced on the way
                self.turned_at = now = time.monotonic()
                self.lag.update(consumer)
                messages = self._next_batch(consumer)
                if self._failed:
                    if self.exactly_once and self._in_transaction:
                        self._abort(consumer, "delivery_failed", None)
                    else:
                        self._rewind(consumer)
                    continue
                if not messages and self._stall.stalled(consumer, self.assigned, now):
                    self._replace_consumer(consumer)
                    continue
                if messages:
                    self._stall.fed(now)
                if messages and not self._process(consumer, messages):
                    continue
                if messages:
                    batches_since_commit += 1
                now = time.monotonic()
                # Fewer records than a batch: the consumer's queue is empty, the loop has
                # read all there is for now.
                caught_up = len(messages) < self.batch_size
                if self._done and (batches_since_commit >= self.commit_every
                                   or now - last_commit >= self.commit_interval
                                   or (caught_up and self.commit_when_caught_up)):
                    self._commit(consumer, self._current_producer())
                    batches_since_commit = 0
                    last_commit = now
            self._commit(self._consumer, self._current_producer())
        finally:
            self.running = False
            self._close_producer()
            if self._spare is not None:  # no transaction of its own is open
                self._spare.flush(self.flush_timeout)
            self._consumer.close()
            self._consumer = self._producer = self._spare = None

    def _subscribed(self) -> Consumer:
        consumer = self.runtime.consumer(self.group)
        consumer.subscribe(self.subscription, on_assign=self._on_assign,
                           on_revoke=self._on_revoke, on_lost=self._on_lost)
        self._stall.fed()
        return consumer

    # -- a consumer that stops handing on records (streams.adapters.kafka.stall) -----------

    def _replace_consumer(self, consumer: Consumer, what: str | None = None) -> None:
        """Close the stalled consumer (its revocation commits or aborts the open work, as
        any does) and subscribe a new one, which starts from the committed offsets. `what`
        it did wrong, when not a stall `_stalled` found."""
        self.stats.consumers_replaced += 1
        if what is None:
            what = self._stall.describe(self.assigned)
        log.error("%s: the consumer %s: replacing it with a new one", self.name, what,
                  extra={"event": "consumer_replaced", "loop": self.name})
        closed, raised = _on_own_thread(f"{self.name}: closing a stalled consumer",
                                        consumer.close, self.flush_timeout + self.hang_grace)
        if not closed:
            # Its close may still call back later, on its own thread, while this one clears
            # its work: from now on its callbacks do nothing. (Held, not weakly: confluent's
            # Consumer takes no weak reference. One per consumer given up: a few at most.)
            self._given_up.append(consumer)
            log.error("%s: the stalled consumer did not close within %.0f s; left to its "
                      "thread (the group expels it after its session timeout)", self.name,
                      self.flush_timeout + self.hang_grace)
        if raised is not None:  # a stalled consumer may fail to close: carry on
            log.warning("%s: closing the stalled consumer failed (%s)", self.name, raised)
        # What close's revocation did not clear (a consumer that lost everything has none).
        if self.exactly_once and self._in_transaction:  # the close revoked nothing
            self._abort(None, "consumer_stalled", None, why="the consumer was replaced")
        if self.assigned and self.on_revoked is not None:
            self.on_revoked([TopicPartition(t, p) for t, p in sorted(self.assigned)])
        self.assigned.clear()
        self._done.clear()
        self._stall.reset()
        self._consumer = self._subscribed()

    def _current_producer(self) -> Producer:
        # A fenced producer is replaced on the way, so the loop asks for it each time.
        assert self._producer is not None
        return self._producer

    def _close_producer(self) -> None:
        producer = self._producer
        if producer is None:
            return
        if self.exactly_once and self._in_transaction:
            # Leaving on an error: what the transaction holds is redone by the next owner.
            try:
                self._watched("aborting on the way out",
                              partial(producer.abort_transaction, self.flush_timeout))
            except KafkaException as exc:
                log.warning("%s: aborting on the way out failed (%s); the broker aborts it "
                            "after the transaction timeout", self.name, exc)
            self._in_transaction = False
        producer.flush(self.flush_timeout)

    def _next_batch(self, consumer: Consumer) -> list[Message]:
        """What is in the local queue now, up to batch_size; when it is empty, wait up to
        poll_timeout for the first record and take what came with it. consume(n, timeout)
        alone would hold a light stream's records for the whole timeout."""
        rebalances = self._rebalances
        messages = consumer.consume(self.batch_size, 0)
        if not messages:
            first = consumer.poll(self.poll_timeout)
            if first is None:
                return []
            messages = [first, *consumer.consume(self.batch_size - 1, 0)]
        if self._rebalances != rebalances:
            # Records fetched before a revocation in the same call belong to another member
            # now: handling them would produce (and, exactly once, commit) its work.
            assigned = self.assigned
            messages = [m for m in messages if m.error() is not None
                        or (m.topic() or "", m.partition() or 0) in assigned]
        return messages

    def _process(self, consumer: Consumer, messages: list[Message]) -> bool:
        """Run the step over one batch and produce its outputs; False if the batch must be
        tried again (an outage), having seeked its partitions back to where it began."""
        if self.exactly_once and self._in_transaction and self._done \
                and self.step_may_block is not None and self.step_may_block(messages):
            self.stats.commits_before_blocking += 1
            if not self._commit_transaction(consumer):
                return False  # aborted and rewound: this batch comes again
        try:
            # One span per batch (when tracing is on): see streams.adapters.tracing.
            with batch_span(messages, group=self._group):
                outputs = self.step(messages)
        except RegistryUnavailable as exc:
            firsts: dict[tuple[str, int], int] = {}
            for msg in messages:
                if msg.error() is not None:
                    continue
                key = (msg.topic() or "", msg.partition() or 0)
                offset = msg.offset() or 0
                if key not in firsts or offset < firsts[key]:
                    firsts[key] = offset
            for (topic, partition), offset in firsts.items():
                consumer.seek(TopicPartition(topic, partition, offset))
            self._wait_outage(str(exc))
            return False
        self._outage_over()
        try:
            producer = self._begin(self._current_producer())
            self._produce(producer, outputs)
        except KafkaException as exc:
            if not self.exactly_once:
                raise
            # The producer refused the records (its transaction failed while it was open).
            self._abort(consumer, abort_reason(_error_of(exc)), exc)
            return False
        done = self._done
        per_topic = self.records_per_topic
        for msg in messages:
            if msg.error() is None:
                topic = msg.topic() or ""
                done[(topic, msg.partition() or 0)] = (msg.offset() or 0) + 1
                per_topic[topic] = per_topic.get(topic, 0) + 1
        self.stats.batches += 1
        self.stats.records += len(messages)
        self.stats.outputs += len(outputs)
        if self._stop_file is not None and outputs and self._in_transaction:
            self._stop_if_asked(self._stop_file)
        return True

    def _stop_if_asked(self, stop_file: Path) -> None:
        """The `stop_in_transaction` fault: SIGSTOP this process, its transaction open."""
        try:
            stop_file.unlink()
        except FileNotFoundError:
            return
        self._stop_file = None
        log.warning("%s: stopping this process inside an open transaction (the "
                    "stop_in_transaction fault)", self.name)
        os.kill(os.getpid(), signal.SIGSTOP)
