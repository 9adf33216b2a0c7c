"""The proposal measures: pure folds over a workspace's whole log, run offline (a report, an
experiment), not on every event.

- `proposal_rates(since, until)`: the outcomes of proposals resolved in the window, counted by
  the rule whose run proposed (as the ledger traces it), with their rates.
- `rule_conversion(survival, now)`: rule drafts proposed, accepted, installed (counted from
  the installer's `rule_installed` facts) and still live after `survival`.
- `history(artifact)`: an artifact's versions for measuring rewrites, each credited to its
  author (an accepted proposal's version to its proposer), archives left out; `rewrites`
  measures it.

Each has an async form over a workspace handle or envelopes (`LogSource`) and a `fold_*`
form over envelopes already read.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Literal

from streams.core.actors import AnyActor, SystemActor, UserActor
from streams.core.errors import ValidationFailed
from streams.core.events import Envelope, RuleArchived, RuleInstalled
from streams.core.measures.source import LogSource, envelopes_of
from streams.core.proposals.ledger import ArtifactState, Ledger, fold_ledger

__all__ = [
    "RULE_KIND",
    "AuthorClass",
    "DraftConversion",
    "HistoryVersion",
    "ProposalRates",
    "Rewrites",
    "RuleConversion",
    "author_class",
    "edit_distance",
    "fold_history",
    "fold_proposal_rates",
    "fold_rule_conversion",
    "history",
    "history_of",
    "proposal_rates",
    "rewrites",
    "rule_conversion",
    "text_of",
]

RULE_KIND = "rule"
"""The artifact kind of a rule draft."""

AuthorClass = Literal["person", "system", "agent"]


# -- proposal_rates ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ProposalRates:
    """One rule's proposals resolved in a window, by outcome.

    Rates are shares of `resolved` (0 when nothing was resolved): `acceptance_rate` taken as
    proposed, `edit_rate` taken with changes that did something, `rejection_rate`.
    """

    rule: str
    accepted: int
    edited: int
    rejected: int

    @property
    def resolved(self) -> int:
        """Proposals of the rule's runs resolved in the window."""
        return self.accepted + self.edited + self.rejected

    def _share(self, count: int) -> float:
        return count / self.resolved if self.resolved else 0.0

    @property
    def acceptance_rate(self) -> float:
        """accepted / resolved."""
        return self._share(self.accepted)

    @property
    def edit_rate(self) -> float:
        """edited / resolved."""
        return self._share(self.edited)

    @property
    def rejection_rate(self) -> float:
        """rejected / resolved."""
        return self._share(self.rejected)


def _window(since: datetime | None, until: datetime | None) -> None:
    if since is not None and until is not None and since >= until:
        raise ValidationFailed(f"since ({since.isoformat()}) must be before until "
                               f"({until.isoformat()})")


def fold_proposal_rates(envelopes: Iterable[Envelope], *, since: datetime | None = None,
                        until: datetime | None = None,
                        ledger: Ledger | None = None) -> dict[str, ProposalRates]:
    """Per rule, the outcomes of its runs' proposals whose first resolution falls in
    `since <= time < until` (either bound may be None).

    The whole log is folded (a proposal may be older than the window); a proposal counts
    once, by its first resolution, and only when the ledger traces it to a run of that rule.
    `ledger`: `fold_ledger(envelopes)` when the caller has it already (the envelopes are
    not folded again).
    """
    _window(since, until)
    ledger = ledger if ledger is not None else fold_ledger(envelopes)
    counts: dict[str, dict[str, int]] = {}
    for proposal_id, state in ledger.proposals.items():
        resolution = state.resolution
        if resolution is None:
            continue
        time = resolution.envelope.time
        if (since is not None and time < since) or (until is not None and time >= until):
            continue
        run = ledger.run_of(proposal_id)
        if run is None:
            continue
        tally = counts.setdefault(run.rule, {"accepted": 0, "edited": 0, "rejected": 0})
        tally[resolution.outcome] += 1
    return {rule: ProposalRates(rule, **tally) for rule, tally in sorted(counts.items())}


