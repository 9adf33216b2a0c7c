"""Firings and runs as events: what a rule's firing and its action's attempts write.

Pure: builds envelopes from decisions and outcomes. Every id is derived (from the rule and the
event that caused the firing), so a firing or a run recorded again after a crash carries the
same ids as the first time, and readers can tell a repeat from a new run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol

from typing_extensions import TypeVar

from streams.core.actors import AgentActor
from streams.core.budgets import Budget
from streams.core.errors import ValidationFailed
from streams.core.events import (
    AppEvent,
    Envelope,
    Event,
    RuleFired,
    RunDeadLettered,
    RunFailed,
    RunRetried,
    RunStarted,
    RunSucceeded,
    TraceContext,
)
from streams.core.ids import (
    fired_event_id,
    firing_id,
    outcome_event_id,
    started_event_id,
    throttled_event_id,
)
from streams.core.ids import run_id_of as run_id_of  # re-exported: callers know it from here
from streams.core.rules import Fire, Throttled
from streams.core.rules.why import THROTTLED_RECORD, throttle_data


class Cause(Protocol):
    """What a firing's envelopes take from the event that caused it: an Envelope, or a
    chain's newest event when a quiet period ended it (streams.core.rules.chains)."""

    @property
    def tenant(self) -> str:
        """The tenant the firing is recorded for."""
    @property
    def workspace(self) -> str:
        """The workspace the firing is recorded in."""
    @property
    def event_id(self) -> str:
        """The causing event's id."""
    @property
    def trace(self) -> TraceContext | None:
        """The trace the firing continues."""


def rule_actor(rule: str) -> AgentActor:
    """The actor a rule's firings and runs are recorded as."""
    return AgentActor(id=f"rule:{rule}")


def fire_envelopes(fire: Fire, cause: Cause) -> list[Envelope]:
    """The `rule_fired` and `run_started` envelopes of a firing, in the causing event's chain
    (for a counting rule: the chain of the event that completed the count)."""
    firing = fire.firing_id
    actor = rule_actor(fire.rule.name)
    fired = Envelope.new(
        fire.to_event(), tenant=cause.tenant, workspace=cause.workspace, actor=actor,
        correlation_id=fire.correlation_id, causation_id=fire.causation_id,
        trace=cause.trace, event_id=fired_event_id(firing),
    )
    run_id = run_id_of(firing)
    started = fired.follow(
        RunStarted(run_id=run_id, rule=fire.rule.name, action=fire.rule.then.name,
                   firing_id=firing, attempt=1, scope=dict(fire.scope)),
        event_id=started_event_id(run_id),
    )
    return [fired, started]


def throttle_envelope(throttled: Throttled, cause: Cause) -> Envelope:
    """The record of a match a rule's rate limit held back (`streams:throttled`), in the
    causing event's chain, by an id derived from the firing it would have been: what
    `Workspace.why` finds for that event."""
    firing = firing_id(throttled.rule.name, throttled.causation_id)
    return Envelope.new(
        AppEvent(name=THROTTLED_RECORD, data=throttle_data(throttled)), tenant=cause.tenant,
        workspace=cause.workspace, actor=rule_actor(throttled.rule.name),
        correlation_id=throttled.correlation_id, causation_id=throttled.causation_id,
        trace=cause.trace, event_id=throttled_event_id(firing))


def outcome_envelope(started: Envelope, event: Event, attempt: int, kind: str) -> Envelope:
    """A lifecycle event of a run (`succeeded`, `failed`, ...) following its `run_started`."""
    run = started.event
    assert isinstance(run, RunStarted)
    return started.follow(event, event_id=outcome_event_id(run.run_id, kind, attempt))


@dataclass(frozen=True)
class RunRecord:
    """A run with the envelopes that made its rule fire and the events it emitted."""

    run: RunStarted
    started: Envelope
    matched: list[Envelope]
    emitted: list[Envelope]
    fired: Envelope | None = None

    @property
    def id(self) -> str:
        """The run's id (what a `RunTarget` names)."""
        return self.run.run_id


class ActingWorkspace(Protocol):
    """What an action may do in its workspace (the workspace handle implements it)."""

    tenant: str
    workspace: str

    async def append(self, event: Event, *, correlation_id: str | None = None,
                     causation_id: str | None = None, trace: Any = None,
                     event_id: str | None = None) -> Any: ...

    async def give_feedback(self, value: Any, *, on: Any, feedback_type: str | None = None,
                            ) -> Any: ...

    def as_actor(self, actor: Any) -> ActingWorkspace: ...

    async def read(self) -> list[Envelope]: ...


