"""Leases on a queue's items, decided on the log: who reviews which item, exactly.

Every process that hands out items appends lease records to its tenant's leases topic
(`<prefix>.<tenant>.leases`), all records of one item in one partition (keyed by workspace,
queue and item), and folds them in log order with `fold_item`. The fold alone decides, so
every process reading the partition agrees on every outcome, and two processes never hand out
the same slot: the same technique as the command ledger's first-claim-wins.

    request  a reviewer asks for the item: granted when fewer than k reviewers hold or have
             submitted it and this reviewer never held it; its lease runs `lease_ms`.
    submit   the reviewer's verdict on the item under that lease: accepted while the lease
             runs, refused once it has expired (the item went back to the queue) or after
             the reviewer's own submit.
    skip     the reviewer gives the item back: its slot is free, and the reviewer never gets
             it again.

Time is each record's `at_ms` (the writer's clock) made monotonic per item: the fold's clock
is the largest `at_ms` read so far, so a record written by a server whose clock lags cannot
revive an expired lease. Expiry is lazy: a lease past its end counts as returned from the
first record read after it (and for `open_slots` at a given time).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Final, Literal

from streams.core.errors import ValidationFailed

__all__ = [
    "ITEM_PATTERN",
    "LEASE_ID_PATTERN",
    "OUTCOMES",
    "Held",
    "InvalidLeaseRecord",
    "ItemLeases",
    "LeaseKind",
    "LeaseRecord",
    "Outcome",
    "QueueProgress",
    "fold_item",
    "item_key",
    "item_of",
    "progress_of",
    "queue_progress",
    "target_of_item",
]

LEASE_ID_PATTERN: Final = "^lease_[0-9a-f]{32}$"
"""A lease's id (its request id), as handed out."""

ITEM_PATTERN: Final = "^(run|firing|chain):[^\\x00-\\x1f]+$"
"""A queue item: its target's kind and id, `run:run_1`."""

# The field that names a target of each kind in its JSON form (streams.core.targets).
_TARGET_ID_FIELD: Final = {"run": "run_id", "firing": "firing_id", "chain": "correlation_id"}


def item_of(kind: str, target_id: str) -> str:
    """The queue item of a target: `item_of("run", "run_1")` is `run:run_1`."""
    if kind not in _TARGET_ID_FIELD:
        raise ValueError(f"no queue items of kind {kind!r}: run, firing or chain")
    return f"{kind}:{target_id}"


def target_of_item(item: str) -> dict[str, str]:
    """An item's target in its JSON form, what give_feedback takes as `target`:
    `{"kind": "chain", "correlation_id": "evt_1"}` for `chain:evt_1`."""
    kind, _, target_id = item.partition(":")
    if kind not in _TARGET_ID_FIELD or not target_id:
        raise ValueError(f"{item!r} is not a queue item (kind:id, kind run, firing or chain)")
    return {"kind": kind, _TARGET_ID_FIELD[kind]: target_id}

LeaseKind = Literal["request", "submit", "skip"]

Outcome = Literal["granted", "full", "seen", "accepted", "expired", "submitted", "skipped",
                  "not_held"]

OUTCOMES: Final[dict[str, str]] = {
    "granted": "the lease is the reviewer's until it expires",
    "full": "k reviewers hold or have submitted the item",
    "seen": "the reviewer held this item before (submitted, skipped or let it expire)",
    "accepted": "the verdict counts",
    "expired": "the lease had expired: the item went back to the queue",
    "submitted": "the reviewer submitted on this item already",
    "skipped": "the item is given back",
    "not_held": "the reviewer holds no lease on this item",
}
"""What a record's fold decided, for each outcome a request, submit or skip can have."""


class InvalidLeaseRecord(ValidationFailed):
    """A value on the leases topic that is not a lease record."""


def item_key(workspace: str, queue: str, item: str) -> str:
    """The key of an item's lease records: one partition holds every record of the item."""
    return f"{workspace}\n{queue}\n{item}"


@dataclass(frozen=True)
class LeaseRecord:
    """One record on the leases topic: `kind` by `reviewer` (a participant) of `item` in
    `queue`, `request_id` naming the lease (unique per request); `reviewers` (k) and
    `lease_ms` are the queue's when the request was written. A submit or skip has an id of
    its own (`record_id`): its outcome is kept under it, so the same record read twice
    decides nothing new, while a second submit under one lease is `submitted`."""

    kind: LeaseKind
    workspace: str
    queue: str
    item: str
    reviewer: str
    request_id: str
    at_ms: int
    reviewers: int = 1
    lease_ms: int = 900_000
    record_id: str = ""

    @property
    def decision(self) -> str:
        """Where the fold keeps this record's outcome (ItemLeases.outcomes)."""
        return f"{self.kind}:{self.record_id or self.request_id}"

    @property
    def key(self) -> str:
        """The record's key (its item's)."""
        return item_key(self.workspace, self.queue, self.item)

    def encode(self) -> bytes:
        """The record value."""
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes) -> LeaseRecord:
        """The record of a value; InvalidLeaseRecord when it is not one."""
        try:
            record = cls(**json.loads(value))
        except (ValueError, TypeError) as exc:
            raise InvalidLeaseRecord(f"not a lease record: {exc}") from exc
        if record.kind not in ("request", "submit", "skip") or record.reviewers < 1:
            raise InvalidLeaseRecord(f"not a lease record: kind {record.kind!r}, "
                                     f"reviewers {record.reviewers}")
        return record


