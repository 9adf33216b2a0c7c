"""Records to produce, and dead letters: what every agent and sink hands to delivery."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.log import Headers
from streams.core.tenancy import parse_topic, tenant_topics


@dataclass(frozen=True, slots=True)
class Output:
    """A record to produce."""

    topic: str
    key: bytes | None
    value: bytes
    headers: Headers | None = None


def dead_letter_output(serde: AvroSerde, prefix: str, *, topic: str, partition: int,
                       offset: int, key: bytes | None, value: bytes | None, reason: str,
                       stage: str) -> Output:
    """A DeadLetter record for the tenant of `topic` (the original bytes, where they were,
    who gave up and why), or for `<prefix>.unrouted.deadletter` if `topic` is no tenant's."""
    parsed = parse_topic(topic, prefix)
    dl_topic = tenant_topics(parsed[0], prefix).deadletter if parsed else \
        f"{prefix}.unrouted.deadletter"
    record: dict[str, Any] = {
        "source_topic": topic, "partition": partition, "offset": offset, "key": key,
        "value": value, "stage": stage, "reason": reason[:2000], "time": datetime.now(UTC),
    }
    return Output(dl_topic, key, serde.encode_dead_letter(record, dl_topic),
                  [("reason", reason[:200].encode())])
