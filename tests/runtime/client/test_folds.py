"""The worker's per-workspace proposal folds: each call folds only what the log view gained
since the last one, per workspace, and gives what the whole-log fold gives."""

from streams.core.events import Change, RunStarted
from streams.core.proposals import EVALUATOR, fold_proposals
from streams.runtime.client.folds import ProposalFolds
from tests.core.proposals.log import Log


def test_each_call_folds_only_what_was_appended_since_the_last() -> None:
    log = Log()
    view = []  # the tenant's log view, which only grows
    folds = ProposalFolds()
    log.create("a1", {"when": "x"})
    started = log.run("chat:draft")
    assert isinstance(started.event, RunStarted)
    view += log.envelopes
    first = folds.fold(view, "prod", EVALUATOR)
    assert folds.fed == len(view) and set(first.ledger.artifacts) == {"a1"}
    before = len(view)
    proposal = log.propose("p1", "a1", Change(set={"when": "y"}), by=started)
    resolved = log.resolve(proposal)
    view += [proposal, resolved]
    again = folds.fold(view, "prod", EVALUATOR)
    assert again is first  # one fold per workspace, kept
    assert folds.fed == before + 2  # only the two new envelopes were looked at
    assert again.decide(resolved).score
    assert folds.fold(view, "prod", EVALUATOR).decide(resolved).target is not None
    assert folds.fed == before + 2  # nothing new, nothing folded


def test_folds_are_per_workspace_and_equal_the_whole_fold() -> None:
    log = Log()
    log.create("a1", {"when": "x"})
    other = log.envelopes[-1].model_copy(update={"workspace": "staging", "event_id": "e-st"})
    view = [*log.envelopes, other]
    folds = ProposalFolds()
    prod, staging = folds.fold(view, "prod", EVALUATOR), folds.fold(view, "staging", EVALUATOR)
    assert prod is not staging
    whole = fold_proposals([e for e in view if e.workspace == "prod"])
    assert {k: [dict(v.content) for v in a.versions] for k, a in prod.ledger.artifacts.items()} \
        == {k: [dict(v.content) for v in a.versions] for k, a in whole.ledger.artifacts.items()}
    assert list(staging.ledger.artifacts) == ["a1"] and staging.folded == 1
