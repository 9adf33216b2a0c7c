"""The outcome of a resolution, over random artifacts and changes (hypothesis): accepted
when the acceptance made what the proposal alone would have, edited when the person's
changes did something, rejected when rejected; an archive is accepted or rejected."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.core.errors import ValidationFailed
from streams.core.events import Change, Envelope, FeedbackGiven
from streams.core.feedback import registry, validate_feedback, value_record
from streams.core.proposals import (
    EVALUATOR,
    PROPOSAL_OUTCOME,
    ProposalOutcome,
    apply_change,
    fold_ledger,
)
from streams.core.scores import scores_of
from streams.core.targets import RunTarget
from tests.core.proposals.log import Log, ResolutionName

FIELDS = st.sampled_from(["when", "then", "name", "note", "scope"])
TEXT = st.text(max_size=12)
CONTENT = st.dictionaries(FIELDS, TEXT, max_size=5)
CHANGE = st.builds(Change, set=st.dictionaries(FIELDS, TEXT, max_size=4),
                   unset=st.lists(FIELDS, max_size=3))

RULE = "chat:draft-rule"


def _resolve(content: dict[str, str] | None, change: Change, changes: Change | None,
             resolution: ResolutionName = "accepted") -> tuple[Log, str]:
    log = Log()
    if content is not None:
        log.create("a1", content)
    run = log.run(RULE)
    log.resolve(log.propose("p1", "a1", change, by=run), resolution, changes)
    return log, "p1"


@given(content=st.none() | CONTENT, change=CHANGE, changes=st.none() | CHANGE)
def test_accepted_exactly_when_the_acceptance_made_what_the_proposal_alone_would(
        content: dict[str, str] | None, change: Change, changes: Change | None) -> None:
    log, pid = _resolve(content, change, changes)
    ledger = fold_ledger(log.envelopes)
    alone = apply_change(content or {}, change)
    made = apply_change(alone, changes)
    assert ledger.outcome(pid) == ("accepted" if made == alone else "edited")
    artifact = ledger.artifact("a1")
    assert artifact is not None and dict(artifact.content) == made


@given(content=CONTENT, change=CHANGE, data=st.data())
def test_changes_that_change_nothing_are_accepted(content: dict[str, str], change: Change,
                                                  data: st.DataObject) -> None:
    alone = apply_change(content, change)
    kept = data.draw(st.lists(st.sampled_from(sorted(alone)), unique=True)) if alone else []
    absent = data.draw(st.lists(FIELDS.filter(lambda f: f not in alone), max_size=3))
    idle = Change(set={name: alone[name] for name in kept}, unset=absent)
    log, pid = _resolve(content, change, idle)
    assert fold_ledger(log.envelopes).outcome(pid) == "accepted"


@given(content=CONTENT, change=CHANGE, name=FIELDS, text=TEXT)
def test_changes_that_do_something_are_edited(content: dict[str, str], change: Change,
                                              name: str, text: str) -> None:
    alone = apply_change(content, change)
    edit = Change(unset=[name]) if alone.get(name) == text else Change(set={name: text})
    log, pid = _resolve(content, change, edit)
    assert fold_ledger(log.envelopes).outcome(pid) == "edited"


@given(content=st.none() | CONTENT, change=CHANGE)
def test_a_rejection_is_rejected_and_makes_no_version(content: dict[str, str] | None,
                                                      change: Change) -> None:
    log, pid = _resolve(content, change, None, "rejected")
    ledger = fold_ledger(log.envelopes)
    assert ledger.outcome(pid) == "rejected"
    artifact = ledger.artifact("a1")
    assert (artifact is None) if content is None else \
        (artifact is not None and len(artifact.versions) == 1)


@pytest.mark.parametrize("resolution", ["accepted", "rejected"])
def test_an_archive_is_accepted_or_rejected(resolution: ResolutionName) -> None:
    log = Log()
    log.create("a1", {"when": "x"})
    run = log.run(RULE)
    log.resolve(log.propose("p1", "a1", by=run, action="archive"), resolution)
    assert fold_ledger(log.envelopes).outcome("p1") == resolution


def test_proposal_outcome_is_feedback_on_runs_scored_per_field() -> None:
    assert registry.require(PROPOSAL_OUTCOME) is ProposalOutcome
    assert ProposalOutcome.feedback_targets == frozenset({"run"})
    for bad in ({"proposal_id": "p1", "outcome": "ignored"},
                {"proposal_id": "", "outcome": "accepted"}):
        with pytest.raises(ValidationFailed, match="proposal_outcome"):
            validate_feedback(bad, PROPOSAL_OUTCOME)
    value = validate_feedback({"proposal_id": "p1", "outcome": "edited"}, PROPOSAL_OUTCOME)
    envelope = Envelope.new(FeedbackGiven(feedback_type=PROPOSAL_OUTCOME,
                                          target=RunTarget(run_id="run_1"),
                                          value=value_record(value)),
                            tenant="acme", workspace="prod", actor=EVALUATOR)
    scores = {s.name: s.value for s in scores_of(envelope) or []}
    assert scores == {"proposal_outcome.proposal_id": "p1", "proposal_outcome.outcome": "edited"}
