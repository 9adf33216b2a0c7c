"""The client configurations' choices that carry a measured reason."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from streams.adapters.kafka.config import (
    TRANSACTION_RETRY_BACKOFF_MS,
    admin_config,
    consumer_config,
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


def test_every_client_reconnects_to_the_brokers_it_knew_unless_the_operator_says_rebootstrap(
) -> None:
    # A one-broker restart made librdkafka re-bootstrap and drop the broker objects that a
    # coordinator's request waited on (librdkafka #5511): every client kind opts out.
    settings = Settings()
    configs = [producer_config(settings), transactional_producer_config(settings, "fs.t.x"),
               consumer_config(settings, "fs.g"), admin_config(settings)]
    assert {c["metadata.recovery.strategy"] for c in configs} == {"none"}
    # librdkafka itself accepts the setting for each kind (a typo would raise here).
    Producer({k: v for k, v in configs[0].items() if k not in ("logger", "error_cb")})
    Consumer({k: v for k, v in configs[2].items() if k not in ("logger", "error_cb")}).close()
    AdminClient({k: v for k, v in configs[3].items() if k not in ("logger", "error_cb")})
    tuned = Settings(kafka_extra={"metadata.recovery.strategy": "rebootstrap"})
    assert producer_config(tuned)["metadata.recovery.strategy"] == "rebootstrap"
