"""The exported metrics of a worker and a sink runner (OpenTelemetry), and their exporter.

`install(settings)` sets the process's meter provider once, from `STREAMS_METRICS`:
`prometheus` (a `PrometheusMetricReader` into a prometheus-client registry that the health
server serves on /metrics), `otlp` (the OTLP/HTTP exporter, pushing every
`OTEL_METRIC_EXPORT_INTERVAL` ms to `OTEL_EXPORTER_OTLP_ENDPOINT`) or `none`.

`Metrics` declares the instruments. Counts are observable instruments that read the counters
the loops keep anyway (`BatchStats`, `MirrorStats`, `ReactorStats`, `SinkStats`, a loop's
records per topic, its `LagTracker`) when a reader collects, so the hot path never calls an
instrument per record. The delays are histograms of every scored feedback (mirror) and every
delivered score (sink): with Prometheus, a `DelayHistogram` of plain bucket counts (a bisect
per value) that a collector renders, since an OpenTelemetry SDK `record` costs ~5 µs, about a
tenth of the mirror's whole work per feedback; with OTLP, OpenTelemetry histograms. Names
(OpenTelemetry; Prometheus adds `_total` to counters and `_seconds` to the delays) are in
`INSTRUMENTS` and in docs/metrics.md.
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import metrics as otel
from opentelemetry.metrics import CallbackOptions, Meter, Observation
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

from streams.core.matching import ReactorStats
from streams.core.tenancy import parse_topic
from streams.settings import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider

__all__ = ["DELAY_BUCKETS", "INSTRUMENTS", "DelayHistogram", "Installed", "Lag", "Metrics",
           "WatchedCalibration", "WatchedLoop", "WatchedMirror", "WatchedSink", "install",
           "process_metrics", "provider_for", "shared"]


# What the instruments read of the loops they watch: small protocols, so this module sits
# below the worker and the sink runner instead of importing them.
class Lag(Protocol):
    """A consumer's lag per partition (streams.adapters.kafka.lag.LagTracker)."""

    group: str

    def snapshot(self) -> Mapping[tuple[str, int], int]:
        """The lag per (topic, partition)."""
        ...


class WatchedLoop(Protocol):
    """A batch loop (streams.runtime.batch.BatchLoop)."""

    name: str
    records_per_topic: dict[str, int]
    topics_seen: set[str]

    @property
    def stats(self) -> Any:
        """The loop's counters (batches, commits, commit_seconds, rewinds, outage_waits,
        aborts_by_reason, producer_resets)."""
        ...

    @property
    def lag(self) -> Lag:
        """The loop's consumer lag."""
        ...


class _MirrorStats(Protocol):
    @property
    def per_tenant(self) -> dict[str, dict[str, int]]: ...


class WatchedMirror(Protocol):
    """A mirror step (streams.runtime.worker.mirror.MirrorStep)."""

    @property
    def stats(self) -> _MirrorStats:
        """The step's per-tenant counters."""
        ...


class _SinkStats(Protocol):
    @property
    def rejected(self) -> int: ...
    @property
    def undecodable(self) -> int: ...
    @property
    def per_tenant(self) -> dict[str, int]: ...


class WatchedCalibration(Protocol):
    """A calibration keeper (streams.runtime.jobs.calibration.CalibrationKeeper)."""

    def snapshot(self) -> Sequence[tuple[str, str, Any]]:
        """(tenant, workspace, Calibration row) of the keeper's last pass."""
        ...


class WatchedSink(Protocol):
    """A sink runner (streams.runtime.sink.runner.SinkRunner)."""

    label: str

    @property
    def stats(self) -> _SinkStats:
        """The runner's counters."""
        ...

    @property
    def lag(self) -> Lag:
        """The runner's consumer lag."""
        ...

log = logging.getLogger(__name__)

# Seconds; from a record that waited one producer linger to one that waited out an outage.
DELAY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                 120.0, 300.0, 600.0)

