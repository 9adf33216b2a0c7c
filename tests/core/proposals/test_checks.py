"""The handle's checks before it records an artifact, a proposal or a resolution: each
refusal names what to fix, and what passes is the event the ledger folds as intended."""

import pytest

from streams.core.errors import NotFound, ValidationFailed
from streams.core.events import Change
from streams.core.proposals import fold_ledger
from streams.core.proposals.checks import (
    artifact_to_create,
    change_of,
    proposal_to_make,
    resolution_to_record,
)
from tests.core.proposals.log import ADA, Log


def _log() -> Log:
    log = Log()
    log.create("a1", {"when": "x", "then": "page"}, kind="runbook")
    log.propose("p1", "a1", Change(set={"when": "y"}), by=ADA, run_id=None)
    log.propose("arch", "a1", by=ADA, run_id=None, action="archive")
    return log


def test_creating_an_artifact() -> None:
    ledger = fold_ledger(_log().envelopes)
    assert artifact_to_create(ledger, "a2", {"text": "t"}, "note").kind == "note"
    with pytest.raises(ValidationFailed, match="'a1' exists already"):
        artifact_to_create(ledger, "a1", {}, "note")
    with pytest.raises(ValidationFailed, match="content maps field names to text"):
        artifact_to_create(ledger, "a3", {"n": 1}, "note")  # type: ignore[dict-item]


def test_proposing_on_an_unknown_or_archived_artifact_or_a_change_that_does_not_apply() -> None:
    log = _log()
    ledger = fold_ledger(log.envelopes)
    made = proposal_to_make(ledger, "p2", "a1", Change(unset=["then"]), "revise", None)
    assert made.kind == "runbook"
    with pytest.raises(NotFound, match=r"no artifact 'nope'.*create it first"):
        proposal_to_make(ledger, "p2", "nope", Change(set={"a": "b"}), "revise", None)
    with pytest.raises(ValidationFailed, match=r"does not apply.*unsets 'gone'"):
        proposal_to_make(ledger, "p2", "a1", Change(unset=["gone"]), "revise", None)
    with pytest.raises(ValidationFailed, match="changes nothing"):
        proposal_to_make(ledger, "p2", "a1", Change(set={"when": "x"}), "revise", None)
    with pytest.raises(ValidationFailed, match="'p1' is taken"):
        proposal_to_make(ledger, "p1", "a1", Change(set={"when": "z"}), "revise", None)
    with pytest.raises(ValidationFailed, match="needs a change"):
        proposal_to_make(ledger, "p2", "a1", None, "revise", None)
    log.archive("a1")
    with pytest.raises(ValidationFailed, match="archived"):
        proposal_to_make(fold_ledger(log.envelopes), "p2", "a1", Change(set={"a": "b"}),
                         "revise", None)


def test_resolving() -> None:
    log = _log()
    ledger = fold_ledger(log.envelopes)
    assert resolution_to_record(ledger, "p1", "accepted",
                                Change(set={"note": "n"})).changes is not None
    with pytest.raises(NotFound, match="no proposal 'nope'"):
        resolution_to_record(ledger, "nope", "accepted", None)
    with pytest.raises(ValidationFailed, match="a rejection takes no changes"):
        resolution_to_record(ledger, "p1", "rejected", Change(set={"a": "b"}))
    with pytest.raises(ValidationFailed, match="archive, which takes no changes"):
        resolution_to_record(ledger, "arch", "accepted", Change(set={"a": "b"}))
    with pytest.raises(ValidationFailed, match=r"do not apply.*unset 'gone'"):
        resolution_to_record(ledger, "p1", "accepted", Change(unset=["gone"]))
    log.resolve("p1")
    with pytest.raises(ValidationFailed, match="accepted already"):
        resolution_to_record(fold_ledger(log.envelopes), "p1", "rejected", None)


def test_a_change_from_a_mapping() -> None:
    assert change_of({"set": {"a": "b"}}) == Change(set={"a": "b"})
    with pytest.raises(ValidationFailed, match="a change is"):
        change_of({"sett": {}})
