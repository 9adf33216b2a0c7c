"""How long a running worker takes to serve a tenant created after it started.

Starts one worker, then repeatedly creates a tenant, gives one piece of feedback on it, and
times from the tenant's creation to its first score on the scores topic.

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.discovery_latency --tenants 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
import uuid

from confluent_kafka import Consumer
from rich.console import Console

from streams.adapters.kafka.admin import TenantAdmin
from streams.adapters.kafka.config import reader_config
from streams.adapters.kafka.log import watermarks
from streams.core.actors import UserActor
from streams.core.events import AppEvent, RunStarted
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.root import Runtime
from streams.settings import Settings

console = Console(stderr=True)


async def one(settings: Settings, client: StreamsClient, watch: Consumer, name: str) -> float:
    created = time.monotonic()
    TenantAdmin(settings).create_tenant(name)
    ws = client.workspace(name, "w", actor=UserActor(id="ada"))
    spike = await ws.append(AppEvent(name="ops:error_spike"))
    await ws.append(RunStarted(run_id="run_1", rule="r", action="a", firing_id="f"),
                    correlation_id=spike.id)
    await ws.give_feedback(TriageQuality(correct=True, severity="low"),
                           on=RunTarget(run_id="run_1"))
    scores = tenant_topics(name, settings.topic_prefix).scores
    while sum(h for _l, h in watermarks(watch, scores).values()) == 0:
        if time.monotonic() - created > 120:
            raise SystemExit(f"tenant {name} not served within 120 s")
        await asyncio.sleep(0.05)
    return time.monotonic() - created


async def main_async(tenants: int) -> None:
    settings = Settings.from_env(topic_prefix=f"disc{uuid.uuid4().hex[:6]}")
    env = settings.child_env()
    worker = subprocess.Popen(  # noqa: ASYNC220 - started once, before anything is timed
        [sys.executable, "-m", "streams", "worker", "--types", "streams.examples.ops"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = StreamsClient(Runtime(settings))
    watch = Consumer(reader_config(settings, f"watch-{uuid.uuid4().hex}"))
    try:
        await asyncio.sleep(8)  # let the worker start and join its group
        took = []
        for i in range(tenants):
            seconds = await one(settings, client, watch, f"late-{i}")
            took.append(seconds)
            console.print(f"  tenant late-{i}: first score {seconds:.2f}s after creation")
            await asyncio.sleep(2)
        print(f"tenants={tenants} min={min(took):.2f}s median={statistics.median(took):.2f}s "
              f"max={max(took):.2f}s")
    finally:
        client.close()
        watch.close()
        worker.terminate()
        worker.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=5)
    asyncio.run(main_async(parser.parse_args().tenants))


if __name__ == "__main__":
    main()
