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

On a rebalance the revoked partitions' work is flushed and committed before they move, and
never past an undelivered output. Outages are waits, not failures: a registry that cannot be
reached makes the loop seek back to the batch and retry with backoff; a commit that fails
because the coordinator is moving is retried; only an outage longer than `outage_limit`
seconds ends the loop with `OutageTooLong`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from streams.adapters.avro.fast import RegistryUnavailable
from streams.adapters.kafka.lag import LagTracker
from streams.adapters.kafka.outputs import Output
from streams.adapters.tracing import batch_span
from streams.core.errors import KafkaUnavailable
from streams.runtime.root import Runtime

__all__ = ["BatchLoop", "BatchStats", "BeforeCommit", "OnAssigned", "OnRevoked", "OutageTooLong",
           "Step"]

log = logging.getLogger(__name__)

Step = Callable[[Sequence[Message]], list[Output]]
"""A batch of consumed messages in, the records to produce out (may raise
RegistryUnavailable, having produced nothing)."""

OnAssigned = Callable[[Consumer, list[TopicPartition]], None]
"""Called when partitions are assigned, before the loop reads them: a stateful step restores
its state here, and may `consumer.assign(...)` the partitions at offsets of its choosing
(the state's own position); if it does not, the loop assigns them at their committed
offsets."""

OnRevoked = Callable[[list[TopicPartition]], None]
"""Called after revoked (or lost) partitions' work was committed (or dropped): a stateful
step forgets their state."""

BeforeCommit = Callable[[set[tuple[str, int]]], list[Output]]
"""Called once the outputs of the partitions about to be committed are delivered, before
their offsets are committed: what it returns (a stateful step's changelog and its position)
is produced and delivered before the commit, so state is never behind its outputs."""


class OutageTooLong(KafkaUnavailable):
    """The registry or broker stayed unreachable longer than the configured limit."""


@dataclass
class BatchStats:
    """What a loop has done: batches, records in, outputs out, commits and repeats."""

    batches: int = 0
    records: int = 0
    outputs: int = 0
    commits: int = 0
    delivery_failures: int = 0
    rewinds: int = 0
    outage_waits: int = 0


class BatchLoop:
    """Runs one step over a consumer group's partitions, at least once, in batches.

    Its consumer (a member of `group`) and its producer (one of its own, `producer_extra`
    added to its configuration) come from the runtime. Construction does no I/O; `run`
    makes them, subscribes and loops until `stop` is set.
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
        flush_timeout: float = 30.0,
        outage_limit: float = 600.0,
        name: str = "batch-loop",
        on_assigned: OnAssigned | None = None,
        on_revoked: OnRevoked | None = None,
        before_commit: BeforeCommit | None = None,
    ) -> None:
        self.runtime = runtime
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
        self.flush_timeout = flush_timeout
        self.outage_limit = outage_limit
        self.name = name
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.before_commit = before_commit
        self._group = group
        self.stats = BatchStats()
        self.assigned: set[tuple[str, int]] = set()
        self._done: dict[tuple[str, int], int] = {}
        self._failed = 0
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
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
        if err is not None:
            self._failed += 1
            self.stats.delivery_failures += 1
            log.warning("%s: an output failed delivery: %s", self.name, err)

    def _produce(self, producer: Producer, outputs: Sequence[Output]) -> None:
        produce = producer.produce
        for out in outputs:
            while True:
                try:
                    if out.partition is None:
                        produce(out.topic, out.value, out.key, headers=out.headers)
                    else:  # a changelog record goes to its input's partition
                        produce(out.topic, out.value, out.key, out.partition,
                                headers=out.headers)
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
        on a failed delivery, rewind instead. Returns whether it committed."""
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
        return True

    def _rewind(self, consumer: Consumer) -> None:
        """Seek every assigned partition back to its committed offset: its work is redone."""
        self._failed = 0
        self._done.clear()
        self.stats.rewinds += 1
        assigned = [TopicPartition(t, p) for t, p in self.assigned]
        if not assigned:
            return
        while True:
            # A flush that timed out usually means the broker is down: reading the committed
            # offsets then fails too, and is an outage to wait out, not a reason to exit.
            try:
                committed = consumer.committed(assigned, timeout=30.0)
                break
            except KafkaException as exc:
                self._wait_outage(f"reading committed offsets failed: {exc}")
        self._outage_over()
        for tp in committed:
            offset = tp.offset if tp.offset >= 0 else 0
            consumer.seek(TopicPartition(tp.topic, tp.partition, offset))

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

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.on_assigned is not None:
            self.on_assigned(consumer, partitions)
        self.assigned |= {(tp.topic, tp.partition) for tp in partitions}
        self.topics_seen |= {tp.topic for tp in partitions}
        self._ready.set()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        if self._producer is not None:
            self._commit(consumer, self._producer, revoked)
        self.assigned -= revoked
        for tp in revoked:
            self._done.pop(tp, None)
        if self.on_revoked is not None:
            self.on_revoked(partitions)

    def _on_lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Lost, not revoked: another member may own them already; committing would be wrong.
        lost = {(tp.topic, tp.partition) for tp in partitions}
        self.assigned -= lost
        for tp in lost:
            self._done.pop(tp, None)
        if self.on_revoked is not None:
            self.on_revoked(partitions)

    # -- the loop ------------------------------------------------------------------------

    def wait_assigned(self, timeout: float) -> bool:
        """Block until the loop has been assigned partitions at least once."""
        return self._ready.wait(timeout)

    def run(self, stop: threading.Event) -> None:
        """Subscribe and process batches until `stop` is set; commits what is delivered on
        the way out. Raises OutageTooLong after an outage longer than the limit."""
        consumer = self._consumer = self.runtime.consumer(self.group)
        producer = self._producer = self.runtime.producer_of_own(**self.producer_extra)
        consumer.subscribe(self.subscription, on_assign=self._on_assign,
                           on_revoke=self._on_revoke, on_lost=self._on_lost)
        batches_since_commit = 0
        last_commit = time.monotonic()
        self.running = True
        try:
            while not stop.is_set():
                self.turned_at = time.monotonic()
                self.lag.update(consumer)
                messages = self._next_batch(consumer)
                if self._failed:
                    self._rewind(consumer)
                    continue
                if messages and not self._process(consumer, producer, messages):
                    continue
                if messages:
                    batches_since_commit += 1
                now = time.monotonic()
                if self._done and (batches_since_commit >= self.commit_every
                                   or now - last_commit >= self.commit_interval):
                    self._commit(consumer, producer)
                    batches_since_commit = 0
                    last_commit = now
            self._commit(consumer, producer)
        finally:
            self.running = False
            producer.flush(self.flush_timeout)
            consumer.close()
            self._consumer = self._producer = None

    def _next_batch(self, consumer: Consumer) -> list[Message]:
        """What is in the local queue now, up to batch_size; when it is empty, wait up to
        poll_timeout for the first record and take what came with it. consume(n, timeout)
        alone would hold a light stream's records for the whole timeout."""
        messages = consumer.consume(self.batch_size, 0)
        if messages:
            return messages
        first = consumer.poll(self.poll_timeout)
        if first is None:
            return []
        return [first, *consumer.consume(self.batch_size - 1, 0)]

    def _process(self, consumer: Consumer, producer: Producer,
                 messages: list[Message]) -> bool:
        """Run the step over one batch and produce its outputs; False if the batch must be
        tried again (an outage), having seeked its partitions back to where it began."""
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
        self._produce(producer, outputs)
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
        return True
