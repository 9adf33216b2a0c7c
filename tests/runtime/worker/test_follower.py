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


def test_what_the_follower_has_is_never_read_again(
        follower: tuple[RulebookFollower, list[str]]) -> None:
    made, reads = follower
    made._entries["acme"] = {WRONG_TRIAGE.name: entry(state="archived")}
    assert made.entry_now("acme", WRONG_TRIAGE.name) == entry(state="archived")
    budget = entry().backfill_budget
    assert budget is not None
    # Known to the follower (archived, no longer live): not found, and not read again.
    assert made.find_now("acme", WRONG_TRIAGE.name) is None
    assert made.find_now("acme", budget.rule_name) is None  # its live rules not applied
    assert reads == []
    assert made.find_now("acme", "nobody") is None and reads == ["acme"]
