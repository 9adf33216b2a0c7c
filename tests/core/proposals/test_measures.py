"""The proposal measures: proposal_rates, rule_conversion, history and rewrites."""

import asyncio
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.core.actors import EvaluatorActor, SystemActor
from streams.core.errors import ValidationFailed
from streams.core.events import Change, Envelope
from streams.core.proposals import (
    HistoryVersion,
    author_class,
    edit_distance,
    fold_history,
    fold_ledger,
    fold_proposal_rates,
    fold_rule_conversion,
    history,
    proposal_rates,
    rewrites,
    rule_conversion,
)
from tests.core.proposals.log import ADA, BOB, T0, Log, agent

DRAFTER = "chat:draft-rule"
TRIAGER = "ops:triage"
DAY = timedelta(days=1)


def _rates_log() -> Log:
    log = Log()
    log.create("doc", {"text": "a"})
    drafter, triager = log.run(DRAFTER), log.run(TRIAGER)
    log.resolve(log.propose("d1", "doc", Change(set={"text": "b"}), by=drafter))
    log.resolve(log.propose("d2", "doc", Change(set={"text": "c"}), by=drafter),
                changes=Change(set={"text": "c2"}))
    d3 = log.propose("d3", "doc", Change(set={"text": "d"}), by=drafter)
    log.resolve(d3, "rejected")
    log.resolve(d3, "accepted")                                   # second: not counted
    log.propose("d4", "doc", Change(set={"text": "e"}), by=drafter)  # open
    log.resolve(log.propose("t1", "doc", Change(set={"text": "f"}), by=triager), "rejected")
    log.resolve(log.propose("u1", "doc", Change(set={"text": "g"}), by=ADA))   # no run
    log.resolve(log.propose("x1", "doc", Change(set={"text": "h"}), by=agent(DRAFTER),
                            run_id="run_claimed"))                 # claims a run, untraced
    return log


def test_proposal_rates_by_the_rule_whose_run_proposed() -> None:
    rates = fold_proposal_rates(_rates_log().envelopes)
    assert sorted(rates) == [DRAFTER, TRIAGER]
    drafter = rates[DRAFTER]
    assert (drafter.accepted, drafter.edited, drafter.rejected, drafter.resolved) == (1, 1, 1, 3)
    assert drafter.acceptance_rate == drafter.edit_rate == drafter.rejection_rate == 1 / 3
    triager = rates[TRIAGER]
    assert (triager.resolved, triager.rejection_rate, triager.acceptance_rate) == (1, 1.0, 0.0)
    assert asyncio.run(proposal_rates(_rates_log().envelopes)) == rates


def test_proposal_rates_count_resolutions_in_the_window() -> None:
    log = Log()
    log.create("doc", {"text": "a"})
    run = log.run(DRAFTER, at=T0)
    early = log.propose("p1", "doc", Change(set={"text": "b"}), by=run, at=T0)
    late = log.propose("p2", "doc", Change(set={"text": "c"}), by=run, at=T0)
    log.resolve(early, at=T0 + DAY)
    log.resolve(late, "rejected", at=T0 + 3 * DAY)
    window = fold_proposal_rates(log.envelopes, since=T0 + DAY, until=T0 + 2 * DAY)
    assert window[DRAFTER].accepted == 1 and window[DRAFTER].rejected == 0
    assert fold_proposal_rates(log.envelopes, since=T0 + 2 * DAY)[DRAFTER].rejected == 1
    assert fold_proposal_rates(log.envelopes, until=T0 + DAY) == {}
    with pytest.raises(ValidationFailed, match=r"since .* must be before until"):
        fold_proposal_rates(log.envelopes, since=T0 + DAY, until=T0 + DAY)


# -- rule_conversion --------------------------------------------------------------------------


