"""ProposalOutcome: how a person received a run's proposal, as feedback on that run."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from streams.core.feedback import Feedback

__all__ = ["PROPOSAL_OUTCOME", "ProposalOutcome"]

PROPOSAL_OUTCOME: Final = "proposal_outcome"


class ProposalOutcome(Feedback, name=PROPOSAL_OUTCOME, targets={"run"}):
    """The outcome of one proposal a run made: accepted as proposed, edited (accepted with
    changes that did something), or rejected. `proposal_id` tells one proposal's score from
    another's on the same run."""

    proposal_id: str = Field(min_length=1)
    outcome: Literal["accepted", "edited", "rejected"]
