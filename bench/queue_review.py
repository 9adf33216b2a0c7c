"""A reviewer working through an annotation queue over REST: next item, submit, next...

    export KAFKA_BOOTSTRAP_SERVERS=... SCHEMA_REGISTRY_URL=...
    .venv/bin/python -m bench.queue_review --runs 10000 --items 400

1. Seeds a fresh tenant (a topic prefix of its own) with `--runs` runs of one rule, starts
   `python -m streams serve` on a free loopback port and installs a queue of that rule's
   runs (one reviewer per run).
2. One reviewer takes `--items` items one after the other: `POST .../next`, then
   `POST .../submit` with a triage verdict on the leased run; each call's latency is from
   its send to its answer. Items are handed out newest run first, a page of 200 of the runs
   view at a time, so past the 200th a `next` reads the pages of done runs before it: the
   latencies are printed per hundred items to show that cost.
   With `--done N`, the newest N runs were reviewed by the team before the server starts
   (a request and a submit each, written to the leases topic as servers write them): the
   reviewer's items come after them, so each `next` has N done runs ahead of it (a server
   jumps them once it has walked them: streams.core.spans).
3. The floors, in the same run on the same server: `GET .../me` (an authenticated read that
   does nothing: the transport) and `POST .../commands` with the same verdict (the command a
   submit ends in, without its lease record).

Prints p50/p99 ms per step and the ratios to the floors. The load generator shares the
machine's cores with the server and the broker.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
import zlib
from dataclasses import dataclass
from typing import Any

import httpx
from confluent_kafka import Producer

from bench.served import start_serve, until_ready
from bench.surfaces import _free_port, _pct
from streams.adapters.kafka.admin import TenantAdmin
from streams.adapters.kafka.config import producer_config
from streams.core.actors import UserActor
from streams.core.events import AppEvent, RunStarted
from streams.core.leases import LeaseRecord
from streams.runtime.client.keys import KeyStore
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.root import Runtime
from streams.settings import Settings

TENANT = "bench"


async def _seed(client: StreamsClient, runs: int) -> None:
    ws = client.workspace(TENANT, "prod")

    async def one(i: int) -> None:
        spike = await ws.append(AppEvent(name="ops:error_spike", data={"n": i}))
        await ws.append(RunStarted(run_id=f"run_{i}", rule="ops:error-spike",
                                   action="triage", firing_id=f"fir_{i}"),
                        correlation_id=spike.id, causation_id=spike.id)

    for start in range(0, runs, 500):
        await asyncio.gather(*(one(i) for i in range(start, min(runs, start + 500))))
        print(f"seeded {min(runs, start + 500)}/{runs} runs", file=sys.stderr)


def _verdict(target: dict[str, Any]) -> dict[str, Any]:
    return {"type": "give_feedback", "feedback_type": "triage_quality", "target": target,
            "value": {"correct": False, "severity": "high"}}


@dataclass
class Served:
    """A seeded tenant's `streams serve` (started by this benchmark), a key of it, and the
    workspace's REST base URL."""

    server: asyncio.subprocess.Process
    port: int
    token: str
    base: str
    tokens: dict[str, str]


def _done_by_the_team(settings: Settings, runs: int, done: int) -> None:
    """Lease records of the newest `done` of `runs` runs (run_{runs-1} down), each requested
    and submitted by one of the team (k = 1), written to the leases topic as a server writes
    them."""
    runtime = Runtime(settings)
    topic, partitions = runtime.admin.ensure_leases_topic(TENANT)
    producer = Producer(producer_config(settings))
    now = int(time.time() * 1000)
    for n in range(done):
        item = f"run:run_{runs - 1 - n}"
        for kind in ("request", "submit"):
            record = LeaseRecord(kind=kind, workspace="prod", queue="spikes", item=item,
                                 reviewer=f"user:team{n % 7}", request_id=f"lease_t{n}",
                                 at_ms=now, record_id="" if kind == "request" else f"s{n}")
            key = record.key.encode()
            producer.produce(topic, record.encode(), key,
                             partition=zlib.crc32(key) % partitions)
        producer.poll(0)
    producer.flush(60)
    runtime.close()
    print(f"{done} runs done by the team before the server starts", file=sys.stderr)


