"""The proposal-outcome evaluator's state, folded one envelope at a time.

`ProposalFold` keeps a workspace's artifact ledger and the proposal ids the evaluator has
scored (its own `proposal_outcome` feedback), so deciding on a resolution costs what was
appended since the last fold, not the log: a worker keeps one per workspace and feeds it only
new records (`streams.runtime.client.workspace.Workspace.proposal_fold`). `fold_proposals` is the
whole-log fold; an incremental one fed the same envelopes in the same order, in any number of
steps, is equal to it (tests/core/proposals/test_fold.py).

`ProposalSource` is the port the rule's action uses: a workspace that keeps such a fold,
caught up to the log's end when asked. A workspace without it (the in-memory replay's) is
folded from its `read()`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from streams.core.actors import AnyActor
from streams.core.events import FEEDBACK_GIVEN, Envelope
from streams.core.proposals.evaluator import (
    EVALUATOR,
    Decision,
    decide_scored,
    scored_proposal_id,
)
from streams.core.proposals.ledger import FOLDED_EVENT_TYPES, Ledger
from streams.core.proposals.outcome import PROPOSAL_OUTCOME

__all__ = ["ProposalFold", "ProposalSource", "fold_proposals", "folded_whole"]


def folded_whole(event_type: str, feedback_type: str | None = None) -> bool:
    """Whether a fold needs the event as an envelope (`ProposalFold.add`): the ledger's
    types and `proposal_outcome` feedback; any other event it folds by its place in its
    chain (`ProposalFold.link`). `feedback_type` is a `feedback_given`'s."""
    return event_type in FOLDED_EVENT_TYPES or (
        event_type == FEEDBACK_GIVEN and feedback_type == PROPOSAL_OUTCOME)


class ProposalFold:
    """A workspace's ledger and the proposals `evaluator` has scored, folded incrementally.

    `add` envelopes in log order (a repeat of an event id changes nothing: the ledger skips
    it and the scored set is a set); `decide` on a resolution the fold holds.
    """

    def __init__(self, evaluator: AnyActor = EVALUATOR) -> None:
        self.evaluator = evaluator
        self.ledger = Ledger()
        self.scored: set[str] = set()
        self.folded = 0
        """How many events were added or linked (repeats included)."""

    def add(self, envelope: Envelope) -> None:
        """Fold one envelope."""
        self.folded += 1
        self.ledger.add(envelope)
        proposal_id = scored_proposal_id(envelope, self.evaluator)
        if proposal_id is not None:
            self.scored.add(proposal_id)

    def link(self, event_id: str, event_type: str, correlation_id: str,
             causation_id: str | None) -> None:
        """Fold an event by its place in its chain alone (`Ledger.link`): for a reader that
        knows from the record's envelope fields that it is none of the ledger's types
        (`FOLDED_EVENT_TYPES`) nor the evaluator's `proposal_outcome` feedback, and so need
        not build its envelope. The same fold as `add` of the envelope."""
        self.ledger.link(event_id, event_type, correlation_id, causation_id)
        self.folded += 1

    def extend(self, envelopes: Iterable[Envelope]) -> None:
        """Fold envelopes in order."""
        for envelope in envelopes:
            self.add(envelope)

    def decide(self, resolved: Envelope) -> Decision:
        """The evaluator's decision on `resolved` (see `evaluator.decide`), from the fold:
        no log is read. ValidationFailed when `resolved` is not a `proposal_resolved`."""
        return decide_scored(self.ledger, lambda: self.scored, resolved)


def fold_proposals(envelopes: Iterable[Envelope], evaluator: AnyActor = EVALUATOR,
                   ) -> ProposalFold:
    """The fold of a whole log's envelopes."""
    fold = ProposalFold(evaluator)
    fold.extend(envelopes)
    return fold


@runtime_checkable
class ProposalSource(Protocol):
    """A workspace that keeps the proposal fold of its log (the port the action uses)."""

    async def proposal_fold(self, evaluator: AnyActor = EVALUATOR) -> ProposalFold:
        """The fold of this workspace's log up to its end as of the call (everything
        acknowledged before it), fed only what was appended since the last call."""
        ...
