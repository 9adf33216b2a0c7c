"""The proposal-outcome rule and its action, in the core (no Kafka): a rules module a worker
can load (`RULES`, `ACTIONS`), run in memory by the replay tests.

    proposal_outcome = Rule(
        name="streams:proposal-outcome",
        when=on(ProposalResolved).scope(F.proposal_id),
        then=run("score_proposal_outcome"),
    )

The rule fires on every `proposal_resolved`, scoped by `proposal_id`, so a worker runs one
proposal's resolutions one at a time (a scoped rule is stateful: its matches go through the
tenant's rules topic, see docs/rules.md). The action takes the workspace's proposal fold
(kept incrementally by the worker's handle, `ProposalSource`), asks `decide` (which
re-reads the proposal, checks the proposer is the traced run's own rule, and looks for the
evaluator's earlier feedback), and, when it scores, gives the
`ProposalOutcome` on the run as the evaluator: it gives feedback and does nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from streams.core.errors import ValidationFailed
from streams.core.events import ProposalResolved
from streams.core.proposals.evaluator import EVALUATOR
from streams.core.proposals.fold import ProposalFold, ProposalSource, fold_proposals
from streams.core.rules import F, Rule, on, run
from streams.core.runs import ActingWorkspace, Reaction

__all__ = ["ACTIONS", "PROPOSAL_OUTCOME_ACTION", "RULES", "proposal_outcome",
           "proposal_state", "score_proposal_outcome"]

PROPOSAL_OUTCOME_ACTION: Final = "score_proposal_outcome"

proposal_outcome = Rule(
    name="streams:proposal-outcome",
    when=on(ProposalResolved).scope(F.proposal_id),
    then=run(PROPOSAL_OUTCOME_ACTION),
    description="Scores the run that proposed, by how a person resolved its proposal.",
)


async def proposal_state(workspace: ActingWorkspace) -> ProposalFold:
    """The workspace's proposal fold, up to the log's end: kept incrementally by a workspace
    that offers it (`ProposalSource`, the worker's handle), else folded from `read()`."""
    if isinstance(workspace, ProposalSource):
        return await workspace.proposal_fold(EVALUATOR)
    return fold_proposals(await workspace.read(), EVALUATOR)


async def score_proposal_outcome(reaction: Reaction) -> Mapping[str, Any]:
    """The action: decide on the resolution that fired the rule and, when it scores, give
    the evaluator's ProposalOutcome on the proposing run. Its output says what it did.

    Bad input fails the attempt with the reason (so the rule's retries, then its dead
    letter, name it): a resolution of a proposal the workspace's log does not hold (it may
    yet arrive from another partition, hence the retries), or one the ledger could not
    apply (changes on an archive, an archive of an artifact that does not exist). Nothing
    is scored for either.
    """
    resolved = next((e for e in reversed(reaction.events)
                     if isinstance(e.event, ProposalResolved)), None)
    if resolved is None:
        raise ValidationFailed(
            f"run {reaction.run.run_id} of {reaction.run.rule!r}: no proposal_resolved among "
            f"the events that made it fire")
    fold = await proposal_state(reaction.workspace)
    decision = fold.decide(resolved)
    where = f"{reaction.workspace.tenant}/{reaction.workspace.workspace}"
    if decision.reason == "unknown proposal":
        raise ValidationFailed(
            f"resolution {resolved.event_id} resolves proposal {decision.proposal_id!r}, "
            f"which workspace {where} has no proposal_made for: resolve a proposal that "
            f"was made (nothing scored)")
    # The ledger lists what it could not apply (changes on an archive, an archive of no
    # artifact) under the resolution's event id; problems are rare, so the scan is short.
    problems = [p for p in fold.ledger.problems if resolved.event_id in p]
    if decision.reason == "not resolved" or problems:
        raise ValidationFailed(
            f"resolution {resolved.event_id} of proposal {decision.proposal_id!r} does not "
            f"apply: {'; '.join(problems) or 'the ledger ignored it'} (nothing scored)")
    if not decision.score:
        return {"scored": False, "proposal_id": decision.proposal_id,
                "reason": decision.reason}
    assert decision.feedback is not None and decision.target is not None
    recorded = await reaction.workspace.as_actor(EVALUATOR).give_feedback(
        decision.feedback, on=decision.target)
    return {"scored": True, "proposal_id": decision.proposal_id,
            "outcome": decision.feedback.outcome, "run_id": decision.target.run_id,
            "feedback_id": recorded.id}


RULES = [proposal_outcome]
ACTIONS = {PROPOSAL_OUTCOME_ACTION: score_proposal_outcome}
