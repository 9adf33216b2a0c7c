"""TenantAdmin without a broker: the replication check and the topic configs it asks for."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from streams.adapters.kafka.admin import TenantAdmin
from streams.core.errors import ConfigError
from streams.settings import Settings


class FakeAdminClient:
    """Answers metadata with `brokers` brokers and records the topics asked for."""

    def __init__(self, brokers: int) -> None:
        self.brokers = brokers
        self.created: list[Any] = []

    def list_topics(self, timeout: float) -> Any:
        return SimpleNamespace(brokers={i: object() for i in range(self.brokers)}, topics={})

    def create_topics(self, topics: list[Any], request_timeout: float) -> dict[str, Any]:
        self.created += topics
        raise RuntimeError("stop here: the test only looks at what was asked")


def admin(brokers: int, **settings: Any) -> tuple[TenantAdmin, FakeAdminClient]:
    made = TenantAdmin(Settings(bootstrap_servers="127.0.0.1:9", **settings))
    fake = FakeAdminClient(brokers)
    made._client = fake  # type: ignore[assignment]
    return made, fake


def test_more_replicas_than_brokers_is_refused_before_any_topic_is_created() -> None:
    tenants, fake = admin(2, replication_factor=3, min_insync_replicas=2)
    with pytest.raises(ConfigError) as raised:
        tenants.create_tenant("acme")
    message = str(raised.value)
    assert "STREAMS_REPLICATION_FACTOR is 3" in message
    assert "has 2 brokers" in message and "at most 2" in message
    assert fake.created == []
    for ensure in (tenants.ensure_rules_topic, tenants.ensure_index_topic):
        with pytest.raises(ConfigError, match="STREAMS_REPLICATION_FACTOR"):
            ensure("acme")
    assert fake.created == []


def test_topics_get_the_replication_settings() -> None:
    tenants, fake = admin(3, replication_factor=3, min_insync_replicas=2)
    assert tenants.check_replication() == 3
    with pytest.raises(RuntimeError, match="stop here"):
        tenants.create_tenant("acme")
    assert {t.replication_factor for t in fake.created} == {3}
    assert {t.config["min.insync.replicas"] for t in fake.created} == {"2"}
    assert len(fake.created) == 4
    for kind in ("events", "scores", "deadletter", "rules", "index"):
        assert tenants.topic_config(kind)["min.insync.replicas"] == "2"
