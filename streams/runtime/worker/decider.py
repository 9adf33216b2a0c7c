"""The decider of stateful rules: a step of a `BatchLoop` over every tenant's `rules` topic
(consumer group `<prefix>-rule-decider`), deciding counts, rate limits and scopes.

The reactor keys each match by `<rule>|<scope key>`, so one key's matches are in one
partition, in order, and one member decides them; different keys spread over the
partitions and so over the workers. Each rules partition's state (streams.core.rules.
snapshots) lives in memory, in a local SQLite store under `STREAMS_STATE_DIR/rules/<tenant>/
<partition>/` and in the tenant's compacted changelog `<prefix>.<tenant>.rulestate` (the
same partition number):

- `before_commit` (the batch's firings are delivered, the offsets not yet committed) returns
  the changed keys' records and the partition's position record for the changelog; once the
  loop has committed, they are written to the local store too. So neither the changelog nor
  the store ever holds a state whose firings were not delivered, and every record says the
  offset it reflects (`upto`).
- On assignment: open the store (checked; missing or corrupt: deleted, restored from the
  changelog's beginning), read the changelog from the store's checkpoint to its end, and
  assign the rules partition at max(committed offset, position): a match below its key's
  `upto` is skipped, so nothing is counted twice, and nothing past the position is lost.
- A rewind of the loop (a delivery failed) reloads the state from the store, which holds
  only what was committed, and the matches are decided again (the same firing ids).
- A one-partition rules topic of a deployment from before the changelog (committed offsets,
  no changelog record): its state is replayed from the topic, as the decider did before,
  once; its records then go to the changelog (docs/rules.md, migration).

Restore time grows with the live state (the keys in the changelog), not with the history.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition

from streams.adapters.kafka.log import header_value, reached_end
from streams.adapters.kafka.outputs import TICK_KEY, Output, tick_time
from streams.adapters.state import StateStore, open_store
from streams.core.events import Envelope
from streams.core.matching import Matcher
from streams.core.rules import Rule
from streams.core.rules.chains import clock_time
from streams.core.rules.engine import chain_due
from streams.core.rules.snapshots import PartitionState, entity_key, parse_entity_key
from streams.core.tenancy import (
    RULES,
    decider_group,
    parse_topic,
    rulestate_reader_group,
    rulestate_topic,
    tenants_pattern,
)
from streams.runtime.batch import BatchLoop
from streams.runtime.root import Runtime
from streams.runtime.worker.records import HEADER_RULE, RuleRecords, firing_outputs
from streams.settings import Settings

__all__ = ["DeciderStats", "RuleDecider", "store_path"]

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoint"
"""The store's named integer: the changelog offset up to which it holds every record."""
POSITION = "position"
"""The store's named integer: the rules offset its state reflects."""


def store_path(settings: Settings, tenant: str, partition: int) -> Path:
    """Where a rules partition's local store lives: `STREAMS_STATE_DIR/rules/<prefix>/
    <tenant>/<partition>/state.sqlite` (the prefix too: two deployments on one machine may
    have a tenant of one name)."""
    return settings.state_path(RULES, settings.topic_prefix, tenant, str(partition)) \
        / "state.sqlite"


@dataclass
class DeciderStats:
    """What the decider has done: restores, their time, keys restored, legacy replays,
    matches skipped as already reflected, stores found corrupt or missing."""

    restores: int = 0
    restore_seconds: float = 0.0
    restored_keys: int = 0
    changelog_records_read: int = 0
    legacy_replayed: int = 0
    skipped: int = 0
    stores_rebuilt: int = 0
    ticks: int = 0
    chains_ended: int = 0


@dataclass
class _Owned:
    """One rules partition this member owns: its state, store and changelog."""

    tenant: str
    topic: str
    partition: int
    changelog: str
    store: StateStore
    part: PartitionState
    durable: int = 0  # the position the store and changelog hold, confirmed
    pending: list[tuple[str, bytes | None]] | None = None
    pending_position: int = 0
    pending_commits: int = 0
    checkpoint_at: float = field(default_factory=time.monotonic)


