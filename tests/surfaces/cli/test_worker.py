"""`streams worker --proposal-outcome` (and STREAMS_PROPOSAL_OUTCOME=on) load the shipped
proposal-outcome rule beside the worker's other rules modules; no broker needed."""

import pytest

from streams.surfaces.cli.base import PROPOSAL_OUTCOME_MODULE, load_rules, with_proposal_outcome


def test_the_flag_adds_the_shipped_rule_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAMS_PROPOSAL_OUTCOME", raising=False)
    monkeypatch.delenv("STREAMS_RULE_MODULES", raising=False)
    assert with_proposal_outcome(None, None) == []
    assert with_proposal_outcome(None, True) == [PROPOSAL_OUTCOME_MODULE]
    assert with_proposal_outcome(["streams.examples.ops_rules"], True) == [
        "streams.examples.ops_rules", PROPOSAL_OUTCOME_MODULE]
    assert with_proposal_outcome([PROPOSAL_OUTCOME_MODULE], True) == [PROPOSAL_OUTCOME_MODULE]
    rules, actions, _deps = load_rules(with_proposal_outcome(None, True))
    assert [r.name for r in rules] == ["streams:proposal-outcome"]
    assert set(actions) == {"score_proposal_outcome"}


def test_the_setting_enables_it_and_the_flag_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAMS_RULE_MODULES", raising=False)
    monkeypatch.setenv("STREAMS_PROPOSAL_OUTCOME", "on")
    assert with_proposal_outcome(None, None) == [PROPOSAL_OUTCOME_MODULE]
    assert with_proposal_outcome(None, False) == []
    monkeypatch.setenv("STREAMS_PROPOSAL_OUTCOME", "off")
    assert with_proposal_outcome(None, None) == []
