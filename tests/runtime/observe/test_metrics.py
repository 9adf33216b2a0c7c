"""The exported metrics' names, labels and values, read through the Prometheus exposition,
without a broker: the instruments read the counters the loops keep."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streams.core.feedback import FeedbackRegistry
from streams.core.matching import ReactorStats
from streams.core.measures.agreement import VerdictPair
from streams.core.measures.calibration import CalibrationPolicy, calibrate
from streams.runtime.batch import BatchLoop
from streams.runtime.observe.metrics import INSTRUMENTS, DelayHistogram, Metrics, provider_for
from streams.runtime.root import Runtime
from streams.runtime.sink.runner import SinkStats
from streams.runtime.worker.mirror import MirrorStats
from streams.settings import Settings


def _scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items()
                                  if k not in ("otel_scope_name", "otel_scope_version",
                                               "otel_scope_schema_url")))
            samples[(sample.name, labels)] = sample.value
    return samples


def _metrics(local_delays: bool = True) -> tuple[Metrics, CollectorRegistry]:
    """Instruments exported through a Prometheus reader; the delays counted by the process's
    own DelayHistogram (what a worker does with Prometheus), or recorded as OpenTelemetry
    histograms (what it does with OTLP)."""
    registry = CollectorRegistry()
    installed = provider_for(Settings(metrics="prometheus"), registry=registry)
    assert installed.provider is not None and installed.registry is registry
    return Metrics(installed.provider.get_meter("test"),
                   registry=registry if local_delays else None), registry


DELAYS = pytest.mark.parametrize("local_delays", [True, False], ids=["prometheus", "otel"])


def _loop(name: str, group: str) -> BatchLoop:
    return BatchLoop(Runtime(Settings()), group=group, subscription=[], step=lambda _m: [],
                     name=name)


@DELAYS
def test_worker_metrics_by_tenant_loop_outcome_and_partition(local_delays: bool) -> None:
    metrics, registry = _metrics(local_delays)
    loop = _loop("feedback-mirror", "fs-feedback-mirror")
    loop.records_per_topic.update({"fs.acme.events": 7, "fs.beta.events": 2, "other": 5})
    loop.topics_seen.update({"fs.acme.events", "fs.beta.events", "fs._control"})
    loop.stats.batches, loop.stats.rewinds, loop.stats.outage_waits = 4, 1, 3
    loop.stats.commits, loop.stats.producer_resets = 2, 1
    loop.stats.consumers_replaced = 3
    loop.stats.commit_seconds, loop.stats.longest_commit_seconds = 0.25, 0.125
    loop.stats.aborts_by_reason.update({"fenced": 1, "group_moved": 2})
    loop.lag._lag = {("fs.acme.events", 0): 3, ("fs.acme.events", 1): 0}
    metrics.watch_loop(loop, "fs")
    stats = MirrorStats()
    stats.bump("acme", "feedback", 5)
    stats.bump("acme", "scores", 15)
    stats.bump("acme", "dead_letters", 1)
    stats.bump("beta", "skipped", 2)
    metrics.watch_mirror(cast(Any, SimpleNamespace(stats=stats)))
    metrics.watch_reactor(ReactorStats(runs=6, succeeded=4, failed_attempts=3, dead_lettered=1,
                                       fired=9, throttled=2, forwarded=5,
                                       budget_refusals={"judges": 3, "usd": 1}))
    metrics.mirror_delay("acme", 0.3)
    metrics.mirror_delay("acme", 4.0)

    got = _scrape(registry)
    assert got[("streams_events_consumed_total",
                (("loop", "feedback-mirror"), ("tenant", "acme")))] == 7
    assert got[("streams_events_consumed_total",
                (("loop", "feedback-mirror"), ("tenant", "beta")))] == 2
    assert not any(k[0] == "streams_events_consumed_total" and ("tenant", "other") in k[1]
                   for k in got)
    assert got[("streams_mirror_feedback_total", (("tenant", "acme"),))] == 5
    assert got[("streams_mirror_scores_total", (("tenant", "acme"),))] == 15
    assert got[("streams_mirror_dead_letters_total", (("tenant", "acme"),))] == 1
    assert got[("streams_mirror_skipped_total", (("tenant", "beta"),))] == 2
    assert got[("streams_runs_total", (("outcome", "succeeded"),))] == 4
    assert got[("streams_runs_total", (("outcome", "failed_attempt"),))] == 3
    assert got[("streams_runs_total", (("outcome", "dead_lettered"),))] == 1
    assert got[("streams_runs_started_total", ())] == 6
    assert got[("streams_rules_matches_total", (("result", "fired"),))] == 9
    assert got[("streams_budget_refusals_total", (("budget", "judges"),))] == 3
    assert got[("streams_budget_refusals_total", (("budget", "usd"),))] == 1
    assert got[("streams_tenants_discovered_total", (("loop", "feedback-mirror"),))] == 2
    assert got[("streams_loop_batches_total", (("loop", "feedback-mirror"),))] == 4
    assert got[("streams_loop_rewinds_total", (("loop", "feedback-mirror"),))] == 1
    assert got[("streams_loop_outage_waits_total", (("loop", "feedback-mirror"),))] == 3
    assert got[("streams_loop_commits_total", (("loop", "feedback-mirror"),))] == 2
    assert got[("streams_loop_commit_seconds_total", (("loop", "feedback-mirror"),))] == 0.25
    assert got[("streams_loop_longest_commit_seconds", (("loop", "feedback-mirror"),))] == 0.125
    assert got[("streams_loop_producer_resets_total", (("loop", "feedback-mirror"),))] == 1
    assert got[("streams_loop_consumer_replacements_total",
                (("loop", "feedback-mirror"),))] == 3
    assert got[("streams_loop_transaction_aborts_total",
                (("loop", "feedback-mirror"), ("reason", "group_moved")))] == 2
    assert got[("streams_loop_transaction_aborts_total",
                (("loop", "feedback-mirror"), ("reason", "fenced")))] == 1
    assert got[("streams_consumer_lag", (("group", "fs-feedback-mirror"), ("partition", "0"),
                                         ("topic", "fs.acme.events")))] == 3
    assert got[("streams_consumer_lag", (("group", "fs-feedback-mirror"), ("partition", "1"),
                                         ("topic", "fs.acme.events")))] == 0
    assert got[("streams_mirror_delay_seconds_count", (("tenant", "acme"),))] == 2
    assert got[("streams_mirror_delay_seconds_sum", (("tenant", "acme"),))] == 4.3
    assert got[("streams_mirror_delay_seconds_bucket", (("le", "0.5"), ("tenant", "acme")))] == 1
    assert got[("streams_mirror_delay_seconds_bucket", (("le", "5.0"), ("tenant", "acme")))] == 2


@DELAYS
def test_sink_metrics(local_delays: bool) -> None:
    metrics, registry = _metrics(local_delays)
    stats = SinkStats(scores=9, retries=2, rejected=1, undecodable=3, outage_waits=4,
                      per_tenant={"acme": 9})
    lag = SimpleNamespace(group="fs.sink.dw", snapshot=lambda: {("fs.acme.scores", 2): 11})
    metrics.watch_sink(cast(Any, SimpleNamespace(stats=stats, label="dw", lag=lag)))
    metrics.sink_delays("dw", [0.02, 0.2, 20.0])
    got = _scrape(registry)
    assert got[("streams_sink_deliveries_total", (("sink", "dw"), ("tenant", "acme")))] == 9
    assert got[("streams_sink_retries_total", (("sink", "dw"),))] == 2
    assert got[("streams_sink_errors_total", (("kind", "rejected"), ("sink", "dw")))] == 1
    assert got[("streams_sink_errors_total", (("kind", "undecodable"), ("sink", "dw")))] == 3
    assert got[("streams_sink_outage_waits_total", (("sink", "dw"),))] == 4
    assert got[("streams_consumer_lag", (("group", "fs.sink.dw"), ("partition", "2"),
                                         ("topic", "fs.acme.scores")))] == 11
    assert got[("streams_sink_delay_seconds_count", (("sink", "dw"),))] == 3
    assert got[("streams_sink_delay_seconds_bucket", (("le", "0.025"), ("sink", "dw")))] == 1
    assert got[("streams_sink_delay_seconds_bucket", (("le", "+Inf"), ("sink", "dw")))] == 3
    assert got[("streams_sink_delay_seconds_sum", (("sink", "dw"),))] == pytest.approx(20.22)


def test_delay_histogram_buckets_are_cumulative_and_consistent() -> None:
    histogram = DelayHistogram("x_delay_seconds", "d", "tenant", buckets=(0.1, 1.0))
    for seconds in (0.05, 0.1, 0.5, 3.0, -1.0):
        histogram.observe("acme", seconds)
    [family] = list(histogram.collect())
    samples = {(s.name, s.labels.get("le")): s.value for s in family.samples}
    # a value on a bound falls in that bucket (le); clock skew counts as 0
    assert samples[("x_delay_seconds_bucket", "0.1")] == 3
    assert samples[("x_delay_seconds_bucket", "1.0")] == 4
    assert samples[("x_delay_seconds_bucket", "+Inf")] == 5
    assert samples[("x_delay_seconds_count", None)] == 5
    assert samples[("x_delay_seconds_sum", None)] == pytest.approx(3.65)


@DELAYS
def test_every_declared_instrument_is_exported_with_its_labels(local_delays: bool) -> None:
    metrics, registry = _metrics(local_delays)
    loop = _loop("rules-reactor", "g")
    loop.records_per_topic["fs.acme.events"] = 1
    loop.topics_seen.add("fs.acme.events")
    loop.stats.aborts_by_reason["fenced"] = 1
    loop.lag._lag = {("fs.acme.events", 0): 0}
    metrics.watch_loop(loop, "fs")
    stats = MirrorStats()
    for key in ("feedback", "scores", "dead_letters", "skipped"):
        stats.bump("acme", key)
    metrics.watch_mirror(cast(Any, SimpleNamespace(stats=stats)))
    metrics.watch_reactor(ReactorStats(budget_refusals={"judges": 1}))
    sink_lag = SimpleNamespace(group="s", snapshot=lambda: {})
    metrics.watch_sink(cast(Any, SimpleNamespace(stats=SinkStats(per_tenant={"acme": 1}),
                                                 label="dw", lag=sink_lag)))
    metrics.watch_calibration(_keeper())
    metrics.mirror_delay("acme", 1.0)
    metrics.sink_delays("dw", [1.0])
    exported: dict[str, set[str]] = {}
    for (name, labels), _value in _scrape(registry).items():
        exported.setdefault(name, set()).update(k for k, _v in labels if k != "le")
    for name, (kind, labels, _doc) in INSTRUMENTS.items():
        base = name.replace(".", "_")
        prom = {"counter": f"{base}_total", "gauge": base,
                "histogram": f"{base}_seconds_count"}[kind]
        assert prom in exported, f"{name} is not exported as {prom}"
        assert exported[prom] == set(labels), (name, exported[prom])


def test_none_and_otlp_choose_their_exporter() -> None:
    assert provider_for(Settings(metrics="none")).provider is None
    otlp = provider_for(Settings(metrics="otlp"))
    assert otlp.provider is not None and otlp.registry is None
    otlp.provider.shutdown(timeout_millis=100)


def _keeper() -> Any:
    """A calibration keeper's last pass: one version in alarm on a bool field."""
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    pairs = [VerdictPair("evaluator:judge@2", "verdict", {"ok": i % 2 == 0},
                         {"ok": i % 2 == 1}, t0 + timedelta(seconds=i)) for i in range(20)]
    rows = calibrate(pairs, CalibrationPolicy(thresholds={"judge": 0.5}, window=20,
                                              min_pairs=10), types=FeedbackRegistry())
    return SimpleNamespace(snapshot=lambda: [("acme", "prod", row) for row in rows])


def test_calibration_gauges_read_the_keepers_last_pass() -> None:
    metrics, registry = _metrics(True)
    metrics.watch_calibration(_keeper())
    samples = _scrape(registry)
    labels = (("evaluator", "judge"), ("feedback_type", "verdict"), ("field", "ok"),
              ("tenant", "acme"), ("version", "2"), ("workspace", "prod"))
    assert samples[("streams_calibration_alarm", labels)] == 1
    assert samples[("streams_calibration_pairs", labels)] == 20
    value = tuple(sorted((*labels, ("measure", "kappa"))))
    assert samples[("streams_calibration_value", value)] == pytest.approx(-1.0)
