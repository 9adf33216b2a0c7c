"""What the workspace handle checks before it records an artifact, a proposal or a
resolution for a caller, against the ledger of the workspace's log: pure, so every surface
refuses the same input with the same words.

Each check returns the event to append (with what the caller left out filled in: the
artifact's kind, a proposal's id) or raises `NotFound` (an artifact or proposal the log does
not have) or `ValidationFailed` (it would be recorded but not apply). The ledger itself
stays tolerant (events appended by others, a run's own proposals, are folded as they are);
these checks are the handle's manners, not the log's rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import ValidationError

from streams.core.errors import NotFound, ValidationFailed
from streams.core.events import ArtifactCreated, Change, ProposalMade, ProposalResolved
from streams.core.proposals.ledger import Ledger, apply_change

__all__ = ["artifact_to_create", "change_of", "proposal_to_make", "resolution_to_record"]


def change_of(change: Change | Mapping[str, object] | None) -> Change | None:
    """A Change from a Change or a mapping (`{"set": {...}, "unset": [...]}`)."""
    if change is None or isinstance(change, Change):
        return change
    try:
        return Change.model_validate(change)
    except ValidationError as exc:
        raise ValidationFailed(
            f"a change is {{'set': {{field: text}}, 'unset': [field, ...]}}, got {change!r}: "
            f"{exc.errors()[0]['msg']}") from exc


def _unapplied(content: Mapping[str, str], change: Change) -> list[str]:
    return [name for name in change.unset if name not in content and name not in change.set]


def artifact_to_create(ledger: Ledger, artifact_id: str, content: Mapping[str, str],
                       kind: str) -> ArtifactCreated:
    """The `artifact_created` of a new artifact; ValidationFailed if the id is taken."""
    if ledger.artifact(artifact_id) is not None:
        raise ValidationFailed(f"artifact {artifact_id!r} exists already: propose a change to "
                               f"it, or create one under another id")
    try:
        return ArtifactCreated(artifact_id=artifact_id, kind=kind, content=dict(content))
    except ValidationError as exc:
        raise ValidationFailed(f"artifact {artifact_id!r}: {exc.errors()[0]['msg']} "
                               f"(content maps field names to text; kind is non-empty)") from exc


def proposal_to_make(ledger: Ledger, proposal_id: str, artifact_id: str,
                     change: Change | None, action: Literal["revise", "archive"],
                     run_id: str | None) -> ProposalMade:
    """The `proposal_made` of a proposal on an existing, live artifact.

    NotFound: no such artifact (create it first). ValidationFailed: the proposal id is taken,
    the artifact is archived, a revise without a change or an archive with one, a change
    that unsets fields the artifact does not have, or one that changes nothing.
    """
    if ledger.proposal(proposal_id) is not None:
        raise ValidationFailed(f"proposal id {proposal_id!r} is taken: choose another "
                               f"(or leave it out to get a fresh one)")
    artifact = ledger.artifact(artifact_id)
    if artifact is None:
        raise NotFound(f"no artifact {artifact_id!r} in this workspace: create it first "
                       f"(create_artifact), then propose changes to it")
    if artifact.archived_at is not None:
        raise ValidationFailed(f"artifact {artifact_id!r} is archived: nothing can be "
                               f"proposed for it")
    if action == "revise" and change is not None:
        missing = _unapplied(artifact.content, change)
        if missing:
            raise ValidationFailed(
                f"the change does not apply to artifact {artifact_id!r}: it unsets "
                f"{', '.join(map(repr, missing))}, which it does not have (it has "
                f"{sorted(artifact.content)})")
        if apply_change(artifact.content, change) == dict(artifact.content):
            raise ValidationFailed(f"the change changes nothing in artifact {artifact_id!r}")
    try:
        return ProposalMade(proposal_id=proposal_id, artifact_id=artifact_id, kind=artifact.kind,
                            action=action, change=change, run_id=run_id)
    except ValidationError as exc:
        raise ValidationFailed(f"proposal {proposal_id!r}: {exc.errors()[0]['msg']}") from exc


def resolution_to_record(ledger: Ledger, proposal_id: str,
                         resolution: Literal["accepted", "rejected"],
                         changes: Change | None) -> ProposalResolved:
    """The `proposal_resolved` of an open proposal.

    NotFound: no such proposal. ValidationFailed: it was resolved already, changes on a
    rejection or on an archive, or changes that unset fields the accepted text would not
    have.
    """
    state = ledger.proposal(proposal_id)
    if state is None:
        raise NotFound(f"no proposal {proposal_id!r} in this workspace: resolve a proposal "
                       f"that was made (its id is in its proposal_made)")
    if state.resolution is not None:
        raise ValidationFailed(
            f"proposal {proposal_id!r} was {state.resolution.resolution} already (event "
            f"{state.resolution.envelope.event_id}); a second resolution would change nothing")
    if changes is not None:
        if resolution == "rejected":
            raise ValidationFailed(f"proposal {proposal_id!r}: a rejection takes no changes")
        if state.proposal.action == "archive":
            raise ValidationFailed(f"proposal {proposal_id!r} proposes an archive, which "
                                   f"takes no changes: accept or reject it")
        alone = ledger.alone(proposal_id) or {}
        missing = _unapplied(alone, changes)
        if missing:
            raise ValidationFailed(
                f"the changes do not apply to what proposal {proposal_id!r} makes: they "
                f"unset {', '.join(map(repr, missing))}, which it does not have (it has "
                f"{sorted(alone)})")
    return ProposalResolved(proposal_id=proposal_id, resolution=resolution, changes=changes)
