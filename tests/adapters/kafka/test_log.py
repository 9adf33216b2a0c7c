"""The event log's errors (streams.adapters.kafka.log): an append not acknowledged in time
says whether the brokers answer a new client, so the caller knows what to fix; an offsets read
asks again while a topic's leaders settle, and only then."""

from __future__ import annotations

from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streams.adapters.kafka.log import LEADER_MOVING, EventLog, ends, watermarks
from streams.core.errors import KafkaUnavailable
from streams.settings import Settings


@pytest.mark.parametrize(("answers", "says"), [
    (None, "check that the brokers in KAFKA_BOOTSTRAP_SERVERS are up"),
    (False, "check that the brokers in KAFKA_BOOTSTRAP_SERVERS are up"),
    (True, "although the brokers answer a new client: the partition's leader was slow to "
           "take the write"),
])
async def test_an_unacknowledged_append_says_whether_the_brokers_answer_others(
        answers: bool | None, says: str) -> None:
    probe = None if answers is None else (lambda: answers)
    log = EventLog(Settings(), cast(Any, None), producer=cast(Any, object()),
                   broker_answers=probe)
    said = await log._unacknowledged("fs.acme.events", 3.0)
    assert said.startswith("append to fs.acme.events not acknowledged within 3 s "
                           "(STREAMS_FEEDBACK_TIMEOUT)")
    assert says in said


class _Partition:
    error = None


class _Topic:
    error = None
    partitions = {0: _Partition(), 1: _Partition()}


class _Metadata:
    def __init__(self, topic: str) -> None:
        self.topics = {topic: _Topic()}


class NotYetEverywhere:
    """A consumer whose metadata names the topic while its leaders do not know it yet (a topic
    just created on a three-broker cluster, ci70): `refusals` watermark reads fail first."""

    def __init__(self, refusals: int, code: int = KafkaError.UNKNOWN_TOPIC_OR_PART) -> None:
        self.refusals = refusals
        self.code = code
        self.asked = 0

    def list_topics(self, topic: str, timeout: float) -> _Metadata:
        return _Metadata(topic)

    def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
        self.asked += 1
        if self.asked <= self.refusals:
            raise KafkaException(KafkaError(self.code))
        return 0, tp.partition * 10


@pytest.mark.parametrize("code", sorted(LEADER_MOVING))
def test_watermarks_ask_again_while_a_new_topic_reaches_its_leaders(code: int) -> None:
    consumer = NotYetEverywhere(refusals=2, code=code)
    assert watermarks(cast(Any, consumer), "fs.acme.index", timeout=5.0) == {0: (0, 0),
                                                                            1: (0, 10)}
    assert consumer.asked == 4


def test_watermarks_give_up_at_the_deadline_or_on_an_error_that_is_not_a_move() -> None:
    stuck = NotYetEverywhere(refusals=10**6)
    with pytest.raises(KafkaUnavailable, match=r"cannot read offsets of fs\.acme\.index"):
        watermarks(cast(Any, stuck), "fs.acme.index", timeout=0.5)
    assert stuck.asked > 1
    refused = NotYetEverywhere(refusals=1, code=KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaUnavailable):
        watermarks(cast(Any, refused), "fs.acme.index", timeout=5.0)
    assert refused.asked == 1


class OneRequest(NotYetEverywhere):
    """NotYetEverywhere that also answers every partition's end in one request
    (`offsets_for_times` with OFFSET_END), or refuses it (`refused`)."""

    def __init__(self, refused: bool) -> None:
        super().__init__(refusals=0)
        self.refused = refused
        self.requests: list[list[int]] = []

    def offsets_for_times(self, partitions: list[TopicPartition],
                          timeout: float) -> list[TopicPartition]:
        self.requests.append([tp.partition for tp in partitions])
        if self.refused:
            raise KafkaException(KafkaError(KafkaError.REQUEST_TIMED_OUT))
        return [TopicPartition(tp.topic, tp.partition, tp.partition * 10 + 5)
                for tp in partitions]


def test_ends_ask_for_every_partition_in_one_request_and_fall_back_to_watermarks() -> None:
    one = OneRequest(refused=False)
    assert ends(cast(Any, one), "fs.acme.events") == {0: 5, 1: 15}
    assert one.requests == [[0, 1]] and one.asked == 0  # no watermark read per partition
    refused = OneRequest(refused=True)
    assert ends(cast(Any, refused), "fs.acme.events") == {0: 0, 1: 10}
    assert refused.asked == 2  # watermarks, a partition at a time
