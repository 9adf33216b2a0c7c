"""The tail's end read asks again while a partition's leader moves (no broker: a consumer
double answering NOT_LEADER_FOR_PARTITION first, as a topic just created does)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from streams.adapters.kafka.tail import TopicTail
from streams.core.errors import KafkaUnavailable
from streams.settings import Settings


class MovingLeader:
    def __init__(self, refusals: int, code: int = KafkaError.NOT_LEADER_FOR_PARTITION) -> None:
        self.refusals = refusals
        self.code = code
        self.asked = 0

    def get_watermark_offsets(self, _tp: Any, timeout: float) -> tuple[int, int]:
        self.asked += 1
        if self.asked <= self.refusals:
            raise KafkaException(KafkaError(self.code))
        return 0, 0


def _tail(consumer: MovingLeader) -> TopicTail:
    tail = TopicTail(Settings(admin_timeout=2.0), "fs._keys", lambda *_a: None)
    tail._meta = consumer  # type: ignore[assignment]
    tail._positions = {0: 0}
    return tail


def test_the_end_is_asked_again_while_the_leader_moves() -> None:
    consumer = MovingLeader(refusals=3)
    _tail(consumer).sync()
    assert consumer.asked == 4


def test_a_leader_that_never_settles_or_another_error_is_unavailable() -> None:
    settling = MovingLeader(refusals=10**6)
    with pytest.raises(KafkaUnavailable, match=r"cannot read the end of fs\._keys"):
        _tail(settling).sync(timeout=0.5)
    assert settling.asked > 1  # asked again until the deadline, then gave up
    refused = MovingLeader(refusals=1, code=KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaUnavailable):
        _tail(refused).sync()
    assert refused.asked == 1  # not a moving leader: not asked again