def _draft(log: Log, artifact_id: str, resolution: str | None = "accepted",
           at: object = None) -> Envelope:
    run = log.run(DRAFTER, at=at)  # type: ignore[arg-type]
    proposal = log.propose(f"p-{artifact_id}", artifact_id, Change(set={"when": artifact_id}),
                           by=run, at=at)  # type: ignore[arg-type]
    if resolution is not None:
        log.resolve(proposal, resolution, at=at)  # type: ignore[arg-type]
    return proposal


def test_rule_conversion_counts_drafts_installs_and_survivors() -> None:
    log = Log()
    start = T0
    for name in "abcdefgh":
        _draft(log, name, "rejected" if name == "e" else "accepted", at=start)
    _draft(log, "i", None, at=start)                        # proposed, still open
    log.create("note", {"text": "x"}, kind="note", at=start)
    log.install("ops:note", "note", at=start + DAY)         # not a rule draft
    log.install("r:a", "a", at=start + DAY)                 # survives
    log.install("r:b", "b", at=start + DAY)
    log.take_down("r:b", actor=BOB, at=start + 10 * DAY)    # archived after install: no
    log.archive("c", at=start + DAY)                        # archived before install: ignored
    log.install("r:c", "c", at=start + 2 * DAY)             # survives
    log.install("r:f", "f", actor=ADA, at=start + DAY)      # not the installer: not installed
    log.install("r:g", "g", at=start + 50 * DAY)            # installed recently: pending
    log.install("r:h", "h", at=start + DAY)
    archive_h = log.propose("arch-h", "h", by=log.run(DRAFTER, at=start + 5 * DAY),
                            action="archive", at=start + 5 * DAY)
    log.resolve(archive_h, at=start + 5 * DAY)             # archived through its artifact: no
    log.install("r:d2", "d", at=start + 70 * DAY)           # after now: not counted
    now = start + 60 * DAY
    conversion = fold_rule_conversion(log.envelopes, now=now)
    by_id = {d.artifact_id: d for d in conversion.drafts}
    assert sorted(by_id) == list("abcdefghi")
    assert (conversion.proposed, conversion.accepted, conversion.installed,
            conversion.survived, conversion.pending) == (9, 7, 5, 2, 1)
    assert [a for a, d in by_id.items() if d.survived] == ["a", "c"]
    assert by_id["b"].archived_at == start + 10 * DAY
    assert by_id["h"].archived_at == start + 5 * DAY and not by_id["h"].survived
    assert by_id["c"].archived_at is None
    assert by_id["f"].installed_at is None and by_id["d"].installed_at is None
    assert by_id["g"].pending and not by_id["g"].survived
    assert asyncio.run(rule_conversion(log.envelopes, now=now)) == conversion


def test_rule_conversion_counts_only_what_was_logged_before_now_and_its_survival() -> None:
    log = Log()
    _draft(log, "a", at=T0)
    log.install("r:a", "a", at=T0 + DAY)
    log.take_down("r:a", at=T0 + 40 * DAY)
    at_35 = fold_rule_conversion(log.envelopes, now=T0 + 35 * DAY)
    assert (at_35.installed, at_35.survived) == (1, 1)      # the take-down is not logged yet
    assert fold_rule_conversion(log.envelopes, now=T0 + 45 * DAY).survived == 0
    longer = fold_rule_conversion(log.envelopes, now=T0 + 35 * DAY, survival=40 * DAY)
    assert (longer.survived, longer.pending) == (0, 1)
    before = fold_rule_conversion(log.envelopes, now=T0)
    assert (before.proposed, before.accepted) == (0, 0)
    with pytest.raises(ValidationFailed, match="survival must be positive"):
        fold_rule_conversion(log.envelopes, now=T0, survival=timedelta(0))
    by_other = fold_rule_conversion(log.envelopes, now=T0 + 35 * DAY,
                                    installer=EvaluatorActor(name="installer"))
    assert by_other.installed == 0


