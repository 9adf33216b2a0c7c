"""Stretches of a queue's items closed to everyone (streams.core.spans.SpanWalk)."""

from __future__ import annotations

import pytest

from streams.core.spans import ClosedSpan, SpanWalk
from streams.core.viewrows import PageKey


def key(i: int) -> PageKey:
    """Item i's key: higher i is older (smaller time), as a queue pages newest first."""
    return PageKey(10_000 - i, 0, i)


def walk_over(walk: SpanWalk, closed: str) -> None:
    """Meet item i for each character of `closed` ('x' closed, '.' open)."""
    for i, mark in enumerate(closed):
        walk.met(f"run:r{i}", key(i), closed=mark == "x")


def test_the_longest_stretch_of_closed_items_is_kept() -> None:
    walk = SpanWalk(None)
    walk_over(walk, "xx.xxxx.x")
    assert walk.span() == ClosedSpan("run:r3", key(3), key(6), 4)
    nothing = SpanWalk(None)
    walk_over(nothing, "...")
    assert nothing.span() is None


def test_a_jump_joins_the_run_above_it_and_the_run_below_it() -> None:
    known = ClosedSpan("run:r2", key(2), key(9), 8)
    walk = SpanWalk(known)
    walk.met("run:r0", key(0), closed=False)
    walk.met("run:r1", key(1), closed=True)
    assert walk.at_known("run:r2", key(2)) and not walk.at_known("run:r1", key(1))
    # The same id at another key (a row recorded twice) is not where the stretch starts.
    assert not walk.at_known("run:r2", key(0))
    walk.jumped()
    assert not walk.at_known("run:r2", key(2))  # a walk jumps once
    walk.met("run:r10", key(10), closed=True)
    walk.met("run:r11", key(11), closed=False)
    assert walk.span() == ClosedSpan("run:r1", key(1), key(10), 10)


def test_a_known_stretch_stays_until_a_longer_one_is_met() -> None:
    known = ClosedSpan("run:r5", key(5), key(9), 5)
    walk = SpanWalk(known)
    walk_over(walk, "x.xx.")  # met before the known stretch: shorter runs
    assert walk.span() == known


def test_a_forgotten_stretch_is_neither_jumped_nor_kept() -> None:
    known = ClosedSpan("run:r0", key(0), key(99), 100)
    walk = SpanWalk(known)
    walk.forget()
    assert not walk.at_known("run:r0", key(0))
    walk_over(walk, "xx.")
    assert walk.span() == ClosedSpan("run:r0", key(0), key(1), 2)
    with pytest.raises(ValueError, match="no known stretch"):
        walk.jumped()
