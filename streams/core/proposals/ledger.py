"""The artifact ledger: a pure fold of artifact and proposal events.

It keeps each artifact's versions (each with the author it is credited to), each proposal's
state and first resolution, and what accepting a proposal alone would have made, so the
outcome of a resolution (accepted, edited, rejected) is a function of the ledger.

Trust: ids a client chooses (`proposal_id`, the `run_id` a proposal claims) never link a
proposal to a run. `Ledger.run_of` links one only through the run's own recorded events: a
`run_started` written by the rule's actor under the ids derived for it, and the proposal
appended in that run's chain, caused (directly or through the run's other events) by that
`run_started`, by the same rule's actor (`agent:rule:<name>`, `runs.rule_actor`).

What it keeps of other events: their place in their chain (correlation and causation ids,
which `run_of` walks), and every `run_started` in full. A reader that knows from a record's
envelope fields that it is of none of those types gives the ledger only that place (`link`),
without building an Envelope: the same ledger as `add` of the envelope would make.

Repeats: an envelope seen again (same event id) is one event. A proposal id's first
`proposal_made` defines it; a later one under the same id is ignored (a retried attempt's
repeat, or a collision, listed in `problems` when it differs). A proposal's first resolution
is its resolution; later ones are kept in `later_resolutions` and change nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Literal

from streams.core.actors import AnyActor
from streams.core.events import (
    ArtifactArchived,
    ArtifactCreated,
    ArtifactRevised,
    Change,
    Envelope,
    ProposalMade,
    ProposalResolved,
    RunStarted,
)
from streams.core.ids import run_id_of, started_event_id
from streams.core.runs import rule_actor

__all__ = [
    "FOLDED_EVENT_TYPES",
    "ArtifactState",
    "Ledger",
    "Outcome",
    "ProposalState",
    "Resolution",
    "Version",
    "apply_change",
    "fold_ledger",
]

FOLDED_EVENT_TYPES: frozenset[str] = frozenset(
    cls.event_type for cls in (ArtifactCreated, ArtifactRevised, ArtifactArchived,
                               ProposalMade, ProposalResolved, RunStarted))
"""The event types the ledger needs as envelopes (`add`); any other event can be `link`ed."""

Outcome = Literal["accepted", "edited", "rejected"]
"""How a person received a proposal: taken as it was, taken with changes that did
something, or rejected."""


def apply_change(content: Mapping[str, str], change: Change | None) -> dict[str, str]:
    """`content` with `change` applied: `set` first, then `unset` (absent fields are
    ignored). No change gives a copy of `content`."""
    out = dict(content)
    if change is None:
        return out
    out.update(change.set)
    for name in change.unset:
        out.pop(name, None)
    return out


@dataclass(frozen=True)
class Version:
    """One version of an artifact.

    `author` is whom the version is credited to: the proposer for an accepted proposal,
    whoever recorded it otherwise; `recorded_by` is the actor of the envelope that made it
    (for an accepted proposal, the person who accepted it). An `archive` version changes no
    text: its content is the previous version's.
    """

    artifact_id: str
    number: int
    content: Mapping[str, str]
    author: AnyActor
    recorded_by: AnyActor
    time: datetime
    event_id: str
    proposal_id: str | None = None
    archive: bool = False


@dataclass
class ArtifactState:
    """An artifact: its kind and its versions, oldest first."""

    artifact_id: str
    kind: str
    versions: list[Version] = field(default_factory=list)

    @property
    def content(self) -> Mapping[str, str]:
        """The newest version's text fields."""
        return self.versions[-1].content

    @property
    def archived_at(self) -> datetime | None:
        """When it was first archived (directly or by an accepted archive proposal)."""
        return next((v.time for v in self.versions if v.archive), None)


@dataclass(frozen=True)
class Resolution:
    """A proposal's (first) resolution.

    For an accepted revise proposal, `alone` is what accepting the proposal alone would have
    made (its change applied to the artifact as it stood at the resolution) and `made` what
    the acceptance made (the resolver's `changes` applied on top of `alone`).
    """

    resolution: Literal["accepted", "rejected"]
    changes: Change | None
    resolver: AnyActor
    envelope: Envelope
    alone: Mapping[str, str] | None = None
    made: Mapping[str, str] | None = None

    @property
    def outcome(self) -> Outcome:
        """accepted when the acceptance made what the proposal alone would (changes that
        change nothing included, and every accepted archive), edited when the resolver's
        changes did something, rejected when rejected."""
        if self.resolution == "rejected":
            return "rejected"
        if self.alone is not None and self.made is not None and self.made != self.alone:
            return "edited"
        return "accepted"