def test_a_ledger_folded_already_gives_the_same_rates_and_conversion() -> None:
    log = _rates_log()
    ledger = fold_ledger(log.envelopes)
    assert fold_proposal_rates(log.envelopes, ledger=ledger) == \
        fold_proposal_rates(log.envelopes)
    now = max(e.time for e in log.envelopes) + DAY
    assert fold_rule_conversion(log.envelopes, now=now, ledger=ledger) == \
        fold_rule_conversion(log.envelopes, now=now)


def test_a_ledger_of_envelopes_logged_after_now_is_not_used() -> None:
    # The conversion folds only what was logged before `now`: a ledger of the whole log
    # (here the accepted draft's proposal comes after `now`) is left aside.
    log = Log()
    _draft(log, "a", at=T0 + 10 * DAY)
    log.install("r:a", "a", at=T0 + 11 * DAY)
    now = T0 + 5 * DAY
    whole = fold_ledger(log.envelopes)
    with_ledger = fold_rule_conversion(log.envelopes, now=now, ledger=whole)
    assert with_ledger == fold_rule_conversion(log.envelopes, now=now)
    assert (with_ledger.proposed, with_ledger.installed) == (0, 0)


# -- history and rewrites ---------------------------------------------------------------------


def test_history_credits_versions_to_their_authors_and_leaves_archives_out() -> None:
    log = Log()
    log.create("a1", {"text": "draft"}, actor=ADA)
    run = log.run(DRAFTER)
    log.resolve(log.propose("p1", "a1", Change(set={"text": "better"}), by=run), actor=BOB)
    log.revise("a1", Change(set={"note": "n"}), actor=SystemActor())
    log.archive("a1", actor=BOB)
    versions = fold_history(log.envelopes, "a1")
    assert [(v.number, v.author, v.author_class) for v in versions] == [
        (1, "user:ada", "person"), (2, f"agent:rule:{DRAFTER}", "agent"), (3, "system", "system")]
    assert [v.text for v in versions] == ["text: draft", "text: better", "note: n\ntext: better"]
    assert versions[1].proposal_id == "p1"
    assert asyncio.run(history(log.envelopes, "a1")) == versions
    with pytest.raises(ValidationFailed, match="no artifact 'zz'"):
        fold_history(log.envelopes, "zz")


def test_author_classes() -> None:
    assert author_class(ADA) == "person"
    assert author_class(SystemActor()) == "system"
    assert author_class(agent(DRAFTER)) == "agent"
    assert author_class(EvaluatorActor(name="judge")) == "agent"


def _version(number: int, text: str, author: str) -> HistoryVersion:
    return HistoryVersion(number=number, text=text, author=author, author_class="person",
                          time=T0, proposal_id=None)


def test_rewrites_of_a_history() -> None:
    versions = [_version(1, "abcd", "user:ada"), _version(2, "abXd", "agent:rule:x"),
                _version(3, "abXdef", "agent:rule:x"), _version(4, "abXdef", "user:bob"),
                _version(5, "zzzzzz", "user:ada")]
    measured = rewrites(versions)
    assert (measured.transitions, measured.rewrites) == (4, 2)
    assert measured.rewrite_share == 0.5
    assert measured.mean_edit_ratio == pytest.approx((1 / 4 + 6 / 6) / 2)
    empty = rewrites([])
    assert (empty.transitions, empty.rewrite_share, empty.mean_edit_ratio) == (0, 0.0, None)


def test_edit_distance_examples() -> None:
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance("", "abc") == edit_distance("abc", "") == 3
    assert edit_distance("same", "same") == 0


@given(a=st.text(max_size=15), b=st.text(max_size=15), c=st.text(max_size=15))
def test_edit_distance_is_a_metric(a: str, b: str, c: str) -> None:
    assert edit_distance(a, b) == edit_distance(b, a)
    assert (edit_distance(a, b) == 0) == (a == b)
    assert abs(len(a) - len(b)) <= edit_distance(a, b) <= max(len(a), len(b))
    assert edit_distance(a, c) <= edit_distance(a, b) + edit_distance(b, c)