async def proposal_rates(source: LogSource, *, since: datetime | None = None,
                         until: datetime | None = None) -> dict[str, ProposalRates]:
    """`fold_proposal_rates` over a workspace's log (read to its end) or envelopes."""
    return fold_proposal_rates(await envelopes_of(source), since=since, until=until)


# -- rule_conversion --------------------------------------------------------------------------


@dataclass(frozen=True)
class DraftConversion:
    """One rule draft (an artifact of kind `rule` someone proposed): how far it went.

    `installed_at`: its first install (None if never installed); `archived_at`: its first
    archive at or after that install (None if none: an archive before it does not count);
    `survived` and `pending` as in `RuleConversion`.
    """

    artifact_id: str
    accepted: bool
    installed_at: datetime | None
    archived_at: datetime | None
    survived: bool
    pending: bool


@dataclass(frozen=True)
class RuleConversion:
    """Rule drafts proposed, accepted, installed and still live after `survival`.

    `pending`: installed, not archived, but installed less than `survival` before `now`, so
    not yet counted as survived or not.
    """

    proposed: int
    accepted: int
    installed: int
    survived: int
    pending: int
    survival: timedelta
    now: datetime
    drafts: tuple[DraftConversion, ...]


def fold_rule_conversion(envelopes: Iterable[Envelope], *, now: datetime,
                         survival: timedelta = timedelta(days=30),
                         installer: AnyActor | None = None,
                         ledger: Ledger | None = None) -> RuleConversion:
    """How many rule drafts were proposed, accepted, installed and survived.

    Only envelopes logged before `now` count. A draft is an artifact of kind `rule` with at
    least one proposal. Installs count from `rule_installed` facts naming the draft's
    artifact and written by `installer` (the system by default: facts others write are not
    installs). A draft survives when `survival` has passed since its first install and it was
    not archived since that install: not by `rule_archived` of a rule installed from it, nor
    by archiving its artifact (directly or through an accepted archive proposal), whoever did
    it. An archive before the first install does not count.

    `ledger`: `fold_ledger(envelopes)` when the caller has it already; it is used only when
    every envelope was logged before `now` (else the envelopes before `now` are folded).
    """
    if survival <= timedelta(0):
        raise ValidationFailed(f"survival must be positive, got {survival}")
    installer = installer or SystemActor()
    every = list(envelopes)
    logged = [e for e in every if e.time < now]
    if ledger is None or len(logged) != len(every):
        ledger = fold_ledger(logged)
    drafts = {s.proposal.artifact_id for s in ledger.proposals.values()
              if s.proposal.kind == RULE_KIND}
    installs: dict[str, datetime] = {}
    rules_of: dict[str, set[str]] = {}
    for envelope in logged:
        event = envelope.event
        if isinstance(event, RuleInstalled) and event.artifact_id in drafts \
                and envelope.actor == installer:
            first = installs.get(event.artifact_id)
            installs[event.artifact_id] = min(first, envelope.time) if first else envelope.time
            rules_of.setdefault(event.artifact_id, set()).add(event.rule)
    archives: dict[str, list[datetime]] = {}
    for envelope in logged:
        event = envelope.event
        if isinstance(event, RuleArchived):
            for artifact_id, rules in rules_of.items():
                if event.rule in rules:
                    archives.setdefault(artifact_id, []).append(envelope.time)
    for artifact_id in drafts:
        artifact = ledger.artifact(artifact_id)
        if artifact is not None:
            archives.setdefault(artifact_id, []).extend(
                v.time for v in artifact.versions if v.archive)
    out = []
    for artifact_id in sorted(drafts):
        accepted = any(s.proposal.artifact_id == artifact_id and s.state == "accepted"
                       for s in ledger.proposals.values())
        installed = installs.get(artifact_id)
        archived = min((t for t in archives.get(artifact_id, []) if installed and t >= installed),
                       default=None)
        due = installed is not None and installed + survival <= now
        out.append(DraftConversion(
            artifact_id=artifact_id, accepted=accepted, installed_at=installed,
            archived_at=archived, survived=due and archived is None,
            pending=installed is not None and not due and archived is None))
    return RuleConversion(
        proposed=len(out), accepted=sum(d.accepted for d in out),
        installed=sum(d.installed_at is not None for d in out),
        survived=sum(d.survived for d in out), pending=sum(d.pending for d in out),
        survival=survival, now=now, drafts=tuple(out))


