"""Leases decided by folding an item's records in log order: never over k, never the same
reviewer twice, a lease that expired returns its slot, a record read twice changes nothing."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

from streams.core.leases import (
    ITEM_PATTERN,
    OUTCOMES,
    Held,
    InvalidLeaseRecord,
    ItemLeases,
    LeaseRecord,
    QueueProgress,
    fold_item,
    item_key,
    item_of,
    progress_of,
    queue_progress,
    target_of_item,
)
from streams.core.targets import Target


def a_record(kind: str = "request", reviewer: str = "user:ada", rid: str = "r1",
             at_ms: int = 0, **changes: Any) -> LeaseRecord:
    """A record on item run:run_1 of queue triage in prod, k=2, 60 s leases."""
    fields: dict[str, Any] = {"kind": kind, "workspace": "prod", "queue": "triage",
                              "item": "run:run_1", "reviewer": reviewer, "request_id": rid,
                              "at_ms": at_ms, "reviewers": 2, "lease_ms": 60_000, **changes}
    return LeaseRecord(**fields)


def fold(*records: LeaseRecord) -> ItemLeases:
    state = None
    for record in records:
        state = fold_item(state, record)
    assert state is not None
    return state


def outcome(state: ItemLeases, kind: str, rid: str) -> str:
    return state.outcomes[f"{kind}:{rid}"]  # records here have no record_id of their own


def test_k_reviewers_get_the_item_and_the_next_finds_it_full() -> None:
    state = fold(a_record(reviewer="user:a", rid="1"), a_record(reviewer="user:b", rid="2"),
                 a_record(reviewer="user:c", rid="3"))
    assert [outcome(state, "request", r) for r in "123"] == ["granted", "granted", "full"]
    assert state.open_slots(0) == 0 and not state.done


def test_a_submit_counts_once_and_a_submitted_item_stays_taken() -> None:
    state = fold(a_record(reviewer="user:a", rid="1"), a_record(reviewer="user:b", rid="2"),
                 a_record("submit", "user:a", "1", at_ms=1000),
                 a_record("submit", "user:a", "1", at_ms=1001),  # read twice
                 a_record("request", "user:c", "3", at_ms=2000),
                 a_record("submit", "user:b", "2", at_ms=3000))
    assert outcome(state, "submit", "1") == "accepted"
    assert outcome(state, "request", "3") == "full"  # a submitted, b holding
    assert state.submitted == {"user:a", "user:b"} and state.done
    # The same reviewer asking again: never the same item twice.
    again = fold_item(state, a_record("request", "user:a", "9", at_ms=4000))
    assert outcome(again, "request", "9") == "seen"


def test_an_expired_lease_returns_the_slot_and_its_submit_is_refused() -> None:
    state = fold(a_record(reviewer="user:a", rid="1"), a_record(reviewer="user:b", rid="2"),
                 a_record("request", "user:c", "3", at_ms=60_000))  # a's and b's ended
    assert outcome(state, "request", "3") == "granted"
    late = fold_item(state, a_record("submit", "user:a", "1", at_ms=60_001))
    assert outcome(late, "submit", "1") == "expired"
    assert late.submitted == frozenset()
    # Having let it expire, a is not given it again.
    assert outcome(fold_item(late, a_record("request", "user:a", "4", at_ms=70_000)),
                   "request", "4") == "seen"


def test_a_lagging_clock_cannot_revive_an_expired_lease() -> None:
    # b's server clock is behind: its submit says 30 s, but the item's clock read 61 s.
    state = fold(a_record(reviewer="user:a", rid="1"), a_record(reviewer="user:b", rid="2"),
                 a_record("request", "user:c", "3", at_ms=61_000),
                 a_record("submit", "user:b", "2", at_ms=30_000))
    assert outcome(state, "submit", "2") == "expired"


def test_a_skip_frees_the_slot_for_someone_else() -> None:
    state = fold(a_record(reviewer="user:a", rid="1", reviewers=1),
                 a_record("skip", "user:a", "1", at_ms=5),
                 a_record("request", "user:b", "2", at_ms=6, reviewers=1),
                 a_record("skip", "user:c", "7", at_ms=7))
    assert [outcome(state, k, r) for k, r in (("skip", "1"), ("request", "2"), ("skip", "7"))
            ] == ["skipped", "granted", "not_held"]
    assert "user:a" in state.seen


def test_records_survive_their_values_and_garbage_is_refused() -> None:
    record = a_record()
    assert LeaseRecord.decode(record.encode()) == record
    assert record.key == item_key("prod", "triage", "run:run_1")
    for garbage in (b"nope", b"{}", a_record(kind="steal").encode(),
                    a_record(reviewers=0).encode()):
        with pytest.raises(InvalidLeaseRecord, match="not a lease record"):
            LeaseRecord.decode(garbage)


records = st.builds(
    lambda kind, reviewer, rid, at: a_record(kind, f"user:{reviewer}", str(rid), at_ms=at),
    st.sampled_from(["request", "request", "submit", "skip"]), st.integers(0, 5),
    st.integers(0, 12), st.integers(0, 200_000))


@given(st.lists(records, max_size=60))
def test_any_log_never_assigns_over_k_nor_anyone_twice(log: list[LeaseRecord]) -> None:
    state: ItemLeases | None = None
    granted: dict[str, set[str]] = {}
    accepted: dict[str, int] = {}
    for record in log:
        before = state
        state = fold_item(state, record)
        assert set(state.outcomes.values()) <= set(OUTCOMES)
        assert len(state.holding(state.clock_ms)) + len(state.submitted) <= state.reviewers
        assert not set(state.holding(state.clock_ms)) & state.submitted
        decided = state.outcomes.get(f"{record.kind}:{record.request_id}")
        first = before is None or f"{record.kind}:{record.request_id}" not in before.outcomes
        if first and decided == "granted":
            granted.setdefault(record.reviewer, set()).add(record.request_id)
        if first and decided == "accepted":
            accepted[record.reviewer] = accepted.get(record.reviewer, 0) + 1
            # Accepted only while the lease ran, by the item's clock.
            assert before is not None
            held = before.held[record.reviewer]
            assert max(before.clock_ms, record.at_ms) < held.ends_ms
        # Folding the same record again changes nothing.
        assert fold_item(state, record).outcomes == state.outcomes
    assert all(len(ids) == 1 for ids in granted.values()), granted
    assert all(n == 1 for n in accepted.values()), accepted


@pytest.mark.parametrize(("kind", "field"), [("run", "run_id"), ("firing", "firing_id"),
                                             ("chain", "correlation_id")])
def test_an_items_target_is_what_give_feedback_takes(kind: str, field: str) -> None:
    item = item_of(kind, "x:1")
    assert re.fullmatch(ITEM_PATTERN, item)
    target = target_of_item(item)
    assert target == {"kind": kind, field: "x:1"}  # an id may hold a colon
    parsed = TypeAdapter(Target).validate_python(target)
    assert (parsed.kind, parsed.id) == (kind, "x:1")


def test_anything_else_is_no_item() -> None:
    with pytest.raises(ValueError, match="no queue items of kind"):
        item_of("artifact", "a1")
    for bad in ("run", "run:", "artifact:a1", ""):
        with pytest.raises(ValueError, match="not a queue item"):
            target_of_item(bad)


def test_a_queues_progress_counts_items_done_in_review_and_left() -> None:
    states = {
        "run:a": ItemLeases(reviewers=2, submitted=frozenset({"user:ada", "user:bo"})),
        "run:b": ItemLeases(reviewers=2, submitted=frozenset({"user:ada"})),
        "run:c": ItemLeases(reviewers=1, held={"user:cy": Held("lease_c", 2_000)}),
        "run:d": ItemLeases(reviewers=1, held={"user:cy": Held("lease_d", 500)}),  # expired
        "run:e": ItemLeases(reviewers=1, seen=frozenset({"user:ada"})),  # skipped
    }
    got = queue_progress(["run:a", "run:b", "run:c", "run:d", "run:e", "run:f"],
                         states.get, at_ms=1_000)
    assert got == QueueProgress(items=6, done=1, in_review=2, left=3, verdicts=3)
    # Counted without the items: the same answer from the total and the states alone.
    assert progress_of(6, states.values(), at_ms=1_000) == got
