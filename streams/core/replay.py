"""Replay experiments: how would a candidate action have handled what happened?

    task = replay_task(
        rule=error_spike,
        action=candidate_triage,
        deps=deps,
        events=lambda example: [ServiceError(service=example.input.service, severity=9)] * 3,
        output=replayed,
        event_types=[ServiceError, IncidentOpened],
    )
    result = await InMemoryExperimentTracker().run_experiment(
        "candidate-triage", dataset=incidents, task=task, evaluators=[incident_judge])

For each example the task publishes the example's events into a fresh, isolated in-memory
workspace (`MemoryWorkspace`) that runs the rule under test with the candidate action through
the same pure pieces as the worker: the matcher (`streams.core.matching`: filters, sampling,
and counts, rate limits and scopes decided against a `RuleState`, as the decider does) and
the run executor (`streams.core.execution`: timeouts, the rule's retry policy, one run at a
time per scope, dead letters). It lets the workspace settle (every run finished, every event
appended, the runs' own among them, matched in turn), at most `step_limit` events, and hands
a `Replay` to `output`. Nothing here imports Kafka: nothing touches a real topic.

Differences from the worker, by design: the events are matched one at a time in log order
(the worker matches a batch, then runs its runs concurrently); a retry's delay is not waited
but added to `Replay.waited` (event times are the wall clock's, so a count's window sees the
attempts closer together than a worker would).

A failing example raises `ReplayError` from the task, which an experiment records as failed
with its message: events that are not of an accepted type or fail their type's validation, a
run dead-lettered (its last error), a replay that does not settle within `step_limit`.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from streams.core.actors import Actor, SystemActor
from streams.core.app_events import AppEventType
from streams.core.capabilities import Capability, Grants, builtin_grants
from streams.core.errors import StreamsError, ValidationFailed
from streams.core.evaluation import VERDICT_RECORD
from streams.core.events import (
    EVENT_TYPES,
    AppEvent,
    Envelope,
    Event,
    FeedbackGiven,
    RuleFired,
    RunDeadLettered,
    RunStarted,
    Seq,
    TraceContext,
)
from streams.core.execution import RunExecutor
from streams.core.feedback import (
    Feedback,
    FeedbackRegistry,
    registry,
    validate_feedback,
    value_record,
)
from streams.core.matching import Forward, Matcher, ReactorStats
from streams.core.rules import Rule, RuleSet, RuleState, chain_due
from streams.core.rules.why import THROTTLED_RECORD
from streams.core.runs import ActionFn, Reaction, RunRecord, latest_runs, rule_actor
from streams.core.targets import ChainTarget, FiringTarget, RunTarget
from streams.core.tenancy import check_tenant, check_workspace
from streams.core.view import Located, LogIndex, not_found

__all__ = [
    "DEFAULT_STEP_LIMIT",
    "EventPayload",
    "MemoryLog",
    "MemoryWorkspace",
    "Recorded",
    "Replay",
    "ReplayError",
    "Replayer",
    "replay_task",
]

DEFAULT_STEP_LIMIT = 1000
"""How many events a replay matches at most before it is refused as not settling."""

EventPayload = AppEventType | Event | Envelope
"""What `events(example)` may return: app event type values (`ErrorSpike(...)`), their
AppEvents, built-in typed events (each starts its own chain, from the system actor), or
ready envelopes (a story with its own chains, causes and actors; moved into the replay's
tenant and workspace)."""

# The app events the rules write themselves (a throttle's record, an evaluator's verdict):
# accepted without a declaration.
_STORY_GRACE = timedelta(hours=1)
"""How long a replay remembers an ended chain (the worker's STREAMS_RULE_STATE_GRACE default)."""

_OWN_RECORDS = frozenset({THROTTLED_RECORD, VERDICT_RECORD})


class ReplayError(StreamsError):
    """A replay could not be built or run; the message names the rule, the example or event
    and what to change."""


@dataclass(frozen=True)
class Recorded:
    """Where an appended event landed in the isolated log (`seq`), its id and envelope (the
    workspace handle's `Recorded`, in memory)."""

    seq: Seq
    id: str
    envelope: Envelope


class MemoryLog:
    """An isolated, in-memory log of one tenant: envelopes in order, their index, and the
    ones not yet matched. Accepts only built-in event types and the declared app event types
    it is given (validated against their declaration)."""

    def __init__(self, tenant: str, accepted: Mapping[str, type[AppEventType]],
                 *, where: str = "replay", grants: Grants | None = None) -> None:
        self.tenant = check_tenant(tenant)
        # The same least privilege as the workspace handle's (streams.core.capabilities).
        self.grants = grants or builtin_grants()
        self.accepted = dict(accepted)
        self.where = where
        self.envelopes: list[Envelope] = []
        self.by_id: dict[str, Envelope] = {}
        self.index = LogIndex()
        self.pending: deque[Envelope] = deque()
        self.emitted: list[Envelope] = []

    def check(self, event: Event) -> Event:
        """The event if its type is accepted and its data validates; ReplayError otherwise."""
        if isinstance(event, AppEvent):
            if event.name in _OWN_RECORDS:
                return event  # written by the rules themselves, never by a story
            declared = self.accepted.get(event.name)
            if declared is None:
                raise ReplayError(
                    f"{self.where}: event type {event.name!r} is not among the replay's "
                    f"event_types {sorted(self.accepted)}; add its AppEventType to event_types=")
            try:
                declared.of(event)
            except ValidationFailed as exc:
                raise ReplayError(f"{self.where}: {exc}") from exc
        elif event.type_name not in EVENT_TYPES:
            raise ReplayError(f"{self.where}: {type(event).__name__} is not an event type")
        return event

    def append(self, envelope: Envelope, *, emitted: bool = False) -> Recorded:
        """Add an envelope at the log's end (to be matched in turn); `emitted` marks what
        an action published."""
        if envelope.tenant != self.tenant:
            raise ReplayError(f"{self.where}: the isolated log holds tenant {self.tenant!r}, "
                              f"not {envelope.tenant!r}")
        self.check(envelope.event)
        seq = Seq(partition=0, offset=len(self.envelopes))
        stored = envelope.model_copy(update={"seq": seq})
        self.envelopes.append(stored)
        self.by_id[stored.event_id] = stored
        self.index.apply(stored)
        self.pending.append(stored)
        if emitted:
            self.emitted.append(stored)
        return Recorded(seq=seq, id=stored.event_id, envelope=stored)


class MemoryWorkspace:
    """One workspace of an isolated in-memory log, seen and written as one actor: the
    `ActingWorkspace` an action gets in the worker (append, give_feedback with the same
    validation, read, as_actor), without a broker."""

    def __init__(self, log: MemoryLog, workspace: str, actor: Actor | None = None, *,
                 types: FeedbackRegistry | None = None,
                 capabilities: frozenset[Capability] | None = None) -> None:
        self.log = log
        self.tenant = log.tenant
        self.workspace = check_workspace(workspace)
        self.actor = actor or SystemActor()
        self.types = types or registry
        self.capabilities = capabilities

    def as_actor(self, actor: Actor, *,
                 capabilities: frozenset[Capability] | None = None) -> MemoryWorkspace:
        """The same workspace, acting as someone else (an evaluator, say); `capabilities`
        narrows what this handle may do below the actor's grant."""
        return MemoryWorkspace(self.log, self.workspace, actor, types=self.types,
                               capabilities=capabilities)

    async def append(self, event: Event, *, correlation_id: str | None = None,
                     causation_id: str | None = None, trace: TraceContext | None = None,
                     event_id: str | None = None) -> Recorded:
        """Append an event as this actor; without a correlation id it starts a new chain.
        `event_id` (default: a new random id) is for ids derived from what caused it.
        ReplayError if its type is not one the replay accepts or its data does not validate;
        Forbidden if the actor (or this handle) may not append it."""
        self.log.grants.check_append(self.actor, event.type_name, narrowed=self.capabilities)
        envelope = Envelope.new(event, tenant=self.tenant, workspace=self.workspace,
                                actor=self.actor, correlation_id=correlation_id,
                                causation_id=causation_id, trace=trace, event_id=event_id)
        return self.log.append(envelope, emitted=True)

    def locate(self, target: RunTarget | FiringTarget | ChainTarget) -> Located:
        """Where a target is in this workspace; NotFound if the log does not have it."""
        found = self.log.index.locate(target, self.workspace)
        if found is None:
            raise not_found(target, self.tenant, self.workspace)
        return found

    async def give_feedback(self, value: Feedback | Mapping[str, Any], *,
                            on: RunTarget | FiringTarget | ChainTarget,
                            feedback_type: str | None = None) -> Recorded:
        """Record feedback on a run, firing or chain, in the target's chain: the checks of
        the workspace handle (ValidationFailed, NotFound), then a `feedback_given`."""
        if not isinstance(on, RunTarget | FiringTarget | ChainTarget):
            raise ValidationFailed(
                f"on= must be a RunTarget, FiringTarget or ChainTarget, not "
                f"{type(on).__name__} (e.g. on=RunTarget(run_id=...))")
        self.log.grants.check_append(self.actor, FeedbackGiven.event_type,
                                     narrowed=self.capabilities)
        feedback = validate_feedback(value, feedback_type, self.types)
        cls = type(feedback)
        if on.kind not in cls.feedback_targets:
            raise ValidationFailed(
                f"{cls.feedback_name} feedback cannot be given on a {on.kind}; it "
                f"targets {sorted(cls.feedback_targets)}")
        where = self.locate(on)
        event = FeedbackGiven(feedback_type=cls.feedback_name, target=on,
                              target_trace_id=where.trace_id, value=value_record(feedback))
        return await self.append(event, correlation_id=where.correlation_id,
                                 causation_id=where.event_id)

    async def read(self) -> list[Envelope]:
        """This workspace's envelopes, in log order."""
        self.log.grants.check(self.actor, Capability.READ, doing="reading the log",
                              narrowed=self.capabilities)
        return [e for e in self.log.envelopes if e.workspace == self.workspace]

    async def runs(self, *, rule: str | None = None, limit: int | None = None,
                   ) -> list[RunRecord]:
        """This workspace's runs (of `rule`, when given), newest first, at most `limit`."""
        return latest_runs(await self.read(), rule=rule, limit=limit)


@dataclass(frozen=True)
class Replay:
    """What a replay left: the rule's runs (oldest first), the isolated workspace's whole
    log, the events the runs published (`emitted`), how many events were matched (`steps`)
    and the retry delays skipped (`waited`, seconds)."""

    runs: list[RunRecord]
    log: list[Envelope]
    emitted: list[Envelope]
    steps: int = 0
    waited: float = 0.0
    published: list[Envelope] = field(default_factory=list)

    @property
    def dead_lettered(self) -> list[RunRecord]:
        """The runs whose attempts were spent."""
        return [r for r in self.runs
                if any(isinstance(e.event, RunDeadLettered) for e in r.emitted)]


def _accepted(event_types: Iterable[type[AppEventType]], where: str,
              ) -> dict[str, type[AppEventType]]:
    accepted: dict[str, type[AppEventType]] = {}
    for declared in event_types:
        if not (isinstance(declared, type) and issubclass(declared, AppEventType)
                and declared.app_event_name):
            raise ReplayError(f"{where}: event_types= takes AppEventType classes, got "
                              f"{declared!r}")
        accepted[declared.app_event_name] = declared
    return accepted


class Replayer:
    """Replays events through one rule and a candidate action in a fresh isolated workspace
    per call (see the module docstring)."""

    def __init__(
        self,
        *,
        rule: Rule,
        action: ActionFn,
        deps: Mapping[str, Any] | None = None,
        event_types: Iterable[type[AppEventType]] = (),
        tenant: str = "replay",
        workspace: str = "replay",
        step_limit: int = DEFAULT_STEP_LIMIT,
        action_timeout: float = 300.0,
        types: FeedbackRegistry | None = None,
    ) -> None:
        where = f"replay of rule {getattr(rule, 'name', rule)!r}"
        if not isinstance(rule, Rule):
            raise ReplayError(f"{where}: rule= takes a Rule, got {rule!r}")
        if not callable(action):
            raise ReplayError(f"{where}: action= takes an async function of a Reaction, "
                              f"got {action!r}")
        if step_limit < 1:
            raise ReplayError(f"{where}: step_limit must be at least 1, got {step_limit}")
        self.rule = rule
        self.action = action
        self.deps = dict(deps or {})
        self.accepted = _accepted(event_types, where)
        watched = rule.when.event_type_name
        if watched is not None and watched not in EVENT_TYPES and watched not in self.accepted:
            raise ReplayError(f"{where}: the rule watches {watched!r}, which is not among "
                              f"event_types {sorted(self.accepted)}; add its AppEventType")
        self.tenant = check_tenant(tenant)
        self.workspace = check_workspace(workspace)
        self.step_limit = step_limit
        self.action_timeout = action_timeout
        self.types = types
        self.where = where
        self.rules = RuleSet([rule])

    def _event(self, payload: object, position: int, label: str) -> Event:
        if isinstance(payload, AppEventType):
            return payload.to_event()
        if isinstance(payload, AppEvent) or (isinstance(payload, Event)
                                             and payload.type_name in EVENT_TYPES):
            return payload
        raise ReplayError(f"{self.where}, {label}: event {position} is a "
                          f"{type(payload).__name__}, not an app event type value, an "
                          "AppEvent, a built-in event or an Envelope")

    async def replay(self, payloads: Iterable[object], *, label: str = "events") -> Replay:
        """Publish the payloads (each event starting its own chain, as an application's
        appends do; envelopes as they are), let the workspace settle, and return what
        happened. ReplayError when an event is refused, a run is dead-lettered, or it does not
        settle within the step limit."""
        where = f"{self.where}, {label}"
        log = MemoryLog(self.tenant, self.accepted, where=where)
        publisher = MemoryWorkspace(log, self.workspace, SystemActor(), types=self.types)
        stats = ReactorStats()
        matcher = Matcher(self.rules, stats)
        state = RuleState()
        waited = 0.0

        async def emit(envelopes: Sequence[Envelope]) -> None:
            for envelope in envelopes:
                log.append(envelope)

        async def reaction(started: Envelope, attempt: int,
                           deps: Mapping[str, Any]) -> Reaction:
            run = started.event
            assert isinstance(run, RunStarted)
            fired = log.by_id.get(started.causation_id or "")
            matched_ids = fired.event.matched if fired is not None and isinstance(
                fired.event, RuleFired) else []
            matched = [log.by_id[i] for i in matched_ids if i in log.by_id]
            acting = MemoryWorkspace(log, started.workspace, rule_actor(run.rule),
                                     types=self.types)
            return Reaction(run=run, started=started, events=matched, workspace=acting,
                            attempt=attempt, deps=deps)

        async def skip(delay: float) -> None:
            nonlocal waited
            waited += delay

        executor = RunExecutor(self.rules, {self.rule.then.name: self.action},
                               reaction=reaction, emit=emit, deps=self.deps,
                               action_timeout=self.action_timeout, stats=stats, sleep=skip)
        published: list[Envelope] = []
        for position, payload in enumerate(payloads):
            if isinstance(payload, Envelope):  # a story with its own chains and actors
                envelope = payload.model_copy(update={"tenant": self.tenant,
                                                      "workspace": self.workspace, "seq": None})
            else:
                envelope = Envelope.new(self._event(payload, position, label),
                                        tenant=self.tenant, workspace=self.workspace,
                                        actor=publisher.actor)
            published.append(log.append(envelope).envelope)
        steps = 0
        clock: datetime | None = None  # a completion rule's: its matches' newest time
        ended = False

        async def chains_due(at: datetime) -> None:
            for fire in chain_due(self.rule, state, at, _STORY_GRACE):
                window = state.chains[(self.rule.name, fire.correlation_id)]
                await emit(matcher.fired(fire, window.cause(self.tenant, fire.causation_id)))

        while log.pending or not ended:
            if not log.pending:
                # The story is over: a completion rule's chains still open end now (their
                # quiet periods pass), and their runs are made like any other.
                ended = True
                if clock is not None:
                    await chains_due(datetime.max.replace(tzinfo=UTC))
                continue
            if steps >= self.step_limit:
                raise ReplayError(f"{where}: did not settle within {self.step_limit} events "
                                  f"(a rule that fires on what its own runs emit?); raise "
                                  f"step_limit= if the story is that long")
            envelope = log.pending.popleft()
            steps += 1
            # The clock moves as the reactor's ticks move a decider's: on every event a
            # completion rule watches, before the event is decided.
            if matcher.moves_clock(envelope) and (clock is None or envelope.time > clock):
                clock = envelope.time
                await chains_due(clock)
            for item in matcher.match(envelope):
                decisions = matcher.decide(item.rule.name, item.envelope, state) \
                    if isinstance(item, Forward) else [item]
                for decision in decisions:
                    await emit(matcher.fired(decision, envelope))
            if clock is not None:  # a chain its event made due on the clock ends now
                await chains_due(clock)
            if executor.runs_here(envelope):
                await executor.execute(envelope)
        runs = list(reversed(latest_runs(log.envelopes, rule=self.rule.name)))
        result = Replay(runs=runs, log=list(log.envelopes), emitted=list(log.emitted),
                        steps=steps, waited=waited, published=published)
        for record in result.dead_lettered:
            last = next(e.event for e in reversed(record.emitted)
                        if isinstance(e.event, RunDeadLettered))
            assert isinstance(last, RunDeadLettered)
            raise ReplayError(f"{where}: run {record.id} of rule {self.rule.name!r} was "
                              f"dead-lettered after {last.attempts} attempt(s): {last.error}")
        return result


def replay_task(
    *,
    rule: Rule,
    action: ActionFn,
    events: Callable[[Any], Iterable[object] | Awaitable[Iterable[object]]],
    output: Callable[[Replay], Any | Awaitable[Any]],
    event_types: Iterable[type[AppEventType]] = (),
    deps: Mapping[str, Any] | None = None,
    step_limit: int = DEFAULT_STEP_LIMIT,
    action_timeout: float = 300.0,
    types: FeedbackRegistry | None = None,
) -> Callable[[Any], Awaitable[Any]]:
    """An experiment task: for each example, replay `events(example)` through `rule` with
    the candidate `action` in a fresh isolated workspace, and return `output(replay)` (both
    may be async). `event_types` are the app event types the replay accepts, published or
    emitted (built-in event types are always accepted); another is a ReplayError naming it,
    as is a dead-lettered run. See the module docstring."""
    replayer = Replayer(rule=rule, action=action, deps=deps, event_types=event_types,
                        step_limit=step_limit, action_timeout=action_timeout, types=types)

    async def task(example: Any) -> Any:
        label = f"example {getattr(example, 'id', example)!r}"
        payloads = events(example)
        if inspect.isawaitable(payloads):
            payloads = await payloads
        replay = await replayer.replay(list(payloads), label=label)
        result = output(replay)
        if inspect.isawaitable(result):
            result = await result
        return result

    return task