DepsT = TypeVar("DepsT", bound=Mapping[str, Any], default=Mapping[str, Any])
"""The type of an application's deps (a worker merges its rules modules' `DEPS` mappings)."""


@dataclass
class Reaction(Generic[DepsT]):
    """What an action gets: its run, the events that made the rule fire, and its workspace
    (acting as the rule's agent). `emit` appends an event in the run's chain.

    Generic in the application's deps, so an action can say what it expects of them:
    `async def judged_input(reaction: Reaction[AppDeps]) -> TriageInput`.
    """

    run: RunStarted
    started: Envelope
    events: list[Envelope]
    workspace: ActingWorkspace
    attempt: int = 1
    deps: DepsT = field(default_factory=lambda: _no_deps())
    budget: Budget | None = None
    """The budget the run's evaluations claim from instead of their action's: a backfill
    run's, when its rule was installed with one (`RulebookEntry.budget_of`)."""

    async def emit(self, event: Event) -> Any:
        """Append an event caused by this run, in its chain."""
        return await self.workspace.append(event, correlation_id=self.started.correlation_id,
                                           causation_id=self.started.event_id,
                                           trace=self.started.trace)


def _no_deps() -> Any:
    # A reaction built without deps gets an empty mapping, whatever DepsT is declared as.
    return {}


ActionFn = Callable[[Reaction], Awaitable[Mapping[str, Any] | None]]
"""An action: an async function of its reaction, returning its output (a JSON object)."""


def attempt_outcomes(started: Envelope, *, attempt: int, error: str | None,
                     output: Mapping[str, Any] | None, will_retry: bool, delay_ms: int,
                     ) -> list[Envelope]:
    """The envelopes recording how one attempt went."""
    run = started.event
    assert isinstance(run, RunStarted)
    base = {"run_id": run.run_id, "rule": run.rule, "action": run.action}
    if error is None:
        return [outcome_envelope(started, RunSucceeded(**base, attempt=attempt,
                                                       output=dict(output or {})),
                                 attempt, "succeeded")]
    out = [outcome_envelope(started, RunFailed(**base, attempt=attempt, error=error[:2000],
                                               will_retry=will_retry), attempt, "failed")]
    if will_retry:
        out.append(outcome_envelope(started, RunRetried(**base, attempt=attempt + 1,
                                                        delay_ms=delay_ms),
                                    attempt, "retried"))
    else:
        out.append(outcome_envelope(started, RunDeadLettered(**base, attempts=attempt,
                                                             error=error[:2000]),
                                    attempt, "dead_lettered"))
    return out


def run_record_of(envelopes: Sequence[Envelope], run_id: str) -> RunRecord | None:
    """Find a run in a chain's (or a log's) envelopes, with what matched and what it emitted."""
    started = next((e for e in envelopes if isinstance(e.event, RunStarted)
                    and e.event.run_id == run_id), None)
    if started is None:
        return None
    run = started.event
    assert isinstance(run, RunStarted)
    by_id = {e.event_id: e for e in envelopes}
    fired = next((e for e in envelopes if isinstance(e.event, RuleFired)
                  and e.event.firing_id == run.firing_id), None)
    matched = [by_id[i] for i in (fired.event.matched if fired and isinstance(
        fired.event, RuleFired) else []) if i in by_id]
    caused = {started.event_id}
    emitted: list[Envelope] = []
    for envelope in envelopes:
        if envelope.causation_id in caused and envelope.event_id not in caused:
            caused.add(envelope.event_id)
            emitted.append(envelope)
    return RunRecord(run=run, started=started, matched=matched, emitted=emitted, fired=fired)


def latest_runs(envelopes: Sequence[Envelope], *, rule: str | None = None,
                limit: int | None = None) -> list[RunRecord]:
    """The runs in `envelopes` (of `rule`, when given), newest first, at most `limit`.

    Newest by the time of the run's `run_started`; runs started in the same millisecond keep
    the reverse of their order in `envelopes`. A `run_started` recorded again (a decision
    repeated after a crash carries the same ids) is one run.
    """
    if limit is not None and limit < 1:
        raise ValidationFailed(f"limit must be at least 1 (or None for every run), got {limit}")
    starts: dict[str, tuple[int, Envelope]] = {}
    for position, envelope in enumerate(envelopes):
        event = envelope.event
        if isinstance(event, RunStarted) and (rule is None or event.rule == rule):
            starts.setdefault(event.run_id, (position, envelope))
    newest = sorted(starts.values(), key=lambda item: (item[1].time, item[0]), reverse=True)
    records = []
    for _position, started in newest[:limit]:
        assert isinstance(started.event, RunStarted)
        record = run_record_of(envelopes, started.event.run_id)
        assert record is not None  # its run_started is in `envelopes`
        records.append(record)
    return records
