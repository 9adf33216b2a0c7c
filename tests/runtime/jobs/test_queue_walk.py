"""Handing out the next item (streams.runtime.jobs.queues.lease_next) on stand-in pages and
leases: the stretch of items done by everyone is jumped once known, an item that arrives
inside it since is still offered, and with or without the jump the item leased is the first
one open to the reviewer. On the broker: tests/integration/test_queues_api.py."""

from __future__ import annotations

from bisect import insort
from dataclasses import dataclass, field
from typing import cast

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.queues import Entry, Queue
from streams.core.spans import ClosedSpan, SpanWalk
from streams.core.viewrows import PageKey
from streams.runtime.client.workspace import Workspace
from streams.runtime.jobs.leases import Lease, LeaseBook
from streams.runtime.jobs.queues import _sampled, lease_next

QUEUE = Queue(name="q", enters=Entry(kind="runs_of", rule="ops:r"),
              feedback_types=("triage_quality",))


def key(t: int, i: int = 0) -> PageKey:
    return PageKey(t, 0, i)


@dataclass
class Items:
    """A queue's items in the view, newest first: (id, key) sorted by key descending."""

    rows: list[tuple[PageKey, str]] = field(default_factory=list)
    pages: int = 0
    counts: int = 0
    workspace: str = "prod"

    def add(self, item_id: str, at: PageKey) -> None:
        insort(self.rows, (at, item_id), key=lambda r: (-r[0].time_ms, -r[0].pos))

    async def queue_items_keyed(self, entry: Entry, *, limit: int = 200,
                                before: PageKey | None = None,
                                catch_up: bool = True) -> list[tuple[str, PageKey]]:
        # Caught up for the first page of a walk only (the broker's ends are asked once).
        assert catch_up == (before is None)
        self.pages += 1
        order = [(i, k) for k, i in self.rows
                 if before is None or (k.time_ms, k.pos) < (before.time_ms, before.pos)]
        return order[:limit]

    async def queue_items_count(self, entry: Entry, *,
                                between: tuple[PageKey, PageKey] | None = None,
                                catch_up: bool = True) -> int:
        assert not catch_up
        self.counts += 1
        assert between is not None
        top, bottom = between
        return sum(1 for k, _i in self.rows
                   if (bottom.time_ms, bottom.pos) <= (k.time_ms, k.pos)
                   <= (top.time_ms, top.pos))


@dataclass
class Leases:
    """Items done by everyone, and per reviewer what they may not have (held or seen)."""

    finished: set[str] = field(default_factory=set)
    not_for: dict[str, set[str]] = field(default_factory=dict)

    def done(self, workspace: str, queue: str, item: str) -> bool:
        return item in self.finished

    async def next_item(self, workspace: str, queue: Queue, reviewer: str,
                        candidates: list[str]) -> Lease | None:
        for item in candidates:
            if item not in self.not_for.get(reviewer, set()):
                return Lease(item, "lease_x", 0)
        return None


async def lease(items: Items, leases: Leases, walk: SpanWalk) -> str | None:
    found = await lease_next(cast(Workspace, items), QUEUE, cast(LeaseBook, leases), walk,
                             "user:ada")
    return None if found is None else found.item


async def test_the_done_stretch_is_read_once_then_jumped() -> None:
    items, leases = Items(), Leases()
    for i in range(1000):
        items.add(f"r{i}", key(10_000 - i))
    leases.finished = {f"run:r{i}" for i in range(900)}
    first = SpanWalk(None)
    assert await lease(items, leases, first) == "run:r900"
    assert items.pages == 5  # 900 done items: 4.5 pages of 200
    span = first.span()
    assert span is not None and (span.top_item, span.n) == ("run:r0", 900)

    items.pages = 0
    assert await lease(items, leases, SpanWalk(span)) == "run:r900"
    assert (items.pages, items.counts) == (2, 1)  # a short first page, a count, the jump

    # A run that arrives with an older clock, inside the stretch: the count says so, the
    # stretch is walked again, and the newcomer is offered.
    items.add("late", key(10_000 - 450, 1))
    items.pages = 0
    again = SpanWalk(span)
    assert await lease(items, leases, again) == "run:late"
    assert items.pages == 4  # 20 above the stretch's top, then pages of 200 to the newcomer
    # The old stretch no longer holds: what is kept is the stretch above the newcomer.
    assert again.span() == ClosedSpan("run:r0", key(10_000), key(10_000 - 449), 450)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from("x.m"), min_size=1, max_size=700),
       st.lists(st.integers(-30, 699), max_size=40),
       st.lists(st.integers(0, 699), max_size=30),
       st.sampled_from([1.0, 0.5]),
       st.integers(0, 699),
       st.lists(st.tuples(st.integers(0, 699), st.integers(-5, 699)), max_size=3))
async def test_with_or_without_the_jump_the_first_item_open_to_the_reviewer_is_leased(
        marks: list[str], late: list[int], closing: list[int], sample: float,
        besides_at: int, twice: list[tuple[int, int]]) -> None:
    # 'x': done by everyone; 'm': closed to ada only (she held or skipped it); '.': open.
    # Late runs arrive anywhere (negative: newer than every item, above the stretch), more
    # items are done since, some ids get a second row elsewhere (a chain's head recorded
    # twice), and ada may name an item shown (`besides`). Bo walks after her.
    queue = Queue(name="q", enters=Entry(kind="runs_of", rule="ops:r"),
                  feedback_types=("triage_quality",), sample=sample)
    items, leases = Items(), Leases()
    for i in range(len(marks)):
        items.add(f"r{i}", key(10_000 - 2 * i))
    leases.finished = {f"run:r{i}" for i, m in enumerate(marks) if m == "x"}
    leases.not_for["user:ada"] = {f"run:r{i}" for i, m in enumerate(marks) if m == "m"}

    async def walk_with(walk: SpanWalk, reviewer: str, besides: str | None) -> str | None:
        found = await lease_next(cast(Workspace, items), queue, cast(LeaseBook, leases),
                                 walk, reviewer, besides)
        return None if found is None else found.item

    def first_open(reviewer: str, besides: str | None) -> str | None:
        for _k, item_id in items.rows:
            item = f"run:{item_id}"
            if (item not in leases.finished and item not in leases.not_for.get(reviewer, ())
                    and item != besides and _sampled(queue, item)):
                return item
        return None

    walk = SpanWalk(None)
    await walk_with(walk, "user:ada", None)
    known = walk.span()
    for n, at in enumerate(late):
        items.add(f"late{n}", key(10_000 - 2 * at - 1))
    for i, at in twice:
        if i < len(marks):
            items.add(f"r{i}", key(10_000 - 2 * at - 1, 7))  # the same id, another row
    leases.finished |= {f"run:r{i}" for i in closing}
    besides = f"run:r{besides_at}"
    again = SpanWalk(known)
    assert await walk_with(again, "user:ada", besides) == first_open("user:ada", besides)
    # What her walks kept serves the next walk, by another reviewer, with no item shown.
    assert await walk_with(SpanWalk(again.span()), "user:bo", None) == \
        first_open("user:bo", None)


def test_the_stand_in_pages_in_the_views_order() -> None:
    # Newest first, by time then position, as ViewStore.item_ids pages them.
    items = Items()
    items.add("a", key(5))
    items.add("b", key(9))
    items.add("c", key(5, 3))
    assert [i for _k, i in items.rows] == ["b", "c", "a"]
