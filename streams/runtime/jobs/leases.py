"""Handing out a queue's items to reviewers, exactly, across server processes.

`LeaseBook(runtime, tenant)` follows the tenant's leases topic (`<prefix>.<tenant>.leases`)
and folds each item's records with `streams.core.leases.fold_item`. To lease, submit or skip,
it appends a record to the item's partition, waits until its own tail has read that record
back, and answers what the fold decided at that point of the log. Every process folds the
same records in the same order, so two processes never hand out the same slot.

    book = LeaseBook(runtime, "acme"); book.start()          # blocking: reads the topic
    lease = await book.next_item("prod", queue, "user:ada", ["run:r1", "run:r2"])
    outcome = await book.submit("prod", queue.name, lease.item, "user:ada", lease.request_id)
"""

from __future__ import annotations

import threading
import time
import uuid
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from streams.adapters.kafka.reports import ReportPoller, produce_acked
from streams.core.errors import KafkaUnavailable
from streams.core.leases import (
    ItemLeases,
    LeaseKind,
    LeaseRecord,
    Outcome,
    QueueProgress,
    fold_item,
    item_key,
    progress_of,
    queue_progress,
)
from streams.core.queues import Queue
from streams.runtime.root import Runtime

__all__ = ["Lease", "LeaseBook"]


@dataclass(frozen=True)
class Lease:
    """An item leased to a reviewer until `ends_ms` (ms since the epoch, the lease's own
    clock), named by `request_id`."""

    item: str
    request_id: str
    ends_ms: int


def _now_ms() -> int:
    return int(time.time() * 1000)


class LeaseBook:
    """One tenant's leases: the folded state of every item, kept current by a tail."""

    def __init__(self, runtime: Runtime, tenant: str) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.tenant = tenant
        self.topic = ""
        self._partitions = 1
        self._items: dict[str, ItemLeases] = {}
        self._lock = threading.Lock()
        self._tail: Any = None
        self._started = threading.Lock()
        self._reports = ReportPoller(runtime.producer, 0.001)
        self.records = 0

    def start(self) -> None:
        """Create the topic if missing, read it to its end and follow it (once)."""
        with self._started:
            if self._tail is not None:
                return
            self.topic, self._partitions = self.runtime.admin.ensure_leases_topic(self.tenant)
            tail = self.runtime.tail(self.topic, self._apply)
            tail.start()
            tail.sync()
            self._tail = tail

    def _apply(self, _partition: int, _offset: int, key: bytes, value: bytes | None) -> None:
        if value is None:
            return
        record = LeaseRecord.decode(value)  # a bad record is logged by the tail and skipped
        name = key.decode()
        with self._lock:
            self._items[name] = fold_item(self._items.get(name), record)
            self.records += 1

    def item(self, workspace: str, queue: str, item: str) -> ItemLeases | None:
        """An item's folded state (None when nobody ever asked for it)."""
        with self._lock:
            return self._items.get(item_key(workspace, queue, item))

    def done(self, workspace: str, queue: str, item: str) -> bool:
        """Whether k reviewers submitted on the item (for good: a submit is never undone)."""
        state = self.item(workspace, queue, item)
        return state is not None and state.done

    def progress(self, workspace: str, queue: str, items: Iterable[str]) -> QueueProgress:
        """Where the queue's `items` stand now, as this book has read the leases."""
        with self._lock:
            return queue_progress(items, lambda i: self._items.get(item_key(workspace, queue,
                                                                            i)), _now_ms())

    def progress_counted(self, workspace: str, queue: str, total: int) -> QueueProgress:
        """Where a queue of `total` items stands now, from the states of the items this
        book has read leases of (what people asked for, not what the queue holds)."""
        prefix = item_key(workspace, queue, "")
        with self._lock:
            states = [state for key, state in self._items.items() if key.startswith(prefix)]
        return progress_of(total, states, _now_ms())

    # -- writing and reading back --------------------------------------------------------

    async def _decide(self, record: LeaseRecord) -> Outcome:
        """Append `record`, wait until the tail has read it, and answer the fold's outcome."""
        if self._tail is None:
            raise RuntimeError("start() the lease book first")
        key = record.key
        wait = self.settings.feedback_timeout
        # The partition is explicit, so every writer (whatever its partitioner) puts an
        # item's records in one partition.
        partition, offset = await produce_acked(
            self.runtime.producer, self._reports, self.topic, key.encode(), record.encode(),
            partition=zlib.crc32(key.encode()) % self._partitions, wait_s=wait,
            then="then ask again")
        if not await self._tail.reached(partition, offset, wait):
            raise KafkaUnavailable(f"reading {self.topic} back did not reach offset {offset} "
                                   f"within {wait:g} s; check the brokers")
        with self._lock:
            state = self._items[key]
        return state.outcomes[record.decision]

    def _record(self, kind: LeaseKind, workspace: str, queue: Queue | str, item: str,
                reviewer: str, request_id: str) -> LeaseRecord:
        k, lease_ms = (queue.reviewers, int(queue.lease_seconds * 1000)) \
            if isinstance(queue, Queue) else (1, 0)
        return LeaseRecord(kind=kind, workspace=workspace,
                           queue=queue.name if isinstance(queue, Queue) else queue,
                           item=item, reviewer=reviewer, request_id=request_id,
                           at_ms=_now_ms(), reviewers=k, lease_ms=lease_ms,
                           record_id="" if kind == "request" else f"{kind}_{uuid.uuid4().hex}")

    # -- what reviewers do ---------------------------------------------------------------

    async def next_item(self, workspace: str, queue: Queue, reviewer: str,
                        candidates: Iterable[str]) -> Lease | None:
        """The first of `candidates` (items of `queue`, in the order to hand them out) the
        reviewer may have: one it holds already, else one it never held with a free slot,
        leased now. None when there is none."""
        now = _now_ms()
        for item in candidates:
            state = self.item(workspace, queue.name, item)
            if state is not None:
                mine = state.holding(now).get(reviewer)
                if mine is not None:
                    return Lease(item, mine.request_id, mine.ends_ms)
                if (reviewer in state.seen or reviewer in state.submitted
                        or reviewer in state.held or state.open_slots(now) == 0):
                    continue
            rid = f"lease_{uuid.uuid4().hex}"
            outcome = await self._decide(self._record("request", workspace, queue, item,
                                                      reviewer, rid))
            if outcome == "granted":
                state = self.item(workspace, queue.name, item)
                assert state is not None
                return Lease(item, rid, state.held[reviewer].ends_ms)
        return None

    async def submit(self, workspace: str, queue: str, item: str, reviewer: str,
                     request_id: str) -> Outcome:
        """Record the reviewer's submit under the lease: `accepted` while it runs, else
        `expired` or `submitted` (see streams.core.leases)."""
        return await self._decide(self._record("submit", workspace, queue, item, reviewer,
                                               request_id))

    async def skip(self, workspace: str, queue: str, item: str, reviewer: str,
                   request_id: str) -> Outcome:
        """Give the item back: `skipped`, or `not_held` when the lease is not running."""
        return await self._decide(self._record("skip", workspace, queue, item, reviewer,
                                               request_id))

    def close(self) -> None:
        """Stop following the topic."""
        if self._tail is not None:
            self._tail.close()
