"""Rules on Kafka: matching in the worker's Faust agent, stateful decisions in one decider per
tenant, and runs of the actions with retries and dead letters.

- Stateless rules (type, filters, sampling) fire straight from the reactor agent: it writes
  `rule_fired` and `run_started` into the chain of the event that matched.
- Stateful rules (counts, rate limits, scopes) need every matching event of a tenant in one
  place and in one order. The agent forwards each match to the tenant's `rules` topic, which
  has one partition, so exactly one decider (a consumer group member) owns it. The decider
  keeps counts and rate windows in memory and rebuilds them after a restart by replaying the
  topic up to its committed offset through the same pure engine, so its decisions do not
  depend on which worker makes them or when it started: the limits are exact across workers
  and restarts.
- Runs: when the agent sees a `run_started` for an action registered in this worker, it runs
  the action, with the rule's retry policy, before the batch is acked. An exception is a
  failed attempt (`run_failed`, then `run_retried` or `run_dead_lettered`), never a lost
  event. Every id is derived, so a repeat after a crash carries the same ids.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition

from streams.adapters.avro.codec import envelope_from_record
from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.delivery import Delivery
from streams.adapters.kafka.log import envelope_headers, group_consumer, header_value
from streams.adapters.kafka.outputs import Output
from streams.core.errors import SchemaError, StreamsError
from streams.core.events import AppEvent, Envelope, RunStarted, Seq
from streams.core.ids import scope_key
from streams.core.rules import Fire, Rule, RuleSet, RuleState, Throttled, evaluate
from streams.core.runs import (
    ActionFn,
    Reaction,
    attempt_outcomes,
    fire_envelopes,
    rule_actor,
)
from streams.core.tenancy import parse_topic, tenant_topics
from streams.runtime.workspace import StreamsClient
from streams.settings import Settings

log = logging.getLogger(__name__)

HEADER_RULE = "rule"


def is_stateful(rule: Rule) -> bool:
    """Whether a rule's decision depends on other events (count, rate limit, scope)."""
    when = rule.when
    return when.counting is not None or when.rate_limit is not None or when.scope_by is not None


@dataclass
class ReactorStats:
    """What the reactor and decider have done."""

    events: int = 0
    matched: int = 0
    forwarded: int = 0
    fired: int = 0
    throttled: int = 0
    runs: int = 0
    succeeded: int = 0
    failed_attempts: int = 0
    dead_lettered: int = 0
    undecodable: int = 0
    per_rule: dict[str, int] = field(default_factory=dict)


