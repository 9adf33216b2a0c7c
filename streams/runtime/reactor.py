"""Rules on Kafka, the batch step: decode each event, match it (streams.runtime.matcher),
write firings of stateless rules and forward matches of stateful ones, then run the actions
this worker has (streams.runtime.executor) before the batch is committed.

- Stateless rules (type, filters, sampling) fire straight from the step: it writes
  `rule_fired` and `run_started` into the chain of the event that matched.
- Stateful rules (counts, rate limits, scopes) need every matching event of a tenant in one
  place and in one order. The step forwards each match to the tenant's `rules` topic, which
  has one partition, so exactly one decider (streams.runtime.decider) owns it.
- Runs: for a `run_started` of an action registered in this worker, the step runs the action
  on the worker's event loop, with the rule's retry policy, before the batch is committed.

Its clients come from the worker's Runtime, on first use.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, Message

from streams.adapters.kafka.log import header_value
from streams.adapters.kafka.outputs import Output
from streams.core.events import Envelope
from streams.core.rules import RuleSet
from streams.core.runs import ActionFn
from streams.runtime.decider import ConsumerFactory, Decider
from streams.runtime.executor import RunExecutor
from streams.runtime.matcher import Forward, Matcher, ReactorStats, is_stateful
from streams.runtime.records import RuleRecords, firing_outputs
from streams.runtime.root import Runtime

__all__ = ["Reactor", "ReactorStats", "is_stateful"]


class Reactor:
    """The rules reactor agent's batch handler: match, fire or forward, run actions."""

    def __init__(
        self,
        runtime: Runtime,
        rules: RuleSet,
        actions: Mapping[str, ActionFn],
        *,
        deps: Mapping[str, Any] | None = None,
    ) -> None:
        settings = runtime.settings
        self.runtime = runtime
        self.settings = settings
        self.rules = rules
        self.stats = ReactorStats()
        self.matcher = Matcher(rules, self.stats)
        self.records = RuleRecords(runtime.serde, settings.topic_prefix, self.stats)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.executor = RunExecutor(
            rules, actions, client=lambda: runtime.client, emit=self.emit, deps=deps,
            action_timeout=settings.action_timeout,
            max_concurrent_runs=settings.max_concurrent_runs, stats=self.stats)

    async def emit(self, envelopes: Sequence[Envelope]) -> None:
        """Write envelopes to their events topics; returns once the broker has them."""
        await self.runtime.delivery.deliver([self.records.envelope(e) for e in envelopes])

    def decider(self, group: str, *, make_consumer: ConsumerFactory = Consumer) -> Decider:
        """A decider of this worker's stateful rules, its consumers configured by the
        runtime (`make_consumer` builds them from those configs)."""
        runtime = self.runtime
        return Decider(self.settings, self.matcher, self.records, runtime.delivery,
                       group=group, consumer_config=runtime.consumer_config,
                       replay_reader_config=runtime.replay_reader_config,
                       make_consumer=make_consumer)

    def outputs(self, envelope: Envelope, raw: bytes | None) -> list[Output]:
        """The records one event makes: forwards of stateful rules' matches, firings of
        stateless ones."""
        out: list[Output] = []
        for item in self.matcher.match(envelope):
            if isinstance(item, Forward):
                out.append(self.records.forward(item, raw))
            else:
                out += firing_outputs(self.records, self.matcher, item, envelope,
                                      stage="reactor")
        return out

    def handle_batch(self, messages: Sequence[Message]) -> list[Output]:
        """The batch data path's step (runs in the loop's thread): match a batch of
        confluent-kafka messages and return the firings and forwards to produce; the runs of
        actions this worker has are executed on the worker's event loop (`bind`) before it
        returns, so the batch is committed only after they finished."""
        outputs: list[Output] = []
        runs: list[Envelope] = []
        wants = self.matcher.wants
        for msg in messages:
            if msg.error() is not None:
                continue
            self.stats.events += 1
            if not wants(header_value(msg.headers(), "event_type")):
                continue
            raw = msg.value()
            envelope = self.records.decode(raw, msg.topic() or "", msg.partition() or 0,
                                           msg.offset() or 0)
            if envelope is None:
                continue
            if self.executor.runs_here(envelope):
                runs.append(envelope)
            outputs += self.outputs(envelope, raw)
        if runs:
            if self.loop is None:
                raise RuntimeError("Reactor.bind(loop) was not called before runs arrived")
            execute = self.executor.execute

            async def run_all() -> None:
                await asyncio.gather(*(execute(r) for r in runs))

            asyncio.run_coroutine_threadsafe(run_all(), self.loop).result()
        return outputs

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The event loop the actions run on (the worker's)."""
        self.loop = loop
