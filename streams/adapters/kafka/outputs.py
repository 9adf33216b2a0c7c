"""Records to produce, and dead letters: what every agent and sink hands to delivery."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, NamedTuple

from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.log import Headers
from streams.core.rules.checks import from_micros, micros
from streams.core.rules.snapshots import entity_key
from streams.core.tenancy import dead_letter_topic


class Output(NamedTuple):
    """A record to produce: to `partition` when given (a changelog co-partitioned with its
    input), else to the partition the producer's partitioner picks for `key`.

    A named tuple, not a frozen dataclass: the mirror makes one per score, and a tuple is
    made in less than half the time (0.36 against 0.85 µs here), as immutable."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers | None = None
    partition: int | None = None


HEADER_RULE = "rule"
"""The header naming the stateful rule a record of a tenant's rules topic is a match of."""


def rule_forward(rules_topic: str, rule: str, scope_key: str | None, event_type: str,
                 value: bytes) -> Output:
    """A match of a stateful rule as a record for a tenant's rules topic: the event's own
    bytes, headed by the rule and keyed by `<rule>|<scope key>`, so one key's matches stay in
    one partition, in order (the producers' default partitioner), and different keys spread
    over the partitions. The reactor forwards matches so; a budget claim is written so."""
    return Output(rules_topic, entity_key(rule, scope_key).encode(), value,
                  [(HEADER_RULE, rule.encode()), ("event_type", event_type.encode())])


TICK_KEY = b"__tick__"
"""The key of a tick: a record of a tenant's rules topic carrying no match, only the newest
event time the reactor saw (microseconds since the epoch, as text), so every partition's
clock moves on even when its keys' events have stopped (completion rules' quiet periods)."""

_TICK_HEADERS: Headers = [("event_type", b"streams:tick")]


def rule_tick(rules_topic: str, partition: int, time: datetime) -> Output:
    """A tick for one partition of a tenant's rules topic (see TICK_KEY)."""
    return Output(rules_topic, TICK_KEY, str(micros(time)).encode(), list(_TICK_HEADERS),
                  partition=partition)


def tick_time(value: bytes | None) -> datetime | None:
    """The event time a tick carries (see `rule_tick`), or None when the value is not one."""
    try:
        return from_micros(int(value or b""))
    except (ValueError, OverflowError):
        return None


def dead_letter_record(*, topic: str, partition: int, offset: int, key: bytes | None,
                       value: bytes | None, reason: str, stage: str,
                       time: datetime | int) -> dict[str, Any]:
    """The DeadLetter record: the original bytes, where they were, who gave up and why."""
    return {
        "source_topic": topic, "partition": partition, "offset": offset, "key": key,
        "value": value, "stage": stage, "reason": reason[:2000], "time": time,
    }


def reason_headers(reason: str) -> Headers:
    """Headers of a dead letter: its reason, short, readable without decoding."""
    return [("reason", reason[:200].encode())]


def dead_letter_output(serde: AvroSerde, prefix: str, *, topic: str, partition: int,
                       offset: int, key: bytes | None, value: bytes | None, reason: str,
                       stage: str) -> Output:
    """A DeadLetter record for the tenant of `topic` (see dead_letter_topic)."""
    dl_topic = dead_letter_topic(prefix, topic)
    record = dead_letter_record(topic=topic, partition=partition, offset=offset, key=key,
                                value=value, reason=reason, stage=stage,
                                time=datetime.now(UTC))
    return Output(dl_topic, key, serde.encode_dead_letter(record, dl_topic),
                  reason_headers(reason))
