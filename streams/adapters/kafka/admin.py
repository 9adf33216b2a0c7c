"""Tenant topics through the Kafka admin API: create idempotently, list, describe."""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from streams.adapters.kafka.config import admin_config
from streams.core.errors import ConfigError, KafkaUnavailable
from streams.core.tenancy import (
    DEADLETTER,
    EVENTS,
    INDEX,
    KINDS,
    LEASES,
    QUEUES,
    REDRIVEN,
    RULEBOOK,
    RULES,
    RULESTATE,
    SCORES,
    TenantTopics,
    index_topic,
    parse_topic,
    redriven_topic,
    rulebook_topic,
    rulestate_topic,
    tenant_topics,
)
from streams.settings import Settings

# Events are the system of record: kept until deleted by policy. Scores are a derived,
# re-buildable view; dead letters are kept for inspection.
TOPIC_CONFIGS: dict[str, dict[str, str]] = {
    EVENTS: {"retention.ms": "-1", "cleanup.policy": "delete"},
    SCORES: {"retention.ms": str(30 * 24 * 3600 * 1000), "cleanup.policy": "delete"},
    DEADLETTER: {"retention.ms": "-1", "cleanup.policy": "delete"},
    # Stateful rules' matches. The deciders restore from the changelog (RULESTATE), not from
    # this topic; it is kept so a decision can be traced back and a lost changelog rebuilt.
    RULES: {"retention.ms": "-1", "cleanup.policy": "delete"},
    # The deciders' changelog: the newest state per (rule, scope key), one position per
    # partition (streams.core.rules.snapshots).
    # Segments roll every minute and are cleaned at 10% dirty: the active segment is never
    # compacted, and a restore without a local store reads all of it (the broker defaults,
    # 1 GB or 7 days, made that 360k records after 1M decisions: bench/rules_restore.py).
    RULESTATE: {"cleanup.policy": "compact", "retention.ms": "-1", "segment.ms": "60000",
                "min.cleanable.dirty.ratio": "0.1"},
    # The handle's view of what exists (streams.core.view): one record per key, the newest
    # kept, so compacted.
    # Segments roll hourly so the cleaner compacts the cursors (rewritten by the workers at
    # each commit) and repeated entries within the hour, not once a week.
    INDEX: {"cleanup.policy": "compact", "retention.ms": "-1", "segment.ms": "3600000"},
    # Installed rules (streams.core.rulebook): the newest entry per rule name is the word.
    RULEBOOK: {"cleanup.policy": "compact", "retention.ms": "-1"},
    # A tenant's annotation queues: the newest entry per (workspace, queue), so compacted.
    QUEUES: {"cleanup.policy": "compact", "retention.ms": "-1"},
    # Leases on queue items (streams.core.leases): every record is folded, none is replaced
    # by a newer one, so kept whole (a submitted item must stay submitted). Each record's
    # time is the writer's; the broker's append time is kept beside it for audits.
    LEASES: {"cleanup.policy": "delete", "retention.ms": "-1",
             "message.timestamp.type": "LogAppendTime"},
    # Dead letters re-driven (streams.core.deadletters): one marker per letter, kept.
    REDRIVEN: {"cleanup.policy": "compact", "retention.ms": "-1"},
}


@dataclass(frozen=True)
class TenantInfo:
    """A tenant's topics and their partition counts as the broker reports them."""

    topics: TenantTopics
    partitions: dict[str, int]


