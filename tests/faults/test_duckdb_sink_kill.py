"""The DuckDB sink exactly once across SIGKILLs: `streams sink duckdb` processes killed
mid-stream (three times over 4,500 scores) and restarted; after each kill the file holds
exactly the records below the offsets it stores, and at the end every score id once, row
count = distinct ids = scores produced, the stored offsets = the topic's end offsets.

And the one-writer rule: a second sink process on the same file (same cursor, so the same
consumer group) is refused at start by DuckDB's file lock, exit 2, and changes nothing; once
the first is SIGKILLed mid-batch, the second starts and finishes the work, each score once.

And the cursor: a Kafka cursor behind the file's offsets is committed up to them by the next
process, even when it has nothing more to read."""

from __future__ import annotations

import signal
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from streams.adapters.avro.codec import score_to_record
from streams.adapters.avro.serde import AvroSerde
from streams.core.scores import Score, score_configs, scores_from_value
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.runtime.sink.runner import cursor_group
from streams.settings import Settings
from tests.conftest import wait_until
from tests.integration.test_duckdb_sink import DuckDBSinkProcess
from tests.integration.test_feedback_mirror import committed, end_offsets

CHUNK = 500  # feedback events per chunk, 3 scores each
CHUNKS = 3
SCORES = CHUNK * 3 * CHUNKS


def make_scores(tenant: str, start: int, n: int) -> list[Score]:
    """The scores of `n` TriageQuality verdicts (3 each, unique ids)."""
    configs = score_configs(TriageQuality)
    out: list[Score] = []
    for i in range(start, start + n):
        out += scores_from_value(
            configs, {"correct": i % 2 == 0, "severity": "high", "note": f"n{i}"},
            feedback_event_id=f"evt_{tenant}_{i}", timestamp=datetime.now(UTC),
            tenant=tenant, workspace="prod", target_kind="run", target_id=f"run_{i}",
            participant="user:ada", trace_id=None, session_id=f"chain_{i}", seq=f"0:{i}")
    return out


def produce(settings: Settings, tenant: str, scores: list[Score]) -> None:
    """Each score once on the tenant's scores topic (an idempotent producer: no record is
    written twice, so offsets count scores)."""
    topic = tenant_topics(tenant, settings.topic_prefix).scores
    serde = AvroSerde(settings.schema_registry_url)
    producer = Producer({"bootstrap.servers": settings.bootstrap_servers, "linger.ms": 5,
                         "enable.idempotence": True})
    for score in scores:
        producer.produce(topic, serde.encode_score(score_to_record(score), topic),
                         key=score.source.feedback_event_id.encode())
    assert producer.flush(30) == 0


def warehouse(path: Path, group: str) -> tuple[int, int, set[str], dict[tuple[str, int], int]]:
    """What the file holds: rows, distinct (id, name, day), the ids, the group's offsets."""
    with duckdb.connect(str(path), read_only=True) as con:
        rows, distinct = con.execute(
            "select count(*), count(distinct (id, name, day)) from scores").fetchone() or (0, 0)
        ids = {i for (i,) in con.execute("select id from scores").fetchall()}
        stored = {(t, p): o for t, p, o in con.execute(
            "select topic, partition, next_offset from sink_offsets "
            "where consumer_group = ?", [group]).fetchall()}
    return rows, distinct, ids, stored


def warehouse_case(settings: Settings, tenant_factory: Callable[..., str], tmp_path: Path,
                   partitions: int) -> tuple[str, str, str, Path, tuple[str, ...]]:
    """A fresh tenant with `partitions` partitions: (tenant, its scores topic, the sink
    cursor's group, the DuckDB file, the `streams sink duckdb` arguments: batches of 5)."""
    tenant = tenant_factory(partitions=partitions)
    path = tmp_path / "warehouse.duckdb"
    return (tenant, tenant_topics(tenant, settings.topic_prefix).scores,
            cursor_group(settings, "warehouse"), path,
            ("--path", str(path), "--cursor", "warehouse", "--batch-size", "5"))


