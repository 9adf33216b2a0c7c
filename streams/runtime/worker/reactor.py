"""Rules on Kafka, the batch step: decode each event, match it (streams.core.matching),
write firings of stateless rules and forward matches of stateful ones, then run the actions
this worker has (streams.runtime.worker.executor) before the batch is committed.

- Stateless rules (type, filters, sampling) fire straight from the step: it writes
  `rule_fired` and `run_started` into the chain of the event that matched.
- Stateful rules (counts, rate limits, scopes) need every matching event of a tenant in one
  place and in one order. The step forwards each match to the tenant's `rules` topic, keyed
  by `<rule>|<scope key>`, so each key's matches are in one partition, decided in order by
  the one decider that owns it (streams.runtime.worker.decider).
- Runs: for a `run_started` of an action registered in this worker, the step runs the action
  on the worker's event loop, with the rule's retry policy, before the batch is committed.
- The index (streams.adapters.kafka.index): the step writes the index entries of every event
  it takes, with the offsets its consumer gave them (a firing's and a run's, read back a
  batch after the step wrote them, as much as any other event's), and `before_commit`
  advances the tenants' index cursors over them (`IndexWriter`), so look-ups find what the
  workers wrote without catching up.
- Rules installed as data (streams.runtime.worker.follower): at the start of each batch the step
  applies the tenants' live rules as the worker's rulebook follower has them now. A rule new
  to this step is first caught up over the events this step already took past its
  installation point (read again from the events topic), so no event after the
  installation point is missed for having arrived before the worker heard of the rule.

Its clients come from the worker's Runtime, on first use.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import Message, TopicPartition

from streams.adapters.kafka.index import IndexWriter
from streams.adapters.kafka.log import header_value
from streams.adapters.kafka.outputs import Output, rule_tick
from streams.core.budgets import BUDGET_RULE_PREFIX, GRANT_ACTION
from streams.core.errors import StreamsError
from streams.core.events import RULE_FIRED, RUN_STARTED, Envelope
from streams.core.matching import Forward, Hit, Matcher, ReactorStats, is_stateful
from streams.core.rulebook import LiveRule
from streams.core.rules import RuleSet
from streams.core.rules.chains import clock_time
from streams.core.runs import ActionFn
from streams.core.tenancy import EVENTS, parse_topic, rules_catch_up_group, tenant_topics
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.root import Runtime
from streams.runtime.worker.decider import RuleDecider
from streams.runtime.worker.executor import RunExecutor
from streams.runtime.worker.follower import RulebookFollower
from streams.runtime.worker.records import RecentEvents, RuleRecords, firing_outputs

__all__ = ["Reactor", "ReactorStats", "is_stateful"]

log = logging.getLogger(__name__)

_PARTITIONS_TTL = 60.0
_TICK_STEP = timedelta(seconds=1)
"""A tenant's ticks go out when its newest event time moved this much (a second): quiet
periods are minutes, and a tick is one record per rules partition."""


_RULE_FIRED = RULE_FIRED.encode()


class Reactor:
    """The rules reactor agent's batch handler: match, fire or forward, run actions."""

    def __init__(
        self,
        runtime: Runtime,
        rules: RuleSet,
        actions: Mapping[str, ActionFn],
        *,
        client: StreamsClient,
        deps: Mapping[str, Any] | None = None,
    ) -> None:
        settings = runtime.settings
        self.client = client
        self.runtime = runtime
        self.settings = settings
        self.rules = rules
        self.stats = ReactorStats()
        self.matcher = Matcher(rules, self.stats)
        self.records = RuleRecords(runtime.serde, settings.topic_prefix, self.stats,
                                   codec=runtime.codec)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.rulebook: RulebookFollower | None = None
        self._live_version = 0
        self._live_tenants: set[str] = set()
        # Per events partition, the offset after the last record this step took: where a
        # catch-up of a newly live rule stops.
        self.taken: dict[tuple[str, int], int] = {}
        # Per tenant, the event time of the last ticks committed to its rules
        # partitions and of those sent since (taken as committed by `before_commit`: a batch
        # redone after a rewind or an abort sends its ticks again), and per rules topic its
        # partitions' count and when it was looked up (see `_ticks`).
        self._ticked: dict[str, datetime] = {}
        self._ticks_sent: dict[str, datetime] = {}
        self._rules_partitions: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()
        prefix = settings.topic_prefix

        def tenant_of(topic: str) -> str | None:
            parsed = parse_topic(topic, prefix)
            return parsed[0] if parsed is not None and parsed[1] == EVENTS else None

        self.index_writer = IndexWriter(
            lambda tenant, producer: runtime.index(tenant, producer=producer), tenant_of,
            lambda failed: runtime.producer_of_own(**{"delivery.report.only.error": True,
                                                      "on_delivery": failed}),
            flush_timeout=settings.flush_timeout) if settings.worker_index else None
        # What a run's reaction needs, where the run is live (see RecentEvents).
        self.recent = RecentEvents()
        self.executor = RunExecutor(
            rules, actions, client=lambda: client, emit=self.emit, deps=deps,
            recent=self.recent,
            action_timeout=settings.action_timeout,
            max_concurrent_runs=settings.max_concurrent_runs, stats=self.stats)

    async def emit(self, envelopes: Sequence[Envelope]) -> None:
        """Write envelopes to their events topics, in order; returns once the broker has them.

        Each awaits its own delivery report on the shared producer, as the workspace
        handle's appends do: a flush per call, in a thread, made every run in flight wait
        for all the others' records. What fails that way (the broker down past
        STREAMS_FEEDBACK_TIMEOUT) goes to the retrying delivery, which waits the outage out;
        a record written twice carries its derived event id twice, which readers fold once.
        """
        events = self.client.log
        for i, envelope in enumerate(envelopes):
            try:
                await events.append(envelope)
            except StreamsError:
                log.warning("emitting %s failed; delivering the rest with retries",
                            envelope.event_id, exc_info=True)
                await self.runtime.delivery.deliver(
                    [self.records.envelope(e) for e in envelopes[i:]])
                return

    def decider(self) -> RuleDecider:
        """The decider of this worker's stateful rules (a batch loop's step: run
        `decider().batch_loop()`), sharing this reactor's matcher and records."""
        return RuleDecider(self.runtime, self.matcher, self.records)

    def outputs(self, envelope: Envelope, raw: bytes | None,
                hits: Sequence[Hit] | None = None) -> list[Output]:
        """The records one event makes: forwards of stateful rules' matches, firings of
        stateless ones (of the rules in `hits` only, when given: `Matcher.match_plain`)."""
        out: list[Output] = []
        for item in self.matcher.match(envelope, hits):
            if isinstance(item, Forward):
                out.append(self.records.forward(item, raw))
            else:
                out += firing_outputs(self.records, self.matcher, item, envelope,
                                      stage="reactor")
        return out

    @staticmethod
    def may_run_actions(messages: Sequence[Message]) -> bool:
        """Whether `handle_batch` may run actions on this batch (it holds a `run_started`),
        and so take as long as they do: the loop commits its open transaction first."""
        started = RUN_STARTED.encode()
        return any(header_value(m.headers(), "event_type") == started for m in messages)

    def handle_batch(self, messages: Sequence[Message]) -> list[Output]:
        """The batch data path's step (runs in the loop's thread): match a batch of
        confluent-kafka messages and return the firings and forwards to produce; the runs of
        actions this worker has are executed on the worker's event loop (`bind`) before it
        returns, so the batch is committed only after they finished."""
        with self._lock:
            return self._handle_batch(messages)

    def _handle_batch(self, messages: Sequence[Message]) -> list[Output]:
        outputs: list[Output] = self._apply_live()
        runs: list[Envelope] = []
        newest: dict[str, datetime] = {}
        wants = self.matcher.wants
        taken = self.taken
        index = self.index_writer
        recent = self.recent
        # Firings are remembered for their runs' reactions only when this worker runs
        # actions (a firing's run lands in its chain, on this partition, just after it);
        # the budgets' grants every worker runs need none (they read nothing).
        firings = _RULE_FIRED if self.executor.actions.keys() - {GRANT_ACTION} else None
        for msg in messages:
            if msg.error() is not None:
                continue
            taken[(msg.topic() or "", msg.partition() or 0)] = (msg.offset() or 0) + 1
            self.stats.events += 1
            event_type = header_value(msg.headers(), "event_type")
            if not wants(event_type):
                if index is not None:
                    index.index(msg)
                if event_type == firings:
                    fired = self.records.decode(msg.value(), msg.topic() or "",
                                                msg.partition() or 0, msg.offset() or 0)
                    if fired is not None:
                        recent.add(fired)
                continue
            raw = msg.value()
            partition, offset = msg.partition() or 0, msg.offset() or 0
            read = self.records.read(raw, partition, offset)
            if read is None:
                if index is not None:
                    index.index(msg)  # skipped for its entries too, if not an envelope
                continue
            record, plain = read
            if index is not None:
                index.index(msg, record=record)
            # Matched on the plain record first: an Envelope only for an event some rule
            # matches or may match, or a run to start (or one the plain form cannot hold).
            hits = None if plain is None else self.matcher.match_plain(plain)
            if plain is not None and not hits and plain.event_type != RUN_STARTED:
                if firings is not None and plain.event_type == RULE_FIRED:
                    fired = self.records.envelope_of(record, partition, offset)
                    if fired is not None:  # a rule watches firings; its run may be ours
                        recent.add(fired)
                continue
            envelope = self.records.envelope_of(record, partition, offset)
            if envelope is None:
                continue
            recent.add(envelope)
            if self.matcher.moves_clock(envelope):
                seen = newest.get(envelope.tenant)
                if seen is None or envelope.time > seen:
                    newest[envelope.tenant] = envelope.time
            if self.executor.runs_here(envelope):
                runs.append(envelope)
            outputs += self.outputs(envelope, raw, hits)
        if newest:
            outputs += self._ticks(newest)
        if runs:
            self.stats.run_batches += 1
            if self.loop is None:
                raise RuntimeError("Reactor.bind(loop) was not called before runs arrived")
            execute = self.executor.execute

            async def run_all() -> None:
                await asyncio.gather(*(execute(r) for r in runs))

            asyncio.run_coroutine_threadsafe(run_all(), self.loop).result()
        return outputs

    def _ticks(self, newest: Mapping[str, datetime]) -> list[Output]:
        """Ticks to every partition of the rules topic of each tenant whose newest event
        time (of the events its completion rules watch: `Matcher.moves_clock`; at most
        FUTURE_SKEW past the wall clock) moved a second or more since its last committed
        ticks: the decider's clocks move on when a partition's own keys have gone quiet."""
        out: list[Output] = []
        now = datetime.now(UTC)
        for tenant, at in newest.items():
            at = clock_time(at, now)
            ticked = self._ticked.get(tenant)
            if ticked is not None and at - ticked < _TICK_STEP:
                continue
            topic = tenant_topics(tenant, self.settings.topic_prefix).rules
            count = self._partitions_of(topic)
            out += [rule_tick(topic, p, at) for p in range(count)]
            self._ticks_sent[tenant] = max(at, self._ticks_sent.get(tenant, at))
        return out

    def _partitions_of(self, topic: str) -> int:
        """A rules topic's partition count, looked up again after a minute (partitions
        added to it get ticks too) and until the topic answers with some."""
        count, when = self._rules_partitions.get(topic, (0, 0.0))
        if not count or time.monotonic() - when > _PARTITIONS_TTL:
            count = self.runtime.admin.partitions_of(topic)
            self._rules_partitions[topic] = (count, time.monotonic())
        return count

    def close(self) -> None:
        """Close what the step holds of its own (the index writer's readers, stores and
        producer); call once its loop has stopped."""
        if self.index_writer is not None:
            self.index_writer.close()

    def before_commit(self, partitions: set[tuple[str, int]]) -> list[Output]:
        """The loop's hook before it commits `partitions`: write the chains' `last:` index
        entries kept since their last commit, then advance their index cursors over the
        entries this step wrote (delivered first). Produces nothing of the loop's."""
        with self._lock:  # the ticks sent are about to be committed with the batches
            for tenant, at in self._ticks_sent.items():
                self._ticked[tenant] = max(at, self._ticked.get(tenant, at))
            self._ticks_sent.clear()
        if self.index_writer is not None:
            with self._lock:
                self.index_writer.checkpoint(partitions)
        return []

    def assigned(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        """The loop's hook on assignment: the new partitions start a new indexed span."""
        if self.index_writer is not None:
            with self._lock:
                self.index_writer.forget([(tp.topic, tp.partition) for tp in partitions])

    def revoked(self, partitions: list[TopicPartition]) -> None:
        """The loop's hook on revocation: forget the partitions' indexed spans."""
        self.assigned(None, partitions)

    def follow(self, rulebook: RulebookFollower) -> None:
        """Match the tenants' rules installed as data, as `rulebook` has them: the follower
        calls `refresh` when they change, and each batch checks for a change too."""
        self.rulebook = rulebook
        self.matcher.fallback = rulebook.find
        self.matcher.fallback_now = rulebook.find_now
        self.executor.installed = rulebook.entry
        self.executor.installed_now = rulebook.entry_now
        self.executor.installed_current = rulebook.entry_current
        self.executor.lookup = self.matcher.rule
        rulebook.on_change = self.refresh

    def refresh(self) -> None:
        """Apply the follower's live rules now, between batches (an idle step would
        otherwise wait for its next event), and deliver the catch-ups' outputs. Holding the
        step's lock, so each event is matched with the rules before or after, never both."""
        with self._lock:
            outputs = self._apply_live()
            if outputs:
                self.runtime.delivery.send_sync(outputs)

    def _apply_live(self) -> list[Output]:
        """Give the matcher the follower's live rules when they changed; the outputs of the
        catch-ups of rules new to this step."""
        if self.rulebook is None:
            return []
        version, live = self.rulebook.snapshot()
        if version == self._live_version:
            return []
        self._live_version = version
        out: list[Output] = []
        for tenant in set(live) | self._live_tenants:
            new = live.get(tenant, {})
            old = self.matcher.live(tenant)
            # New, or live again from another installation point. A rule pointed at another
            # action with its installation point kept (`streams rules promote`) is not: the
            # events this step took went to the old action already, the rest go to the new.
            # A budget's rule is not caught up: its claims never reach the events topic.
            added = [found for name, found in new.items() if (name not in old
                     or old[name].entry.start != found.entry.start)
                     and not name.startswith(BUDGET_RULE_PREFIX)]
            self.matcher.set_live(tenant, new)
            for found in added:
                out += self._catch_up(tenant, found)
        self._live_tenants = set(live)
        return out

    def _catch_up(self, tenant: str, found: LiveRule) -> list[Output]:
        """Match one newly live rule over the events this step took before it had the rule
        and at or past its installation point: read again, per partition, from the
        installation point to where this step is."""
        events = tenant_topics(tenant, self.settings.topic_prefix).events
        todo = {p: (found.entry.start.get(p, 0), upto) for (topic, p), upto in self.taken.items()
                if topic == events and upto > found.entry.start.get(p, 0)}
        if not todo:
            return []
        out: list[Output] = []
        consumer = self.runtime.reader(rules_catch_up_group(self.settings.topic_prefix))
        try:
            consumer.assign([TopicPartition(events, p, lo) for p, (lo, _hi) in todo.items()])
            # consume(n, t) waits for n records or t: ask often, give up after a silence.
            quiet_until = time.monotonic() + self.settings.replay_timeout
            while todo:
                messages = consumer.consume(500, 0.05)
                if not messages:
                    if time.monotonic() > quiet_until:
                        log.error("catch-up of rule %s for %s stopped short of %s",
                                  found.rule.name, tenant, todo)
                        break
                    continue
                quiet_until = time.monotonic() + self.settings.replay_timeout
                for msg in messages:
                    span = todo.get(msg.partition() or 0)
                    offset = msg.offset() or 0
                    if msg.error() is not None or span is None or offset >= span[1]:
                        continue
                    if offset + 1 >= span[1]:
                        del todo[msg.partition() or 0]
                    raw = msg.value()
                    envelope = self.records.decode(raw, events, msg.partition() or 0, offset)
                    if envelope is None:
                        continue
                    self.stats.caught_up += 1
                    for item in self.matcher.match_live(found, envelope):
                        if isinstance(item, Forward):
                            out.append(self.records.forward(item, raw))
                        else:
                            out += [self.records.envelope(e)
                                    for e in self.matcher.fired(item, envelope)]
        finally:
            consumer.close()
        log.info("rule %s live for %s: caught up, %d outputs", found.rule.name, tenant, len(out))
        return out

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The event loop the actions run on (the worker's)."""
        self.loop = loop
