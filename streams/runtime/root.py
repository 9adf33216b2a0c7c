"""The composition root: one `Runtime` per process builds, shares and closes its clients.

    runtime = Runtime(Settings.from_env())
    runtime.delivery        # the one idempotent producer, for agents, decider and appends
    runtime.serde           # the one Avro serde and its registry client
    runtime.admin           # TenantAdmin
    runtime.client          # StreamsClient, the workspace handle, on the same producer/serde
    runtime.consumer(group) # a consumer-group member
    runtime.faust_settings()  # what faust.App needs for these brokers and this security
    runtime.metrics         # the process's instruments, exported as STREAMS_METRICS says

Every client is created on first use, and none on construction, so building a Runtime (and
the worker, sink runner or demo on top of it) does no network I/O. Every configuration comes
from `streams.adapters.kafka.config`, so every client kind carries the same brokers, SASL,
TLS and extra settings.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient

from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka import config
from streams.adapters.kafka.admin import TenantAdmin
from streams.adapters.kafka.delivery import Delivery
from streams.core.feedback import FeedbackRegistry, registry
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.observe.health import CHECK_TIMEOUT, Check, server_checks
from streams.runtime.observe.metrics import Metrics, process_metrics
from streams.settings import Settings

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
        return self.reader_config(f"{topic}.rebuild")

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
        return self._once("serde", lambda: AvroSerde(self.registry, types=self.types))

    @property
    def admin(self) -> TenantAdmin:
        """Tenant topics through the admin API."""
        return self._once("admin", lambda: TenantAdmin(self.settings))

    @property
    def client(self) -> StreamsClient:
        """The workspace handle, on the shared producer and serde."""
        return self._once("client", lambda: StreamsClient(
            self.settings, types=self.types, serde=self.serde, producer=self.producer))

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
        return server_checks(lambda t: self.admin.client.list_topics(timeout=t),
                             lambda: self.probe_registry().get_subjects())

    def consumer(self, group: str, **extra: Any) -> Consumer:
        """A new consumer-group member (each caller owns and closes its own)."""
        return Consumer(self.consumer_config(group, **extra))

    def reader(self, group: str, **extra: Any) -> Consumer:
        """A new group-less reader (the caller owns and closes it)."""
        return Consumer(self.reader_config(group, **extra))

    def close(self) -> None:
        """Flush the producer and leave the broker; clients never created are not made."""
        made = self._made
        if "client" in made:
            self.client.close()
        if "producer" in made:
            self.producer.flush(self.settings.flush_timeout)
