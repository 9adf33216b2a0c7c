"""Pairwise review's pure part: the preference type, the display order, the tally."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from streams.core.pairwise import (
    PairwisePreference,
    display_order,
    preference_tally,
    wilson,
)

A, B = "evaluator:judge@2", "evaluator:judge@3"


def test_a_preference_names_two_evaluator_versions() -> None:
    assert PairwisePreference(a=A, b=B, preferred="tie").note is None
    with pytest.raises(ValidationError, match="pattern"):
        PairwisePreference(a="user:ada", b=B, preferred="a")
    with pytest.raises(ValidationError):
        PairwisePreference(a=A, b=B, preferred="both")  # type: ignore[arg-type]


def test_half_the_items_show_b_first_the_same_for_everyone() -> None:
    orders = [display_order(f"run:r{i}", "q") for i in range(2000)]
    assert 900 < orders.count(("b", "a")) < 1100
    assert set(orders) == {("a", "b"), ("b", "a")}
    assert orders == [display_order(f"run:r{i}", "q") for i in range(2000)]


def test_wilson_interval() -> None:
    assert wilson(0, 0) is None
    low, high = wilson(5, 10) or (0.0, 0.0)
    assert low == pytest.approx(0.2366, abs=1e-4) and high == pytest.approx(0.7634, abs=1e-4)
    assert wilson(10, 10) == (pytest.approx(0.7225, abs=1e-4), pytest.approx(1.0))


def test_the_tally_orients_pairs_and_counts_each_persons_latest() -> None:
    tallies = preference_tally([
        ("user:ada", "run:1", PairwisePreference(a=A, b=B, preferred="b")),
        ("user:ada", "run:1", PairwisePreference(a=A, b=B, preferred="a")),  # changed mind
        ("user:bo", "run:1", PairwisePreference(a=B, b=A, preferred="a")),  # B, reversed
        ("user:bo", "run:2", PairwisePreference(a=A, b=B, preferred="tie")),
        ("user:cy", "run:2", PairwisePreference(a=A, b=A, preferred="a")),  # no pair: left out
    ])
    [tally] = tallies
    assert (tally.a, tally.b, tally.a_wins, tally.b_wins, tally.ties) == (A, B, 1, 1, 1)
    assert tally.n == 3 and tally.a_rate == pytest.approx(0.5)
    assert tally.a_rate_ci == wilson(1.5, 3)
    assert preference_tally([]) == []
