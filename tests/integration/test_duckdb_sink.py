"""The DuckDB warehouse on the real broker: feedback given, mirrored by a worker, carried by
`streams sink duckdb` (a child process) into a file with its offsets; a replay adds nothing
and leaves the offsets; SQL answers; scores of an aborted transaction never arrive."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
from confluent_kafka import Producer

from streams.adapters.avro.codec import score_to_record
from streams.adapters.avro.serde import AvroSerde
from streams.core.actors import UserActor
from streams.core.events import AppEvent, RunStarted
from streams.core.targets import ChainTarget, RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import Resolution, TriageQuality
from streams.runtime.sink.runner import cursor_group
from streams.settings import Settings
from tests.conftest import REPO, WorkerProcess, wait_until
from tests.integration.test_feedback_mirror import end_offsets
from tests.integration.test_sinks import make_scores


def after_last_records(settings: Settings, topic: str) -> dict[tuple[str, int], int]:
    """The offset after the last record a read_committed reader is handed, per partition
    of `topic` that has records (what a sink that stores its offsets stores)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers,
                         "group.id": "after-last", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out: dict[tuple[str, int], int] = {}
        while batch := consumer.consume(1000, 3.0):
            for msg in batch:
                if msg.error() is None:
                    out[(topic, msg.partition() or 0)] = (msg.offset() or 0) + 1
        return out
    finally:
        consumer.close()

RUNS = 10
SCORES = RUNS * 4  # triage_quality: correct, severity (no note); resolution: resolved, minutes


class DuckDBSinkProcess:
    """`python -m streams sink duckdb ...` with its stats lines in a log file."""

    def __init__(self, settings: Settings, log: Path, *args: str) -> None:
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streams", "sink", "duckdb", *args,
                 "--stats-interval", "0.3"],
                env=settings.child_env(), stdout=out, stderr=subprocess.STDOUT, cwd=REPO)

    def scores(self) -> int:
        """Scores the sink handed on, from its latest stats line (0 before the first)."""
        lines = [line for line in self.log.read_text(errors="replace").splitlines()
                 if line.startswith('{"sink_stats"')]
        return int(json.loads(lines[-1])["sink_stats"]["scores"]) if lines else 0

    def stop(self) -> int:
        """SIGTERM; the exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(sql).fetchall()


async def test_scores_reach_the_warehouse_and_a_replay_adds_nothing(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    tenant = tenant_factory()
    worker_factory()
    ada = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    for i in range(RUNS):
        spike = await ada.append(AppEvent(name="ops:error_spike"))
        await ada.append(RunStarted(run_id=f"run_{i}", rule="ops:error-spike",
                                    action="triage", firing_id=f"fir_{i}"),
                         correlation_id=spike.id, causation_id=spike.id)
        await ada.give_feedback(TriageQuality(correct=i % 2 == 0, severity="high"),
                                on=RunTarget(run_id=f"run_{i}"))
        await ada.give_feedback(Resolution(resolved=True, minutes_to_mitigate=10 * (i + 1)),
                                on=ChainTarget(correlation_id=spike.id))

    path = tmp_path / "warehouse.duckdb"
    sink = DuckDBSinkProcess(settings, tmp_path / "sink.log", "--path", str(path),
                             "--cursor", "warehouse")
    wait_until(lambda: sink.scores() >= SCORES or sink.proc.poll() is not None, 120,
               f"{SCORES} scores through the DuckDB sink")
    assert sink.stop() == 0, (tmp_path / "sink.log").read_text()
    assert sink.scores() == SCORES
    assert rows(path, "select count(*) from scores") == [(SCORES,)]
    topic = tenant_topics(tenant, settings.topic_prefix).scores
    group = cursor_group(settings, "warehouse")
    offsets_sql = ("select topic, partition, next_offset from sink_offsets "
                   f"where consumer_group = '{group}'")
    stored = {(t, p): o for t, p, o in rows(path, offsets_sql)}
    # After the last record of each partition: under exactly once the end offset is one
    # further, the transaction's marker, which no reader is handed.
    assert stored == after_last_records(settings, topic)
    assert all(stored[tp] <= end for tp, end in end_offsets(settings, topic).items())

    replay = DuckDBSinkProcess(settings, tmp_path / "replay.log", "--path", str(path),
                               "--cursor", "warehouse", "--replay")
    wait_until(lambda: replay.scores() >= SCORES or replay.proc.poll() is not None, 120,
               "the replay to hand on every score again")
    assert replay.stop() == 0, (tmp_path / "replay.log").read_text()
    assert replay.scores() == SCORES
    assert rows(path, "select count(*) from scores") == [(SCORES,)]
    assert {(t, p): o for t, p, o in rows(path, offsets_sql)} == stored

    averages = dict(rows(path, "select name, avg(numeric_value) from scores "
                               "where numeric_value is not null group by name"))
    assert averages == {"triage_quality.correct": 0.5, "resolution.resolved": 1.0,
                        "resolution.minutes_to_mitigate": 55.0}
    assert rows(path, "select tenant, workspace, count(distinct feedback_event_id) "
                      "from scores group by all") == [(tenant, "prod", RUNS * 2)]


def test_scores_of_an_aborted_transaction_never_reach_the_warehouse(
    settings: Settings, tenant_factory: Callable[..., str], tmp_path: Path,
) -> None:
    tenant = tenant_factory(partitions=1)
    topic = tenant_topics(tenant, settings.topic_prefix).scores
    serde = AvroSerde(settings.schema_registry_url)
    producer = Producer({"bootstrap.servers": settings.bootstrap_servers,
                         "transactional.id": f"{tenant}-writer"})
    producer.init_transactions(30)
    made = make_scores(tenant, 40)  # 3 scores each
    aborted, kept = made[:60], made[60:]
    for scores, commit in ((aborted, False), (kept, True)):
        producer.begin_transaction()
        for score in scores:
            producer.produce(topic, serde.encode_score(score_to_record(score), topic),
                             key=score.source.feedback_event_id.encode())
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    path = tmp_path / "warehouse.duckdb"
    sink = DuckDBSinkProcess(settings, tmp_path / "sink.log", "--path", str(path))
    wait_until(lambda: sink.scores() >= len(kept) or sink.proc.poll() is not None, 120,
               "the committed scores through the DuckDB sink")
    assert sink.stop() == 0, (tmp_path / "sink.log").read_text()
    assert sink.scores() == len(kept)  # read_committed: the aborted ones are never read
    assert {i for (i,) in rows(path, "select id from scores")} == {s.id for s in kept}