async def rule_conversion(source: LogSource, *, now: datetime,
                          survival: timedelta = timedelta(days=30),
                          installer: AnyActor | None = None) -> RuleConversion:
    """`fold_rule_conversion` over a workspace's log (read to its end) or envelopes."""
    return fold_rule_conversion(await envelopes_of(source), now=now, survival=survival,
                                installer=installer)


# -- history and rewrites ---------------------------------------------------------------------


def author_class(actor: AnyActor) -> AuthorClass:
    """person for a person (a user actor); system for the system; agent for anything else
    (an agent, a rule's agent, an evaluator)."""
    if isinstance(actor, UserActor):
        return "person"
    if isinstance(actor, SystemActor):
        return "system"
    return "agent"


def text_of(content: Mapping[str, str]) -> str:
    """An artifact's text: its fields in name order, `name: text` per line."""
    return "\n".join(f"{name}: {content[name]}" for name in sorted(content))


@dataclass(frozen=True)
class HistoryVersion:
    """One version in an artifact's history, credited to its author."""

    number: int
    text: str
    author: str
    author_class: AuthorClass
    time: datetime
    proposal_id: str | None


def fold_history(envelopes: Iterable[Envelope], artifact_id: str) -> list[HistoryVersion]:
    """The artifact's versions, oldest first, archives left out (they change no text).

    An accepted proposal's version is its proposer's, not whoever accepted it. Raises
    ValidationFailed when the log holds no such artifact.
    """
    artifact = fold_ledger(envelopes).artifact(artifact_id)
    if artifact is None:
        raise ValidationFailed(f"no artifact {artifact_id!r} in the log")
    return history_of(artifact)


def history_of(artifact: ArtifactState) -> list[HistoryVersion]:
    """The versions of an artifact the ledger already folded (see `fold_history`)."""
    return [HistoryVersion(number=v.number, text=text_of(v.content),
                           author=v.author.participant, author_class=author_class(v.author),
                           time=v.time, proposal_id=v.proposal_id)
            for v in artifact.versions if not v.archive]


async def history(source: LogSource, artifact_id: str) -> list[HistoryVersion]:
    """`fold_history` over a workspace's log (read to its end) or envelopes."""
    return fold_history(await envelopes_of(source), artifact_id)


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance between two texts, in characters (O(len(a)·len(b)))."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, left in enumerate(a, 1):
        current = [i]
        for j, right in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1,
                               previous[j - 1] + (left != right)))
        previous = current
    return previous[-1]


@dataclass(frozen=True)
class Rewrites:
    """How much of a history rewrote the previous author's text.

    `transitions`: consecutive pairs of versions; `rewrites`: those whose author differs from
    the previous version's and whose text differs; `rewrite_share` = rewrites / transitions
    (0 when there are none); `mean_edit_ratio`: the mean over the rewrites of
    edit distance / the longer text's length (None without rewrites).
    """

    transitions: int
    rewrites: int
    rewrite_share: float
    mean_edit_ratio: float | None


def rewrites(versions: list[HistoryVersion]) -> Rewrites:
    """The rewrite measure of a history (see `Rewrites`)."""
    ratios = []
    for previous, current in pairwise(versions):
        if current.author != previous.author and current.text != previous.text:
            longest = max(len(previous.text), len(current.text))
            ratios.append(edit_distance(previous.text, current.text) / longest)
    transitions = max(len(versions) - 1, 0)
    return Rewrites(transitions=transitions, rewrites=len(ratios),
                    rewrite_share=len(ratios) / transitions if transitions else 0.0,
                    mean_edit_ratio=math.fsum(ratios) / len(ratios) if ratios else None)
