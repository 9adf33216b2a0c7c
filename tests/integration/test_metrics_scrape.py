"""Metrics and health of a running worker and sink on the real broker: feedback given while
/metrics is scraped; the counts match what was sent, and the consumer lag returns to 0; a
worker with rules counts its runs by outcome."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streams.core.actors import UserActor
from streams.core.events import AppEvent, RunStarted
from streams.core.targets import ChainTarget, RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import Resolution, TriageQuality
from streams.settings import Settings
from tests.conftest import WorkerProcess, _free_port, wait_until
from tests.scrape import Samples, health, scrape, start_duckdb_sink

RUNS = 12
EVENTS = RUNS * 4  # app event, run_started, two feedback
FEEDBACK = RUNS * 2
SCORES = RUNS * 4  # triage_quality: correct, severity (no note); resolution: resolved, minutes


def _scraper(port: int, stop: threading.Event, seen: list[Samples]) -> None:
    while not stop.is_set():
        samples = scrape(port)
        if samples is not None:
            seen.append(samples)
        stop.wait(0.25)


async def test_scrape_during_a_run_matches_what_was_sent(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    tenant = tenant_factory()
    topics = tenant_topics(tenant, settings.topic_prefix)
    worker_port, sink_port = _free_port(), _free_port()
    worker = worker_factory(STREAMS_HEALTH_PORT=str(worker_port))
    sink = start_duckdb_sink(settings.replace(health_port=sink_port), tmp_path)
    try:
        for port in (worker_port, sink_port):
            wait_until(lambda p=port: health(p, "/readyz")[0] == 200, 120,
                       f"/readyz on {port} to answer 200")
            assert health(port, "/healthz")[0] == 200

        stop, seen = threading.Event(), []
        scraper = threading.Thread(target=_scraper, args=(worker_port, stop, seen))
        scraper.start()
        ada = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
        started = time.time()
        for i in range(RUNS):
            spike = await ada.append(AppEvent(name="ops:error_spike"))
            await ada.append(RunStarted(run_id=f"run_{i}", rule="ops:error-spike",
                                        action="triage", firing_id=f"fir_{i}"),
                             correlation_id=spike.id, causation_id=spike.id)
            await ada.give_feedback(TriageQuality(correct=i % 2 == 0, severity="high"),
                                    on=RunTarget(run_id=f"run_{i}"))
            await ada.give_feedback(Resolution(resolved=True, minutes_to_mitigate=5 + i),
                                    on=ChainTarget(correlation_id=spike.id))
            await asyncio.sleep(0.05)

        def worker_done() -> Samples | None:
            s = scrape(worker_port)
            lag = s.select("streams_consumer_lag",
                           group=f"{settings.topic_prefix}-feedback-mirror",
                           topic=topics.events) if s else []
            if s and s.total("streams_mirror_scores_total", tenant=tenant) >= SCORES \
                    and len(lag) == settings.partitions and all(v == 0 for _l, v in lag):
                return s
            return None

        done = await asyncio.to_thread(wait_until, worker_done, 90, "the worker's lag to be 0")
        lag_zero_after = time.time() - started
        stop.set()
        scraper.join(10)

        mirror = {"loop": "feedback-mirror", "tenant": tenant}
        assert done.total("streams_events_consumed_total", **mirror) == EVENTS
        assert done.total("streams_mirror_feedback_total", tenant=tenant) == FEEDBACK
        assert done.total("streams_mirror_scores_total", tenant=tenant) == SCORES
        assert done.total("streams_mirror_dead_letters_total", tenant=tenant) == 0
        assert done.total("streams_mirror_delay_seconds_count", tenant=tenant) == FEEDBACK
        assert done.total("streams_tenants_discovered_total", loop="feedback-mirror") == 1
        # Scraped during the run: the counts grew step by step, never backwards.
        during = [s.total("streams_mirror_scores_total", tenant=tenant) for s in seen]
        assert len(during) >= 3 and during == sorted(during)
        assert any(0 < n < SCORES for n in during), "no scrape saw the run half-way"

        def sink_done() -> Samples | None:
            s = scrape(sink_port)
            lag = s.select("streams_consumer_lag", group=f"{settings.topic_prefix}.sink."
                           "warehouse", topic=topics.scores) if s else []
            if s and s.total("streams_sink_deliveries_total", tenant=tenant) >= SCORES \
                    and lag and all(v == 0 for _l, v in lag):
                return s
            return None

        sunk = await asyncio.to_thread(wait_until, sink_done, 90, "the sink's lag to be 0")
        assert sunk.total("streams_sink_deliveries_total", sink="warehouse",
                          tenant=tenant) == SCORES
        assert sunk.total("streams_sink_delay_seconds_count", sink="warehouse") == SCORES
        assert sunk.total("streams_sink_errors_total", sink="warehouse") == 0
        await asyncio.sleep(2.0)  # nothing is counted twice afterwards
        again = scrape(worker_port)
        assert again is not None
        assert again.total("streams_mirror_scores_total", tenant=tenant) == SCORES
        assert again.total("streams_events_consumed_total", **mirror) == EVENTS
        print(f"{EVENTS} events, {FEEDBACK} feedback, {SCORES} scores; worker lag 0 "
              f"{lag_zero_after:.1f} s after the first append; {len(seen)} scrapes during "
              "the run")
    finally:
        if sink.poll() is None:
            sink.terminate()
            sink.wait(30)
        worker.stop()


async def test_runs_by_outcome_and_rule_matches_are_scraped(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    """A worker with rules: three runs that succeed on their second attempt and one whose
    three attempts fail; /metrics counts them by outcome."""
    tenant = tenant_factory()
    port = _free_port()
    worker_factory("--rules", "tests.integration.rules_fixture",
                   types="streams.examples.ops,streams.core.judges",
                   STREAMS_HEALTH_PORT=str(port))
    await asyncio.to_thread(wait_until, lambda: health(port, "/readyz")[0] == 200, 120,
                            "the worker to be ready")
    ada = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    for i in range(3):
        await ada.append(AppEvent(name="t:flaky", data={"i": i}))
    await ada.append(AppEvent(name="t:broken"))

    def counted() -> Samples | None:
        s = scrape(port)
        if s and s.total("streams_runs_total", outcome="succeeded") >= 3 \
                and s.total("streams_runs_total", outcome="dead_lettered") >= 1:
            return s
        return None

    got = await asyncio.to_thread(wait_until, counted, 120, "four runs to finish")
    await asyncio.sleep(1.0)  # nothing is counted twice afterwards
    again = scrape(port)
    assert again is not None
    for s in (got, again):
        assert s.total("streams_runs_total", outcome="succeeded") == 3
        assert s.total("streams_runs_total", outcome="failed_attempt") == 3 + 3
        assert s.total("streams_runs_total", outcome="dead_lettered") == 1
        assert s.total("streams_runs_started_total") == 4
        assert s.total("streams_rules_matches_total", result="fired") == 4
    assert again.total("streams_events_consumed_total", loop="rules-reactor",
                       tenant=tenant) >= 4
    assert again.total("streams_tenants_discovered_total", loop="rules-reactor") == 1
