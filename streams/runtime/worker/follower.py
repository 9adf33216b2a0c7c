"""The follower a worker reads its tenants' live rules with: every tenant's rulebook read at
start, then followed in a thread, so installs and archives reach its reactor within about a
second (streams.runtime.jobs.rules installs and archives them)."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from streams.adapters.kafka.log import reached_end
from streams.core.app_events import AppEventTypes
from streams.core.budgets import BUDGET_RULE_PREFIX
from streams.core.errors import KafkaUnavailable, ValidationFailed
from streams.core.rulebook import LiveRule, RulebookEntry, live_rules
from streams.core.tenancy import (
    RULEBOOK,
    rulebook_follower_group,
    rulebook_tenant,
    rulebook_topic,
    tenants_pattern,
)
from streams.runtime.client.entries import read_entries
from streams.runtime.root import Runtime

__all__ = ["RulebookFollower"]

BACKFILL_BUDGETS = f"{BUDGET_RULE_PREFIX}backfill."
"""What the rules of backfill budgets are named (streams.core.budgets.backfill_budget)."""

log = logging.getLogger(__name__)


class RulebookFollower:
    """A worker's view of its tenants' live rules: every tenant's rulebook read at start
    (`load`), then followed in a thread (`run`), new tenants' rulebooks found by listing
    topics every `discover_every` seconds.

    `snapshot()` gives the live rules per tenant and a version that changes with them; the
    reactor applies a new version at its next batch. An entry this worker cannot build (an
    undeclared app event type, a name its rules modules use) is logged with the reason and
    left out; a rule whose action this worker lacks is logged and kept live (another worker
    may have the action; the run waits for it).
    """

    def __init__(self, runtime: Runtime, *, reserved: Collection[str] = (),
                 actions: Collection[str] = (), types: AppEventTypes | None = None,
                 discover_every: float = 2.0) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.reserved = set(reserved)
        self.actions = set(actions)
        self.types = types
        self.discover_every = discover_every
        self.pattern = re.compile(tenants_pattern(RULEBOOK, self.settings.topic_prefix))
        self.version = 0
        self.refused: dict[tuple[str, str], str] = {}
        self._entries: dict[str, dict[str, RulebookEntry]] = {}
        self._live: dict[str, dict[str, LiveRule]] = {}
        self._read_to: dict[str, int] = {}  # per rulebook topic, the offset applied up to
        self._ends: Consumer | None = None  # asks where rulebooks end (`entry_current`)
        self._ends_lock = threading.Lock()
        self._assigned: set[str] = set()
        self._consumer: Consumer | None = None
        self._warned: set[tuple[str, str, str]] = set()
        self.on_change: Callable[[], None] | None = None

    def snapshot(self) -> tuple[int, dict[str, dict[str, LiveRule]]]:
        """The version and the live rules per tenant (not to be changed)."""
        return self.version, self._live

    def find(self, tenant: str, name: str) -> LiveRule | None:
        """A tenant's live rule by name, as the follower has it now."""
        return self._live.get(tenant, {}).get(name)

    def entry(self, tenant: str, name: str) -> RulebookEntry | None:
        """A tenant's newest entry of rule `name` (live or archived) as the follower has it
        now: no I/O."""
        return self._entries.get(tenant, {}).get(name)

    def entry_now(self, tenant: str, name: str) -> RulebookEntry | None:
        """`entry`, and on a miss the tenant's rulebook read to its end now (blocking). An
        install writes the rule's entry before any of its firings, so a run of a rule
        installed a moment ago, read before the follower's tail got to the entry, still
        finds it (a backfill budget rides on it: a run must not miss it)."""
        found = self.entry(tenant, name)
        return found if found is not None else self._read(tenant).get(name)

    def entry_current(self, tenant: str, name: str, wait: float = 2.0) -> RulebookEntry | None:
        """The entry as the rulebook holds it now (blocking): the follower's, once its tail
        has read the tenant's rulebook up to the end offset asked for here (waiting up to
        `wait` seconds for it), else the rulebook read there and then. For a backfill run
        whose entry, as the follower has it, has no budget: a repeat install may have just
        given it one, written before the run's firing."""
        topic = rulebook_topic(tenant, self.settings.topic_prefix)
        with self._ends_lock:
            # A client of its own that never fetches: the tail's consumer is busy in its
            # own thread (a call on it from another waited behind its consume).
            if self._ends is None:
                self._ends = self.runtime.reader(
                    rulebook_follower_group(self.settings.topic_prefix))
            try:
                _low, high = self._ends.get_watermark_offsets(
                    TopicPartition(topic, 0), timeout=self.settings.admin_timeout,
                    cached=False)
            except KafkaException as exc:
                raise KafkaUnavailable(f"cannot ask where {topic} ends: {exc}; check the "
                                       "broker") from exc
        deadline = time.monotonic() + wait
        while self._read_to.get(topic, 0) < high:
            if time.monotonic() >= deadline:
                return self._read(tenant).get(name)
            time.sleep(0.02)
        return self.entry(tenant, name)

    def find_now(self, tenant: str, name: str) -> LiveRule | None:
        """`find`, and for a backfill budget's rule the follower has not made live yet, its
        rule from the entries the follower has, or else from the tenant's rulebook read
        there and then (blocking): the decider may get a claim on a budget installed a
        moment ago. Other names are never read for (a forwarded match of a rule removed
        long ago would read the rulebook on every record)."""
        found = self.find(tenant, name)
        if found is not None or not name.startswith(BACKFILL_BUDGETS):
            return found
        rules, _refused = live_rules(list(self._entries.get(tenant, {}).values()),
                                     reserved=self.reserved, types=self.types)
        if name not in rules:
            rules, _refused = live_rules(self._read(tenant).values(), reserved=self.reserved,
                                         types=self.types)
        return rules.get(name)

    def _read(self, tenant: str) -> dict[str, RulebookEntry]:
        log.info("tenant %s: reading its rulebook now (a rule not followed yet)", tenant)
        return read_entries(self.runtime, rulebook_topic(tenant, self.settings.topic_prefix),
                            RulebookEntry.decode)

    def _consumer_of(self) -> Consumer:
        if self._consumer is None:
            self._consumer = self.runtime.reader(
                rulebook_follower_group(self.settings.topic_prefix))
        return self._consumer

    def _discover(self) -> list[str]:
        consumer = self._consumer_of()
        meta = consumer.list_topics(timeout=self.settings.admin_timeout)
        new = sorted(t for t in meta.topics if self.pattern.match(t) and t not in self._assigned)
        if new:
            consumer.incremental_assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in new])
            self._assigned.update(new)
            log.info("following the rulebooks %s", ", ".join(new))
        return new

    def _apply(self, messages: list[Any]) -> None:
        changed: set[str] = set()
        read_to: dict[str, int] = {}
        for msg in messages:
            if msg.error() is not None:
                continue
            tenant = rulebook_tenant(msg.topic() or "", self.settings.topic_prefix)
            if tenant is None:
                continue
            read_to[msg.topic() or ""] = (msg.offset() or 0) + 1
            key = (msg.key() or b"").decode()
            book = self._entries.setdefault(tenant, {})
            value = msg.value()
            if value is None:
                book.pop(key, None)
            else:
                try:
                    book[key] = RulebookEntry.decode(value)
                except ValidationFailed as exc:
                    log.error("tenant %s: rulebook entry %r refused: %s", tenant, key, exc)
                    continue
            changed.add(tenant)
        # After the entries above are applied: `entry_current` trusts `entry` from here.
        self._read_to.update(read_to)
        if not changed:
            return
        live = dict(self._live)
        for tenant in changed:
            rules, refused = live_rules(self._entries[tenant].values(), reserved=self.reserved,
                                        types=self.types)
            for name, reason in refused.items():
                if self.refused.get((tenant, name)) != reason:
                    log.error("tenant %s: installed rule %r is not live in this worker: %s",
                              tenant, name, reason)
                self.refused[(tenant, name)] = reason
            for name, found in rules.items():
                self.refused.pop((tenant, name), None)
                action = found.rule.then.name
                if action not in self.actions and (tenant, name, action) not in self._warned:
                    self._warned.add((tenant, name, action))
                    log.warning("tenant %s: installed rule %r runs action %r, which this "
                                "worker does not have (its --rules modules' ACTIONS): its "
                                "runs wait for a worker that has it", tenant, name, action)
            live[tenant] = rules
        self._live = live
        self.version += 1
        log.info("live rules now: %s", {t: sorted(r) for t, r in live.items() if t in changed})
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception:  # the next batch applies them again; the follower goes on
                log.exception("applying the live rules failed")

    def load(self, timeout: float = 30.0) -> None:
        """Read every tenant's rulebook to its end (the worker calls this before its loops
        start, so it begins with the rules live now)."""
        consumer = self._consumer_of()
        self._discover()
        ends: dict[str, int] = {}
        for topic in self._assigned:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0),
                                                        timeout=self.settings.admin_timeout)
            if high > 0:
                ends[topic] = high
        deadline = time.monotonic() + timeout
        while ends and time.monotonic() < deadline:
            messages = consumer.consume(500, 0.2)
            self._apply(messages)
            if not messages:  # past transaction markers, should a rulebook have any
                for topic in [t for t, e in ends.items() if reached_end(consumer, t, 0, e)]:
                    ends.pop(topic)
            for msg in messages:
                if msg.error() is None and (msg.offset() or 0) + 1 >= ends.get(msg.topic() or "",
                                                                                 0):
                    ends.pop(msg.topic() or "", None)
        if ends:
            raise KafkaUnavailable(f"could not read the rulebooks {sorted(ends)} within "
                                   f"{timeout} s; check the broker")

    def run(self, stop: threading.Event) -> None:
        """Follow the rulebooks until `stop` (blocking; the worker runs it in a thread)."""
        last = 0.0
        try:
            while not stop.is_set():
                now = time.monotonic()
                if now - last >= self.discover_every:
                    try:
                        self._discover()
                    except KafkaException:
                        log.warning("rulebook discovery failed; trying again", exc_info=True)
                    last = now
                self._apply(self._consumer_of().consume(500, 0.2))
        finally:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None
            with self._ends_lock:
                if self._ends is not None:
                    self._ends.close()
                    self._ends = None
