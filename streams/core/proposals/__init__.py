"""Proposals: artifacts and their versions, proposals and their resolutions, folded by a
pure ledger; the outcome of a resolution (accepted, edited, rejected) as `ProposalOutcome`
feedback on the run that proposed; the proposal-outcome evaluator's decision; and the
measures over them (proposal rates, rule conversion, history and rewrites).

The events themselves are built-in event types in `streams.core.events`
(`artifact_created`, `artifact_revised`, `artifact_archived`, `proposal_made`,
`proposal_resolved`, `rule_installed`, `rule_archived`). See docs/proposals.md.
"""

from streams.core.proposals.evaluator import (
    EVALUATOR,
    Decision,
    decide,
    decide_scored,
    scored_proposals,
)
from streams.core.proposals.fold import (
    ProposalFold,
    ProposalSource,
    fold_proposals,
    folded_whole,
)
from streams.core.proposals.ledger import (
    FOLDED_EVENT_TYPES,
    ArtifactState,
    Ledger,
    Outcome,
    ProposalState,
    Resolution,
    Version,
    apply_change,
    fold_ledger,
)
from streams.core.proposals.measures import (
    DraftConversion,
    HistoryVersion,
    ProposalRates,
    Rewrites,
    RuleConversion,
    author_class,
    edit_distance,
    fold_history,
    fold_proposal_rates,
    fold_rule_conversion,
    history,
    history_of,
    proposal_rates,
    rewrites,
    rule_conversion,
    text_of,
)
from streams.core.proposals.outcome import PROPOSAL_OUTCOME, ProposalOutcome

__all__ = [
    "EVALUATOR",
    "FOLDED_EVENT_TYPES",
    "PROPOSAL_OUTCOME",
    "ArtifactState",
    "Decision",
    "DraftConversion",
    "HistoryVersion",
    "Ledger",
    "Outcome",
    "ProposalFold",
    "ProposalOutcome",
    "ProposalRates",
    "ProposalSource",
    "ProposalState",
    "Resolution",
    "Rewrites",
    "RuleConversion",
    "Version",
    "apply_change",
    "author_class",
    "decide",
    "decide_scored",
    "edit_distance",
    "fold_history",
    "fold_ledger",
    "fold_proposal_rates",
    "fold_proposals",
    "fold_rule_conversion",
    "folded_whole",
    "history",
    "history_of",
    "proposal_rates",
    "rewrites",
    "rule_conversion",
    "scored_proposals",
    "text_of",
]