class Reactor:
    """Applies rules to events and runs actions; shared by the agent and the decider."""

    def __init__(
        self,
        settings: Settings,
        serde: AvroSerde,
        rules: RuleSet,
        actions: Mapping[str, ActionFn],
        *,
        client: StreamsClient | None = None,
        deps: Mapping[str, Any] | None = None,
        action_timeout: float = 300.0,
        max_concurrent_runs: int = 32,
    ) -> None:
        self.settings = settings
        self.serde = serde
        self.rules = rules
        self.actions = dict(actions)
        self.deps = dict(deps or {})
        self.client = client or StreamsClient(settings, types=serde.types)
        self.delivery = Delivery(settings)
        self.action_timeout = action_timeout
        self.stats = ReactorStats()
        self._runs = asyncio.Semaphore(max_concurrent_runs)
        self._scopes: dict[str, asyncio.Lock] = {}
        # Rules by the event type they watch, so an event is checked only against its own.
        self._by_type: dict[str, list[Rule]] = {}
        self._any_app_event: list[Rule] = []
        # Each rule alone, for the engine: built once, not per event.
        self.alone = {rule.name: RuleSet([rule]) for rule in rules}
        self._stateful = {rule.name for rule in rules if is_stateful(rule)}
        for rule in rules:
            source = rule.when.source
            if source is AppEvent:
                self._any_app_event.append(rule)
            else:
                name = source if isinstance(source, str) else source.event_type
                self._by_type.setdefault(name, []).append(rule)
        self._wanted = {t.encode() for t in self._by_type} | {b"run_started"}

    # -- the agent's side --------------------------------------------------------------

    async def handle(self, messages: Sequence[Any]) -> None:
        """Match a batch of events, fire or forward, run actions; returns when every output
        is on the broker and every run of the batch has finished."""
        outputs: list[Output] = []
        runs: list[Envelope] = []
        for msg in messages:
            self.stats.events += 1
            event_type = header_value(msg.headers, "event_type")
            if not self._any_app_event and event_type is not None \
                    and event_type not in self._wanted:
                continue
            envelope = self.decode(msg.value, msg.topic, msg.partition, msg.offset)
            if envelope is None:
                continue
            if isinstance(envelope.event, RunStarted) and envelope.event.attempt == 1 \
                    and envelope.event.action in self.actions:
                runs.append(envelope)
            outputs += self.match(envelope, msg.value)
        await self.delivery.deliver(outputs)
        if runs:
            await asyncio.gather(*(self.execute(r) for r in runs))

    def decode(self, value: bytes | None, topic: str, partition: int,
               offset: int) -> Envelope | None:
        """The envelope of a record, or None (counted) if it cannot be decoded."""
        try:
            record = self.serde.decode(value or b"", topic)
            return envelope_from_record(record, Seq(partition=partition, offset=offset))
        except (SchemaError, KeyError, TypeError, ValueError):
            self.stats.undecodable += 1  # the feedback mirror dead-letters these
            return None

    def match(self, envelope: Envelope, raw: bytes | None) -> list[Output]:
        """Outputs for one event: firings of stateless rules, forwards of stateful ones."""
        out: list[Output] = []
        candidates = self._by_type.get(envelope.event_type, [])
        if self._any_app_event and isinstance(envelope.event, AppEvent):
            candidates = candidates + self._any_app_event
        for rule in candidates:
            stateful = rule.name in self._stateful
            try:
                # A stateless rule's decision is its match, made by the engine itself.
                decisions = [] if stateful else evaluate(self.alone[rule.name], envelope,
                                                         RuleState())
                matched = rule.matches(envelope) if stateful else bool(decisions)
            except Exception:  # a rule's own predicate failed: that rule does not match
                log.exception("rule %s raised on %s", rule.name, envelope.event_id)
                continue
            if not matched:
                continue
            self.stats.matched += 1
            if stateful:
                self.stats.forwarded += 1
                rules_topic = tenant_topics(envelope.tenant, self.settings.topic_prefix).rules
                out.append(Output(rules_topic, rule.name.encode(), raw or b"",
                                  [(HEADER_RULE, rule.name.encode()),
                                   ("event_type", envelope.event_type.encode())]))
            for decision in decisions:
                out += self.decision_outputs(decision, envelope)
        return out

    def decision_outputs(self, decision: Fire | Throttled, cause: Envelope) -> list[Output]:
        """The records a decision writes: for a firing, `rule_fired` and `run_started`."""
        if isinstance(decision, Throttled):
            self.stats.throttled += 1
            return []
        self.stats.fired += 1
        self.stats.per_rule[decision.rule.name] = \
            self.stats.per_rule.get(decision.rule.name, 0) + 1
        return [self.envelope_output(e) for e in fire_envelopes(decision, cause)]

    def envelope_output(self, envelope: Envelope) -> Output:
        """An envelope as a record for its tenant's events topic, keyed by its chain."""
        topic = tenant_topics(envelope.tenant, self.settings.topic_prefix).events
        return Output(topic, envelope.correlation_id.encode(),
                      self.serde.encode_envelope(envelope, topic), envelope_headers(envelope))

    # -- runs ----------------------------------------------------------------------------

    async def execute(self, started: Envelope) -> None:
        """Run one run's action to success or to its dead letter, recording every attempt."""
        run = started.event
        assert isinstance(run, RunStarted)
        rule = self.rules.get(run.rule)
        retry = rule.then.retry if rule is not None else None
        scope = scope_key(run.scope)
        lock = self._scopes.setdefault(f"{started.tenant}|{run.rule}|{scope}", asyncio.Lock())
        async with self._runs, lock:
            self.stats.runs += 1
            attempt = 1
            while True:
                error: str | None = None
                output: Mapping[str, Any] | None = None
                try:
                    reaction = await self.reaction(started, attempt)
                    output = await asyncio.wait_for(self.actions[run.action](reaction),
                                                    self.action_timeout)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # an action's failure is an attempt's outcome
                    error = f"{type(exc).__name__}: {exc}"
                will_retry = error is not None and retry is not None and \
                    retry.retries_after(attempt)
                delay = retry.delay(attempt).total_seconds() if will_retry and retry else 0.0
                outcomes = attempt_outcomes(started, attempt=attempt, error=error,
                                            output=output, will_retry=will_retry,
                                            delay_ms=int(delay * 1000))
                await self.delivery.deliver([self.envelope_output(e) for e in outcomes])
                if error is None:
                    self.stats.succeeded += 1
                    return
                self.stats.failed_attempts += 1
                if not will_retry:
                    self.stats.dead_lettered += 1
                    return
                await asyncio.sleep(delay)
                attempt += 1

    async def reaction(self, started: Envelope, attempt: int) -> Reaction:
        """The reaction an action gets: its run, the matched events, its workspace."""
        run = started.event
        assert isinstance(run, RunStarted)
        log_view = self.client.tenant_log(started.tenant)
        fired = log_view.by_id.get(started.causation_id or "")
        if fired is None or any(i not in log_view.by_id
                                for i in getattr(fired.event, "matched", [])):
            # Only read the log when this process has not seen the firing's events yet.
            await log_view.catch_up()
            fired = log_view.by_id.get(started.causation_id or "")
        matched_ids = list(getattr(fired.event, "matched", [])) if fired else []
        matched = [log_view.by_id[i] for i in matched_ids if i in log_view.by_id]
        workspace = self.client.workspace(started.tenant, started.workspace,
                                          actor=rule_actor(run.rule))
        return Reaction(run=run, started=started, events=matched, workspace=workspace,
                        attempt=attempt, deps=self.deps)

    # -- the decider ---------------------------------------------------------------------

    def decider(self, group: str) -> Decider:
        """The decider of stateful rules for this worker's group."""
        return Decider(self, group)


