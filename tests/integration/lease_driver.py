"""Run by tests/integration/test_leases.py as a process of its own: reviewers of one process
asking a LeaseBook for a queue's items at once, against another such process.

    python -m tests.integration.lease_driver <tenant> <queue json> <items> <reviewers> <go file>

Starts the book (prints "ready"), waits for <go file> to exist, then runs one task per
reviewer (comma-separated names): each takes items (in the same order for all, the most
contention) and submits on it, then the next, until none is left for it. Prints one JSON line:
{"grants": [[reviewer, item, request id], ...], "submits": {request id: outcome}}.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import streams.examples.ops  # noqa: F401  (registers triage_quality)
from streams.core.queues import queue_from_dict
from streams.runtime.jobs.leases import Lease, LeaseBook
from streams.runtime.root import Runtime
from streams.settings import Settings


async def review(book: LeaseBook, queue_json: str, items: list[str], reviewer: str,
                 ) -> tuple[list[tuple[str, Lease]], dict[str, str]]:
    # As a person works: take an item, submit on it, take the next.
    queue = queue_from_dict(json.loads(queue_json))
    mine: list[tuple[str, Lease]] = []
    submits: dict[str, str] = {}
    while (lease := await book.next_item("prod", queue, reviewer, items)) is not None:
        mine.append((reviewer, lease))
        submits[lease.request_id] = await book.submit("prod", queue.name, lease.item,
                                                      reviewer, lease.request_id)
    return mine, submits


def _wait_for(go: Path) -> None:
    while not go.exists():
        time.sleep(0.005)


async def main() -> None:
    tenant, queue_json, count, reviewers, go = sys.argv[1:]
    items = [f"run:run_{n}" for n in range(int(count))]
    runtime = Runtime(Settings.from_env())
    book = LeaseBook(runtime, tenant)
    await asyncio.to_thread(book.start)
    # Connected and with the leases topic's leaders known before "ready", as the other
    # process: a first produce that must fetch them first (a second or more on a loaded
    # machine) would let the other process take every item before this one asks once.
    await asyncio.to_thread(runtime.producer.list_topics, book.topic, 30)
    print("ready", flush=True)
    await asyncio.to_thread(_wait_for, Path(go))
    done = await asyncio.gather(*(review(book, queue_json, items, r)
                                  for r in reviewers.split(",")))
    grants = [[r, lease.item, lease.request_id] for mine, _s in done for r, lease in mine]
    submits = {rid: outcome for _m, s in done for rid, outcome in s.items()}
    print(json.dumps({"grants": grants, "submits": submits}), flush=True)
    book.close()
    runtime.close()


if __name__ == "__main__":
    asyncio.run(main())