_CALIBRATION = ("tenant", "workspace", "evaluator", "version", "feedback_type", "field")

INSTRUMENTS: dict[str, tuple[str, tuple[str, ...], str]] = {
    # name: (kind, labels, meaning)
    "streams.events.consumed": ("counter", ("loop", "tenant"),
                                "records a worker loop consumed from a tenant's events topic "
                                "(repeats after a rewind included)"),
    "streams.mirror.feedback": ("counter", ("tenant",), "feedback_given events the mirror read"),
    "streams.mirror.scores": ("counter", ("tenant",), "score records the mirror produced"),
    "streams.mirror.dead_letters": ("counter", ("tenant",),
                                    "records the mirror dead-lettered (undecodable or invalid)"),
    "streams.mirror.skipped": ("counter", ("tenant",),
                               "feedback of a type the worker does not register"),
    "streams.mirror.delay": ("histogram", ("tenant",),
                             "seconds from a feedback event's time to its scores' production"),
    "streams.runs": ("counter", ("outcome",),
                     "run attempts by outcome: succeeded, failed_attempt, dead_lettered"),
    "streams.runs.started": ("counter", (), "runs this worker started executing"),
    "streams.budget.refusals": ("counter", ("budget",),
                                "evaluator calls not made: their budget refused the claim"),
    "streams.rules.matches": ("counter", ("result",),
                              "rule matches: fired, throttled, forwarded (to the decider)"),
    "streams.tenants.discovered": ("counter", ("loop",),
                                   "tenants whose events topic a loop was assigned"),
    "streams.loop.batches": ("counter", ("loop",), "batches a loop processed"),
    "streams.loop.rewinds": ("counter", ("loop",),
                             "times a loop redid work from its committed offsets"),
    "streams.loop.outage_waits": ("counter", ("loop",),
                                  "waits for an unreachable broker or registry"),
    "streams.loop.commits": ("counter", ("loop",),
                             "offset commits of a loop (exactly_once: committed transactions)"),
    "streams.loop.commit_seconds": ("counter", ("loop",),
                                    "seconds a loop spent committing (at_least_once: waiting "
                                    "for delivery, then the offsets; exactly_once: the "
                                    "transaction's offsets and commit); over commits, the "
                                    "mean commit"),
    "streams.loop.longest_commit_seconds": ("gauge", ("loop",),
                                            "the longest single commit of a loop since it "
                                            "started: one that waited out a broker outage "
                                            "inside the client's own retries shows here"),
    "streams.loop.transaction_aborts": ("counter", ("loop", "reason"),
                                        "transactions an exactly-once loop aborted and redid, "
                                        "by reason (fenced, group_moved, coordinator_moved, "
                                        "broker_down, timed_out, hung, delivery_failed, other)"),
    "streams.loop.producer_resets": ("counter", ("loop",),
                                     "transactional producers an exactly-once loop replaced "
                                     "after they were fenced or wedged (hung)"),
    "streams.loop.consumer_replacements": ("counter", ("loop",),
                                           "consumers a loop replaced for handing on nothing "
                                           "while records waited on their partitions"),
    "streams.calibration.value": ("gauge", (*_CALIBRATION, "measure"),
                                  "an evaluator version's calibration measure over its newest "
                                  "pairs with people (kappa or Spearman's rho)"),
    "streams.calibration.pairs": ("gauge", _CALIBRATION,
                                  "pairs with people in the version's calibration window"),
    "streams.calibration.alarm": ("gauge", _CALIBRATION,
                                  "1 while the version's calibration alarm stands, else 0"),
    "streams.consumer.lag": ("gauge", ("group", "topic", "partition"),
                             "records after the member's position (high watermark - position)"),
    "streams.sink.deliveries": ("counter", ("sink", "tenant"), "scores a sink handed on"),
    "streams.sink.retries": ("counter", ("sink",), "sink calls that failed and were retried"),
    "streams.sink.errors": ("counter", ("sink", "kind"),
                            "scores dead-lettered by a sink runner: rejected, undecodable"),
    "streams.sink.outage_waits": ("counter", ("sink",),
                                  "waits for an unreachable broker or registry"),
    "streams.sink.broker_errors": ("counter", ("sink",),
                                   "times a sink's consumer found the brokers unreachable"),
    "streams.sink.delay": ("histogram", ("sink",),
                           "seconds from a feedback event's time to its score's delivery "
                           "by the sink"),
}