def reach_end(settings: Settings, sink: DuckDBSinkProcess, topic: str, path: Path,
              timeout: float, what: str) -> None:
    """Wait until the sink's cursor is at the topic's end offsets (or the sink exits); on a
    timeout, fail with the cursor, the file's offsets and the sink's log."""
    group = cursor_group(settings, "warehouse")
    ends = end_offsets(settings, topic)
    try:
        wait_until(lambda: committed(settings, group) == ends or sink.proc.poll() is not None,
                   timeout, what)
    except pytest.fail.Exception:
        stored = warehouse(path, group)[3] if path.exists() else {}
        pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}: cursor "
                    f"{committed(settings, group)}, file {stored}, end offsets {ends}; the "
                    f"sink's log:\n{sink.log.read_text(errors='replace')[-4000:]}")


def kill(sink: DuckDBSinkProcess) -> None:
    sink.proc.send_signal(signal.SIGKILL)
    sink.proc.wait(30)
    assert sink.proc.returncode == -signal.SIGKILL


def test_sigkilled_three_times_the_warehouse_holds_each_score_exactly_once(
    settings: Settings, tenant_factory: Callable[..., str], tmp_path: Path,
) -> None:
    tenant, topic, group, path, args = warehouse_case(settings, tenant_factory, tmp_path, 3)
    expected: set[str] = set()
    # The whole stream is on the topic before the first start, so every kill is mid-stream.
    for k in range(CHUNKS):
        chunk = make_scores(tenant, k * CHUNK, CHUNK)
        produce(settings, tenant, chunk)
        expected |= {s.id for s in chunk}
    assert len(expected) == SCORES
    figures: list[str] = []
    for k in range(3):
        sink = DuckDBSinkProcess(settings, tmp_path / f"sink{k}.log", *args)
        before = warehouse(path, group)[0] if path.exists() else 0
        # Killed once it has written a quarter of the stream: kills at about a quarter, a
        # half and three quarters of it, wherever a batch stands then.
        wait_until(lambda sink=sink: sink.scores() >= SCORES // 4
                   or sink.proc.poll() is not None, 120, f"sink {k} to write")
        kill(sink)
        rows, distinct, ids, stored = warehouse(path, group)
        # Exactly the records below the stored offsets (one score a record): nothing of a
        # batch whose transaction the kill cut, nothing twice.
        assert rows == distinct == len(ids) == sum(stored.values()), (rows, stored)
        assert ids <= expected
        assert before < rows < SCORES, f"kill {k} did not land mid-stream: {rows} rows"
        behind = sum(stored.values()) - sum(committed(settings, group).values())
        figures.append(f"kill {k + 1}: {rows} rows, Kafka cursor {behind} records behind "
                       "the file's offsets")
    left = SCORES - rows
    last = DuckDBSinkProcess(settings, tmp_path / "sink3.log", *args)
    reach_end(settings, last, topic, path, 180, "the last sink to reach the end")
    assert last.stop() == 0, (tmp_path / "sink3.log").read_text()[-3000:]
    # It started at the file's offsets, not the Kafka cursor: it handed the sink exactly
    # the scores the file lacked (its final stats line is exact), none of them again.
    assert last.scores() == left, (last.scores(), left)
    rows, distinct, ids, stored = warehouse(path, group)
    assert rows == distinct == len(ids) == SCORES
    assert ids == expected
    assert stored == end_offsets(settings, topic)
    assert committed(settings, group) == stored  # the progress marker caught up
    print(f"{SCORES} scores, 3 SIGKILLs ({'; '.join(figures)}); the last process wrote "
          f"{left}: {rows} rows, {distinct} distinct, 0 lost, 0 twice; sink_offsets = end "
          f"offsets {sorted(stored.values())}")


