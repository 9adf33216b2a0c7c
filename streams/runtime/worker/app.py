"""The worker: the feedback mirror's and the rules reactor's batch data paths, hosted by a
Faust application, and the decider of stateful rules.

The mirror runs on the batch data path (streams.runtime.batch.BatchLoop over MirrorStep) in a
thread started with the worker process, in the consumer group `<prefix>-<cursor>` (default
`fs-feedback-mirror`: the mirror's cursor); the rules reactor, when rules are given, in
another, in the group `<prefix>-<cursor>-rules`, its actions running on the app's event loop.
Both subscribe to every tenant's events topic by pattern, so a new tenant is picked up at the
next metadata refresh (`STREAMS_METADATA_REFRESH_INTERVAL`). Faust's per-event stream
machinery cost more than the mirror's whole job (docs/design.md), so no record goes through
it; Faust stays the application: lifecycle, signals, timers (stats, the discovery that gives
new tenants their rules topic), an idle agent on the control topic in `<prefix>-<cursor>-app`.
A loop that stops on an error (an outage longer than `STREAMS_OUTAGE_LIMIT`) ends the process
with exit code 70, so a supervisor restarts it from its cursor.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

import faust
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from streams.adapters.kafka.admin import TenantAdmin
from streams.adapters.tracing import configure_tracing
from streams.core.budgets import with_budgets
from streams.core.rules import Rule, RuleSet
from streams.core.runs import ActionFn
from streams.core.tenancy import (
    EVENTS,
    control_topic,
    parse_topic,
    tenant_topics,
    tenants_pattern,
    worker_app_group,
    worker_group,
    worker_rules_group,
)
from streams.runtime.batch import BatchLoop
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.observe.health import HealthServer, serve_health
from streams.runtime.root import Runtime
from streams.runtime.worker.follower import RulebookFollower
from streams.runtime.worker.mirror import MirrorStep
from streams.runtime.worker.reactor import Reactor

__all__ = ["MIRROR_CURSOR", "MIRROR_LOOP", "Worker"]

log = logging.getLogger(__name__)

MIRROR_CURSOR = "feedback-mirror"
MIRROR_LOOP = "feedback-mirror"
"""The mirror loop's name (logs, stats, metrics' `loop` label)."""
REACTOR_LOOP = "rules-reactor"
"""The rules reactor loop's name (logs, stats, metrics' `loop` label, its thread's name)."""


def _ensure_control_topic(admin: AdminClient, name: str, replication_factor: int) -> None:
    for future in admin.create_topics([NewTopic(name, 1, replication_factor)]).values():
        with contextlib.suppress(KafkaException):  # exists already
            future.result()


def run_or_exit(name: str, target: Callable[[threading.Event], None],
                stop: threading.Event) -> None:
    """Run a loop until `stop`; if it raises, end the process (exit 70) rather than go on
    without it: nothing past its last commit was acknowledged, so a restarted worker redoes
    exactly that work."""
    try:
        target(stop)
    except Exception:
        log.critical("%s stopped; exiting so it restarts from its cursor", name, exc_info=True)
        os._exit(70)


