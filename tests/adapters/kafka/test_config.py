"""The client configurations' choices that carry a measured reason."""

from __future__ import annotations

from streams.adapters.kafka.config import (
    TRANSACTION_RETRY_BACKOFF_MS,
    producer_config,
    transactional_producer_config,
)
from streams.settings import Settings


def test_a_transactional_producer_retries_after_milliseconds_not_librdkafkas_100() -> None:
    # Each transaction's offsets are refused once while the coordinator finishes the last
    # one; at librdkafka's 100 ms backoff every transaction took 100 ms or more.
    config = transactional_producer_config(Settings(transaction_timeout=7.0), "fs.t.mirror")
    assert config["retry.backoff.ms"] == TRANSACTION_RETRY_BACKOFF_MS <= 10
    assert config["transactional.id"] == "fs.t.mirror"
    assert config["transaction.timeout.ms"] == 7000
    # Plain producers keep librdkafka's default; the user's own settings win over both.
    assert "retry.backoff.ms" not in producer_config(Settings())
    tuned = Settings(kafka_extra={"retry.backoff.ms": "50"})
    assert transactional_producer_config(tuned, "x")["retry.backoff.ms"] == "50"
