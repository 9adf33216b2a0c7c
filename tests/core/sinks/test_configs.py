from typing import Literal

import pytest

from streams.core.errors import ScoreConfigError
from streams.core.feedback import Feedback, FeedbackRegistry
from streams.core.sinks.configs import sync_score_configs
from streams.core.sinks.memory import InMemoryScoreConfigStore
from streams.examples.ops import Resolution, ShouldHaveFired, TriageQuality


async def test_sync_creates_missing_configs_once() -> None:
    store = InMemoryScoreConfigStore()
    types = [TriageQuality, ShouldHaveFired, Resolution]
    created = await sync_score_configs(store, types)
    assert created == [
        "triage_quality.correct", "triage_quality.severity", "triage_quality.note",
        "should_have_fired.fired_rightly", "resolution.resolved",
        "resolution.minutes_to_mitigate",
    ]
    assert await sync_score_configs(store, types) == []
    assert len(store.configs) == 6
    severity = next(c for c in store.configs if c.name == "triage_quality.severity")
    assert [c.label for c in severity.categories] == ["low", "high", "critical"]


async def test_sync_leaves_existing_configs_alone() -> None:
    store = InMemoryScoreConfigStore()
    await sync_score_configs(store, [Resolution])
    before = list(store.configs)
    created = await sync_score_configs(store, [TriageQuality, Resolution])
    assert created == ["triage_quality.correct", "triage_quality.severity",
                       "triage_quality.note"]
    assert store.configs[:2] == before


async def test_too_long_name_refused_before_anything_is_sent() -> None:
    types = FeedbackRegistry()

    class Verbose(Feedback, name="a_rather_long_feedback_type_name", targets={"run"},
                  registry=types):
        ok: bool
        explanation_of_the_verdict: Literal["a", "b"]

    store = InMemoryScoreConfigStore()
    with pytest.raises(ScoreConfigError) as caught:
        await sync_score_configs(store, [Verbose])
    message = str(caught.value)
    assert "a_rather_long_feedback_type_name" in message
    assert "explanation_of_the_verdict" in message or "'ok'" in message
    assert "shorter name=" in message
    assert store.configs == []
