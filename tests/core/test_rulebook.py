"""Installed rules: rulebook entries, live rules from their installation point, install
checks, backfill firings, and the matcher's per-tenant live rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import streams.examples.ops  # noqa: F401  (declares ops:error_spike)
from streams.core.errors import ValidationFailed
from streams.core.events import Envelope, Seq
from streams.core.matching import Forward, Matcher
from streams.core.rulebook import (
    LiveRule,
    RulebookEntry,
    backfill_firings,
    check_install,
    history_before,
    live_rules,
)
from streams.core.rules import (
    F,
    Fire,
    InvalidRule,
    Rule,
    RuleSet,
    RuleState,
    on,
    rule_to_dict,
    run,
)
from streams.core.tenancy import rulebook_tenant, rulebook_topic
from tests.core.rules.samples import T0, WRONG_TRIAGE, feedback, spike

SPIKES = Rule(name="ops:spikes", when=on("ops:error_spike").count(2, within=timedelta(hours=1))
              .scope(F.data.service), then=run("triage"))


def entry(rule: Rule = WRONG_TRIAGE, *, start: dict[int, int] | None = None,
          **kw: Any) -> RulebookEntry:
    fields: dict[str, Any] = {
        "rule": rule.name, "state": "installed", "definition": rule_to_dict(rule),
        "start": {0: 10, 1: 0} if start is None else start, "workspace": "prod",
        "installed_event_id": "ev1", "installed_at": datetime(2026, 11, 30, tzinfo=UTC),
        "installed_by": "system", **kw}
    return RulebookEntry(**fields)


def at(envelope: Envelope, partition: int, offset: int) -> Envelope:
    return envelope.model_copy(update={"seq": Seq(partition=partition, offset=offset)})


def test_an_entry_round_trips_and_garbage_is_refused() -> None:
    archived = entry(state="archived", archived_event_id="ev2", archived_by="system",
                     archived_at=datetime(2026, 12, 1, tzinfo=UTC), artifact_id="a1")
    for e in (entry(), archived):
        assert RulebookEntry.decode(e.encode()) == e
    with pytest.raises(ValidationFailed, match="not an entry"):
        RulebookEntry.decode(b'{"rule": "x"}')
    with pytest.raises(ValidationFailed, match="not an entry"):
        RulebookEntry.decode(b"\xff")
    assert rulebook_topic("acme") == "fs.acme.rulebook"
    assert rulebook_tenant("fs.acme.rulebook") == "acme"
    assert rulebook_tenant("fs.acme.rules") is None
    assert rulebook_tenant("xx.acme.rulebook", "fs") is None


def test_a_rule_is_live_from_its_installation_point() -> None:
    e = entry(start={0: 10, 1: 0})
    assert not e.is_live_at(Seq(partition=0, offset=9))
    assert e.is_live_at(Seq(partition=0, offset=10))
    assert e.is_live_at(Seq(partition=1, offset=0))
    assert e.is_live_at(Seq(partition=7, offset=0))  # a partition added after the install
    assert e.is_live_at(None)


def test_live_rules_skip_archived_refuse_what_cannot_be_built_and_reserved_names() -> None:
    undeclared = {**rule_to_dict(WRONG_TRIAGE), "name": "x:y", "when": {"on": "zz:nothing"}}
    entries = [
        entry(),
        entry(SPIKES, state="archived"),
        RulebookEntry(**{**entry().__dict__, "rule": "x:y", "definition": undeclared}),
        RulebookEntry(**{**entry().__dict__, "rule": "other"}),
    ]
    live, refused = live_rules(entries)
    assert list(live) == ["ops:wrong-triage"] and live["ops:wrong-triage"].rule == WRONG_TRIAGE
    assert "no event type 'zz:nothing'" in refused["x:y"]
    assert "names another rule" in refused["other"]
    _, refused = live_rules([entry()], reserved={"ops:wrong-triage"})
    assert "--rules modules" in refused["ops:wrong-triage"]


def test_a_backfill_budget_rides_on_the_entry_and_is_decided_as_a_live_rule() -> None:
    budgeted = entry(backfill_tokens=5_000)
    assert RulebookEntry.decode(budgeted.encode()) == budgeted
    assert RulebookEntry.decode(entry().encode()).backfill_tokens is None  # older entries
    with pytest.raises(ValidationFailed, match="whole number above 0"):
        entry(backfill_tokens=0)
    with pytest.raises(ValidationFailed, match="not an entry"):
        RulebookEntry.decode(entry().encode().replace(b'"backfill_tokens":null',
                                                      b'"backfill_tokens":-3'))
    budget = budgeted.backfill_budget
    assert budget is not None and budget.tokens == 5_000
    # Its claims' rule is live beside the rule, archived or not (runs may still claim).
    live, _ = live_rules([budgeted])
    assert sorted(live) == ["ops:wrong-triage", budget.rule_name]
    live, _ = live_rules([entry(backfill_tokens=5_000, state="archived")])
    assert list(live) == [budget.rule_name]
    assert live_rules([entry()])[0].keys() == {"ops:wrong-triage"}


def test_a_run_caused_before_the_installation_point_claims_from_the_backfill_budget() -> None:
    budgeted = entry(backfill_tokens=5_000, start={0: 10, 1: 0})
    cause = spike("api")
    assert budgeted.budget_of(at(cause, 0, 9)) == budgeted.backfill_budget  # history
    assert budgeted.budget_of(at(cause, 0, 10)) is None  # live
    assert budgeted.budget_of(at(cause, 1, 0)) is None
    # A cause not found: counted as history, so a backfill run never claims past its budget.
    assert budgeted.budget_of(None) == budgeted.backfill_budget
    assert budgeted.budget_of(cause) == budgeted.backfill_budget  # no seq: not from the log
    assert entry().budget_of(at(cause, 0, 9)) is None  # no backfill budget
    assert entry().is_history(at(cause, 0, 9)) and not entry().is_history(at(cause, 0, 10))


def test_install_checks() -> None:
    data = rule_to_dict(WRONG_TRIAGE)
    rule, repeat = check_install(data, actions={"escalate"})
    assert rule == WRONG_TRIAGE and not repeat
    with pytest.raises(InvalidRule, match=r"\$.then.action: no action 'escalate'"):
        check_install(data, actions={"triage"})
    with pytest.raises(InvalidRule, match="a rule of the --rules modules is called"):
        check_install(data, actions={"escalate"}, module_rules={"ops:wrong-triage"})
    installed = {"ops:wrong-triage": entry()}
    assert check_install(data, actions={"escalate"}, installed=installed)[1] is True
    changed = {**data, "then": {"action": "triage"}}
    with pytest.raises(InvalidRule, match="installed with another definition; archive it"):
        check_install(changed, actions={"triage"}, installed=installed)
    archived = {"ops:wrong-triage": entry(state="archived")}
    assert check_install(changed, actions={"triage"}, installed=archived)[1] is False


def test_a_backfill_fires_over_history_once() -> None:
    log = [at(spike("api", at=T0), 0, 0), at(spike("db", at=T0), 1, 0),
           at(spike("api", at=T0 + timedelta(minutes=1)), 1, 1),
           at(spike("api", at=T0 + timedelta(minutes=2)), 0, 1),   # past the install point
           at(spike("api", at=T0 + timedelta(minutes=3)), 0, 2)]
    history = history_before(log, {0: 1, 1: 2})
    assert history == log[:3]
    firings = backfill_firings(SPIKES, history, fired=())
    assert [(f.scope_key, cause.event_id) for f, cause in firings] == \
        [("service=api", log[2].event_id)]
    again = backfill_firings(SPIKES, history, fired={firings[0][0].firing_id})
    assert again == []


def test_a_backfill_of_a_completion_rule_ends_chains_on_the_historys_event_time() -> None:
    whole = Rule(name="ops:whole-spike", when=on("ops:error_spike").completes(
        quiet=timedelta(minutes=5)), then=run("triage"))
    a1 = spike("api", at=T0, correlation_id="a")
    a2 = spike("api", at=T0 + timedelta(minutes=1), correlation_id="a")
    b = spike("db", at=T0 + timedelta(minutes=10), correlation_id="b")
    history = [a1, a2, b]
    firings = backfill_firings(whole, history, fired=())
    # a is quiet by b's time; b is still open where the history ends: not judged here.
    assert [(f.matched_event_ids, cause.event_id) for f, cause in firings] == \
        [((a1.event_id, a2.event_id), a2.event_id)]
    assert backfill_firings(whole, history, fired={firings[0][0].firing_id}) == []


def test_the_matcher_matches_a_tenants_live_rules_from_their_installation_point() -> None:
    matcher = Matcher(RuleSet([]))
    assert not matcher.wants(b"feedback_given")
    found = LiveRule(WRONG_TRIAGE, entry(start={0: 10}))
    matcher.set_live("acme", {found.rule.name: found})
    assert matcher.wants(b"feedback_given")
    assert matcher.match(at(feedback(False), 0, 9)) == []
    [fire] = matcher.match(at(feedback(False), 0, 10))
    assert isinstance(fire, Fire) and fire.rule == WRONG_TRIAGE
    assert matcher.match(at(feedback(False, tenant="other"), 0, 10)) == []
    assert matcher.rule("acme", "ops:wrong-triage") == WRONG_TRIAGE
    assert matcher.rule("other", "ops:wrong-triage") is None
    matcher.set_live("acme", {})
    assert matcher.match(at(feedback(False), 0, 11)) == []
    assert not matcher.wants(b"feedback_given")


def test_a_stateful_live_rule_is_forwarded_and_decided_for_its_tenant() -> None:
    matcher = Matcher(RuleSet([]))
    found = LiveRule(SPIKES, entry(SPIKES, start={}))
    matcher.set_live("acme", {SPIKES.name: found})
    assert matcher.has_stateful
    first, second = at(spike("api"), 0, 0), at(spike("api"), 0, 1)
    assert matcher.match(first) == [Forward(SPIKES, first)]
    state = RuleState()
    assert matcher.knows(SPIKES.name)
    assert matcher.decide(SPIKES.name, first, state) == []
    [fire] = matcher.decide(SPIKES.name, second, state)
    assert isinstance(fire, Fire)
    # A decider whose reactor has not applied the rule yet asks the fallback.
    late = Matcher(RuleSet([]))
    late.fallback = lambda tenant, name: found if (tenant, name) == ("acme", SPIKES.name) \
        else None
    assert late.knows(SPIKES.name)
    state = RuleState()
    assert late.decide(SPIKES.name, first, state) == []
    assert len(late.decide(SPIKES.name, second, state)) == 1
    assert late.decide("nope", second, state) == []


def test_match_live_is_one_rule_alone_from_its_installation_point() -> None:
    matcher = Matcher(RuleSet([WRONG_TRIAGE]))
    found = LiveRule(SPIKES, entry(SPIKES, start={0: 1}))
    assert matcher.match_live(found, at(spike("api"), 0, 0)) == []
    assert matcher.match_live(found, at(feedback(False), 0, 5)) == []
    assert len(matcher.match_live(found, at(spike("api"), 0, 1))) == 1
