"""The composition root: one `Runtime` per process builds, shares and closes its clients.

    runtime = Runtime(Settings.from_env())
    runtime.delivery        # the one idempotent producer, for agents, decider and appends
    runtime.serde           # the one Avro serde and its registry client
    runtime.codec           # the batch path's fastavro codec, on the same registry client
    runtime.event_log       # appends and topic checks, on the shared producer and serde
    runtime.admin           # TenantAdmin
    runtime.consumer(group) # a consumer-group member
    runtime.reader(group)   # a group-less reader (assigns partitions itself)
    runtime.transactional_producer(id)  # an exactly-once loop's producer
    runtime.topic_reader(topic), runtime.tail(topic, on_record), runtime.index(tenant)
    runtime.faust_settings()  # what faust.App needs for these brokers and this security
    runtime.metrics         # the process's instruments, exported as STREAMS_METRICS says
    StreamsClient(runtime)  # the workspace handle (streams.runtime.client), on all of these

This module and the adapters are the only places that construct a Kafka producer, consumer
or admin client, a schema registry client or an HTTP client (tests/test_layers.py holds the
rest of the package to it): everything else asks the Runtime. Every client is created on
first use, and none on construction, so building a Runtime (and the worker, sink runner,
server or demo on top of it) does no network I/O. Every configuration comes from
`streams.adapters.kafka.config`, so every client kind carries the same brokers, SASL, TLS
and extra settings.

The root imports no other room of the runtime but observe/: the rooms above it (worker,
sink, client, jobs) take a Runtime.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, TypeVar, cast

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient

from streams.adapters.avro.fast import FastCodec
from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka import config
from streams.adapters.kafka.access import TenantAccess, authenticates
from streams.adapters.kafka.admin import TenantAdmin
from streams.adapters.kafka.delivery import Delivery
from streams.adapters.kafka.index import EntriesOf, TenantIndex, fast_entries
from streams.adapters.kafka.log import EventLog, TopicReader, stable_offsets
from streams.adapters.kafka.tail import OnRecord, TopicTail
from streams.core.feedback import FeedbackRegistry, registry
from streams.core.tenancy import replay_group, tenant_topics
from streams.runtime.observe.health import CHECK_TIMEOUT, Check, server_checks
from streams.runtime.observe.metrics import Metrics, process_metrics
from streams.settings import Settings

if TYPE_CHECKING:
    import httpx
    from langfuse import Langfuse

    from streams.adapters.langfuse import LangfuseProject

__all__ = ["Runtime"]

_T = TypeVar("_T")


class Runtime:
    """Builds a process's Kafka and registry clients from its Settings, once, and owns them."""

    def __init__(self, settings: Settings | None = None, *,
                 types: FeedbackRegistry | None = None) -> None:
        self.settings = settings or Settings.from_env()
        self.types = types or registry
        self._lock = threading.RLock()
        self._made: dict[str, Any] = {}
        self._closers: list[Callable[[], None]] = []

    # -- configurations (pure) ---------------------------------------------------------------

    def producer_config(self, **extra: Any) -> dict[str, Any]:
        """The producer's configuration."""
        return config.producer_config(self.settings, **extra)

    def consumer_config(self, group: str, **extra: Any) -> dict[str, Any]:
        """A consumer-group member's configuration."""
        return config.consumer_config(self.settings, group, **extra)

    def reader_config(self, group: str, **extra: Any) -> dict[str, Any]:
        """A group-less reader's configuration (assigns partitions, commits nothing)."""
        return config.reader_config(self.settings, group, **extra)

    def replay_reader_config(self, topic: str) -> dict[str, Any]:
        """The configuration of the reader a decider replays a rules topic with."""
        return self.reader_config(replay_group(topic))

    def admin_config(self) -> dict[str, Any]:
        """The admin client's configuration."""
        return config.admin_config(self.settings)

    def registry_config(self) -> dict[str, Any]:
        """The schema registry client's configuration."""
        return config.registry_config(self.settings)

    def faust_settings(self) -> dict[str, Any]:
        """Broker, credentials and consumer timing for a faust.App."""
        return config.faust_settings(self.settings)

    # -- shared clients, created on first use ------------------------------------------------

    def _once(self, name: str, make: Callable[[], _T]) -> _T:
        # The decider thread and the event loop may both ask for a client first: make it
        # once, under a lock.
        with self._lock:
            if name not in self._made:
                self._made[name] = make()
            return cast(_T, self._made[name])

    @property
    def producer(self) -> Producer:
        """The process's one idempotent producer."""
        return self._once("producer", lambda: Producer(self.producer_config()))

    @property
    def delivery(self) -> Delivery:
        """Batch delivery through the shared producer."""
        return self._once("delivery",
                          lambda: Delivery(self.settings, producer=self.producer))

    @property
    def registry(self) -> SchemaRegistryClient:
        """The schema registry client."""
        return self._once("registry", lambda: SchemaRegistryClient(self.registry_config()))

    @property
    def serde(self) -> AvroSerde:
        """The Avro serde on the shared registry client."""
        return self._once("serde", lambda: AvroSerde(
            self.registry, types=self.types, prefix=self.settings.topic_prefix))

    @property
    def admin(self) -> TenantAdmin:
        """Tenant topics through the admin API."""
        return self._once("admin", lambda: TenantAdmin(self.settings))

    @property
    def codec(self) -> FastCodec:
        """The batch path's codec (fastavro, writer schemas cached per id) on the shared
        registry client."""
        return self._once("codec", lambda: FastCodec(self.registry, self.settings.topic_prefix))

    @property
    def event_log(self) -> EventLog:
        """Appends to the tenants' events topics, on the shared producer and serde."""
        return self._once("event_log", lambda: EventLog(self.settings, self.serde,
                                                        producer=self.producer,
                                                        broker_answers=self.broker_answers))

    @property
    def access(self) -> TenantAccess:
        """Tenant principals and ACLs (SCRAM users) through the admin API."""
        return self._once("access", lambda: TenantAccess(self.settings))

    @property
    def metrics(self) -> Metrics:
        """The process's instruments; the first use installs the meter provider that
        STREAMS_METRICS chooses (one per process, streams.runtime.observe.metrics)."""
        return self._once("metrics", lambda: process_metrics(self.settings))

    def probe_registry(self) -> SchemaRegistryClient:
        """A registry client of its own that fails fast (2 s, no retries), for health probes:
        the shared one retries, and a probe must not wait."""
        return self._once("probe_registry", lambda: SchemaRegistryClient(
            {**self.registry_config(), "timeout": CHECK_TIMEOUT, "max.retries": 0}))

    def server_checks(self) -> dict[str, Check]:
        """The readiness checks every process shares: the broker and the registry answer."""
        return server_checks(self._broker_metadata, lambda: self.probe_registry().get_subjects())

    def _broker_metadata(self, timeout: float) -> Any:
        """The brokers' metadata, asked of the shared admin client and, when it cannot get
        them, of a client made for the asking: after a one-broker restart a long-lived client
        can stay unable to reach a broker that answers everyone else (a CI run's worker
        answered /readyz 503 for 120 s after its loops had caught up), and readiness must
        say whether the broker answers, not whether that client does."""
        try:
            return self.admin.client.list_topics(timeout=timeout)
        except KafkaException:
            return self._fresh_metadata(timeout)

    def _fresh_metadata(self, timeout: float) -> Any:
        """The brokers' metadata asked of a client made for the asking (raises
        KafkaException when they do not answer in `timeout` seconds); the client goes when
        this returns (confluent-kafka's admin client has no close: it is freed with its
        last reference)."""
        return AdminClient(self.admin_config()).list_topics(timeout=timeout)

    def stable_offsets(self, partitions: Collection[tuple[str, int]],
                       timeout: float = 5.0) -> dict[tuple[str, int], tuple[int, int]]:
        """Partitions' (low, last stable) offsets, of any topics, asked of the brokers at
        once on the admin client (`streams.adapters.kafka.log.stable_offsets`)."""
        return stable_offsets(self.admin.client, partitions, timeout)

    def broker_answers(self, timeout: float = 5.0) -> bool:
        """Whether the brokers answer a metadata request of a client made for the asking.

        A fresh client, not a shared one: after a one-broker restart a long-lived client
        can stay unable to reach the broker while it answers everyone else (seen in the
        fault tests: a consumer that neither rejoined its group nor read its offsets), and
        the loops ask this to tell such a client from an outage."""
        try:
            self._fresh_metadata(timeout)
        except KafkaException:
            return False
        return True

    def authenticates(self, user: str, password: str, timeout: float | None = None) -> bool:
        """Whether the broker accepts `user` and `password` on this process's SASL listener
        and mechanism (a fresh client made for the asking; see access.authenticates)."""
        return authenticates(self.settings, user, password,
                             self.settings.admin_timeout if timeout is None else timeout)

    def consumer(self, group: str, **extra: Any) -> Consumer:
        """A new consumer-group member (each caller owns and closes its own)."""
        return Consumer(self.consumer_config(group, **extra))

    def reader(self, group: str, **extra: Any) -> Consumer:
        """A new group-less reader (the caller owns and closes it)."""
        return Consumer(self.reader_config(group, **extra))

    def consumer_of(self, configuration: dict[str, Any]) -> Consumer:
        """A new consumer of a configuration made by one of the `*_config` methods (the
        decider builds its members and replay readers this way)."""
        return Consumer(configuration)

    def producer_of_own(self, **extra: Any) -> Producer:
        """A new producer of the caller's own, with `extra` configuration (a batch loop's
        delivery-report callback, say); the caller flushes it. Most writers share
        `producer` instead."""
        return Producer(self.producer_config(**extra))

    def transactional_producer(self, transactional_id: str, **extra: Any) -> Producer:
        """A new transactional producer (an exactly-once loop's: `transactional_id` from
        `streams.core.tenancy.transactional_id`, `extra` its configuration); the caller
        calls `init_transactions` and owns it."""
        return Producer(config.transactional_producer_config(self.settings, transactional_id,
                                                             **extra))

    def delivery_of_own(self, **extra: Any) -> Delivery:
        """Retrying batch delivery through a producer of its own (`extra`: its configuration,
        a logger, say); the caller closes it."""
        return Delivery(self.settings, producer=self.producer_of_own(**extra))

    def topic_reader(self, topic: str) -> TopicReader:
        """A new reader of `topic` up to its end, from positions it remembers (the caller
        closes it)."""
        return TopicReader(self.settings, topic)

    def tail(self, topic: str, on_record: OnRecord) -> TopicTail:
        """A new live tail of a (compacted) topic, handing every record to `on_record` once
        started (the caller closes it)."""
        return TopicTail(self.settings, topic, on_record)

    def index(self, tenant: str, entries_of: EntriesOf | None = None, *,
              producer: Producer | None = None) -> TenantIndex:
        """A new view of a tenant's index topic, writing entries through the shared
        producer (a delivery report per entry), or through `producer`, which reports only
        failed deliveries, to the index's `delivery_failed` (a worker's index writer),
        creating the topic when the tenant has none (the caller closes it). Events it
        indexes itself are decoded with the runtime's fastavro codec to plain records
        (`fast_entries`) unless `entries_of` says otherwise."""
        events = tenant_topics(tenant, self.settings.topic_prefix).events
        return TenantIndex(self.settings, tenant,
                           producer if producer is not None else self.producer, events,
                           entries_of or fast_entries(self.codec),
                           ensure_topic=lambda: self.admin.ensure_index_topic(tenant),
                           reports_each=producer is None)

    def http(self, **options: Any) -> httpx.AsyncClient:
        """A new HTTP client (`options`: httpx.AsyncClient's, a timeout, say); the caller
        closes it (e.g. with `async with`)."""
        import httpx  # only the surfaces that call out over HTTP need it

        return httpx.AsyncClient(**options)

    def langfuse(self, project: LangfuseProject | None = None) -> Langfuse:
        """A Langfuse SDK client for the settings' LANGFUSE_* variables, or for `project`
        (one tenant's, from STREAMS_LANGFUSE_PROJECTS); the caller flushes it. Its tracing
        stays off: the pipeline sends its own scores."""
        from langfuse import Langfuse  # only the Langfuse surfaces need the SDK

        settings = self.settings
        public, secret, host = (project.public_key, project.secret_key, project.host) \
            if project is not None else \
            (settings.langfuse_public_key, settings.langfuse_secret_key, None)
        # base_url, not host: the SDK lets its own LANGFUSE_BASE_URL variable beat `host`.
        return Langfuse(public_key=public, secret_key=secret,
                        base_url=host or settings.langfuse_host or None, tracing_enabled=False)

    def started(self) -> None:
        """Say that the process has started: with `Settings.gc_freeze` (the default), what
        exists now (modules, schemas, validators, clients) is collected once and frozen out
        of Python's garbage collector (`gc.freeze`), so a full collection later walks only
        what was made since. Called by the long-lived processes this project runs (the
        worker, `streams serve`, `streams sink`), never by the workspace handle: a library
        must not freeze its user's heap (docs/operations.md says how a user's own server
        can)."""
        if self.settings.gc_freeze:
            gc.collect()
            gc.freeze()

    def on_close(self, close: Callable[[], None]) -> None:
        """Call `close` when the runtime closes, before its shared clients are flushed (a
        workspace handle built on the runtime registers its own close here)."""
        with self._lock:
            self._closers.append(close)

    def close(self) -> None:
        """Close what was built on the runtime (`on_close`), then flush the producer; clients
        never created are not made."""
        with self._lock:
            closers, self._closers = self._closers, []
        for close in reversed(closers):
            close()
        self.flush()

    def flush(self) -> None:
        """Wait until the shared producer has delivered what it holds (if it was made)."""
        if "producer" in self._made:
            self.producer.flush(self.settings.flush_timeout)