@dataclass
class ProposalState:
    """A proposal as the ledger knows it: who made it, in which envelope, and its first
    resolution (None while open)."""

    proposal: ProposalMade
    envelope: Envelope
    resolution: Resolution | None = None
    later_resolutions: list[Envelope] = field(default_factory=list)

    @property
    def proposal_id(self) -> str:
        """The proposal's id (chosen by its proposer)."""
        return self.proposal.proposal_id

    @property
    def proposer(self) -> AnyActor:
        """Who proposed it: the actor of its `proposal_made`."""
        return self.envelope.actor

    @property
    def state(self) -> Literal["open", "accepted", "rejected"]:
        """open, or its first resolution."""
        return "open" if self.resolution is None else self.resolution.resolution


@dataclass
class Ledger:
    """Artifacts, proposals and runs folded from a log; build it with `fold_ledger` or
    `add` envelopes in log order."""

    artifacts: dict[str, ArtifactState] = field(default_factory=dict)
    proposals: dict[str, ProposalState] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    # Every event folded or linked: its chain and its cause (what run_of walks).
    _links: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    _runs: dict[str, Envelope] = field(default_factory=dict)
    _waiting: dict[str, list[Envelope]] = field(default_factory=dict)

    def add(self, envelope: Envelope) -> None:
        """Fold one envelope (a repeat of an event id already folded changes nothing)."""
        if envelope.event_id in self._links:
            return
        self._links[envelope.event_id] = (envelope.correlation_id, envelope.causation_id)
        event = envelope.event
        if isinstance(event, RunStarted):
            self._runs[envelope.event_id] = envelope
        elif isinstance(event, ArtifactCreated):
            self._created(envelope, event)
        elif isinstance(event, ArtifactRevised):
            self._revised(envelope, event)
        elif isinstance(event, ArtifactArchived):
            self._archived(envelope, event)
        elif isinstance(event, ProposalMade):
            self._proposed(envelope, event)
        elif isinstance(event, ProposalResolved):
            self._resolved(envelope, event)

    def link(self, event_id: str, event_type: str, correlation_id: str,
             causation_id: str | None) -> None:
        """Fold an event of a type the ledger does not fold (not one of FOLDED_EVENT_TYPES)
        by its place in its chain alone, as `add` of its envelope would. ValueError for a
        folded type: such an event must be added whole."""
        if event_type in FOLDED_EVENT_TYPES:
            raise ValueError(f"a {event_type} event is folded whole: add its envelope")
        if event_id not in self._links:
            self._links[event_id] = (correlation_id, causation_id)

    # -- queries --------------------------------------------------------------------------

    def proposal(self, proposal_id: str) -> ProposalState | None:
        """The proposal of that id, if the ledger has seen it."""
        return self.proposals.get(proposal_id)

    def artifact(self, artifact_id: str) -> ArtifactState | None:
        """The artifact of that id, if it exists (created, or made by an accepted proposal)."""
        return self.artifacts.get(artifact_id)

    def alone(self, proposal_id: str) -> dict[str, str] | None:
        """What accepting the proposal alone, now, would make of its artifact's text (None
        for an unknown proposal or an archive proposal, which changes no text)."""
        state = self.proposals.get(proposal_id)
        if state is None or state.proposal.action != "revise":
            return None
        found = self.artifacts.get(state.proposal.artifact_id)
        return apply_change(found.content if found else {}, state.proposal.change)

    def outcome(self, proposal_id: str) -> Outcome | None:
        """The outcome of the proposal's first resolution (None while open or unknown)."""
        state = self.proposals.get(proposal_id)
        return None if state is None or state.resolution is None else state.resolution.outcome

    def run_of(self, proposal_id: str) -> RunStarted | None:
        """The run whose action made the proposal, traced through the run's own events only.

        The proposal's envelope must be in the chain of a `run_started` that the rule's actor
        recorded under its derived ids, be caused by it (directly or through other events of
        that chain), and be written by the same rule's actor. The run id the proposal claims
        must then agree; the proposal id plays no part.
        """
        state = self.proposals.get(proposal_id)
        if state is None:
            return None
        envelope = state.envelope
        started = self._cause_run(envelope)
        if started is None:
            return None
        run = started.event
        assert isinstance(run, RunStarted)
        if started.actor != rule_actor(run.rule) or envelope.actor != rule_actor(run.rule):
            return None
        if started.event_id != started_event_id(run.run_id) or \
                run.run_id != run_id_of(run.firing_id):
            return None
        if state.proposal.run_id is not None and state.proposal.run_id != run.run_id:
            return None
        return run

    def _cause_run(self, envelope: Envelope) -> Envelope | None:
        seen: set[str] = set()
        cause = envelope.causation_id
        while cause is not None and cause not in seen:
            seen.add(cause)
            found = self._links.get(cause)
            if found is None or found[0] != envelope.correlation_id:
                return None
            started = self._runs.get(cause)
            if started is not None:
                return started
            cause = found[1]
        return None

    # -- folding --------------------------------------------------------------------------

    def _version(self, artifact: ArtifactState, envelope: Envelope, content: Mapping[str, str],
                 *, author: AnyActor | None = None, proposal_id: str | None = None,
                 archive: bool = False) -> None:
        artifact.versions.append(Version(
            artifact_id=artifact.artifact_id, number=len(artifact.versions) + 1,
            content=MappingProxyType(dict(content)), author=author or envelope.actor,
            recorded_by=envelope.actor, time=envelope.time, event_id=envelope.event_id,
            proposal_id=proposal_id, archive=archive,
        ))

    def _problem(self, envelope: Envelope, what: str) -> None:
        self.problems.append(f"{envelope.event_type} {envelope.event_id}: {what}")

    def _created(self, envelope: Envelope, event: ArtifactCreated) -> None:
        if event.artifact_id in self.artifacts:
            self._problem(envelope, f"artifact {event.artifact_id!r} exists already; ignored")
            return
        artifact = ArtifactState(event.artifact_id, event.kind)
        self.artifacts[event.artifact_id] = artifact
        self._version(artifact, envelope, event.content)

    def _revised(self, envelope: Envelope, event: ArtifactRevised) -> None:
        artifact = self.artifacts.get(event.artifact_id)
        if artifact is None:
            self._problem(envelope, f"no artifact {event.artifact_id!r}; ignored")
            return
        self._version(artifact, envelope, apply_change(artifact.content, event.change))

    def _archived(self, envelope: Envelope, event: ArtifactArchived) -> None:
        artifact = self.artifacts.get(event.artifact_id)
        if artifact is None:
            self._problem(envelope, f"no artifact {event.artifact_id!r}; ignored")
            return
        self._version(artifact, envelope, artifact.content, archive=True)

    def _proposed(self, envelope: Envelope, event: ProposalMade) -> None:
        known = self.proposals.get(event.proposal_id)
        if known is not None:
            if known.proposal != event or known.proposer != envelope.actor:
                self._problem(envelope, f"proposal id {event.proposal_id!r} was made already "
                                        f"(event {known.envelope.event_id}); ignored")
            return
        self.proposals[event.proposal_id] = ProposalState(event, envelope)
        for waiting in self._waiting.pop(event.proposal_id, []):
            self._resolved(waiting, waiting.event)  # type: ignore[arg-type]

    def _resolved(self, envelope: Envelope, event: ProposalResolved) -> None:
        state = self.proposals.get(event.proposal_id)
        if state is None:  # its proposal may be later in the log (another partition)
            self._waiting.setdefault(event.proposal_id, []).append(envelope)
            return
        if state.resolution is not None:
            state.later_resolutions.append(envelope)
            return
        proposal = state.proposal
        if proposal.action == "archive" and event.changes is not None:
            self._problem(envelope, f"proposal {proposal.proposal_id!r} proposes an archive, "
                                    "which takes no changes; ignored")
            return
        if event.resolution == "rejected":
            state.resolution = Resolution("rejected", None, envelope.actor, envelope)
            return
        artifact = self.artifacts.get(proposal.artifact_id)
        if proposal.action == "archive":
            state.resolution = Resolution("accepted", None, envelope.actor, envelope)
            if artifact is None:
                self._problem(envelope, f"archive of no artifact {proposal.artifact_id!r}")
            else:
                self._version(artifact, envelope, artifact.content, author=state.proposer,
                              proposal_id=proposal.proposal_id, archive=True)
            return
        alone = apply_change(artifact.content if artifact else {}, proposal.change)
        made = apply_change(alone, event.changes)
        state.resolution = Resolution("accepted", event.changes, envelope.actor, envelope,
                                      alone=MappingProxyType(alone),
                                      made=MappingProxyType(made))
        if artifact is None:
            artifact = ArtifactState(proposal.artifact_id, proposal.kind)
            self.artifacts[proposal.artifact_id] = artifact
        self._version(artifact, envelope, made, author=state.proposer,
                      proposal_id=proposal.proposal_id)

    @property
    def unresolvable(self) -> dict[str, list[Envelope]]:
        """Resolutions of proposals the ledger has not seen (yet)."""
        return {k: list(v) for k, v in self._waiting.items()}


def fold_ledger(envelopes: Iterable[Envelope]) -> Ledger:
    """The ledger of a log's envelopes, folded in order."""
    ledger = Ledger()
    for envelope in envelopes:
        ledger.add(envelope)
    return ledger
