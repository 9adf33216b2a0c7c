"""The demo: tenants, a worker, a producer, and a live view of events in and scores out."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from streams.actors import EvaluatorActor, UserActor
from streams.events import AppEvent, RuleFired, RunStarted, RunSucceeded, new_id
from streams.examples.ops import Resolution, ShouldHaveFired, TriageQuality
from streams.feedback import Feedback
from streams.kafka.admin import TenantAdmin
from streams.kafka.log import watermarks
from streams.scores import score_configs, scores_from_value
from streams.settings import Settings
from streams.targets import ChainTarget, FiringTarget, RunTarget
from streams.tenancy import tenant_topics
from streams.workspace import StreamsClient, Workspace, value_record

SERVICES = ("checkout", "search", "payments", "auth")
PEOPLE = ("ada", "grace", "linus")


@dataclass
class TenantProgress:
    """What the demo produced for one tenant, and what it expects back."""

    events: int = 0
    feedback: int = 0
    expected_scores: int = 0
    start_offsets: dict[str, int] = field(default_factory=dict)


def expected_scores(value: Feedback) -> int:
    """How many scores the mirror will make of this value (the domain's own mapping)."""
    return len(scores_from_value(
        score_configs(type(value)), value_record(value), feedback_event_id="x",
        timestamp=datetime.now(UTC),
        tenant="t", workspace="w", target_kind="run", target_id="r", participant="p",
        trace_id=None, session_id="s"))


async def _incident(ws: Workspace, judge: Workspace, rng: random.Random,
                    progress: TenantProgress) -> None:
    service = rng.choice(SERVICES)
    errors = rng.randint(3, 40)
    spike = await ws.append(AppEvent(name="ops:error_spike",
                                     data={"service": service, "errors": errors}))
    firing_id, run_id = new_id("fir"), new_id("run")
    fired = await ws.append(RuleFired(firing_id=firing_id, rule="ops:error-spike",
                                      matched=[spike.id], scope_key=service),
                            correlation_id=spike.id, causation_id=spike.id)
    started = await ws.append(RunStarted(run_id=run_id, rule="ops:error-spike",
                                         action="triage", firing_id=firing_id,
                                         scope={"service": service}),
                              correlation_id=spike.id, causation_id=fired.id)
    await ws.append(RunSucceeded(run_id=run_id, rule="ops:error-spike", action="triage",
                                 output={"opened_incident": errors > 10}),
                    correlation_id=spike.id, causation_id=started.id)
    progress.events += 4
    person = ws.as_actor(UserActor(id=rng.choice(PEOPLE)))
    severity = rng.choice(["low", "high", "critical"])
    verdicts: list[tuple[Workspace, Feedback, RunTarget | FiringTarget | ChainTarget]] = [
        (person, TriageQuality(correct=rng.random() > 0.3, severity=severity,
                               note="missed the deploy" if rng.random() < 0.2 else None),
         RunTarget(run_id=run_id)),
        (judge, TriageQuality(correct=errors > 10, severity=severity),
         RunTarget(run_id=run_id)),
        (person, ShouldHaveFired(fired_rightly=errors > 5), FiringTarget(firing_id=firing_id)),
        (person, Resolution(resolved=rng.random() > 0.1,
                            minutes_to_mitigate=rng.randint(1, 240)),
         ChainTarget(correlation_id=spike.id)),
    ]
    for who, value, target in verdicts:
        await who.give_feedback(value, on=target)
        progress.events += 1
        progress.feedback += 1
        progress.expected_scores += expected_scores(value)


def _ends(consumer: Consumer, topic: str) -> int:
    return sum(high for _low, high in watermarks(consumer, topic).values())


def _table(settings: Settings, consumer: Consumer, progress: dict[str, TenantProgress],
           started: float) -> tuple[Table, bool]:
    table = Table(title=f"feedback-streams demo  ({time.monotonic() - started:.0f}s)")
    for column in ("tenant", "events in", "feedback given", "scores out", "expected",
                   "dead letters"):
        table.add_column(column, justify="right" if column != "tenant" else "left")
    done = True
    for tenant, p in progress.items():
        topics = tenant_topics(tenant, settings.topic_prefix)
        scores = _ends(consumer, topics.scores) - p.start_offsets[topics.scores]
        dead = _ends(consumer, topics.deadletter) - p.start_offsets[topics.deadletter]
        done = done and p.expected_scores > 0 and scores >= p.expected_scores
        table.add_row(tenant, str(p.events), str(p.feedback), f"[green]{scores}[/green]",
                      str(p.expected_scores), str(dead))
    return table, done


def run_demo(settings: Settings, tenants: list[str], *, chains: int = 200,
             timeout: float = 120.0, console: Console | None = None) -> bool:
    """Run the demo end to end; True when every expected score arrived."""
    console = console or Console()
    admin = TenantAdmin(settings)
    for tenant in tenants:
        info = admin.create_tenant(tenant)
        console.print(f"tenant [bold]{tenant}[/bold]: {', '.join(info.topics.all())}")
    consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers,
                         "group.id": new_id("demo-watch")})
    progress = {t: TenantProgress() for t in tenants}
    for tenant, p in progress.items():
        for topic in tenant_topics(tenant, settings.topic_prefix).all():
            p.start_offsets[topic] = _ends(consumer, topic)

    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
           "SCHEMA_REGISTRY_URL": settings.schema_registry_url,
           "STREAMS_TOPIC_PREFIX": settings.topic_prefix}
    worker = subprocess.Popen(
        [sys.executable, "-m", "streams", "worker", "--types", "streams.examples.ops"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    console.print(f"worker started (pid {worker.pid}); producing {chains} incident chains "
                  f"per tenant")
    client = StreamsClient(settings)
    started = time.monotonic()
    ok = False
    try:
        async def produce() -> None:
            rng = random.Random(7)
            for tenant in tenants:
                ws = client.workspace(tenant, "prod", actor=UserActor(id="ops-bot"))
                judge = ws.as_actor(EvaluatorActor(name="triage-judge", version="1"))
                for start in range(0, chains, 20):
                    await asyncio.gather(*(
                        _incident(ws, judge, rng, progress[tenant])
                        for _ in range(start, min(start + 20, chains))))

        with Live(console=console, refresh_per_second=4) as live:
            producer = _Background(produce)
            while time.monotonic() - started < timeout:
                table, done = _table(settings, consumer, progress, started)
                live.update(table)
                if producer.error is not None:
                    raise producer.error
                if producer.finished and done:
                    ok = True
                    break
                if worker.poll() is not None:
                    break
                time.sleep(0.5)
        if worker.poll() is not None:
            stderr = worker.stderr.read().decode(errors="replace") if worker.stderr else ""
            console.print(f"[red]worker exited early ({worker.returncode}):[/red]\n"
                          f"{stderr[-3000:]}")
            ok = False
        elif not ok:
            console.print(f"[red]not every score arrived within {timeout:.0f}s[/red]")
        else:
            console.print(f"[green]every expected score arrived in "
                          f"{time.monotonic() - started:.1f}s[/green]")
    finally:
        client.close()
        consumer.close()
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        console.print(f"worker stopped (exit {worker.returncode})")
    return ok


class _Background:
    """Runs an async producer in a thread so the live view keeps refreshing."""

    def __init__(self, coro_fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self.finished = False
        self.error: BaseException | None = None

        def run() -> None:
            try:
                asyncio.run(coro_fn())
            except BaseException as exc:
                self.error = exc
            finally:
                self.finished = True

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
