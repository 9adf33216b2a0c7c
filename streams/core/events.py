"""Events and their envelope: what a tenant's log holds.

An envelope says who did what, when, in which workspace and causal chain; its `event` is one
of the typed payloads below. A chain's events share a correlation id (the event id of the
chain's first event), which is also their Kafka key, so a chain keeps its order.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from streams.core.actors import Actor, SystemActor
from streams.core.ids import new_id as new_id  # its old home; callers import it from here
from streams.core.targets import Target

FEEDBACK_GIVEN = "feedback_given"
RUN_STARTED = "run_started"
RUN_SUCCEEDED = "run_succeeded"
RUN_FAILED = "run_failed"
RUN_RETRIED = "run_retried"
RUN_DEAD_LETTERED = "run_dead_lettered"
RULE_FIRED = "rule_fired"
ARTIFACT_CREATED = "artifact_created"
ARTIFACT_REVISED = "artifact_revised"
ARTIFACT_ARCHIVED = "artifact_archived"
PROPOSAL_MADE = "proposal_made"
PROPOSAL_RESOLVED = "proposal_resolved"
RULE_INSTALLED = "rule_installed"
RULE_ARCHIVED = "rule_archived"


def utcnow() -> datetime:
    """Now, in UTC, at millisecond precision (what the wire keeps)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


class Seq(BaseModel):
    """Where a record sits in its topic: its partition and offset."""

    model_config = ConfigDict(frozen=True)

    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.partition}:{self.offset}"


class TraceContext(BaseModel):
    """W3C trace context of the work an event belongs to."""

    model_config = ConfigDict(frozen=True)

    traceparent: str
    tracestate: str | None = None

    @property
    def trace_id(self) -> str | None:
        """The 32-hex trace id inside `traceparent`, if it is well formed."""
        return trace_id_of(self.traceparent)


def trace_id_of(traceparent: str) -> str | None:
    """The 32-hex trace id inside a W3C `traceparent`, if it is well formed (what
    `TraceContext.trace_id` answers; readers of plain records call it directly)."""
    parts = traceparent.split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None


class Event(BaseModel):
    """Base of event payloads; `event_type` names the kind on the wire."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    event_type: ClassVar[str] = ""

    @property
    def type_name(self) -> str:
        """The event type of this payload (AppEvent overrides it per instance)."""
        return self.event_type


class RunStarted(Event):
    """A rule's action began an attempt."""

    event_type: ClassVar[str] = RUN_STARTED
    run_id: str
    rule: str
    action: str
    firing_id: str
    attempt: int = 1
    scope: dict[str, str] = Field(default_factory=dict)


class RunSucceeded(Event):
    """A run's attempt finished; `output` is the action's result."""

    event_type: ClassVar[str] = RUN_SUCCEEDED
    run_id: str
    rule: str
    action: str
    attempt: int = 1
    output: dict[str, Any] = Field(default_factory=dict)


class RunFailed(Event):
    """A run's attempt raised; `will_retry` says whether the retry policy allows another."""

    event_type: ClassVar[str] = RUN_FAILED
    run_id: str
    rule: str
    action: str
    attempt: int = 1
    error: str
    will_retry: bool = False


class RunRetried(Event):
    """A failed run is tried again after `delay_ms`."""

    event_type: ClassVar[str] = RUN_RETRIED
    run_id: str
    rule: str
    action: str
    attempt: int
    delay_ms: int = 0


class RunDeadLettered(Event):
    """A run spent its retry policy; `error` is the last attempt's."""

    event_type: ClassVar[str] = RUN_DEAD_LETTERED
    run_id: str
    rule: str
    action: str
    attempts: int
    error: str


class RuleFired(Event):
    """A rule's trigger matched; `matched` holds the event ids that made it fire."""

    event_type: ClassVar[str] = RULE_FIRED
    firing_id: str
    rule: str
    matched: list[str] = Field(default_factory=list)
    scope_key: str | None = None


class FeedbackGiven(Event):
    """A judgement of a run, firing or chain; `value` validates against `feedback_type`.

    `target_trace_id` is the target's trace when the writer knew it, so a mirror can attach
    scores to the trace without a lookup.
    """

    event_type: ClassVar[str] = FEEDBACK_GIVEN
    feedback_type: str
    target: Target
    target_trace_id: str | None = None
    value: dict[str, Any]
    target_rule: str | None = None
    target_action: str | None = None


class AppEvent(Event):
    """An application's own event (for example `ops:error_spike`) with a JSON object body."""

    name: str = Field(min_length=1)
    data: dict[str, Any] = Field(default_factory=dict)

    @property
    def type_name(self) -> str:
        return self.name


class Change(BaseModel):
    """A change to an artifact's text fields: `set` gives fields their new text, `unset`
    removes fields. Applied in that order; a field in both is removed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    set: dict[str, str] = Field(default_factory=dict)
    unset: list[str] = Field(default_factory=list)


class ArtifactCreated(Event):
    """An artifact's first version (`content`: its text fields), authored by the actor."""

    event_type: ClassVar[str] = ARTIFACT_CREATED
    artifact_id: str = Field(min_length=1)
    kind: str = Field(min_length=1)
    content: dict[str, str] = Field(default_factory=dict)


