"""Stretches of a queue's items closed to every reviewer, so handing out the next item does
not walk the items already done.

A queue's items come newest first (a rule's runs or firings, the chains). An item is closed
to everyone when it is out of the queue's sample or k reviewers submitted on it; both are for
good (the sample is a hash of the item, and a submit is never taken back). A reviewer's
`next` walks the items from the newest until one is open to them, so on a queue whose newest
thousands are done it would read every page of them, each call. `SpanWalk` remembers the
longest stretch of consecutive closed items met (`ClosedSpan`: its newest and oldest keys,
how many items), and the next walk that meets the stretch's newest item jumps past its
oldest, after checking that the stretch still holds as many items as it did (one count in
the view: an item that arrived inside it since, a run with an older clock, breaks the count
and the stretch is walked again). Only sources whose items are never removed may be jumped:
a rule's runs or firings and the chains (`JUMPABLE`); items that enter by verdicts come and
go with newer verdicts.

    walk = SpanWalk(known)                  # known: this process's span of the queue, or None
    for item, key in page:
        if walk.at_known(item, key):        # the span's newest item: count, then jump
            ...
        walk.met(item, key, closed=...)
    known = walk.span()                     # the longest stretch met, kept for the next walk
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from streams.core.viewrows import PageKey

__all__ = ["JUMPABLE", "ClosedSpan", "SpanWalk"]

JUMPABLE: Final = frozenset({"runs_of", "firings_of", "chains"})
"""The queue sources whose items stay in the view once there, so a closed stretch of them
can be jumped after a count."""


@dataclass(frozen=True)
class ClosedSpan:
    """Consecutive items of a queue, from `top` (the newest, item `top_item`) down to
    `bottom` (the oldest), both included: `n` items, each closed to every reviewer."""

    top_item: str
    top: PageKey
    bottom: PageKey
    n: int


class SpanWalk:
    """One walk over a queue's items, newest first, keeping the longest closed stretch.

    `known` is the stretch an earlier walk left (None: none yet). The walk calls `met` for
    each item it reads, in order, and `jumped` when it skipped `known` (after checking its
    count); `span()` is then the longest closed stretch seen, `known` included."""

    def __init__(self, known: ClosedSpan | None) -> None:
        self.known = known
        self._best = known
        self._run: ClosedSpan | None = None
        self._jumped = False

    def at_known(self, item: str, key: PageKey) -> bool:
        """Whether `item` at `key` is the newest item of the known stretch (where a walk may
        jump). The key too: an id may have more than one row (a chain's head recorded
        twice), and only the row the stretch starts at may jump."""
        return not self._jumped and self.known is not None and \
            item == self.known.top_item and key == self.known.top

    def met(self, item: str, key: PageKey, *, closed: bool) -> None:
        """The walk read `item` (at `key`): closed to everyone, or not."""
        if not closed:
            self._end_run()
            return
        run = self._run
        self._run = ClosedSpan(item, key, key, 1) if run is None else \
            ClosedSpan(run.top_item, run.top, key, run.n + 1)

    def jumped(self) -> None:
        """The walk skipped the known stretch (its count held): the run goes on past it."""
        known = self.known
        if known is None or self._jumped:
            raise ValueError("no known stretch to jump")
        self._jumped = True  # once per walk: the walk goes on past its oldest item
        run = self._run
        self._run = known if run is None else \
            ClosedSpan(run.top_item, run.top, known.bottom, run.n + known.n)

    def forget(self) -> None:
        """The known stretch no longer holds (an item arrived inside it): never jumped,
        never kept."""
        if self._best is self.known:
            self._best = None
        self.known = None

    def span(self) -> ClosedSpan | None:
        """The longest closed stretch this walk saw (the known one if none longer)."""
        self._end_run()
        return self._best

    def _end_run(self) -> None:
        run, self._run = self._run, None
        if run is not None and (self._best is None or run.n > self._best.n):
            self._best = run