_lock = threading.Lock()


@dataclass(frozen=True)
class Installed:
    """What `install` set up: the provider, and the registry /metrics serves (prometheus)."""

    provider: MeterProvider | None
    registry: CollectorRegistry | None


_installed: Installed | None = None
_shared: Metrics | None = None


def provider_for(settings: Settings, *, registry: CollectorRegistry | None = None,
                 service: str = "feedback-streams") -> Installed:
    """A meter provider for `settings.metrics` (not installed globally): with `prometheus`,
    its reader fills `registry` (a new one when not given); no I/O for either exporter until
    a reader collects."""
    if settings.metrics == "none":
        return Installed(None, None)
    from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
    from opentelemetry.sdk.resources import Resource

    reader: MetricReader
    if settings.metrics == "prometheus":
        from opentelemetry.exporter.prometheus import PrometheusMetricReader

        if registry is None:
            registry = CollectorRegistry()
            # The process's CPU, memory and open files, as prometheus-client's default has.
            ProcessCollector(registry=registry)
        reader = PrometheusMetricReader(registry=registry)
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        registry = None
        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    delays = View(instrument_name="streams.*.delay",
                  aggregation=ExplicitBucketHistogramAggregation(DELAY_BUCKETS))
    # No exemplars: the default (trace-based) filter looks up the current span on every
    # measurement, which doubles the cost of the per-feedback delay record (12 µs -> 6 µs).
    provider = MeterProvider(metric_readers=[reader], views=[delays],
                             exemplar_filter=AlwaysOffExemplarFilter(),
                             resource=Resource.create({"service.name": service}))
    return Installed(provider, registry)


def install(settings: Settings, *, service: str = "feedback-streams") -> Installed:
    """Set the process's global meter provider from the settings, once (a second call returns
    what the first set up). Instruments made before, through `opentelemetry.metrics`, bind to
    it then."""
    global _installed
    with _lock:
        if _installed is None:
            _installed = provider_for(settings, service=service)
            if _installed.provider is not None:
                otel.set_meter_provider(_installed.provider)
        return _installed


def process_metrics(settings: Settings) -> Metrics:
    """Install the meter provider the settings choose (once) and return the process's
    `Metrics`."""
    installed = install(settings)
    global _shared
    with _lock:
        if _shared is None:
            _shared = Metrics(registry=installed.registry)
        return _shared


def shared() -> Metrics | None:
    """The process's `Metrics`, once `process_metrics` made it."""
    return _shared


