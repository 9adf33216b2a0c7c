"""The rulebook follower's look-ups on a miss (`entry_now`, `find_now`): the tenant's
rulebook is read now, since an install writes a rule's entry before any of its firings (the
reads here are a stand-in; the follower's tail on the real broker:
tests/integration/test_rules_as_data.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest

import streams.examples.ops  # noqa: F401  (declares ops:error_spike)
from streams.core.rulebook import RulebookEntry
from streams.core.rules.serialized import rule_to_dict
from streams.runtime.root import Runtime
from streams.runtime.worker.follower import RulebookFollower
from streams.settings import Settings
from tests.core.rules.samples import WRONG_TRIAGE


def entry(tokens: int | None = 500, state: str = "installed") -> RulebookEntry:
    return RulebookEntry(rule=WRONG_TRIAGE.name, state=cast(Any, state),
                         definition=rule_to_dict(WRONG_TRIAGE), start={0: 10},
                         workspace="prod", installed_event_id="ev",
                         installed_at=datetime(2026, 12, 7, tzinfo=UTC),
                         installed_by="system", backfill_tokens=tokens)


@pytest.fixture
def follower() -> tuple[RulebookFollower, list[str]]:
    made = RulebookFollower(cast(Runtime, SimpleNamespace(settings=Settings())))
    reads: list[str] = []
    book = {WRONG_TRIAGE.name: entry()}

    def read(tenant: str) -> dict[str, RulebookEntry]:
        reads.append(tenant)
        return book

    made._read = read  # type: ignore[method-assign]
    return made, reads


def test_a_rule_not_followed_yet_is_read_from_its_rulebook_now(
        follower: tuple[RulebookFollower, list[str]]) -> None:
    made, reads = follower
    assert made.entry("acme", WRONG_TRIAGE.name) is None  # no I/O, not followed yet
    assert made.entry_now("acme", WRONG_TRIAGE.name) == entry()
    budget = entry().backfill_budget
    assert budget is not None
    found = made.find_now("acme", budget.rule_name)  # a claim's rule, installed just now
    assert found is not None and found.rule == budget.rule
    assert reads == ["acme", "acme"]


def test_only_a_backfill_budgets_rule_is_read_for_and_what_is_followed_is_not_read(
        follower: tuple[RulebookFollower, list[str]]) -> None:
    made, reads = follower
    # A forwarded match of a rule removed long ago: never a read per record.
    assert made.find_now("acme", "nobody") is None and reads == []
    # The entry applied, its live rules not yet (the follower between the two steps).
    made._entries["acme"] = {WRONG_TRIAGE.name: entry(state="archived")}
    assert made.entry_now("acme", WRONG_TRIAGE.name) == entry(state="archived")
    budget = entry().backfill_budget
    assert budget is not None
    found = made.find_now("acme", budget.rule_name)
    assert found is not None and found.rule == budget.rule
    assert reads == []


class Ends:
    """A stand-in consumer: where the tenant's rulebook ends now."""

    def __init__(self, high: int) -> None:
        self.high = high

    def get_watermark_offsets(self, _tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        assert cached is False  # the end as of now, not a cached one
        return 0, self.high


def test_the_current_entry_is_the_followers_once_it_has_read_to_the_end(
        follower: tuple[RulebookFollower, list[str]]) -> None:
    made, reads = follower
    made._ends = cast(Any, Ends(high=3))
    made._entries["acme"] = {WRONG_TRIAGE.name: entry(tokens=None)}
    made._read_to["fs.acme.rulebook"] = 3  # read to the end: its entry is current
    assert made.entry_current("acme", WRONG_TRIAGE.name) == entry(tokens=None)
    assert reads == []
    # Behind the end (a repeat install gave the rule a budget a moment ago): after a
    # short wait, the rulebook read there and then has the budget.
    made._read_to["fs.acme.rulebook"] = 2
    assert made.entry_current("acme", WRONG_TRIAGE.name, wait=0.05) == entry()
    assert reads == ["acme"]
