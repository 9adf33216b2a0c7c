"""Where the broker and registry are, and the pipeline's knobs; read from the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_REGISTRY = "http://127.0.0.1:8081/apis/ccompat/v7"


@dataclass(frozen=True)
class Settings:
    """Connection settings and defaults.

    Environment: KAFKA_BOOTSTRAP_SERVERS, SCHEMA_REGISTRY_URL, STREAMS_TOPIC_PREFIX,
    STREAMS_PARTITIONS, STREAMS_DISCOVERY_INTERVAL (seconds between tenant discoveries).
    """

    bootstrap_servers: str = DEFAULT_BOOTSTRAP
    schema_registry_url: str = DEFAULT_REGISTRY
    topic_prefix: str = "fs"
    partitions: int = 3
    replication_factor: int = 1
    discovery_interval: float = 1.0
    kafka_extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, **overrides: object) -> Settings:
        """Settings from the environment, then `overrides`."""
        env = os.environ
        values: dict[str, object] = {
            "bootstrap_servers": env.get("KAFKA_BOOTSTRAP_SERVERS", DEFAULT_BOOTSTRAP),
            "schema_registry_url": env.get("SCHEMA_REGISTRY_URL", DEFAULT_REGISTRY),
            "topic_prefix": env.get("STREAMS_TOPIC_PREFIX", "fs"),
            "partitions": int(env.get("STREAMS_PARTITIONS", "3")),
            "discovery_interval": float(env.get("STREAMS_DISCOVERY_INTERVAL", "1.0")),
        }
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]