class Decider:
    """Owns the tenants' `rules` topics (one partition each) and decides stateful rules."""

    def __init__(self, reactor: Reactor, group: str) -> None:
        self.reactor = reactor
        settings = reactor.settings
        self.settings = settings
        self.states: dict[str, RuleState] = {}
        self.replayed: dict[str, int] = {}
        self._error: BaseException | None = None
        self.consumer = group_consumer(settings, group)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        try:
            committed = consumer.committed(partitions, timeout=15.0)
            for tp in committed:
                parsed = parse_topic(tp.topic, self.settings.topic_prefix)
                if parsed is None:
                    continue
                self.states[parsed[0]] = self._rebuild(tp.topic, max(tp.offset, 0))
            consumer.assign(partitions)
        except Exception as exc:
            self._error = exc

    def _rebuild(self, topic: str, upto: int) -> RuleState:
        """Replay the decisions made before `upto` through the engine, producing nothing."""
        state = RuleState()
        if upto <= 0:
            return state
        reader = Consumer({"bootstrap.servers": self.settings.bootstrap_servers,
                           "group.id": f"{topic}.rebuild", "enable.auto.commit": False})
        reader.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        done = 0
        try:
            while done < upto:
                msg = reader.poll(5.0)
                if msg is None:
                    raise KafkaException(f"could not replay {topic} up to {upto}")
                if msg.error():
                    continue
                offset = msg.offset() or 0
                if offset >= upto:
                    break
                done = offset + 1
                self._decide(msg, state)
        finally:
            reader.close()
        self.replayed[topic] = done
        log.info("rebuilt rule state of %s from %d decisions", topic, done)
        return state

    def _decide(self, msg: Message, state: RuleState,
                ) -> tuple[Envelope | None, list[Fire | Throttled]]:
        rule = self.reactor.rules.get((header_value(msg.headers(), HEADER_RULE) or b"").decode())
        if rule is None:
            return None, []  # a rule this worker no longer has
        envelope = self.reactor.decode(msg.value(), msg.topic() or "", msg.partition() or 0,
                                        msg.offset() or 0)
        if envelope is None:
            return None, []
        return envelope, list(evaluate(self.reactor.alone[rule.name], envelope, state))

    def run(self, stop: threading.Event) -> None:
        """Decide until `stop` is set (blocking; the worker runs it in a thread)."""
        prefix = self.settings.topic_prefix.replace(".", "\\.")
        self.consumer.subscribe([f"^{prefix}\\.[a-z][a-z0-9-]*\\.rules$"],
                                on_assign=self._on_assign)
        try:
            while not stop.is_set():
                if self._error is not None:
                    raise self._error
                messages = self.consumer.consume(200, 0.2)
                if not messages:
                    continue
                outputs: list[Output] = []
                ends: dict[tuple[str, int], int] = {}
                for msg in messages:
                    if msg.error():
                        continue
                    tenant = (parse_topic(msg.topic() or "", self.settings.topic_prefix)
                              or ("?", ""))[0]
                    state = self.states.setdefault(tenant, RuleState())
                    envelope, decisions = self._decide(msg, state)
                    for decision in decisions:
                        if envelope is not None:
                            outputs += self.reactor.decision_outputs(decision, envelope)
                    key = (msg.topic() or "", msg.partition() or 0)
                    ends[key] = (msg.offset() or 0) + 1
                self.reactor.delivery.send_sync(outputs)
                if ends:
                    self.consumer.commit(offsets=[TopicPartition(t, p, o)
                                                  for (t, p), o in ends.items()],
                                         asynchronous=False)
        except StreamsError:
            log.exception("decider stopped")
            raise
        finally:
            self.consumer.close()


def start_decider(reactor: Reactor, group: str) -> tuple[threading.Thread, threading.Event]:
    """Run a decider in a daemon thread; set the event to stop it."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                reactor.decider(group).run(stop)
            except Exception:  # a decider that fails starts again from its committed offset
                log.exception("decider failed; restarting in 1 s")
                time.sleep(1.0)

    thread = threading.Thread(target=loop, name="rule-decider", daemon=True)
    thread.start()
    return thread, stop


__all__ = ["Decider", "Reactor", "ReactorStats", "is_stateful", "start_decider"]