class ArtifactRevised(Event):
    """A new version of an artifact, written directly (not through a proposal)."""

    event_type: ClassVar[str] = ARTIFACT_REVISED
    artifact_id: str = Field(min_length=1)
    change: Change


class ArtifactArchived(Event):
    """An artifact archived directly (not through a proposal); its text does not change."""

    event_type: ClassVar[str] = ARTIFACT_ARCHIVED
    artifact_id: str = Field(min_length=1)


class ProposalMade(Event):
    """A proposal (by the envelope's actor) to revise or archive an artifact.

    `action` is `revise` (with `change`: applied to the artifact's text when accepted; a
    proposal for an artifact that does not exist yet creates it, of `kind`, from empty text)
    or `archive` (no change). `run_id` is what the proposer says about the run whose action
    proposed it; readers trust it only when the run's own events confirm it.
    """

    event_type: ClassVar[str] = PROPOSAL_MADE
    proposal_id: str = Field(min_length=1)
    artifact_id: str = Field(min_length=1)
    kind: str = Field(min_length=1)
    action: Literal["revise", "archive"] = "revise"
    change: Change | None = None
    run_id: str | None = None

    @model_validator(mode="after")
    def _change_fits_action(self) -> ProposalMade:
        if self.action == "revise" and self.change is None:
            raise ValueError("a revise proposal needs a change")
        if self.action == "archive" and self.change is not None:
            raise ValueError("an archive proposal takes no change")
        return self


class ProposalResolved(Event):
    """A proposal accepted (with the resolver's optional `changes` on top of it) or
    rejected, by the envelope's actor. An archive proposal takes no changes."""

    event_type: ClassVar[str] = PROPOSAL_RESOLVED
    proposal_id: str = Field(min_length=1)
    resolution: Literal["accepted", "rejected"]
    changes: Change | None = None

    @model_validator(mode="after")
    def _changes_only_when_accepted(self) -> ProposalResolved:
        if self.resolution == "rejected" and self.changes is not None:
            raise ValueError("a rejection takes no changes")
        return self


class RuleInstalled(Event):
    """A rule put live (from the artifact of its draft, when it has one).

    For a rule installed as data (`streams rules install`): `definition`, its JSON form, and
    `start_offsets`, its installation point (per events partition, the first offset it is
    live for; streams.core.rulebook). Both absent on facts written before rules were data.
    """

    event_type: ClassVar[str] = RULE_INSTALLED
    rule: str = Field(min_length=1)
    artifact_id: str | None = None
    definition: str | None = None
    start_offsets: dict[str, int] = Field(default_factory=dict)


class RuleArchived(Event):
    """A live rule taken down."""

    event_type: ClassVar[str] = RULE_ARCHIVED
    rule: str = Field(min_length=1)


EVENT_TYPES: dict[str, type[Event]] = {
    cls.event_type: cls
    for cls in (RunStarted, RunSucceeded, RunFailed, RunRetried, RunDeadLettered, RuleFired,
                FeedbackGiven, ArtifactCreated, ArtifactRevised, ArtifactArchived,
                ProposalMade, ProposalResolved, RuleInstalled, RuleArchived)
}


class Envelope(BaseModel):
    """One event in a tenant's log, with who, when, where and which chain.

    `seq` is set on envelopes read back from Kafka (partition and offset), None before.
    """

    model_config = ConfigDict(frozen=True)

    event_id: str
    tenant: str
    workspace: str
    event_type: str
    time: datetime
    actor: Actor
    correlation_id: str
    causation_id: str | None = None
    trace: TraceContext | None = None
    event: Event
    seq: Seq | None = None

    @property
    def data(self) -> Mapping[str, Any]:
        """The event's payload as a read-only mapping, whatever its type.

        An application event's `data` (`data["service"]` of an `ops:error_spike`); for the
        typed events their fields (`data["run_id"]` of a `run_succeeded`, `data["value"]` of a
        `feedback_given`), so code that handles many event types reads them one way.
        """
        event = self.event
        payload = dict(event.data) if isinstance(event, AppEvent) else event.model_dump()
        return MappingProxyType(payload)

    @classmethod
    def new(
        cls,
        event: Event,
        *,
        tenant: str,
        workspace: str,
        actor: Actor | None = None,
        correlation_id: str | None = None,
        causation_id: str | None = None,
        trace: TraceContext | None = None,
        time: datetime | None = None,
        event_id: str | None = None,
    ) -> Envelope:
        """Wrap a payload; with no correlation id the event starts a chain of its own."""
        eid = event_id or new_id("evt")
        return cls(
            event_id=eid,
            tenant=tenant,
            workspace=workspace,
            event_type=event.type_name,
            time=time or utcnow(),
            actor=actor or SystemActor(),
            correlation_id=correlation_id or eid,
            causation_id=causation_id,
            trace=trace,
            event=event,
        )

    def follow(self, event: Event, *, actor: Actor | None = None, **kw: Any) -> Envelope:
        """An envelope caused by this one, in the same chain, workspace and trace."""
        kw.setdefault("trace", self.trace)
        return Envelope.new(
            event, tenant=self.tenant, workspace=self.workspace, actor=actor or self.actor,
            correlation_id=self.correlation_id, causation_id=self.event_id, **kw,
        )