class Worker:
    """Builds the Faust app with the feedback mirror agent and tenant discovery.

    Its clients come from a Runtime (one producer, one serde, one admin client for the
    mirror, the reactor, the decider and the actions' workspace handle), made on first use:
    building a Worker does no network I/O; `run` does.
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        cursor: str = MIRROR_CURSOR,
        batch_size: int | None = None,
        batch_within: float | None = None,
        resubscribe_delay: float | None = None,
        stats_interval: float | None = None,
        rules: Iterable[Rule] = (),
        actions: Mapping[str, ActionFn] | None = None,
        deps: Mapping[str, Any] | None = None,
    ) -> None:
        # The composition root builds every client (and holds the feedback types).
        self.runtime = runtime
        self.settings = self.runtime.settings
        # The budgets the actions carry are rules too (their claims' decider).
        every, budgeted = with_budgets(rules, actions or {},
                                       prices=self.settings.llm_price_table)
        self.rules = RuleSet(every)
        # Refuse, before anything connects, a rule that would silently never fire.
        self.rules.check_event_types()
        self.actions = budgeted
        self.types = self.runtime.types
        self.cursor = cursor
        self.stats_interval = stats_interval
        self.step = MirrorStep(self.runtime.codec, prefix=self.settings.topic_prefix,
                               types=self.types)
        self.mirror_group = worker_group(cursor, self.settings.topic_prefix)
        self.mirror = BatchLoop(
            self.runtime, group=self.mirror_group,
            subscription=[tenants_pattern(EVENTS, self.settings.topic_prefix)],
            step=self.step.handle_batch,
            batch_size=self.settings.mirror_batch_size if batch_size is None else batch_size,
            # A batch is what arrived within this window (or batch_size records): the window
            # bounds the latency a batch adds when traffic is light.
            poll_timeout=self.settings.batch_within if batch_within is None else batch_within,
            commit_interval=self.settings.commit_interval,
            flush_timeout=self.settings.flush_timeout,
            outage_limit=self.settings.outage_limit,
            name=MIRROR_LOOP)
        self.subscribed: set[str] = set()
        self.discovered_at: dict[str, float] = {}
        missing = sorted({r.then.name for r in self.rules} - set(self.actions))
        if missing:
            log.warning("no action registered in this worker for %s: another worker must run "
                        "them", ", ".join(missing))
        # The actions' workspace handle, on the runtime's clients (closed with the runtime).
        self.client = StreamsClient(self.runtime, read_views=False)  # look-ups: the index
        self.reactor = Reactor(self.runtime, self.rules, self.actions, client=self.client,
                               deps=deps) \
            if self.rules or actions else None  # not for the grants' action alone
        # Rules installed as data (streams rules install) for every tenant, followed live.
        self.rulebook = RulebookFollower(self.runtime, reserved=self.rules.names(),
                                         actions=self.actions) \
            if self.reactor is not None else None
        if self.reactor is not None and self.rulebook is not None:
            self.reactor.follow(self.rulebook)
        self.reactor_loop = BatchLoop(
            self.runtime, group=worker_rules_group(cursor, self.settings.topic_prefix),
            subscription=[tenants_pattern(EVENTS, self.settings.topic_prefix)],
            step=self.reactor.handle_batch, batch_size=self.settings.reactor_batch_size,
            poll_timeout=self.settings.batch_within if batch_within is None else batch_within,
            commit_interval=self.settings.commit_interval,
            flush_timeout=self.settings.flush_timeout,
            outage_limit=self.settings.outage_limit,
            on_assigned=self.reactor.assigned, on_revoked=self.reactor.revoked,
            before_commit=self.reactor.before_commit,
            step_may_block=self.reactor.may_run_actions,
            name=REACTOR_LOOP) if self.reactor is not None else None
        # Stateful rules' decider: a batch loop over the tenants' rules topics, started by
        # `run` when a rule needs it (or rules may be installed as data).
        self.decider = self.reactor.decider() if self.reactor is not None else None
        self.decider_loop = self.decider.batch_loop() if self.decider is not None else None
        settings = self.settings
        self.app = self._build(
            settings.mirror_batch_size if batch_size is None else batch_size,
            settings.resubscribe_delay if resubscribe_delay is None else resubscribe_delay)

    @property
    def deciding(self) -> bool:
        """Whether this worker runs the decider: a rule is stateful, or rules may be
        installed as data."""
        return self.reactor is not None and (self.reactor.matcher.has_stateful
                                             or self.rulebook is not None)

    @property
    def tenant_admin(self) -> TenantAdmin:
        """The runtime's TenantAdmin."""
        return self.runtime.admin

    def faust_settings(self, batch_size: int) -> dict[str, Any]:
        """The faust.App settings: the runtime's brokers, credentials and consumer timing,
        and the worker's own choices. The app's own group, `<prefix>-<cursor>-app`, only
        holds the control topic: the mirror's loop owns `<prefix>-<cursor>` and the
        reactor's loop `<prefix>-<cursor>-rules`."""
        group = worker_app_group(self.cursor, self.settings.topic_prefix)
        datadir = os.path.join(tempfile.gettempdir(), "feedback-streams", group)
        return {
            **self.runtime.faust_settings(),
            "id": group,
            "value_serializer": "raw",
            "key_serializer": "raw",
            "topic_allow_declare": False,
            "topic_disable_leader": True,
            "web_enabled": False,
            "datadir": datadir,
            "consumer_auto_offset_reset": "earliest",
            "stream_buffer_maxsize": max(4096, batch_size * 4),
            "broker_max_poll_records": max(500, batch_size),
            "producer_acks": -1,
            # Stopping or rebalancing does not wait for buffered events: unacked events are
            # not committed, so whoever owns the partition next processes them again.
            "stream_wait_empty": False,
        }

    def _build(self, batch_size: int, resubscribe_delay: float) -> faust.App:
        settings = self.settings
        conf = self.faust_settings(batch_size)
        os.makedirs(conf["datadir"], exist_ok=True)
        # A killed worker's partitions move to the others after STREAMS_SESSION_TIMEOUT
        # (10 s), not Faust's 60 s: the session and heartbeat come from the settings.
        app = faust.App(**conf)
        # Faust waits 45 s before resubscribing after topics change; tenants arrive rarely,
        # and an operator who creates one expects it served within seconds.
        app.topics._resubscribe_sleep_lock_seconds = resubscribe_delay  # type: ignore[attr-defined]
        ctl = control_topic(settings.topic_prefix)
        self.channel = app.topic(ctl, value_serializer="raw", key_serializer="raw")
        self.subscribed.add(ctl)

        # Faust needs a topic to subscribe to; the control topic (always empty) is it.
        async def idle(stream: Any) -> None:
            async for _event in stream:
                pass

        app.agent(self.channel, name="control")(idle)

        reactor, reactor_loop = self.reactor, self.reactor_loop
        if reactor is not None and reactor_loop is not None:

            async def discover() -> None:
                try:
                    await self.discover()
                except Exception:  # a failed discovery must not crash the worker: retry
                    log.exception("tenant discovery failed")

            app.timer(settings.discovery_interval)(discover)

        if self.stats_interval:
            async def report() -> None:
                line: dict[str, Any] = {"stats": asdict(self.step.stats),
                                        "loop": asdict(self.mirror.stats), "time": time.time()}
                if self.reactor is not None:
                    line["rules"] = asdict(self.reactor.stats)
                print(json.dumps(line), file=sys.stderr, flush=True)
            app.timer(self.stats_interval)(report)
        return app

    def events_topics(self) -> list[str]:
        """The tenants' events topics that exist now."""
        prefix = self.settings.topic_prefix
        return [tenant_topics(t, prefix).events for t in self.tenant_admin.tenants()]

    async def discover(self) -> list[str]:
        """Note tenants' events topics that appeared since the last look and give each its
        rules topic (stateful rules forward matches there); the loops themselves find new
        tenants by pattern."""
        names = await asyncio.to_thread(self.events_topics)
        new = [n for n in names if n not in self.subscribed]
        if new:
            await asyncio.to_thread(self._ensure_rules_topics, new)
            now = time.monotonic()
            for name in new:
                self.subscribed.add(name)
                self.discovered_at[name] = now
            log.info("new tenant topics: %s", ", ".join(new))
        return new

    def _ensure_rules_topics(self, events_topics: Sequence[str]) -> None:
        """Stateful rules forward matches to the tenant's rules topic: make sure it exists."""
        if self.reactor is None or not self.reactor.matcher.has_stateful:
            return
        for name in events_topics:
            parsed = parse_topic(name, self.settings.topic_prefix)
            if parsed:
                self.tenant_admin.ensure_rules_topic(parsed[0])

    def start(self) -> None:
        """What the worker needs from the broker before Faust starts: the control topic,
        and the tenants (with their rules topics) that exist now."""
        _ensure_control_topic(self.tenant_admin.client, control_topic(self.settings.topic_prefix),
                              self.settings.replication_factor)
        if self.reactor is None:
            return  # the loops find tenants by pattern
        initial = self.events_topics()
        self._ensure_rules_topics(initial)
        self.subscribed.update(initial)

    def run(self, loglevel: str = "warn") -> None:
        """Run the worker until SIGTERM or SIGINT (blocking)."""
        configure_tracing(self.settings.otlp_traces_endpoint, "streams-worker")
        self.start()
        reactor = self.reactor
        if self.rulebook is not None:
            # Start with the rules live now, so the decider knows their rules at restore.
            self.rulebook.load()
        worker = faust.Worker(self.app, loglevel=loglevel, quiet=True)
        if reactor is not None:
            # Actions run on the app's event loop; the reactor's thread waits for them.
            reactor.bind(self.app.loop)
            # Their reads block in threads (index look-ups and catch-ups, `to_thread`): as
            # many threads as runs at once. asyncio's default, cores + 4, made runs queue
            # for a thread behind look-ups waiting for a shared read (6 on 2 cores).
            self.app.loop.set_default_executor(ThreadPoolExecutor(
                max_workers=max(self.settings.max_concurrent_runs, 8),
                thread_name_prefix="actions-io"))
        # The loops start with the process, not after Faust's own group has settled: a new
        # worker takes its share of the partitions at once.
        stop = threading.Event()
        loops: list[tuple[Callable[[threading.Event], None], str]] = [
            (self.mirror.run, MIRROR_LOOP)]
        if self.reactor_loop is not None:
            loops.append((self.reactor_loop.run, REACTOR_LOOP))
        if self.rulebook is not None:
            loops.append((self.rulebook.run, "rulebook"))
        if self.deciding and self.decider_loop is not None:
            loops.append((self.decider_loop.run, "rule-decider"))
        threads = [threading.Thread(target=run_or_exit, args=(name, loop, stop),
                                    name=name, daemon=True) for loop, name in loops]
        health = self._serve_health()  # metrics exported, /healthz and /readyz served
        self.runtime.started()
        for thread in threads:
            thread.start()
        try:
            worker.execute_from_commandline()
        finally:
            if health is not None:
                health.stop()
            stop.set()
            for thread in threads:
                thread.join(60.0)
            if reactor is not None and not any(t.is_alive() for t in threads
                                               if t.name == REACTOR_LOOP):
                reactor.close()  # its loop is done with it: not closed under its feet
            self.runtime.close()

    def _serve_health(self) -> HealthServer | None:
        """Watch this worker's loops in the process's metrics and serve its health (None
        when STREAMS_HEALTH_PORT is 0 or the port is taken). Call before the loops start."""
        metrics = self.runtime.metrics
        prefix = self.settings.topic_prefix
        loops = [self.mirror] + ([self.reactor_loop] if self.reactor_loop else [])
        if self.deciding and self.decider_loop is not None:
            loops.append(self.decider_loop)
        for loop in loops:
            metrics.watch_loop(loop, prefix)
        metrics.watch_mirror(self.step)
        self.step.on_delay = metrics.mirror_delay
        if self.reactor is not None:
            metrics.watch_reactor(self.reactor.stats)
        return serve_health(self.settings, loops, self.runtime.server_checks())
