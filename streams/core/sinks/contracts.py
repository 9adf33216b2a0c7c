"""Contract suites any ScoreSink or ScoreConfigStore implementation's tests can run.

    await check_score_sink(MySink(...), stored=my_backend_keys)
    await check_score_config_store(MyStore(...))

They raise AssertionError naming the broken rule. `stored`, when given, reads back the
backend's stored scores as (id, name, UTC date) tuples, one per stored score, so the suite
can check that recording a score again replaces it instead of adding another.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import Field

from streams.core.feedback import Feedback, FeedbackRegistry
from streams.core.scores import Score, ScoreConfig, score_configs, scores_from_value
from streams.core.sinks.base import ScoreConfigStore, ScoreSink, flush_sink, rejected_of
from streams.core.sinks.configs import sync_score_configs

_TYPES = FeedbackRegistry()


class ContractSample(Feedback, name="contract_sample", targets={"run", "chain"},
                     registry=_TYPES):
    """One field of every scored kind."""

    flag: bool
    level: Literal["low", "high"]
    ratio: Annotated[float, Field(ge=0, le=1)]
    note: str


def sample_scores(run: str = "1") -> list[Score]:
    """Scores of every data type: one feedback on a trace, one on a session."""
    value = {"flag": True, "level": "high", "ratio": 0.25, "note": "contract"}
    when = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
    out: list[Score] = []
    for i, trace in enumerate(["0af7651916cd43dd8448eb211c80319c", None]):
        out += scores_from_value(
            score_configs(ContractSample), value, feedback_event_id=f"evt_contract_{run}_{i}",
            timestamp=when, tenant="contract", workspace="w", target_kind="run",
            target_id=f"run_{i}", participant="user:contract", trace_id=trace,
            session_id=f"evt_chain_{run}_{i}",
        )
    return out


def _keys(scores: Sequence[Score]) -> set[tuple[str, str, str]]:
    return {(s.id, s.name, s.timestamp.astimezone(UTC).date().isoformat()) for s in scores}


def _require(condition: bool, rule: str) -> None:
    if not condition:
        raise AssertionError(f"sink contract broken: {rule}")


async def check_score_sink(
    sink: ScoreSink,
    *,
    stored: Callable[[], Awaitable[Collection[tuple[str, str, str]]]] | None = None,
) -> None:
    """Check a sink against the ScoreSink contract (`record` returning None accepts all; a
    sink with a `flush` must allow it twice)."""
    _require(isinstance(sink, ScoreSink), "implements record()")
    _require(rejected_of(await sink.record([])) == [],
             "an empty batch records nothing, rejects nothing")
    batch = sample_scores()
    rejected = rejected_of(await sink.record(batch))
    _require(rejected == [], f"valid scores of every type are accepted, got {rejected}")
    again = rejected_of(await sink.record(batch))
    _require(again == [], "recording the same scores again is accepted")
    await flush_sink(sink)
    await flush_sink(sink)
    if stored is not None:
        keys = list(await stored())
        _require(_keys(batch) <= set(keys), "every recorded score is stored")
        _require(len([k for k in keys if k[0] in {s.id for s in batch}]) == len(batch),
                 "a score recorded twice is stored once (replaced by id, name and date)")


def _same(a: ScoreConfig, b: ScoreConfig) -> bool:
    return (a.name, a.data_type, a.min_value, a.max_value,
            tuple((c.label, c.value) for c in a.categories)) == (
        b.name, b.data_type, b.min_value, b.max_value,
        tuple((c.label, c.value) for c in b.categories))


async def check_score_config_store(store: ScoreConfigStore) -> None:
    """Check a store against the ScoreConfigStore contract (and sync_score_configs on it)."""
    _require(isinstance(store, ScoreConfigStore), "implements list() and create()")
    before = list(await store.list())
    wanted = list(score_configs(ContractSample))
    created = await sync_score_configs(store, [ContractSample])
    _require(sorted(created) == sorted(c.name for c in wanted)
             or all(any(_same(c, b) for b in before) for c in wanted if c.name not in created),
             "sync creates every config the store lacks")
    listed = list(await store.list())
    for config in wanted:
        _require(any(_same(config, got) for got in listed),
                 f"a created config lists back with its type, range and categories: "
                 f"{config.name}")
    _require(await sync_score_configs(store, [ContractSample]) == [],
             "syncing again creates nothing")
    names = [c.name for c in await store.list()]
    for config in wanted:
        _require(names.count(config.name) == 1, f"{config.name} exists once after two syncs")
