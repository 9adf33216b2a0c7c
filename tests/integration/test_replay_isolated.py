"""A replay experiment writes to no real topic: the broker's topics, and the offsets of every
topic that could be the replay's (its tenant `replay`, under any prefix), are the same before
and after (other test sessions may create their own topics meanwhile, so only topics a replay
could write are compared)."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from streams.core.experiments import InMemoryExperimentTracker
from streams.core.replay import replay_task
from streams.settings import Settings
from tests.core import test_replay as story


def _replay_topics(settings: Settings) -> dict[str, int]:
    """Every topic naming the replay's tenant, with the sum of its high watermarks."""
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    metadata = admin.list_topics(timeout=30)
    consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers,
                         "group.id": "replay-isolation-probe", "enable.auto.commit": False})
    try:
        out: dict[str, int] = {}
        for name, topic in metadata.topics.items():
            if ".replay." not in f".{name}.":
                continue
            out[name] = sum(consumer.get_watermark_offsets(TopicPartition(name, p),
                                                           timeout=10)[1]
                            for p in topic.partitions)
        return out
    finally:
        consumer.close()


async def test_a_replay_experiment_creates_and_writes_no_topic(settings: Settings) -> None:
    before = _replay_topics(settings)
    task = replay_task(rule=story.error_spike, action=story.candidate_triage, deps=story.deps,
                       events=lambda e: [story.ServiceError(service=e.input.service,
                                                            severity=9)] * 3,
                       output=lambda r: len(r.emitted),
                       event_types=[story.ServiceError, story.IncidentOpened])
    result = await InMemoryExperimentTracker().run_experiment("isolated",
                                                              dataset=story.incidents, task=task)
    assert [r.output for r in result.results] == [1, 0, 1]
    assert _replay_topics(settings) == before
