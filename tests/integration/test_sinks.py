"""Score sinks as consumer groups on the real broker, delivering into the Langfuse stand-in
(an HTTP server that applies Langfuse's rules; not Langfuse)."""

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from langfuse import Langfuse

from streams.adapters.avro.codec import score_to_record
from streams.adapters.avro.serde import AvroSerde
from streams.adapters.langfuse import LangfuseScoreSink
from streams.core.errors import ValidationFailed
from streams.core.scores import Score, score_configs, scores_from_value
from streams.core.sinks.memory import InMemoryScoreSink
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.runtime.sink_runner import SinkRunner, cursor_group
from streams.settings import Settings
from streams.testing.langfuse_standin import LangfuseStandIn
from tests.conftest import REPO, wait_until
from tests.integration.conftest import SinkProcess

FEEDBACK = 400
SCORES = FEEDBACK * 3


def make_scores(tenant: str, n: int) -> list[Score]:
    out: list[Score] = []
    configs = score_configs(TriageQuality)
    from datetime import UTC, datetime

    for i in range(n):
        out += scores_from_value(
            configs, {"correct": i % 2 == 0, "severity": "high", "note": f"n{i}"},
            feedback_event_id=f"evt_{tenant}_{i}", timestamp=datetime.now(UTC),
            tenant=tenant, workspace="prod", target_kind="run", target_id=f"run_{i}",
            participant="user:ada", trace_id=None, session_id=f"chain_{i}", seq=f"0:{i}")
    return out


def produce_scores(settings: Settings, tenant: str, scores: list[Score]) -> None:
    topic = tenant_topics(tenant, settings.topic_prefix).scores
    serde = AvroSerde(settings.schema_registry_url)
    producer = Producer({"bootstrap.servers": settings.bootstrap_servers, "linger.ms": 10})
    for score in scores:
        producer.produce(topic, serde.encode_score(score_to_record(score), topic),
                         key=score.source.feedback_event_id.encode())
    assert producer.flush(30) == 0


def client_for(standin: LangfuseStandIn) -> Langfuse:
    return Langfuse(public_key=standin.public_key, secret_key=standin.secret_key,
                    host=standin.url, tracing_enabled=False)


def keys(standin: LangfuseStandIn) -> list[tuple[str, str, str]]:
    return [(s["id"], s["name"], s["timestamp"][:10]) for s in standin.scores()]


def committed(settings: Settings, cursor: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    group = cursor_group(settings, cursor)
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    try:
        result = futures[group].result()
    except Exception:
        return {}
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions
            if tp.offset >= 0}


