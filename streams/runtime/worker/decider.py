"""The decider of stateful rules: the single owner of each tenant's one-partition `rules`
topic (a consumer-group member), deciding counts, rate limits and scopes in one order.

It keeps counts and rate windows in memory, and rebuilds them after a restart or a move by
replaying the topic up to its committed offset through the same pure engine (producing
nothing), so its decisions do not depend on which worker makes them or when it started: the
limits are exact across workers and restarts. It runs in a thread of the worker; a failure
starts it again from its committed offset.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition

from streams.adapters.kafka.delivery import Delivery
from streams.adapters.kafka.log import header_value
from streams.adapters.kafka.outputs import Output
from streams.core.errors import StreamsError
from streams.core.events import Envelope
from streams.core.matching import Decision, Matcher
from streams.core.rules import RuleState
from streams.core.tenancy import RULES, parse_topic, tenants_pattern
from streams.runtime.worker.records import HEADER_RULE, RuleRecords, firing_outputs
from streams.settings import Settings

__all__ = ["ConsumerFactory", "Decider", "start_decider"]

log = logging.getLogger(__name__)

ConsumerFactory = Callable[[dict[str, Any]], Any]
"""Builds a consumer from its configuration (the runtime's `consumer_of`; tests pass
fakes)."""


class Decider:
    """Owns the tenants' `rules` topics (one partition each) and decides stateful rules."""

    def __init__(self, settings: Settings, matcher: Matcher, records: RuleRecords,
                 delivery: Delivery, *, group: str,
                 consumer_config: Callable[[str], dict[str, Any]],
                 replay_reader_config: Callable[[str], dict[str, Any]],
                 make_consumer: ConsumerFactory) -> None:
        self.settings = settings
        self.matcher = matcher
        self.records = records
        self.delivery = delivery
        self.group = group
        self.replay_reader_config = replay_reader_config
        self.make_consumer = make_consumer
        self.states: dict[str, RuleState] = {}
        self.replayed: dict[str, int] = {}
        self._error: BaseException | None = None
        self.consumer: Consumer = make_consumer(consumer_config(group))

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        try:
            committed = consumer.committed(partitions, timeout=self.settings.admin_timeout)
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
        reader = self.make_consumer(self.replay_reader_config(topic))
        reader.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        done = 0
        try:
            while done < upto:
                msg = reader.poll(self.settings.replay_timeout)
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
                ) -> tuple[Envelope | None, list[Decision]]:
        name = (header_value(msg.headers(), HEADER_RULE) or b"").decode()
        if not self.matcher.knows(name):
            return None, []  # a rule this worker no longer has
        envelope = self.records.decode(msg.value(), msg.topic() or "", msg.partition() or 0,
                                       msg.offset() or 0)
        if envelope is None:
            return None, []
        return envelope, self.matcher.decide(name, envelope, state)

    def run(self, stop: threading.Event) -> None:
        """Decide until `stop` is set (blocking; the worker runs it in a thread)."""
        self.consumer.subscribe([tenants_pattern(RULES, self.settings.topic_prefix)],
                                on_assign=self._on_assign)
        try:
            while not stop.is_set():
                if self._error is not None:
                    raise self._error
                messages = self.consumer.consume(self.settings.reactor_batch_size, 0.2)
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
                            outputs += firing_outputs(self.records, self.matcher, decision,
                                                      envelope, stage="decider")
                    key = (msg.topic() or "", msg.partition() or 0)
                    ends[key] = (msg.offset() or 0) + 1
                self.delivery.send_sync(outputs)
                if ends:
                    self.consumer.commit(offsets=[TopicPartition(t, p, o)
                                                  for (t, p), o in ends.items()],
                                         asynchronous=False)
        except StreamsError:
            log.exception("decider stopped")
            raise
        finally:
            self.consumer.close()


def start_decider(make: Callable[[], Decider]) -> tuple[threading.Thread, threading.Event]:
    """Run deciders made by `make` in a daemon thread; set the event to stop it. A decider
    that fails is replaced by a new one, which starts again from its committed offset."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                make().run(stop)
            except Exception:
                log.exception("decider failed; restarting in 1 s")
                time.sleep(1.0)

    thread = threading.Thread(target=loop, name="rule-decider", daemon=True)
    thread.start()
    return thread, stop
