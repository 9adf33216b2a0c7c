"""A log builder for the proposal tests: runs recorded as the worker records them, and
artifact, proposal and resolution events, each a millisecond after the last."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

from streams.core.actors import AgentActor, AnyActor, SystemActor, UserActor
from streams.core.app_events import app_event_type
from streams.core.events import (
    AppEvent,
    ArtifactArchived,
    ArtifactCreated,
    ArtifactRevised,
    Change,
    Envelope,
    Event,
    ProposalMade,
    ProposalResolved,
    RuleArchived,
    RuleInstalled,
    RunStarted,
)
from streams.core.rules import Rule, RuleEngine, on, run
from streams.core.runs import fire_envelopes, rule_actor

ResolutionName = Literal["accepted", "rejected"]
T0 = datetime(2026, 11, 1, tzinfo=UTC)
ADA = UserActor(id="ada")
BOB = UserActor(id="bob")
SYSTEM = SystemActor()
CHAT_MESSAGE = app_event_type("chat:message")
"""What starts the runs of the builder's rules."""


class Log:
    """Envelopes in log order; `clock` moves forward a millisecond per event (or `at`)."""

    def __init__(self) -> None:
        self.envelopes: list[Envelope] = []
        self.clock = T0
        self._causes = 0

    def _time(self, at: datetime | None) -> datetime:
        self.clock = at if at is not None else self.clock + timedelta(milliseconds=1)
        return self.clock

    def append(self, event: Event, actor: AnyActor, *, after: Envelope | None = None,
               at: datetime | None = None, event_id: str | None = None) -> Envelope:
        """An event by `actor`: in `after`'s chain, caused by it, or starting a chain."""
        time = self._time(at)
        if after is not None:
            envelope = after.follow(event, actor=actor, time=time, event_id=event_id)
        else:
            envelope = Envelope.new(event, tenant="acme", workspace="prod", actor=actor,
                                    time=time, event_id=event_id)
        self.envelopes.append(envelope)
        return envelope

    def run(self, rule: str, *, at: datetime | None = None) -> Envelope:
        """A run of `rule` as a worker records it (its cause, rule_fired, run_started);
        returns the run_started."""
        self._causes += 1
        cause = self.append(AppEvent(name="chat:message", data={"n": self._causes}), ADA, at=at)
        [fire] = RuleEngine([Rule(name=rule, when=on("chat:message"),
                                  then=run("draft"))]).evaluate(cause)
        fired, started = fire_envelopes(fire, cause)  # type: ignore[arg-type]
        self.envelopes += [fired, started]
        return started

    def propose(self, proposal_id: str, artifact_id: str, change: Change | None = None, *,
                by: Envelope | AnyActor, run_id: str | bool | None = True,
                action: Literal["revise", "archive"] = "revise", kind: str = "rule",
                at: datetime | None = None) -> Envelope:
        """A proposal. `by` a run_started: the run's action proposes it, as the rule's actor,
        in its chain, claiming its run id (`run_id=True`); `by` an actor: a client does."""
        if isinstance(by, Envelope):
            assert isinstance(by.event, RunStarted)
            claim = by.event.run_id if run_id is True else run_id
            event = ProposalMade(proposal_id=proposal_id, artifact_id=artifact_id, kind=kind,
                                 action=action, change=change,
                                 run_id=claim if isinstance(claim, str) else None)
            return self.append(event, rule_actor(by.event.rule), after=by, at=at)
        event = ProposalMade(proposal_id=proposal_id, artifact_id=artifact_id, kind=kind,
                             action=action, change=change,
                             run_id=run_id if isinstance(run_id, str) else None)
        return self.append(event, by, at=at)

    def resolve(self, proposal: Envelope | str, resolution: ResolutionName = "accepted",
                changes: Change | None = None, *, actor: AnyActor = ADA,
                at: datetime | None = None) -> Envelope:
        """A resolution by `actor`, in the proposal's chain when given its envelope."""
        if isinstance(proposal, Envelope):
            assert isinstance(proposal.event, ProposalMade)
            pid, after = proposal.event.proposal_id, proposal
        else:
            pid, after = proposal, None
        event = ProposalResolved(proposal_id=pid, resolution=resolution,
                                 changes=changes)
        return self.append(event, actor, after=after, at=at)

    def create(self, artifact_id: str, content: dict[str, str], *, actor: AnyActor = ADA,
               kind: str = "rule", at: datetime | None = None) -> Envelope:
        return self.append(ArtifactCreated(artifact_id=artifact_id, kind=kind, content=content),
                           actor, at=at)

    def revise(self, artifact_id: str, change: Change, *, actor: AnyActor = ADA,
               at: datetime | None = None) -> Envelope:
        return self.append(ArtifactRevised(artifact_id=artifact_id, change=change), actor, at=at)

    def archive(self, artifact_id: str, *, actor: AnyActor = ADA,
                at: datetime | None = None) -> Envelope:
        return self.append(ArtifactArchived(artifact_id=artifact_id), actor, at=at)

    def install(self, rule: str, artifact_id: str | None, *, actor: AnyActor = SYSTEM,
                at: datetime | None = None) -> Envelope:
        return self.append(RuleInstalled(rule=rule, artifact_id=artifact_id), actor, at=at)

    def take_down(self, rule: str, *, actor: AnyActor = ADA,
                  at: datetime | None = None) -> Envelope:
        return self.append(RuleArchived(rule=rule), actor, at=at)


def agent(rule: str) -> AgentActor:
    """The actor of a rule's runs."""
    return rule_actor(rule)
