"""The drafting example: a rule whose runs propose changes to an artifact, for the
proposal-outcome rule to score (docs/proposals.md; the demo and the proposal tests run it).

Someone asks for a draft (`docs:draft_requested`: the artifact, the fields to set, an
optional `archive`); the rule `docs:draft` runs `draft_change`, which proposes the change as
the rule's agent, in the run's chain, caused by its `run_started` (what traces a proposal to
its run). People then accept, edit or reject the proposal (`Workspace.resolve`), and a worker
with `--proposal-outcome` scores the run by how it was received.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from streams.core.app_events import AppEventType
from streams.core.events import AppEvent, Change, ProposalMade
from streams.core.rules import RetryPolicy, Rule, on, run
from streams.core.runs import Reaction

__all__ = ["ACTIONS", "DRAFT_RULE", "RULES", "DraftRequested", "draft", "draft_change",
           "proposal_id_of"]

DRAFT_RULE = "docs:draft"


class DraftRequested(AppEventType, name="docs:draft_requested"):
    """A request for a draft: set `fields` of artifact `artifact_id` (of `kind`), or archive
    it (`archive`)."""

    artifact_id: str
    kind: str = "runbook"
    fields: dict[str, str] = {}
    archive: bool = False


def proposal_id_of(run_id: str) -> str:
    """The id a run gives its proposal: derived from the run, so a retried attempt repeats
    the same proposal (the ledger folds a repeat once) rather than making a second."""
    return f"{run_id}/proposal"


async def draft_change(reaction: Reaction) -> Mapping[str, Any]:
    """Propose the requested change, as the rule's agent, in the run's chain."""
    request = DraftRequested.of(next(e.event for e in reversed(reaction.events)
                                     if isinstance(e.event, AppEvent)))
    proposal_id = proposal_id_of(reaction.run.run_id)
    event = ProposalMade(proposal_id=proposal_id, artifact_id=request.artifact_id,
                         kind=request.kind, action="archive" if request.archive else "revise",
                         change=None if request.archive else Change(set=request.fields),
                         run_id=reaction.run.run_id)
    await reaction.emit(event)
    return {"proposal_id": proposal_id, "artifact_id": request.artifact_id}


draft = Rule(name=DRAFT_RULE, when=on(DraftRequested), then=run(
    "draft_change", retry=RetryPolicy(max_attempts=3, backoff=timedelta(milliseconds=200))),
    description="Drafts a change to an artifact when someone asks for one.")

RULES = [draft]
ACTIONS = {"draft_change": draft_change}
