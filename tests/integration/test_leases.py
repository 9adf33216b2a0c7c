"""Leases on the real broker: two processes of 25 reviewers each take a queue's items at
once and never over-assign; a lease that expires returns its item; a submit after expiry, a
second submit and a skip are decided on the log."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

import streams.examples.ops  # noqa: F401  (registers triage_quality, resolution)
from streams.core.actors import UserActor
from streams.core.queues import queue_from_dict
from streams.runtime.client.keys import KeyStore
from streams.runtime.jobs.leases import LeaseBook
from streams.runtime.root import Runtime
from streams.settings import Settings
from tests.conftest import REPO
from tests.integration.conftest import Server
from tests.integration.served import start_run

ITEMS = 20
K = 2


def _driver(settings: Settings, tenant: str, queue: dict[str, Any], reviewers: list[str],
            go: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.lease_driver", tenant, json.dumps(queue),
         str(ITEMS), ",".join(reviewers), str(go)],
        env=settings.child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=str(REPO))


async def test_two_processes_and_50_reviewers_never_over_assign(
        settings: Settings, tenant_factory: Callable[..., str], tmp_path: Path) -> None:
    tenant = tenant_factory()
    queue = {"name": "triage", "enters": {"runs_of": "ops:wrong-triage"},
             "feedback_types": ["triage_quality"], "reviewers": K, "lease_seconds": 600}
    go = tmp_path / "go"
    people = [f"user:r{n}" for n in range(50)]
    procs = [_driver(settings, tenant, queue, people[:25], go),
             _driver(settings, tenant, queue, people[25:], go)]
    try:
        for proc in procs:  # both have read the topic: they start together
            assert proc.stdout is not None
            line = await asyncio.to_thread(proc.stdout.readline)
            assert line.strip() == "ready", line + (proc.stderr.read() if proc.stderr else "")
        go.touch()
        outs = [await asyncio.to_thread(p.communicate, timeout=300) for p in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    answers = []
    for proc, (out, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err[-4000:]
        answers.append(json.loads(out.strip().splitlines()[-1]))
    grants = [tuple(g) for a in answers for g in a["grants"]]
    submits = {rid: o for a in answers for rid, o in a["submits"].items()}

    # Exact: every item went to exactly k reviewers, never one reviewer twice, and each of
    # those reviewers' submits counted.
    per_item = Counter(item for _r, item, _rid in grants)
    assert per_item == dict.fromkeys((f"run:run_{n}" for n in range(ITEMS)), K), per_item
    assert len({(r, item) for r, item, _rid in grants}) == len(grants)
    assert set(submits.values()) == {"accepted"} and len(submits) == ITEMS * K
    # Both processes' reviewers got items: they contended, not took turns.
    assert all(a["grants"] for a in answers), answers

    # A third reader folds the same log to the same outcomes.
    book = LeaseBook(Runtime(settings), tenant)
    await asyncio.to_thread(book.start)
    try:
        for reviewer, item, rid in grants:
            state = book.item("prod", "triage", item)
            assert state is not None
            assert state.outcomes[f"request:{rid}"] == "granted"
            assert reviewer in state.submitted
        assert all(len(s.submitted) == K for s in (book.item("prod", "triage", i) for i in
                                                   per_item) if s is not None)
    finally:
        book.close()
    print(f"two processes, 50 reviewers, {ITEMS} items x {K}: {len(grants)} leases, "
          f"{len(submits)} submits accepted, 0 over-assigned; {book.records} lease records")


async def test_an_expired_lease_returns_the_item_and_its_late_submit_is_refused(
        settings: Settings, tenant_factory: Callable[..., str]) -> None:
    tenant = tenant_factory()
    queue = queue_from_dict({"name": "quick", "enters": {"chains": {}},
                             "feedback_types": ["resolution"], "lease_seconds": 1})
    book = LeaseBook(Runtime(settings), tenant)
    await asyncio.to_thread(book.start)
    try:
        ada = await book.next_item("prod", queue, "user:ada", ["chain:c1"])
        assert ada is not None and ada.item == "chain:c1"
        # Held: nobody else gets it, and asking again gives ada the same lease.
        assert await book.next_item("prod", queue, "user:bo", ["chain:c1"]) is None
        assert await book.next_item("prod", queue, "user:ada", ["chain:c1"]) == ada
        await asyncio.sleep(1.2)
        bo = await book.next_item("prod", queue, "user:bo", ["chain:c1"])
        assert bo is not None and bo.request_id != ada.request_id
        assert await book.submit("prod", "quick", "chain:c1", "user:ada",
                                 ada.request_id) == "expired"
        assert await book.submit("prod", "quick", "chain:c1", "user:bo",
                                 bo.request_id) == "accepted"
        assert await book.submit("prod", "quick", "chain:c1", "user:bo",
                                 bo.request_id) == "submitted"
        # Ada let it expire: she never gets it again; it is done anyway.
        assert await book.next_item("prod", queue, "user:ada", ["chain:c1"]) is None
        state = book.item("prod", "quick", "chain:c1")
        assert state is not None and state.done and state.submitted == {"user:bo"}
        # A skip gives an item back to someone else.
        cy = await book.next_item("prod", queue, "user:cy", ["chain:c2"])
        assert cy is not None
        assert await book.skip("prod", "quick", "chain:c2", "user:cy",
                               cy.request_id) == "skipped"
        dee = await book.next_item("prod", queue, "user:dee", ["chain:c2"])
        assert dee is not None and dee.item == "chain:c2"
        assert await book.next_item("prod", queue, "user:cy", ["chain:c2"]) is None
    finally:
        book.close()


async def test_two_serve_processes_and_50_reviewers_record_each_run_exactly_k_times(
        settings: Settings, tenant_factory: Callable[..., str],
        client_factory: Callable[..., Any], serve_factory: Callable[..., Server],
        keys: KeyStore) -> None:
    # The check through the surface: 50 reviewers over REST, half on each of two
    # `streams serve` processes, each taking a run, judging it and taking the next.
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod")
    for n in range(ITEMS):
        await start_run(ws, f"run_{n}")
    servers = [serve_factory(), serve_factory()]
    _k, admin = keys.create(tenant, UserActor(id="root"), {"read", "manage_queues"})
    tokens = [keys.create(tenant, UserActor(id=f"r{n}"), {"give_feedback", "read"})[1]
              for n in range(50)]
    queue = {"name": "spikes", "enters": {"runs_of": "ops:error-spike"},
             "feedback_types": ["triage_quality"], "reviewers": K}

    async with httpx.AsyncClient(timeout=60) as http:
        installed = await http.post(f"{servers[0].url}/v1/workspaces/{tenant}.prod/queues",
                                    json=queue, headers={"Authorization": f"Bearer {admin}"})
        assert installed.status_code == 201, installed.text

        async def reviewer(n: int) -> list[str]:
            base = f"{servers[n % 2].url}/v1/workspaces/{tenant}.prod/queues/spikes"
            headers = {"Authorization": f"Bearer {tokens[n]}"}
            judged = []
            while True:
                answer = await http.post(f"{base}/next", headers=headers)
                assert answer.status_code == 200, answer.text
                lease = answer.json()["lease"]
                if lease is None:
                    return judged
                done = await http.post(f"{base}/submit", headers=headers, json={
                    "request_id": lease["request_id"], "command": {
                        "type": "give_feedback", "feedback_type": "triage_quality",
                        "target": lease["target"],
                        "value": {"correct": n % 3 != 0, "severity": "high"}}})
                assert done.status_code == 200, done.text
                judged.append(lease["item"])

        judged = await asyncio.gather(*(reviewer(n) for n in range(50)))
    per_run = Counter(item for items in judged for item in items)
    assert per_run == dict.fromkeys((f"run:run_{n}" for n in range(ITEMS)), K), per_run
    given = [e for e in await ws.feedback()]
    assert len(given) == ITEMS * K  # recorded once each
    assert len({(e.actor.participant, e.event.target.id) for e in given}) == ITEMS * K
    print(f"two serve processes, 50 reviewers over REST: {ITEMS} runs x {K} reviewers, "
          f"{len(given)} feedback recorded, 0 over-assigned")
