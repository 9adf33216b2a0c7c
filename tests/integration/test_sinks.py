"""Score sinks as consumer groups on the real broker, delivering into the Langfuse stand-in
(an HTTP server that applies Langfuse's rules; not Langfuse)."""

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from langfuse import Langfuse

from standins.langfuse_standin import LangfuseStandIn
from streams.adapters.avro.codec import score_to_record
from streams.adapters.avro.serde import AvroSerde
from streams.adapters.langfuse import LangfuseScoreSink
from streams.core.errors import ValidationFailed
from streams.core.scores import Score, score_configs, scores_from_value
from streams.core.sinks.memory import InMemoryScoreSink
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.runtime.root import Runtime
from streams.runtime.sink.runner import SinkRunner, cursor_group
from streams.settings import Settings
from tests.conftest import REPO, wait_until
from tests.integration.conftest import SinkProcess
from tests.integration.test_feedback_mirror import committed as group_committed

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
    """The sink cursor's committed offsets ({} when it has none)."""
    return group_committed(settings, cursor_group(settings, cursor))


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
    await SinkRunner(Runtime(settings), sink, cursor="lf").run(until=lambda s: s.scores >= 300)
    first = committed(settings, "lf")
    assert sum(first.values()) == 300
    before = keys(standin)
    replay = SinkRunner(Runtime(settings), sink, cursor="lf", replay=True)
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
        SinkRunner(Runtime(settings), warehouse, cursor="warehouse").run(
            until=lambda s: s.scores >= 300),
        SinkRunner(Runtime(settings), langfuse, cursor="langfuse").run(
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
    await SinkRunner(Runtime(settings), InMemoryScoreSink(), cursor="shared").run(
        until=lambda s: s.scores >= 30)
    produce_scores(settings, tenant, make_scores(tenant + "x", 1))
    other = LangfuseScoreSink(client_for(standin_factory()), identity="langfuse:other")
    with pytest.raises(ValidationFailed, match="belongs to sink"):
        await asyncio.wait_for(SinkRunner(Runtime(settings), other, cursor="shared").run(), 60)


async def test_no_cursor_reads_everything_every_time_and_commits_nothing(
    settings: Settings, tenant_factory: Callable[..., str],
) -> None:
    tenant = tenant_factory()
    produce_scores(settings, tenant, make_scores(tenant, 20))
    for _ in range(2):
        sink = InMemoryScoreSink()
        stats = await SinkRunner(Runtime(settings), sink, cursor=None).run(
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


def test_langfuse_500_then_429_then_timeouts_lose_nothing_and_never_pass_the_cursor(
    settings: Settings, tenant_factory: Callable[..., str],
    standin_factory: Callable[[], LangfuseStandIn], tmp_path: Path,
) -> None:
    import threading

    from tests.conftest import read_topic

    tenant = tenant_factory()
    topic = tenant_topics(tenant, settings.topic_prefix).scores
    waves = [make_scores(f"{tenant}{n}", 60) for n in range(3)]  # 180 scores each
    standin = standin_factory()
    sink = SinkProcess(settings.replace(langfuse_timeout=1.0, sink_max_backoff=1.0), standin,
                       tmp_path / "sink.log", "--cursor", "lf", "--no-sync-configs",
                       "--batch-size", "50")
    # Which score is at which offset, to check the cursor against what Langfuse holds.
    at: dict[tuple[str, int], dict[int, str]] = {}
    violations: list[str] = []
    checking = threading.Event()
    sampled = [0]

    def learn(expected: int) -> None:
        at.clear()
        for msg, record in read_topic(settings, topic, at_least=expected, settle=0.5):
            at.setdefault((msg.topic(), msg.partition()), {})[msg.offset()] = record["id"]

    def check_cursor() -> None:
        # Committed first, then the store: the store only grows, so a score missing from it
        # below the committed offset was committed before Langfuse took it.
        while not checking.is_set():
            cursor = committed(settings, "lf")
            stored = {s["id"] for s in standin.scores()}
            for tp, offset in cursor.items():
                missing = [i for o, i in at.get(tp, {}).items() if o < offset and i not in stored]
                if missing:
                    violations.append(f"{tp} committed {offset}, {len(missing)} not in Langfuse")
            sampled[0] += 1
            time.sleep(0.1)

    def answered(status: int) -> int:
        return sum(1 for r in standin.request_log() if r.status == status)

    checker = threading.Thread(target=check_cursor, daemon=True)
    try:
        standin.fail_next(4, 500)
        produce_scores(settings, tenant, waves[0])
        learn(180)
        checker.start()
        sink.start()
        wait_until(lambda: answered(500) >= 4, 120, "four 500 answers")
        wait_until(lambda: len(standin.scores()) >= 180, 120, "the first wave")
        wait_until(lambda: sum(committed(settings, "lf").values()) >= 180, 60, "its commit")
        standin.fail_next(4, 429)
        produce_scores(settings, tenant, waves[1])
        learn(360)
        wait_until(lambda: answered(429) >= 4, 120, "four 429 answers")
        wait_until(lambda: len(standin.scores()) >= 360, 120, "the second wave")
        wait_until(lambda: sum(committed(settings, "lf").values()) >= 360, 60, "its commit")
        standin.set_delay(2.5)  # answers after the sink's 1 s timeout
        before = standin.requests
        produce_scores(settings, tenant, waves[2])
        learn(540)
        wait_until(lambda: standin.requests >= before + 4, 120, "four timed-out requests")
        assert sum(committed(settings, "lf").values()) == 360  # the cursor waits
        standin.set_delay(0)
        wait_until(lambda: sum(committed(settings, "lf").values()) >= 540, 120, "the cursor")
        stored = keys(standin)
        assert len(stored) == len(set(stored)) == 540  # 0 lost, 0 duplicates
        assert {s.id for wave in waves for s in wave} == {key[0] for key in stored}
        assert sink.proc is not None and sink.proc.poll() is None
        sink.stop()
        assert sink.proc.returncode == 0
    finally:
        checking.set()
        if checker.is_alive():
            checker.join(30)
        sink.stop()
    assert sampled[0] > 0 and violations == []
    print(f"{standin.received_total} scores sent for 540; cursor checked {sampled[0]} times")


async def test_rejected_and_undecodable_records_are_dead_lettered_with_their_reason(
    settings: Settings, tenant_factory: Callable[..., str],
    standin_factory: Callable[[], LangfuseStandIn],
) -> None:
    from tests.conftest import read_topic

    tenant = tenant_factory()
    topics = tenant_topics(tenant, settings.topic_prefix)
    scores = make_scores(tenant, 20)
    produce_scores(settings, tenant, scores)
    producer = Producer({"bootstrap.servers": settings.bootstrap_servers})
    producer.produce(topics.scores, b"not avro at all", key=b"bad-1")
    producer.produce(topics.scores, b"\x00\x7f\xff\xff\xf0{}", key=b"bad-2")  # unknown id
    assert producer.flush(30) == 0
    standin = standin_factory()
    standin.reject_ids({scores[0].id, scores[4].id}, "no thanks")
    runner = SinkRunner(Runtime(settings), LangfuseScoreSink(client_for(standin)), cursor="lf")
    stats = await asyncio.wait_for(runner.run(until=lambda s: s.records >= 62), 120)
    assert (stats.scores, stats.rejected, stats.undecodable) == (60, 2, 2)
    assert sum(committed(settings, "lf").values()) == 62  # handed on or dead-lettered
    letters = [record for _msg, record in read_topic(settings, topics.deadletter, at_least=4)]
    assert len(letters) == 4
    reasons = [str(letter["reason"]) for letter in letters]
    assert sum(r.startswith("rejected by langfuse") and "no thanks" in r for r in reasons) == 2
    assert sum(r.startswith("undecodable score") for r in reasons) == 2
    assert {letter["stage"] for letter in letters} == {"sink:lf"}
    assert len(standin.scores()) == 58