async def serve_seeded(runs: int, prefix: str, people: tuple[str, ...] = ("ada",),
                       done: int = 0) -> Served:
    """Seed a fresh tenant (topic prefix `prefix`) with `runs` runs, make a key for each of
    `people` (give_feedback, read, manage_queues; `token` is the first one's) and start
    `python -m streams serve` on a free loopback port; the caller stops `server` (by its
    handle)."""
    settings = Settings.from_env(topic_prefix=prefix)
    TenantAdmin(settings).create_tenant(TENANT)
    seeding = StreamsClient(Runtime(settings))
    await _seed(seeding, runs)
    seeding.close()
    if done:
        _done_by_the_team(settings, runs, done)
    keys = KeyStore(Runtime(settings))
    keys.start()
    tokens = {person: keys.create(TENANT, UserActor(id=person),
                                  {"give_feedback", "read", "manage_queues"})[1]
              for person in people}
    keys.close()
    port = _free_port()
    server = await start_serve(settings, port)
    return Served(server, port, tokens[people[0]],
                  f"http://127.0.0.1:{port}/v1/workspaces/{TENANT}.prod", tokens)


async def main_async(args: argparse.Namespace) -> None:
    served = await serve_seeded(args.runs, f"bq{uuid.uuid4().hex[:8]}", done=args.done)
    server, port, token = served.server, served.port, served.token
    base = f"http://127.0.0.1:{port}/v1/workspaces/{TENANT}.prod"
    headers = {"Authorization": f"Bearer {token}"}
    steps: dict[str, list[float]] = {"next": [], "submit": [], "me (floor)": [],
                                     "command (floor)": []}
    per_hundred: list[tuple[float, float]] = []
    try:
        async with httpx.AsyncClient(headers=headers, timeout=60) as http:
            await until_ready(f"http://127.0.0.1:{port}")
            queue = {"name": "spikes", "enters": {"runs_of": "ops:error-spike"},
                     "feedback_types": ["triage_quality"]}
            installed = await http.post(f"{base}/queues", json=queue)
            if installed.status_code != 201:
                raise SystemExit(f"the queue was not installed: {installed.text}")

            async def timed(step: str, call: Any) -> httpx.Response:
                started = time.perf_counter()
                answer: httpx.Response = await call
                steps[step].append(time.perf_counter() - started)
                if answer.status_code != 200:
                    raise SystemExit(f"{step} failed: {answer.status_code} {answer.text}")
                return answer

            hundred: list[float] = []
            for n in range(args.items):
                started = time.perf_counter()
                lease = (await timed("next", http.post(f"{base}/queues/spikes/next"))
                         ).json()["lease"]
                hundred.append(time.perf_counter() - started)
                if lease is None:
                    raise SystemExit(f"the queue ran out after {n} items")
                await timed("submit", http.post(f"{base}/queues/spikes/submit", json={
                    "request_id": lease["request_id"], "command": _verdict(lease["target"])}))
                # The floors, interleaved with the steps they bound.
                await timed("me (floor)", http.get(f"{base}/me"))
                await timed("command (floor)", http.post(f"{base}/commands", json={
                    "type": "command", "command": _verdict(lease["target"])}))
                if len(hundred) == 100:
                    per_hundred.append((_pct(hundred, 0.5), _pct(hundred, 0.99)))
                    hundred = []
    finally:
        server.terminate()  # the server this run started, by its handle
        await server.wait()

    print(f"one reviewer over REST, {args.items} items of a queue of {args.runs} runs, "
          f"{args.done} done ahead")
    print(f"{'step':<18}{'p50 ms':>10}{'p99 ms':>10}")
    for step, latencies in steps.items():
        print(f"{step:<18}{_pct(latencies, 0.5):>10.1f}{_pct(latencies, 0.99):>10.1f}")
    me = _pct(steps["me (floor)"], 0.5)
    command = _pct(steps["command (floor)"], 0.5)
    print(f"next p50 / me p50: {_pct(steps['next'], 0.5) / me:.1f}; submit p50 / command "
          f"p50: {_pct(steps['submit'], 0.5) / command:.1f}")
    for n, (p50, p99) in enumerate(per_hundred):
        print(f"next, items {n * 100 + 1}-{n * 100 + 100}: p50 {p50:.1f} ms, p99 {p99:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument("--done", type=int, default=0,
                        help="newest runs the team reviewed before the server starts")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