@dataclass(frozen=True)
class Held:
    """A lease being held: its request id and when it ends (ms)."""

    request_id: str
    ends_ms: int


@dataclass(frozen=True)
class ItemLeases:
    """The folded state of one item: who holds it now, who submitted, who saw it, the
    clock (largest `at_ms` read), k, and each request id's outcome."""

    reviewers: int = 1
    clock_ms: int = 0
    held: dict[str, Held] = field(default_factory=dict)
    submitted: frozenset[str] = frozenset()
    seen: frozenset[str] = frozenset()
    outcomes: dict[str, Outcome] = field(default_factory=dict)

    def holding(self, at_ms: int) -> dict[str, Held]:
        """The leases still running at `at_ms`."""
        return {r: h for r, h in self.held.items() if h.ends_ms > at_ms}

    def open_slots(self, at_ms: int) -> int:
        """How many more reviewers may get the item at `at_ms`."""
        return max(0, self.reviewers - len(self.submitted) - len(self.holding(at_ms)))

    @property
    def done(self) -> bool:
        """k reviewers submitted on it."""
        return len(self.submitted) >= self.reviewers


def fold_item(current: ItemLeases | None, record: LeaseRecord) -> ItemLeases:
    """An item's state after one more of its records, in log order (see the module)."""
    state = current or ItemLeases(reviewers=record.reviewers)
    now = max(state.clock_ms, record.at_ms)
    # Leases that ended before this record returned their slots; their reviewers saw it.
    running = state.holding(now)
    seen = state.seen | (set(state.held) - set(running))
    reviewer, rid = record.reviewer, record.request_id
    outcome: Outcome
    held, submitted = running, state.submitted
    if record.kind == "request":
        reviewers = state.reviewers if current is not None else record.reviewers
        mine = running.get(reviewer)
        if mine is not None and mine.request_id == rid:
            outcome = "granted"  # a repeat of the request that holds it
        elif reviewer in seen or reviewer in submitted or mine is not None:
            outcome = "seen"
        elif reviewers - len(submitted) - len(running) <= 0:
            outcome = "full"
        else:
            outcome = "granted"
            held = {**running, reviewer: Held(rid, now + record.lease_ms)}
    else:
        reviewers = state.reviewers
        mine = running.get(reviewer)
        if record.kind == "submit":
            if reviewer in submitted:
                outcome = "submitted"
            elif mine is not None and mine.request_id == rid:
                outcome = "accepted"
                held = {r: h for r, h in running.items() if r != reviewer}
                submitted = submitted | {reviewer}
            else:
                outcome = "expired"
        elif mine is not None and mine.request_id == rid:
            outcome = "skipped"
            held = {r: h for r, h in running.items() if r != reviewer}
            seen = seen | {reviewer}
        else:
            outcome = "not_held"
    # The first outcome of a record stands: a record read twice decides nothing new.
    outcomes = state.outcomes if record.decision in state.outcomes else {
        **state.outcomes, record.decision: outcome}
    return replace(state, reviewers=reviewers, clock_ms=now, held=held,
                   submitted=submitted, seen=frozenset(seen), outcomes=outcomes)


@dataclass(frozen=True)
class QueueProgress:
    """Where a queue's items stand: `done` (k reviewers submitted), `in_review` (not done,
    but leased now or submitted by some), `left` (neither: never handed out, or only
    skipped or let expire), and `verdicts`, the submits accepted on them."""

    items: int
    done: int
    in_review: int
    left: int
    verdicts: int


def queue_progress(items: Iterable[str], state_of: Callable[[str], ItemLeases | None],
                   at_ms: int) -> QueueProgress:
    """The progress of a queue's `items` (ids such as `run:r1`), each item's folded state
    given by `state_of` (None: never asked for), at `at_ms`."""
    total = 0
    states: list[ItemLeases] = []
    for item in items:
        total += 1
        state = state_of(item)
        if state is not None:
            states.append(state)
    return progress_of(total, states, at_ms)


def progress_of(total: int, states: Iterable[ItemLeases], at_ms: int) -> QueueProgress:
    """The progress of a queue of `total` items whose asked-for items have the folded
    `states` (every item with a state is one of the total): what `queue_progress` gives
    without reading the items, when the total is counted."""
    done = in_review = verdicts = 0
    for state in states:
        verdicts += len(state.submitted)
        if state.done:
            done += 1
        elif state.submitted or state.holding(at_ms):
            in_review += 1
    return QueueProgress(total, done, in_review, total - done - in_review, verdicts)