def test_one_writer_per_file_a_second_is_refused_then_takes_over_after_a_kill(
    settings: Settings, tenant_factory: Callable[..., str], tmp_path: Path,
) -> None:
    tenant, topic, group, path, args = warehouse_case(settings, tenant_factory, tmp_path, 3)
    scores = make_scores(tenant, 0, 300)  # 900 scores, as in the measurement
    produce(settings, tenant, scores)
    first = DuckDBSinkProcess(settings, tmp_path / "first.log", *args)
    wait_until(lambda: first.scores() >= 10 or first.proc.poll() is not None, 120,
               "the first sink to write")
    # A second process of the same group on the same file: DuckDB's lock refuses it before
    # it joins the group, so it takes no partition from the first.
    second = DuckDBSinkProcess(settings, tmp_path / "second.log", *args)
    assert second.proc.wait(60) == 2
    said = (tmp_path / "second.log").read_text()
    assert "is another process writing to it?" in said, said
    assert first.proc.poll() is None
    kill(first)  # mid-batch: the first has been writing for a while
    rows, _distinct, _ids, stored = warehouse(path, group)
    assert 0 < rows == sum(stored.values()) < len(scores), rows
    behind = rows - sum(committed(settings, group).values())
    # The standby takes over (a supervisor restarting it, say) from the file's offsets.
    standby = DuckDBSinkProcess(settings, tmp_path / "standby.log", *args)
    reach_end(settings, standby, topic, path, 180, "the standby to reach the end")
    assert standby.stop() == 0, (tmp_path / "standby.log").read_text()[-3000:]
    assert standby.scores() == len(scores) - rows  # from the file's offsets: none again
    killed_at = rows
    rows, distinct, ids, stored = warehouse(path, group)
    assert rows == distinct == len(ids) == len(scores)
    assert ids == {s.id for s in scores}
    assert stored == end_offsets(settings, topic)
    print(f"{len(scores)} scores, two sink processes on one file and cursor: the second "
          f"refused (exit 2), the first SIGKILLed at {killed_at} rows (Kafka cursor {behind} "
          f"behind), the second restarted and wrote {standby.scores()}: {rows} rows, "
          f"{distinct} distinct")


def test_a_cursor_behind_the_files_offsets_catches_up_with_nothing_more_to_read(
    settings: Settings, tenant_factory: Callable[..., str], tmp_path: Path,
) -> None:
    # What a kill between a partition's last transaction and its commit leaves: the file
    # holds the whole partition, the Kafka cursor lags it. The next process starts at the
    # file's offsets and reads nothing; it must still commit them, or the group's lag shows
    # held records for ever (and a wait for the cursor, like the tests above, never ends).
    tenant, topic, group, path, args = warehouse_case(settings, tenant_factory, tmp_path, 2)
    scores = make_scores(tenant, 0, 20)  # 60 scores
    produce(settings, tenant, scores)
    ends = end_offsets(settings, topic)
    first = DuckDBSinkProcess(settings, tmp_path / "first.log", *args)
    reach_end(settings, first, topic, path, 120, "the first sink to reach the end")
    assert first.stop() == 0, (tmp_path / "first.log").read_text()[-3000:]
    # The cursor of partition 0 set back to 0 (the group is empty now): the file is ahead.
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    owner = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])[group].result(30).topic_partitions[0].metadata
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, 0, 0, metadata=owner)])])[group].result(30)
    assert committed(settings, group)[(topic, 0)] == 0
    second = DuckDBSinkProcess(settings, tmp_path / "second.log", *args)
    reach_end(settings, second, topic, path, 120, "the cursor to catch up with the file's "
              "offsets")
    assert second.stop() == 0, (tmp_path / "second.log").read_text()[-3000:]
    assert second.scores() == 0  # nothing read or written again
    rows, distinct, _ids, stored = warehouse(path, group)
    assert rows == distinct == len(scores) and stored == ends
