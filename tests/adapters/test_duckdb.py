"""The DuckDB warehouse sink: the sink contract, upserts by Langfuse's key, SQL on scores, and
its offset store (rows and consumer offsets in one transaction)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest

from streams.adapters.duckdb import _ROWS_PER_STATEMENT, TABLE, DuckDBScoreSink
from streams.core.errors import SinkError
from streams.core.scores import Score
from streams.core.sinks import OffsetStoringSink, stores_offsets
from streams.core.sinks.contracts import check_score_sink, sample_scores
from tests.conftest import REPO


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


# -- the offset store: rows and offsets in one transaction (no broker) ----------------------

GROUP = "fs.sink.warehouse"


async def test_rows_and_offsets_are_stored_together_and_offsets_never_go_back(
        tmp_path: Path) -> None:
    path = tmp_path / "scores.duckdb"
    sink = DuckDBScoreSink(path)
    assert isinstance(sink, OffsetStoringSink) and stores_offsets(sink)
    assert sink.offsets(GROUP) == {}
    scores = sample_scores()
    await sink.write(scores[:4], {("fs.a.scores", 0): 4}, group=GROUP)
    await sink.write(scores[4:], {("fs.a.scores", 0): 7, ("fs.a.scores", 1): 2}, group=GROUP)
    assert sink.offsets(GROUP) == {("fs.a.scores", 0): 7, ("fs.a.scores", 1): 2}
    # Another group's offsets are its own.
    await sink.write([], {("fs.a.scores", 0): 1}, group="fs.sink.other")
    assert sink.offsets("fs.sink.other") == {("fs.a.scores", 0): 1}
    # A replay writes the rows again, and leaves the offsets where they were.
    await sink.write(scores[:4], {("fs.a.scores", 0): 4}, group=GROUP)
    assert sink.offsets(GROUP) == {("fs.a.scores", 0): 7, ("fs.a.scores", 1): 2}
    assert sink.query("select count(*), count(distinct (id, name, day)) from scores") == [
        (len(scores), len(scores))]
    sink.close()
    again = DuckDBScoreSink(path)  # the file holds both after a reopen
    assert again.offsets(GROUP) == {("fs.a.scores", 0): 7, ("fs.a.scores", 1): 2}
    again.close()


async def test_a_failed_write_stores_neither_rows_nor_offsets(tmp_path: Path) -> None:
    sink = DuckDBScoreSink(tmp_path / "scores.duckdb")
    scores = sample_scores()
    await sink.write(scores[:2], {("t", 0): 2}, group=GROUP)
    # A row DuckDB refuses (a NULL in a NOT NULL column) fails the whole transaction.
    broken = replace(scores[2], name=None)  # type: ignore[arg-type]
    with pytest.raises(SinkError, match="DuckDB refused"):
        await sink.write([scores[3], broken], {("t", 0): 4}, group=GROUP)
    assert sink.offsets(GROUP) == {("t", 0): 2}
    assert sink.query("select count(*) from scores") == [(2,)]
    sink.close()


def _many(n: int) -> list[Score]:
    """`n` scores of distinct ids (the sample's first, renumbered)."""
    first = sample_scores()[0]
    return [replace(first, id=f"{first.id}-{i}", value=float(i % 2)) for i in range(n)]


async def test_a_batch_of_several_statements_is_one_transaction(tmp_path: Path) -> None:
    # The upsert writes a batch as multi-row statements of _ROWS_PER_STATEMENT rows: a batch
    # of two and a bit statements, with keys repeated across them, stores each key once
    # (the last value), and a row refused in the last statement undoes the earlier ones.
    sink = DuckDBScoreSink(tmp_path / "scores.duckdb")
    n = 2 * _ROWS_PER_STATEMENT + 7
    scores = _many(n)
    repeated = [replace(s, value=1.0 - s.value) for s in scores[:_ROWS_PER_STATEMENT + 3]]
    await sink.write([*scores, *repeated], {("t", 0): n}, group=GROUP)
    assert sink.query("select count(*), count(distinct id) from scores") == [(n, n)]
    wanted = {s.id: s.value for s in [*scores, *repeated]}
    assert dict(sink.query("select id, numeric_value from scores")) == wanted
    broken = replace(scores[0], id="broken", name=None)  # type: ignore[arg-type]
    more = [replace(s, id=f"more-{s.id}") for s in scores]
    with pytest.raises(SinkError, match="DuckDB refused"):
        await sink.write([*more, broken], {("t", 0): 2 * n}, group=GROUP)
    assert sink.query("select count(*) from scores") == [(n,)]
    assert sink.offsets(GROUP) == {("t", 0): n}
    sink.close()


def test_a_file_made_before_the_offsets_table_gains_it_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute(TABLE)
    sink = DuckDBScoreSink(path)
    assert sink.offsets(GROUP) == {}  # the runner falls back to the committed cursor
    sink.close()


def test_a_second_writer_of_the_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "scores.duckdb"
    code = (f"from streams.adapters.duckdb import DuckDBScoreSink\n"
            f"s = DuckDBScoreSink({str(path)!r}); s.query('select 1')\n"
            "import sys; sys.stdout.write('open'); sys.stdout.flush(); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, cwd=REPO)
    try:
        assert holder.stdout is not None and holder.stdout.read(4) == b"open"
        with pytest.raises(SinkError, match="is another process writing to it"):
            DuckDBScoreSink(path).query("select 1")
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(30)