class DelayHistogram(Collector):
    """A Prometheus histogram of delays per label value, kept in plain integers: `observe` is
    a bisect and two additions (no lock: the counts are read as a snapshot whose `_count` is
    the sum of its buckets, so a scrape is always consistent)."""

    def __init__(self, name: str, documentation: str, label: str,
                 buckets: Sequence[float] = DELAY_BUCKETS) -> None:
        self.name = name
        self.documentation = documentation
        self.label = label
        self.bounds = tuple(buckets)
        self._counts: dict[str, list[int]] = {}
        self._sums: dict[str, float] = {}

    def observe(self, value: str, seconds: float) -> None:
        """Count one delay (negative clock skew counts as 0)."""
        counts = self._counts.get(value)
        if counts is None:
            counts = self._counts[value] = [0] * (len(self.bounds) + 1)
        seconds = max(0.0, seconds)
        counts[bisect_left(self.bounds, seconds)] += 1
        self._sums[value] = self._sums.get(value, 0.0) + seconds

    def collect(self) -> Iterable[HistogramMetricFamily]:
        """The histogram as Prometheus sees it (cumulative buckets, sum, count)."""
        family = HistogramMetricFamily(self.name, self.documentation, labels=[self.label],
                                       unit="seconds")
        for value, counts in list(self._counts.items()):
            snapshot = list(counts)
            cumulative, running = [], 0
            for bound, n in zip((*map(_le, self.bounds), "+Inf"), snapshot, strict=True):
                running += n
                cumulative.append((bound, float(running)))
            family.add_metric([value], cumulative, self._sums.get(value, 0.0))
        yield family


def _le(bound: float) -> str:
    return repr(float(bound))


def _tenant(topic: str, prefix: str) -> str | None:
    parsed = parse_topic(topic, prefix)
    return parsed[0] if parsed else None


