"""A topic's offsets in one round trip (`watermarks_of`, what a read view asks before each
read; `stable_offsets`, what a stall check asks) against the per-partition path
(`watermarks`) on the real broker: the same low and last stable offsets, an open transaction
included, and the per-partition path's errors when
the partitions it was told are not the topic's."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from streams.adapters.kafka.log import stable_offsets, watermarks, watermarks_of
from streams.core.errors import NotFound
from streams.core.tenancy import tenant_topics
from streams.runtime.root import Runtime
from streams.settings import Settings
from tests.conftest import wait_until


def test_one_round_trip_gives_what_the_per_partition_path_gives(
    settings: Settings, tenant_factory: Callable[..., str],
) -> None:
    runtime = Runtime(settings)
    try:
        topic = tenant_topics(tenant_factory(), settings.topic_prefix).events
        plain = runtime.producer_of_own()
        for i in range(20):
            plain.produce(topic, f"v{i}".encode(), f"k{i}".encode())
        plain.flush(30)
        # An open transaction: its records are past the last stable offset of their
        # partitions until it commits, for either path.
        txn: Producer = runtime.transactional_producer(f"test-wm-{uuid.uuid4().hex}")
        txn.init_transactions(30)
        txn.begin_transaction()
        for i in range(5):
            txn.produce(topic, b"open", f"t{i}".encode())
        txn.flush(30)
        reader = runtime.reader(f"test-wm-{uuid.uuid4().hex}")
        admin = runtime.admin.client
        every = watermarks(reader, topic)
        assert sum(high for _low, high in every.values()) == 20
        assert watermarks_of(admin, reader, topic, list(every)) == every
        # Any topics' partitions at once (the stall check's look): the same offsets.
        assert stable_offsets(admin, [(topic, p) for p in every]) == {
            (topic, p): marks for p, marks in every.items()}
        assert stable_offsets(admin, []) == {}
        txn.commit_transaction(30)
        # The commit returns once the coordinator has logged it; the markers that move the
        # partitions' last stable offsets follow: wait until every last stable offset is the
        # high watermark (what a read_uncommitted reader sees), markers included.
        uncommitted = runtime.consumer_of(runtime.consumer_config(
            f"test-wm-{uuid.uuid4().hex}", **{"isolation.level": "read_uncommitted"}))
        committed = wait_until(
            lambda: (marks := watermarks(reader, topic)) == watermarks(uncommitted, topic)
            and marks, 10, "the committed transaction's markers")
        uncommitted.close()
        assert sum(high for _low, high in committed.values()) > 25  # 5 records and markers
        assert watermarks_of(admin, reader, topic, list(committed)) == committed
        # Told the wrong partitions (or none): the per-partition path answers.
        assert watermarks_of(admin, reader, topic, [0]) == committed
        assert watermarks_of(admin, reader, topic, []) == committed
        with pytest.raises(NotFound, match="create the tenant first"):
            watermarks_of(admin, reader, f"{topic}-missing", list(committed), timeout=5)
        reader.close()
    finally:
        runtime.close()
