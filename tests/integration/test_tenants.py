from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from streams.adapters.kafka.admin import TOPIC_CONFIGS, TenantAdmin
from streams.core.errors import ConfigError, ValidationFailed
from streams.settings import Settings
from tests.conftest import unique


def test_create_tenant_is_idempotent_and_sets_partitions_and_configs(settings: Settings) -> None:
    admin = TenantAdmin(settings)
    name = unique("acme-")
    first = admin.create_tenant(name, partitions=2)
    again = admin.create_tenant(name, partitions=2)
    assert first == again
    # The rules topic is made with the tenant's partitions (keys spread over deciders) and
    # never grown: a key's state lives in the partition its key hashes to.
    assert first.partitions == {first.topics.events: 2, first.topics.scores: 2,
                                first.topics.deadletter: 2, first.topics.rules: 2}
    grown = admin.create_tenant(name, partitions=4)
    assert grown.partitions == {first.topics.events: 4, first.topics.scores: 4,
                                first.topics.deadletter: 4, first.topics.rules: 2}
    assert name in admin.tenants()
    raw = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    resource = ConfigResource(ConfigResource.Type.TOPIC, first.topics.events)
    configs = raw.describe_configs([resource])[resource].result()
    assert configs["retention.ms"].value == TOPIC_CONFIGS["events"]["retention.ms"]
    assert configs["min.insync.replicas"].value == str(settings.min_insync_replicas)


def test_more_replicas_than_the_cluster_has_brokers_is_a_clear_error(
    settings: Settings,
) -> None:
    raw = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    brokers = len(raw.list_topics(timeout=10).brokers)
    admin = TenantAdmin(settings.replace(replication_factor=brokers + 1))
    name = unique("acme-")
    with pytest.raises(ConfigError, match=f"STREAMS_REPLICATION_FACTOR is {brokers + 1} but "
                       f"the cluster at .* has {brokers} broker"):
        admin.create_tenant(name)
    assert admin.tenants() == []  # nothing was created


@pytest.mark.parametrize("bad", ["Acme", "a.b", "", "has space"])
def test_invalid_tenant_refused_before_any_call(settings: Settings, bad: str) -> None:
    admin = TenantAdmin(settings)
    with pytest.raises(ValidationFailed, match="invalid tenant name"):
        admin.create_tenant(bad)
    assert admin.tenants() == []


def test_tenants_lists_only_this_prefix(settings: Settings,
                                        tenant_factory: Callable[..., str]) -> None:
    a = tenant_factory()
    b = tenant_factory()
    assert TenantAdmin(settings).tenants() == sorted([a, b])