class Metrics:
    """A process's instruments, reading the loops, steps and runners it is told to watch.

    Construction only declares instruments (on `meter`, default the global provider's: they
    bind to it once `install` sets it).
    """

    def __init__(self, meter: Meter | None = None, *,
                 registry: CollectorRegistry | None = None) -> None:
        meter = meter or otel.get_meter("streams")
        # With a Prometheus registry the delays are counted in plain integers and rendered
        # by a collector there; otherwise they are OpenTelemetry histograms (OTLP).
        self._delays: dict[str, DelayHistogram] | None = None
        if registry is not None:
            self._delays = {
                "mirror": DelayHistogram("streams_mirror_delay_seconds",
                                         INSTRUMENTS["streams.mirror.delay"][2], "tenant"),
                "sink": DelayHistogram("streams_sink_delay_seconds",
                                       INSTRUMENTS["streams.sink.delay"][2], "sink")}
            for histogram in self._delays.values():
                registry.register(histogram)
        else:
            self._mirror_delay = meter.create_histogram(
                "streams.mirror.delay", unit="s",
                description=INSTRUMENTS["streams.mirror.delay"][2])
            self._sink_delay = meter.create_histogram(
                "streams.sink.delay", unit="s", description=INSTRUMENTS["streams.sink.delay"][2])
        self._loops: list[tuple[WatchedLoop, str]] = []
        self._mirrors: list[WatchedMirror] = []
        self._reactors: list[ReactorStats] = []
        self._sinks: list[WatchedSink] = []
        observed: dict[str, Callable[[], Iterable[Observation]]] = {
            "streams.events.consumed": self._events,
            "streams.mirror.feedback": lambda: self._mirror("feedback"),
            "streams.mirror.scores": lambda: self._mirror("scores"),
            "streams.mirror.dead_letters": lambda: self._mirror("dead_letters"),
            "streams.mirror.skipped": lambda: self._mirror("skipped"),
            "streams.runs": self._runs,
            "streams.runs.started": lambda: [Observation(sum(s.runs for s in self._reactors))]
            if self._reactors else [],
            "streams.rules.matches": self._matches,
            "streams.budget.refusals": self._refusals,
            "streams.tenants.discovered": self._discovered,
            "streams.loop.batches": lambda: self._loop_stat("batches"),
            "streams.loop.rewinds": lambda: self._loop_stat("rewinds"),
            "streams.loop.outage_waits": lambda: self._loop_stat("outage_waits"),
            "streams.loop.commits": lambda: self._loop_stat("commits"),
            "streams.loop.commit_seconds": lambda: self._loop_stat("commit_seconds"),
            "streams.loop.transaction_aborts": self._aborts,
            "streams.loop.producer_resets": lambda: self._loop_stat("producer_resets"),
            "streams.loop.consumer_replacements":
                lambda: self._loop_stat("consumers_replaced"),
            "streams.sink.deliveries": self._deliveries,
            "streams.sink.retries": lambda: self._sink_stat("retries"),
            "streams.sink.errors": self._sink_errors,
            "streams.sink.outage_waits": lambda: self._sink_stat("outage_waits"),
            "streams.sink.broker_errors": lambda: self._sink_stat("broker_errors"),
        }
        for name, read in observed.items():
            meter.create_observable_counter(name, callbacks=[_callback(read)],
                                            description=INSTRUMENTS[name][2])
        meter.create_observable_gauge("streams.consumer.lag", callbacks=[_callback(self._lag)],
                                      description=INSTRUMENTS["streams.consumer.lag"][2])
        self._calibrations: list[WatchedCalibration] = []
        for name, read in {"streams.calibration.value": self._calibration_values,
                           "streams.calibration.pairs": lambda: self._calibration("pairs"),
                           "streams.calibration.alarm": lambda: self._calibration("alarm"),
                           "streams.loop.longest_commit_seconds":
                               lambda: self._loop_stat("longest_commit_seconds"),
                           }.items():
            meter.create_observable_gauge(name, callbacks=[_callback(read)],
                                          description=INSTRUMENTS[name][2])

    # -- what to watch -----------------------------------------------------------------------

    def watch_loop(self, loop: WatchedLoop, prefix: str) -> None:
        """Export a batch loop's records per tenant, batches, rewinds, outages and lag."""
        self._loops.append((loop, prefix))

    def watch_mirror(self, step: WatchedMirror) -> None:
        """Export a mirror step's per-tenant counts; its delays go to `mirror_delay`."""
        self._mirrors.append(step)

    def watch_reactor(self, stats: ReactorStats) -> None:
        """Export a reactor's runs by outcome and its rule matches."""
        self._reactors.append(stats)

    def watch_sink(self, runner: WatchedSink) -> None:
        """Export a sink runner's deliveries, retries, errors, outages and lag."""
        self._sinks.append(runner)

    def watch_calibration(self, keeper: WatchedCalibration) -> None:
        """Export a calibration keeper's measures, pairs and alarm states."""
        self._calibrations.append(keeper)

    # -- recorded measurements ---------------------------------------------------------------

    def mirror_delay(self, tenant: str, seconds: float) -> None:
        """Record one feedback's delay from its event time to its scores' production."""
        if self._delays is not None:
            self._delays["mirror"].observe(tenant, seconds)
            return
        self._mirror_delay.record(max(0.0, seconds), {"tenant": tenant})

    def sink_delays(self, sink: str, seconds: Sequence[float]) -> None:
        """Record delivered scores' delays from their feedback's event time."""
        if self._delays is not None:
            observe = self._delays["sink"].observe
            for s in seconds:
                observe(sink, s)
            return
        attributes = {"sink": sink}
        record = self._sink_delay.record
        for s in seconds:
            record(max(0.0, s), attributes)

    # -- observations (read when a reader collects; the counters are copied first, since
    # -- the loops' threads keep adding to them) ----------------------------------------------

    def _events(self) -> Iterable[Observation]:
        for loop, prefix in self._loops:
            for topic, n in dict(loop.records_per_topic).items():
                tenant = _tenant(topic, prefix)
                if tenant is not None:
                    yield Observation(n, {"loop": loop.name, "tenant": tenant})

    def _calibration_rows(self) -> Iterable[tuple[dict[str, str], Any]]:
        for keeper in self._calibrations:
            for tenant, workspace, row in keeper.snapshot():
                evaluator, feedback_type, field = row.key
                name, _, version = evaluator.removeprefix("evaluator:").rpartition("@")
                yield ({"tenant": tenant, "workspace": workspace, "evaluator": name,
                        "version": version, "feedback_type": feedback_type, "field": field},
                       row)

    def _calibration_values(self) -> Iterable[Observation]:
        for labels, row in self._calibration_rows():
            if row.value is not None:
                yield Observation(row.value, {**labels, "measure": row.measure})

    def _calibration(self, key: str) -> Iterable[Observation]:
        for labels, row in self._calibration_rows():
            yield Observation(row.n if key == "pairs" else int(row.standing), labels)

    def _mirror(self, key: str) -> Iterable[Observation]:
        totals: dict[str, int] = {}
        for step in self._mirrors:
            for tenant, counts in dict(step.stats.per_tenant).items():
                totals[tenant] = totals.get(tenant, 0) + counts.get(key, 0)
        return [Observation(n, {"tenant": t}) for t, n in totals.items()]

    def _runs(self) -> Iterable[Observation]:
        if not self._reactors:
            return []
        stats = self._reactors
        return [Observation(sum(s.succeeded for s in stats), {"outcome": "succeeded"}),
                Observation(sum(s.failed_attempts for s in stats), {"outcome": "failed_attempt"}),
                Observation(sum(s.dead_lettered for s in stats), {"outcome": "dead_lettered"})]

    def _matches(self) -> Iterable[Observation]:
        if not self._reactors:
            return []
        stats = self._reactors
        return [Observation(sum(s.fired for s in stats), {"result": "fired"}),
                Observation(sum(s.throttled for s in stats), {"result": "throttled"}),
                Observation(sum(s.forwarded for s in stats), {"result": "forwarded"})]

    def _refusals(self) -> Iterable[Observation]:
        totals: dict[str, int] = {}
        for stats in self._reactors:
            for budget, count in dict(stats.budget_refusals).items():
                totals[budget] = totals.get(budget, 0) + count
        return [Observation(count, {"budget": budget}) for budget, count in sorted(totals.items())]

    def _discovered(self) -> Iterable[Observation]:
        for loop, prefix in self._loops:
            tenants = {t for topic in set(loop.topics_seen)
                       if (t := _tenant(topic, prefix)) is not None}
            yield Observation(len(tenants), {"loop": loop.name})

    def _loop_stat(self, key: str) -> Iterable[Observation]:
        return [Observation(getattr(loop.stats, key), {"loop": loop.name})
                for loop, _prefix in self._loops]

    def _aborts(self) -> Iterable[Observation]:
        for loop, _prefix in self._loops:
            for reason, n in dict(loop.stats.aborts_by_reason).items():
                yield Observation(n, {"loop": loop.name, "reason": reason})

    def _lag(self) -> Iterable[Observation]:
        trackers = [loop.lag for loop, _prefix in self._loops] + \
                   [runner.lag for runner in self._sinks]
        for tracker in trackers:
            for (topic, partition), lag in tracker.snapshot().items():
                yield Observation(lag, {"group": tracker.group, "topic": topic,
                                        "partition": str(partition)})

    def _deliveries(self) -> Iterable[Observation]:
        for runner in self._sinks:
            for tenant, n in dict(runner.stats.per_tenant).items():
                yield Observation(n, {"sink": runner.label, "tenant": tenant})

    def _sink_stat(self, key: str) -> Iterable[Observation]:
        return [Observation(getattr(runner.stats, key), {"sink": runner.label})
                for runner in self._sinks]

    def _sink_errors(self) -> Iterable[Observation]:
        for runner in self._sinks:
            yield Observation(runner.stats.rejected, {"sink": runner.label, "kind": "rejected"})
            yield Observation(runner.stats.undecodable,
                              {"sink": runner.label, "kind": "undecodable"})


def _callback(read: Callable[[], Iterable[Observation]]) -> Callable[[CallbackOptions],
                                                                      Iterable[Observation]]:
    def observe(_options: CallbackOptions) -> Iterable[Observation]:
        try:
            return list(read())
        except Exception:  # a metric must never break the export of the others
            log.exception("reading a metric failed")
            return []
    return observe