class TenantAdmin:
    """Creates and lists tenants' topics."""

    def __init__(self, settings: Settings, timeout: float | None = None) -> None:
        self.settings = settings
        self.timeout = settings.admin_timeout if timeout is None else timeout
        self._client: AdminClient | None = None

    @property
    def client(self) -> AdminClient:
        """The admin client, made on first use (so building a TenantAdmin does no I/O)."""
        if self._client is None:
            self._client = AdminClient(admin_config(self.settings))
        return self._client

    def topic_config(self, kind: str) -> dict[str, str]:
        """The configs of a tenant topic of this kind: its retention and cleanup, and the
        settings' min.insync.replicas."""
        return {**TOPIC_CONFIGS[kind],
                "min.insync.replicas": str(self.settings.min_insync_replicas)}

    def create_tenant(self, tenant: str, partitions: int | None = None) -> TenantInfo:
        """Create the tenant's topics, or bring existing ones up to the wanted partitions and
        configs. Idempotent. An invalid name raises ValidationFailed before any call; a
        replication factor above the cluster's broker count raises ConfigError before any
        topic is created."""
        topics = tenant_topics(tenant, self.settings.topic_prefix)
        wanted = partitions or self.settings.partitions
        kinds = dict(zip(KINDS, topics.all(),
                         strict=True))
        sizes = dict.fromkeys(kinds.values(), wanted)
        new = [
            NewTopic(name, num_partitions=sizes[name],
                     replication_factor=self.settings.replication_factor,
                     config=self.topic_config(kind))
            for kind, name in kinds.items()
        ]
        try:
            self._create(new)
            counts = self._wait_visible(dict.fromkeys(topics.all(), 1))
            # A rules topic keeps its partition count: its keys' state lives in the
            # partitions they hash to (growing it is a migration: docs/rules.md).
            sizes[topics.rules] = counts[topics.rules]
            grow = [NewPartitions(n, sizes[n]) for n, c in counts.items() if c < sizes[n]]
            if grow:
                for future in self.client.create_partitions(grow).values():
                    future.result()
            resources = []
            for kind, name in kinds.items():
                res = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
                    ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                    for k, v in self.topic_config(kind).items()
                ])
                resources.append(res)
            for future in self.client.incremental_alter_configs(resources).values():
                future.result()
            self.ensure_index_topic(tenant)
            self.ensure_rulestate_topic(tenant, counts[topics.rules])
            return TenantInfo(topics, self._wait_visible(sizes))
        except KafkaException as exc:
            raise KafkaUnavailable(f"could not create tenant {tenant!r}: {exc}") from exc

    def ensure_rules_topic(self, tenant: str) -> str:
        """Create the tenant's rules topic (`Settings.partitions` partitions) and its rule
        state changelog if missing (tenants created before rules existed have none);
        returns the rules topic's name."""
        topic = tenant_topics(tenant, self.settings.topic_prefix).rules
        partitions = self._ensure(topic, self.settings.partitions, self.topic_config(RULES))
        self.ensure_rulestate_topic(tenant, partitions)
        return topic

    def ensure_rulestate_topic(self, tenant: str, partitions: int) -> str:
        """Create the tenant's compacted rule state changelog with `partitions` partitions
        (its rules topic's count) if missing, or grow it to that count; returns its name."""
        topic = rulestate_topic(tenant, self.settings.topic_prefix)
        have = self._ensure(topic, partitions, self.topic_config(RULESTATE))
        if have < partitions:
            try:
                for future in self.client.create_partitions(
                        [NewPartitions(topic, partitions)]).values():
                    future.result()
            except KafkaException as exc:
                raise KafkaUnavailable(f"could not grow {topic}: {exc}") from exc
            self._wait_visible({topic: partitions})
        return topic

    def partitions_of(self, topic: str) -> int:
        """How many partitions `topic` has (0 when it does not exist)."""
        try:
            meta = self.client.list_topics(topic, timeout=self.timeout)
        except KafkaException as exc:
            raise KafkaUnavailable(f"could not describe {topic}: {exc}") from exc
        found = meta.topics.get(topic)
        return 0 if found is None or found.error is not None else len(found.partitions)

    def ensure_index_topic(self, tenant: str) -> str:
        """Create the tenant's compacted index topic if it is missing (tenants created before
        the index existed have none; the workspace handle calls this on first use); returns
        its name."""
        topic = index_topic(tenant, self.settings.topic_prefix)
        self._ensure(topic, self.settings.index_partitions, self.topic_config(INDEX))
        return topic

    def check_replication(self) -> int:
        """The cluster's broker count; ConfigError if STREAMS_REPLICATION_FACTOR asks for more
        replicas than there are brokers (the broker's own refusal names no setting)."""
        brokers = len(self.client.list_topics(timeout=self.timeout).brokers)
        wanted = self.settings.replication_factor
        if wanted > brokers:
            raise ConfigError(
                f"STREAMS_REPLICATION_FACTOR is {wanted} but the cluster at "
                f"{self.settings.bootstrap_servers} has {brokers} broker"
                f"{'' if brokers == 1 else 's'}: set STREAMS_REPLICATION_FACTOR (and "
                f"STREAMS_MIN_INSYNC_REPLICAS) to at most {brokers}, or add brokers")
        return brokers

    def ensure_rulebook_topic(self, tenant: str) -> str:
        """Create the tenant's compacted one-partition rulebook topic (its installed rules)
        if it is missing; `streams rules install` calls this; returns its name."""
        return self._ensure_kind(rulebook_topic(tenant, self.settings.topic_prefix), RULEBOOK)

    def ensure_queues_topic(self, tenant: str) -> str:
        """Create the tenant's compacted one-partition queues topic (its annotation queues)
        if it is missing; `streams queues install` calls this; returns its name."""
        return self._ensure_kind(tenant_topics(tenant, self.settings.topic_prefix).queues,
                                 QUEUES)

    def ensure_leases_topic(self, tenant: str) -> tuple[str, int]:
        """Create the tenant's leases topic (STREAMS_PARTITIONS partitions) if it is missing;
        handing out queue items calls this; returns its name and partition count."""
        topic = tenant_topics(tenant, self.settings.topic_prefix).leases
        return topic, self._ensure(topic, self.settings.partitions, self.topic_config(LEASES))

    def _ensure_kind(self, topic: str, kind: str) -> str:
        self._ensure(topic, 1, self.topic_config(kind))
        return topic

    def ensure_compacted_topic(self, topic: str, partitions: int,
                               config: dict[str, str] | None = None) -> int:
        """Create a compacted topic if it is missing (the key store, a tenant's command
        ledger); returns its partition count. `config` adds to or overrides compaction."""
        return self._ensure(topic, partitions, {"cleanup.policy": "compact",
                                                "retention.ms": "-1", **(config or {})})

    def _ensure(self, topic: str, partitions: int, config: dict[str, str]) -> int:
        """Create `topic` if it is missing and wait until it is visible; its partition count."""
        try:
            self._create([NewTopic(topic, num_partitions=partitions,
                                   replication_factor=self.settings.replication_factor,
                                   config=config)])
            return self._wait_visible({topic: 1})[topic]
        except KafkaException as exc:
            raise KafkaUnavailable(f"could not create {topic}: {exc}") from exc

    def ensure_redriven_topic(self, tenant: str) -> str:
        """Create the tenant's compacted one-partition topic of re-driven dead letters if it
        is missing; `streams deadletters redrive` calls this; returns its name."""
        topic = redriven_topic(tenant_topics(tenant, self.settings.topic_prefix).deadletter)
        self._ensure(topic, 1, self.topic_config(REDRIVEN))
        return topic

    def _create(self, topics: list[NewTopic]) -> None:
        """Create topics; one that exists already is left as it is. The replication factor is
        checked against the cluster first."""
        self.check_replication()
        for future in self.client.create_topics(topics, request_timeout=self.timeout).values():
            try:
                future.result()
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise

    def _wait_visible(self, sizes: dict[str, int]) -> dict[str, int]:
        """Partition counts once every topic is in the metadata with at least its size in
        partitions, each with a leader: a created topic is not usable before that."""
        names = tuple(sizes)
        deadline = time.monotonic() + self.timeout
        while True:
            meta = self.client.list_topics(timeout=self.timeout)
            counts = {n: len(meta.topics[n].partitions) for n in names if n in meta.topics}
            ready = len(counts) == len(names) and all(
                c >= sizes[n] and all(p.leader >= 0 for p in meta.topics[n].partitions.values())
                for n, c in counts.items())
            if ready:
                return counts
            if time.monotonic() > deadline:
                raise KafkaUnavailable(f"topics {names} not ready after {self.timeout:.0f}s")
            time.sleep(0.1)

    def tenants(self) -> list[str]:
        """Tenants whose events topic exists, sorted."""
        try:
            meta = self.client.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise KafkaUnavailable(f"could not list topics: {exc}") from exc
        found = set()
        for name in meta.topics:
            parsed = parse_topic(name, self.settings.topic_prefix)
            if parsed and parsed[1] == EVENTS:
                found.add(parsed[0])
        return sorted(found)

    def delete_tenant(self, tenant: str) -> None:
        """Delete a tenant's topics (tests and demos clean up with this)."""
        topics = tenant_topics(tenant, self.settings.topic_prefix)
        names = list(topics.every())
        for future in self.client.delete_topics(names).values():
            try:
                future.result()
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise KafkaUnavailable(f"could not delete {tenant!r}: {exc}") from exc
