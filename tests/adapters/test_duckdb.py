"""The DuckDB warehouse sink: the sink contract, upserts by Langfuse's key, SQL on scores."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from streams.adapters.duckdb import DuckDBScoreSink
from streams.core.sinks.contracts import check_score_sink, sample_scores


async def test_meets_the_sink_contract(tmp_path: Path) -> None:
    sink = DuckDBScoreSink(tmp_path / "scores.duckdb")

    async def stored() -> list[tuple[str, str, str]]:
        return [(i, n, d.isoformat()) for i, n, d in sink.query("select id, name, day from scores")]

    await check_score_sink(sink, stored=stored)
    sink.close()


async def test_a_replay_adds_nothing_and_a_resend_another_day_adds_one(tmp_path: Path) -> None:
    path = tmp_path / "scores.duckdb"
    sink = DuckDBScoreSink(path)
    scores = sample_scores()
    await sink.record(scores)
    await sink.record(scores)
    assert sink.query("select count(*) from scores") == [(len(scores),)]
    moved = replace(scores[0], timestamp=scores[0].timestamp + timedelta(days=1))
    await sink.record([moved])
    assert sink.query("select count(*) from scores") == [(len(scores) + 1,)]
    sink.close()
    # The file is the warehouse: a new connection sees every score, queryable with SQL.
    again = DuckDBScoreSink(path)
    rows = again.query("select data_type, count(*) from scores group by 1 order by 1")
    assert rows == [("BOOLEAN", 3), ("CATEGORICAL", 2), ("NUMERIC", 2), ("TEXT", 2)]
    assert again.query("select distinct tenant, participant from scores") == [
        ("contract", "user:contract")]
    again.close()


async def test_the_last_score_of_a_key_in_one_batch_wins(tmp_path: Path) -> None:
    sink = DuckDBScoreSink(":memory:")
    first = sample_scores()[0]
    later = replace(first, value=0.0 if first.value == 1.0 else 1.0)
    await sink.record([first, later])
    assert sink.query("select numeric_value from scores where id = ?", [first.id]) == [
        (later.value,)]