def test_sigkill_mid_stream_loses_and_duplicates_nothing(
    settings: Settings, tenant_factory: Callable[..., str],
    standin_factory: Callable[[], LangfuseStandIn], sink_factory: Callable[..., SinkProcess],
) -> None:
    tenant = tenant_factory()
    produce_scores(settings, tenant, make_scores(tenant, FEEDBACK))
    standin = standin_factory()
    standin.set_delay(0.05)  # slow answers, so the kill lands mid-stream
    sink = sink_factory(standin, "--cursor", "lf", "--batch-size", "30")
    wait_until(lambda: len(standin.scores()) >= SCORES // 4, 120, "a quarter of the scores")
    assert sink.proc is not None
    sink.proc.send_signal(signal.SIGKILL)
    sink.proc.wait(30)
    assert len(standin.scores()) < SCORES, "the kill came too late to test anything"
    standin.set_delay(0)
    sink.start()
    wait_until(lambda: len(standin.scores()) >= SCORES, 120, "every score")
    wait_until(lambda: sum(committed(settings, "lf").values()) >= SCORES, 60,
               "the cursor to reach the end")
    stored = keys(standin)
    assert len(stored) == SCORES and len(set(stored)) == SCORES  # 0 lost, 0 duplicates
    print(f"{standin.received_total} scores sent for {SCORES}: "
          f"{standin.received_total - SCORES} resent after SIGKILL and replaced")


def test_outage_delays_but_loses_nothing_and_commits_nothing_ahead(
    settings: Settings, tenant_factory: Callable[..., str],
    standin_factory: Callable[[], LangfuseStandIn], sink_factory: Callable[..., SinkProcess],
) -> None:
    tenant = tenant_factory()
    produce_scores(settings, tenant, make_scores(tenant, 100))
    standin = standin_factory()
    sink = sink_factory(standin, "--cursor", "lf", "--no-sync-configs", "--batch-size", "50")
    standin.set_down(True)
    wait_until(lambda: standin.requests >= 3, 60, "the sink to try a few times")
    assert committed(settings, "lf") == {}
    assert standin.scores() == []
    standin.set_down(False)
    wait_until(lambda: len(standin.scores()) >= 300, 120, "every score after the outage")
    wait_until(lambda: sum(committed(settings, "lf").values()) >= 300, 60, "the cursor")
    assert len(set(keys(standin))) == 300 == len(keys(standin))
    sink.stop()
    assert sink.proc is not None and sink.proc.returncode == 0


async def test_replay_adds_nothing_and_cursor_stays(
    settings: Settings, tenant_factory: Callable[..., str],
    standin_factory: Callable[[], LangfuseStandIn],
) -> None:
    tenant = tenant_factory()
    produce_scores(settings, tenant, make_scores(tenant, 100))
    standin = standin_factory()
    sink = LangfuseScoreSink(client_for(standin))
    await SinkRunner(settings, sink, cursor="lf").run(until=lambda s: s.scores >= 300)
    first = committed(settings, "lf")
    assert sum(first.values()) == 300
    before = keys(standin)
    replay = SinkRunner(settings, sink, cursor="lf", replay=True)
    stats = await replay.run(until=lambda s: s.scores >= 300)
    assert stats.commits == 0  # the replay never passed the cursor
    assert committed(settings, "lf") == first
    assert sorted(keys(standin)) == sorted(before)
    assert standin.received_total == 600


async def test_two_cursors_each_receive_everything(
    settings: Settings, tenant_factory: Callable[..., str],
) -> None:
    a, b = tenant_factory(), tenant_factory()
    produce_scores(settings, a, make_scores(a, 50))
    produce_scores(settings, b, make_scores(b, 50))
    warehouse, langfuse = InMemoryScoreSink(), InMemoryScoreSink()
    await asyncio.gather(
        SinkRunner(settings, warehouse, cursor="warehouse").run(
            until=lambda s: s.scores >= 300),
        SinkRunner(settings, langfuse, cursor="langfuse").run(
            until=lambda s: s.scores >= 300))
    assert len(warehouse.scores) == len(langfuse.scores) == 300
    assert sum(committed(settings, "warehouse").values()) == 300
    assert sum(committed(settings, "langfuse").values()) == 300


async def test_a_cursor_belongs_to_one_sink(
    settings: Settings, tenant_factory: Callable[..., str],
    standin_factory: Callable[[], LangfuseStandIn],
) -> None:
    tenant = tenant_factory()
    produce_scores(settings, tenant, make_scores(tenant, 10))
    await SinkRunner(settings, InMemoryScoreSink(), cursor="shared").run(
        until=lambda s: s.scores >= 30)
    produce_scores(settings, tenant, make_scores(tenant + "x", 1))
    other = LangfuseScoreSink(client_for(standin_factory()), identity="langfuse:other")
    with pytest.raises(ValidationFailed, match="belongs to sink"):
        await asyncio.wait_for(SinkRunner(settings, other, cursor="shared").run(), 60)


async def test_no_cursor_reads_everything_every_time_and_commits_nothing(
    settings: Settings, tenant_factory: Callable[..., str],
) -> None:
    tenant = tenant_factory()
    produce_scores(settings, tenant, make_scores(tenant, 20))
    for _ in range(2):
        sink = InMemoryScoreSink()
        stats = await SinkRunner(settings, sink, cursor=None).run(
            until=lambda s: s.scores >= 60)
        assert len(sink.scores) == 60 and stats.commits == 0


def test_too_long_score_name_refused_before_anything_is_sent(
    settings: Settings, standin_factory: Callable[[], LangfuseStandIn], tmp_path: Path,
) -> None:
    module = f"long_types_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent('''
        from streams.core.feedback import Feedback

        class Verbose(Feedback, name="incident_postmortem_quality", targets={"chain"}):
            root_cause_identified: bool
    '''))
    standin = standin_factory()
    env: dict[str, Any] = {**os.environ, "PYTHONPATH": str(tmp_path),
                           "LANGFUSE_HOST": standin.url,
                           "LANGFUSE_PUBLIC_KEY": standin.public_key,
                           "LANGFUSE_SECRET_KEY": standin.secret_key}
    done = subprocess.run([sys.executable, "-m", "streams", "sink", "sync-configs",
                           "--types", module], env=env, capture_output=True, text=True,
                          cwd=REPO, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    message = " ".join(done.stderr.split())
    assert "incident_postmortem_quality.root_cause_identified" in message
    assert "root_cause_identified" in message and "shorter name=" in message
    assert standin.score_configs() == []
    assert standin.requests == 0
