"""The proposal-outcome evaluator's decision, as pure code.

An online rule fires on `proposal_resolved`; its action
(`streams.core.proposals.rule.score_proposal_outcome`, docs/proposals.md) asks `decide`
whether to score the resolution and with what. The decision re-reads the proposal in the
ledger rather than trust the triggering event, and scores only:

- a proposal whose proposer is an external agent, a rule's participant (`agent:rule:<name>`);
- that the ledger traces to a run (through the run's own events, never a client's ids);
- whose proposer is that run's own rule;
- that the evaluator has not scored already: no earlier `proposal_outcome` feedback from the
  evaluator's actor carries the proposal's id (so a second resolution, a retried attempt and
  a replay score nothing more).

The feedback is a `ProposalOutcome` on `RunTarget(run_id)`, given as
`EvaluatorActor(name="proposal-outcome")`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Literal

from streams.core.actors import AgentActor, AnyActor, EvaluatorActor
from streams.core.errors import ValidationFailed
from streams.core.events import Envelope, FeedbackGiven, ProposalResolved
from streams.core.proposals.ledger import Ledger
from streams.core.proposals.outcome import PROPOSAL_OUTCOME, ProposalOutcome
from streams.core.runs import rule_actor
from streams.core.targets import RunTarget

__all__ = [
    "EVALUATOR",
    "RULE_PREFIX",
    "Decision",
    "decide",
    "decide_scored",
    "scored_proposal_id",
    "scored_proposals",
]

EVALUATOR = EvaluatorActor(name="proposal-outcome")
"""The evaluator's actor: its feedback is the record of what it scored."""

RULE_PREFIX = "rule:"
"""A rule's agent id is `rule:<name>` (see `streams.core.runs.rule_actor`)."""

Skip = Literal["unknown proposal", "not resolved", "proposer is not a rule's agent",
               "not traced to a run", "proposer is not the run's rule", "scored already"]


@dataclass(frozen=True)
class Decision:
    """Whether to score a resolution; when `score`, the feedback and its target.

    `reason` says why not (one of `Skip`), None when it scores.
    """

    proposal_id: str
    reason: Skip | None
    feedback: ProposalOutcome | None = None
    target: RunTarget | None = None

    @property
    def score(self) -> bool:
        """True when the evaluator should give `feedback` on `target`."""
        return self.reason is None


def scored_proposals(log: Iterable[Envelope], evaluator: AnyActor = EVALUATOR) -> set[str]:
    """The proposal ids the evaluator has given `proposal_outcome` feedback on, in `log`.

    Reads every `feedback_given` (feedback is read by type alone), keeps the evaluator's own.
    """
    found: set[str] = set()
    for envelope in log:
        proposal_id = scored_proposal_id(envelope, evaluator)
        if proposal_id is not None:
            found.add(proposal_id)
    return found


def scored_proposal_id(envelope: Envelope, evaluator: AnyActor = EVALUATOR) -> str | None:
    """The proposal id of the evaluator's `proposal_outcome` feedback in `envelope`, None
    when the envelope is anything else (another type, or someone else's feedback)."""
    event = envelope.event
    if isinstance(event, FeedbackGiven) and event.feedback_type == PROPOSAL_OUTCOME \
            and envelope.actor == evaluator:
        proposal_id = event.value.get("proposal_id")
        if isinstance(proposal_id, str):
            return proposal_id
    return None


def decide(ledger: Ledger, log: Iterable[Envelope], resolved: Envelope, *,
           evaluator: AnyActor = EVALUATOR) -> Decision:
    """Whether the evaluator scores the resolution in `resolved`, and the feedback to give.

    `ledger` is the artifact ledger of the log (it must hold the resolution); `log` the
    envelopes read so far, where the evaluator's earlier feedback is looked for. Only the
    proposal id is taken from `resolved`: the proposal, its first resolution and its run are
    read from the ledger. Raises ValidationFailed when `resolved` is not a
    `proposal_resolved`.
    """
    return decide_scored(ledger, lambda: scored_proposals(log, evaluator), resolved)


def decide_scored(ledger: Ledger, scored: Callable[[], Collection[str]],
                  resolved: Envelope) -> Decision:
    """`decide`, with the proposal ids the evaluator has scored already given by `scored`
    (called only when every other check passes): how an incremental fold
    (`streams.core.proposals.fold.ProposalFold`) decides without reading the log again."""
    event = resolved.event
    if not isinstance(event, ProposalResolved):
        raise ValidationFailed(
            f"the proposal-outcome evaluator decides on proposal_resolved events, not "
            f"{resolved.event_type} (event {resolved.event_id})")
    proposal_id = event.proposal_id
    state = ledger.proposal(proposal_id)
    if state is None:
        return Decision(proposal_id, "unknown proposal")
    if state.resolution is None:
        return Decision(proposal_id, "not resolved")
    proposer = state.proposer
    if not isinstance(proposer, AgentActor) or not proposer.id.startswith(RULE_PREFIX):
        return Decision(proposal_id, "proposer is not a rule's agent")
    run = ledger.run_of(proposal_id)
    if run is None:
        return Decision(proposal_id, "not traced to a run")
    if proposer != rule_actor(run.rule):
        return Decision(proposal_id, "proposer is not the run's rule")
    if proposal_id in scored():
        return Decision(proposal_id, "scored already")
    return Decision(proposal_id, None,
                    feedback=ProposalOutcome(proposal_id=proposal_id,
                                             outcome=state.resolution.outcome),
                    target=RunTarget(run_id=run.run_id))