class RuleDecider:
    """Decides stateful rules' matches, a step of the batch loop `batch_loop()` builds."""

    def __init__(self, runtime: Runtime, matcher: Matcher, records: RuleRecords, *,
                 checkpoint_interval: float = 10.0) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.matcher = matcher
        self.records = records
        self.checkpoint_interval = checkpoint_interval
        # How late (event time) a match may be and still find its windows: older count
        # entries and rate windows are forgotten, so state does not grow with history.
        self.grace = timedelta(seconds=runtime.settings.rule_state_grace)
        self.owned: dict[tuple[str, int], _Owned] = {}
        self.stats = DeciderStats()
        self.loop: BatchLoop | None = None
        self._consumer: Consumer | None = None
        self._rewinds = 0
        self._changelogs: set[str] = set()

    def batch_loop(self) -> BatchLoop:
        """The batch loop running this decider (made once)."""
        if self.loop is None:
            settings = self.settings
            self.loop = BatchLoop(
                self.runtime, group=decider_group(settings.topic_prefix),
                subscription=[tenants_pattern(RULES, settings.topic_prefix)],
                step=self.handle_batch, batch_size=settings.reactor_batch_size,
                poll_timeout=settings.batch_within, commit_interval=settings.commit_interval,
                flush_timeout=settings.flush_timeout, outage_limit=settings.outage_limit,
                name="rule-decider", on_assigned=self.on_assigned,
                on_revoked=self.on_revoked, before_commit=self.before_commit)
        return self.loop

    # -- the step ------------------------------------------------------------------------

    def handle_batch(self, messages: Sequence[Message]) -> list[Output]:
        """Decide a batch of forwarded matches; the firings to produce. Every record is
        decoded before any state changes, so a registry outage (RegistryUnavailable)
        leaves the state as it was for the loop's retry."""
        self._sync()
        now = datetime.now(UTC)  # bounds how far past it an event moves a clock
        decoded: list[tuple[_Owned, int, Rule | None, Envelope | None, datetime | None]] = []
        for msg in messages:
            if msg.error() is not None:
                continue
            owned = self.owned.get((msg.topic() or "", msg.partition() or 0))
            if owned is None:
                continue
            offset = msg.offset() or 0
            if msg.key() == TICK_KEY:
                tick = tick_time(msg.value())
                if tick is None:
                    log.warning("rule-decider: a tick without a time: %r",
                                (msg.value() or b"")[:40])
                decoded.append((owned, offset, None, None,
                                None if tick is None else clock_time(tick, now)))
                continue
            name = (header_value(msg.headers(), HEADER_RULE) or b"").decode()
            # A claim may name a backfill budget installed a moment ago: rule_now reads
            # the rulebook for it (this loop's thread may wait; the executor's may not).
            rule = self.matcher.rule_now(owned.tenant, name) if name else None
            envelope = None if rule is None else self.records.decode(
                msg.value(), owned.topic, owned.partition, offset)
            # Only completion rules' matches move the clock (other matches and budget
            # claims may be stamped when written, not when their events happened).
            at = None
            if envelope is not None and rule is not None and rule.when.completion is not None:
                at = clock_time(envelope.time, now)
            decoded.append((owned, offset, rule, envelope, at))
        outputs: list[Output] = []
        for owned, offset, rule, envelope, at in decoded:
            if envelope is None and at is not None:
                self.stats.ticks += 1
            # The clock moves first: a chain quiet up to this record's time ends before
            # the record is decided (an event of that chain is then late). After it, a
            # chain it made due on a clock already past (its events behind the clock by
            # more than the quiet period, or late events of an ended chain) ends at once.
            part = owned.part
            if at is not None:
                part.advance(at)
            if part.has_due():
                outputs += self._ended(owned, offset, emit=True)
            if rule is not None and envelope is not None:
                outputs += self._decide(part, offset, rule, envelope, emit=True)
                if part.has_due():
                    outputs += self._ended(owned, offset, emit=True)
            part.passed(offset)
        return outputs

    def _decide(self, part: PartitionState, offset: int, rule: Rule, envelope: Envelope,
                *, emit: bool) -> list[Output]:
        key = entity_key(rule.name, rule.scope_key(envelope))
        if not part.wants(key, offset):
            self.stats.skipped += 1  # reflected in the key's state already
            return []
        out: list[Output] = []
        state = part.state_of(key)
        for decision in self.matcher.decide(rule.name, envelope, state):
            if emit:
                out += firing_outputs(self.records, self.matcher, decision, envelope,
                                      stage="decider")
        part.applied(key, offset)
        part.expire(key, envelope.time - self.grace)
        completion = rule.when.completion
        if completion is not None:
            window = state.chains.get((rule.name, envelope.correlation_id))
            if window is not None:
                part.schedule(key, window.deadline(completion, self.grace))
        return out

    def _ended(self, owned: _Owned, offset: int, *, emit: bool) -> list[Output]:
        """The firings of the chains the partition's clock has made due (quiet periods
        over), as of the record at `offset`; chains grace past their last event are
        forgotten, also those of a rule this process does not have (now or any more)."""
        part = owned.part
        clock = part.clock
        out: list[Output] = []
        if clock is None:
            return out
        for key in part.due():
            state = part.states.get(key)
            if state is None or not state.chains:
                continue
            rule = self.matcher.rule(owned.tenant, parse_entity_key(key)[0])
            before = dict(state.chains)
            if rule is None or rule.when.completion is None:
                # Not (yet) known here: kept until grace past its last event, then dropped.
                for at, window in before.items():
                    forget = window.forget_at(self.grace)
                    if forget is not None and forget <= clock:
                        del state.chains[at]
                    else:
                        part.schedule(key, forget)
            else:
                for fire in chain_due(rule, state, clock, self.grace):
                    self.stats.chains_ended += 1
                    window = state.chains[(rule.name, fire.correlation_id)]
                    if emit:
                        out += firing_outputs(
                            self.records, self.matcher, fire,
                            window.cause(owned.tenant, fire.causation_id), stage="decider")
                for window in state.chains.values():
                    part.schedule(key, window.deadline(rule.when.completion, self.grace))
            if state.chains != before:
                # Ended or forgotten as of the records before `offset`: the record at
                # `offset` itself is still to be decided against it (and after a restore
                # it is, once).
                part.swept(key, offset)
        return out

    def _schedule_all(self, owned: _Owned) -> None:
        """Put every chain a restored partition holds on its clock's schedule (a rule this
        process does not have yet: at its forgetting time, when it is looked up again)."""
        for key, state in owned.part.states.items():
            for (name, _chain), window in state.chains.items():
                rule = self.matcher.rule(owned.tenant, name)
                completion = rule.when.completion if rule is not None else None
                owned.part.schedule(key, window.forget_at(self.grace) if completion is None
                                    else window.deadline(completion, self.grace))

    # -- the changelog -------------------------------------------------------------------

    def before_commit(self, partitions: set[tuple[str, int]]) -> list[Output]:
        """The changelog records of the partitions about to be committed (their firings
        are delivered): the changed keys and the position."""
        self._sync()
        loop = self.batch_loop()
        out: list[Output] = []
        for tp in sorted(partitions):
            owned = self.owned.get(tp)
            if owned is None:
                continue
            part = owned.part
            if not part.dirty and not part.empty and part.position == owned.durable \
                    and not part.clock_dirty:
                continue
            records = part.snapshot(owned.durable)
            out += [Output(owned.changelog, key.encode(), value, partition=owned.partition)
                    for key, value in records]
            owned.pending = (owned.pending or []) + records
            owned.pending_position = part.position
            owned.pending_commits = loop.stats.commits
        return out

    def _sync(self, *, final: bool = False) -> None:
        """Write what the loop has committed since to the local stores (`final`: with the
        changelog's end as their checkpoint, whenever it was last taken); after a rewind,
        take the state back to what the stores hold."""
        loop = self.batch_loop()
        for owned in self.owned.values():
            if owned.pending is not None and loop.stats.commits > owned.pending_commits:
                meta = {POSITION: owned.pending_position}
                checkpoint = self._checkpoint(owned, force=final)
                if checkpoint is not None:
                    meta[CHECKPOINT] = checkpoint
                owned.store.write(owned.pending, meta)
                owned.durable = owned.pending_position
                owned.pending = None
        if loop.stats.rewinds != self._rewinds:
            self._rewinds = loop.stats.rewinds
            for owned in self.owned.values():
                owned.pending = None
                owned.part = self._from_store(owned.store)
                self._schedule_all(owned)
                log.info("rule-decider: %s[%d] back to its stored state at %d after a rewind",
                         owned.topic, owned.partition, owned.part.position)

    def _checkpoint(self, owned: _Owned, *, force: bool = False) -> int | None:
        """The changelog's end now (every record before it is in the store once this
        write is done), at most every `checkpoint_interval` seconds; None otherwise."""
        now = time.monotonic()
        if self._consumer is None or (
                not force and now - owned.checkpoint_at < self.checkpoint_interval):
            return None
        owned.checkpoint_at = now
        try:
            _low, high = self._consumer.get_watermark_offsets(
                TopicPartition(owned.changelog, owned.partition),
                timeout=self.settings.admin_timeout, cached=False)
        except KafkaException:
            return None  # the next write tries again; a restore reads a little more
        return int(high)

    @staticmethod
    def _from_store(store: StateStore) -> PartitionState:
        part = PartitionState()
        for key, value in store.items():
            part.load(key, value)
        part.position = max(part.position, store.meta(POSITION) or 0)
        return part

    # -- rebalances ----------------------------------------------------------------------

    def on_assigned(self, consumer: Consumer,
                    partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Restore each assigned partition's state (store, then changelog); the partitions
        (given at their committed offsets) start at max(committed offset, position)."""
        self._consumer = consumer
        started = time.monotonic()
        committed = {(tp.topic, tp.partition): tp.offset for tp in partitions}
        opened: list[_Owned] = []
        for tp in partitions:
            parsed = parse_topic(tp.topic, self.settings.topic_prefix)
            if parsed is None:
                continue
            tenant = parsed[0]
            changelog = self._changelog(tenant, tp.topic)
            store = open_store(store_path(self.settings, tenant, tp.partition))
            if store.rebuilt:
                self.stats.stores_rebuilt += 1
            owned = _Owned(tenant, tp.topic, tp.partition, changelog, store,
                           self._from_store(store))
            opened.append(owned)
        self._restore(opened)
        assign: list[TopicPartition] = []
        for owned in opened:
            done = max(committed.get((owned.topic, owned.partition), -1), 0)
            if owned.part.position == 0 and not owned.part.states and done > 0:
                self._legacy_replay(owned, done)
            owned.durable = owned.part.position
            self._schedule_all(owned)
            self.owned[(owned.topic, owned.partition)] = owned
            assign.append(TopicPartition(owned.topic, owned.partition,
                                         max(done, owned.part.position)))
        took = time.monotonic() - started
        self.stats.restores += 1
        self.stats.restore_seconds = took
        if opened:
            log.info("rule-decider: restored %d partitions (%d keys) in %.2f s", len(opened),
                     sum(len(o.part.upto) for o in opened), took)
        return assign

    def _changelog(self, tenant: str, rules: str) -> str:
        topic = rulestate_topic(tenant, self.settings.topic_prefix)
        if topic not in self._changelogs:
            admin = self.runtime.admin
            admin.ensure_rulestate_topic(tenant, admin.partitions_of(rules))
            self._changelogs.add(topic)
        return topic

    def _restore(self, opened: list[_Owned]) -> None:
        """Read each partition's changelog from its store's checkpoint to its end, into
        its state and its store."""
        if not opened:
            return
        reader = self.runtime.reader(rulestate_reader_group(opened[0].changelog))
        try:
            ends: dict[tuple[str, int], int] = {}
            starts: list[TopicPartition] = []
            for owned in opened:
                tp = TopicPartition(owned.changelog, owned.partition)
                low, high = reader.get_watermark_offsets(
                    tp, timeout=self.settings.admin_timeout, cached=False)
                if (owned.store.meta(CHECKPOINT) or 0) > high:
                    # The store is ahead of the changelog's end: the topic was made again
                    # (a tenant deleted and created anew). It is not this changelog's cache.
                    log.warning("rule-decider: the store of %s[%d] is past its changelog's "
                                "end; rebuilding it", owned.topic, owned.partition)
                    owned.store.clear()
                    owned.part = PartitionState()
                    self.stats.stores_rebuilt += 1
                start = max(low, 0 if owned.store.rebuilt else
                            owned.store.meta(CHECKPOINT) or 0)
                if start < high:
                    ends[(owned.changelog, owned.partition)] = high
                    starts.append(TopicPartition(owned.changelog, owned.partition, start))
                else:
                    owned.store.write([], {CHECKPOINT: high})
            by_tp = {(o.changelog, o.partition): o for o in opened}
            read: dict[tuple[str, int], list[tuple[str, bytes | None]]] = {}
            if starts:
                reader.assign(starts)
            quiet_until = time.monotonic() + self.settings.replay_timeout
            done: set[tuple[str, int]] = set()
            while len(done) < len(ends):
                messages = reader.consume(10_000, 0.2)
                if not messages:
                    # What is left may be transaction markers or aborted records: a
                    # read_committed reader is never handed them, its position moves past.
                    done |= {key for key, end in ends.items() if key not in done
                             and reached_end(reader, key[0], key[1], end)}
                    if len(done) >= len(ends):
                        break
                    if time.monotonic() > quiet_until:
                        raise KafkaException(f"could not read the rule state changelog to "
                                             f"its end: {sorted(set(ends) - done)}")
                    continue
                quiet_until = time.monotonic() + self.settings.replay_timeout
                for msg in messages:
                    if msg.error() is not None:
                        continue
                    key = (msg.topic() or "", msg.partition() or 0)
                    end = ends.get(key)
                    offset = msg.offset() or 0
                    if end is None or offset >= end or key in done:
                        continue
                    read.setdefault(key, []).append(
                        ((msg.key() or b"").decode(), msg.value()))
                    if offset + 1 >= end:
                        done.add(key)
            for key, records in read.items():
                owned = by_tp[key]
                # One pass that decodes only each key's newest record: a tail read without
                # a local store holds each key many times.
                kept, unreadable = owned.part.restore(records)
                for name in unreadable:
                    log.warning("rule-decider: %s[%d]: a changelog record of %r cannot "
                                "be read; skipped", key[0], key[1], name)
                self.stats.changelog_records_read += len(records)
                owned.store.write(kept, {CHECKPOINT: ends[key],
                                         POSITION: owned.part.position})
            for owned in opened:
                self.stats.restored_keys += len(owned.part.upto)
        finally:
            reader.close()

    def _legacy_replay(self, owned: _Owned, upto: int) -> None:
        """The state of a partition decided before the changelog existed (a one-partition
        rules topic of an older deployment): replay its first `upto` records, deciding and
        producing nothing; the next commit writes its keys to the changelog."""
        if self.runtime.admin.partitions_of(owned.topic) != 1:
            log.error("rule-decider: %s[%d] has committed offsets but no rule state: its "
                      "keys' state before offset %d is lost (a rules topic of many "
                      "partitions is never replayed; docs/rules.md, migration)",
                      owned.topic, owned.partition, upto)
            owned.part.position = upto
            return
        reader = self.runtime.consumer_of(self.runtime.replay_reader_config(owned.topic))
        reader.assign([TopicPartition(owned.topic, owned.partition, OFFSET_BEGINNING)])
        part = owned.part
        done = 0
        try:
            while done < upto:
                messages = reader.consume(10_000, self.settings.replay_timeout)
                if not messages:
                    raise KafkaException(f"could not replay {owned.topic} up to {upto}")
                for msg in messages:
                    offset = msg.offset() or 0
                    if msg.error() is not None or offset >= upto:
                        continue
                    done = offset + 1
                    name = (header_value(msg.headers(), HEADER_RULE) or b"").decode()
                    rule = self.matcher.rule(owned.tenant, name) if name else None
                    envelope = None if rule is None else self.records.decode(
                        msg.value(), owned.topic, owned.partition, offset)
                    if rule is not None and envelope is not None:
                        self._decide(part, offset, rule, envelope, emit=False)
                    part.passed(offset)
        finally:
            reader.close()
        part.position = max(part.position, upto)
        self.stats.legacy_replayed += done
        log.info("rule-decider: replayed %s[%d] up to %d (no changelog yet); its %d keys go "
                 "to the changelog with the next commit", owned.topic, owned.partition, upto,
                 len(part.upto))

    def on_revoked(self, partitions: list[TopicPartition]) -> None:
        """Forget revoked (or lost) partitions, their committed state written to their
        stores first."""
        self._sync(final=True)
        for tp in partitions:
            owned = self.owned.pop((tp.topic, tp.partition), None)
            if owned is not None:
                owned.store.close()
