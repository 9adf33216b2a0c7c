import enum
from datetime import UTC, datetime
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from streams.core.actors import EvaluatorActor
from streams.core.events import Envelope, FeedbackGiven, Seq, TraceContext
from streams.core.feedback import Feedback, FeedbackRegistry
from streams.core.scores import score_configs, score_id, scores_of
from streams.core.targets import ChainTarget, RunTarget


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Nested(BaseModel):
    x: int


@pytest.fixture
def types() -> FeedbackRegistry:
    return FeedbackRegistry()


@pytest.fixture
def everything(types: FeedbackRegistry) -> type[Feedback]:
    class Everything(Feedback, name="everything", targets={"run", "chain"}, registry=types):
        ok: bool
        level: Literal["low", "high"]
        colour: Colour
        score: Annotated[float, Field(ge=0, le=1)]
        count: int
        text: str
        maybe: Annotated[int, Field(ge=0, le=10)] | None = None
        tags: list[str] = []
        nested: Nested | None = None

    return Everything


def test_each_field_maps_to_one_score_config(everything: type[Feedback]) -> None:
    configs = {c.name: c for c in score_configs(everything)}
    assert list(configs) == [
        "everything.ok", "everything.level", "everything.colour", "everything.score",
        "everything.count", "everything.text", "everything.maybe", "everything.tags",
    ]  # a list is scored as its count; a nested model is not scored
    assert configs["everything.ok"].data_type == "BOOLEAN"
    level = configs["everything.level"]
    assert level.data_type == "CATEGORICAL"
    assert [(c.label, c.value) for c in level.categories] == [("low", 0.0), ("high", 1.0)]
    assert [c.label for c in configs["everything.colour"].categories] == ["red", "blue"]
    score = configs["everything.score"]
    assert (score.data_type, score.min_value, score.max_value) == ("NUMERIC", 0.0, 1.0)
    assert configs["everything.count"].min_value is None
    assert configs["everything.text"].data_type == "TEXT"
    maybe = configs["everything.maybe"]
    assert (maybe.data_type, maybe.optional, maybe.max_value) == ("NUMERIC", True, 10.0)
    tags = configs["everything.tags"]
    assert (tags.data_type, tags.min_value, tags.max_value) == ("NUMERIC", 0, None)
    assert tags.description == "how many tags"


def _envelope(value: dict[str, object], *, trace: TraceContext | None = None,
              target_trace: str | None = None) -> Envelope:
    event = FeedbackGiven(feedback_type="everything", target=RunTarget(run_id="run_1"),
                          target_trace_id=target_trace, value=value)
    return Envelope.new(event, tenant="acme", workspace="prod",
                        actor=EvaluatorActor(name="judge", version="3"),
                        correlation_id="evt_chain", trace=trace,
                        time=datetime(2026, 11, 1, 12, 0, tzinfo=UTC),
                        ).model_copy(update={"seq": Seq(partition=1, offset=7)})


VALUE = {"ok": True, "level": "high", "colour": "blue", "score": 0.5, "count": 3,
         "text": "fine", "maybe": None, "tags": ["a"], "nested": None}


def test_scores_of_feedback(everything: type[Feedback], types: FeedbackRegistry) -> None:
    envelope = _envelope(VALUE, target_trace="ab" * 16)
    scores = scores_of(envelope, types=types)
    assert scores is not None
    by_name = {s.name: s for s in scores}
    assert "everything.maybe" not in by_name  # Optional without a value is not scored
    assert by_name["everything.ok"].value == 1.0
    assert by_name["everything.level"].value == "high"
    assert by_name["everything.colour"].value == "blue"
    assert by_name["everything.count"].value == 3.0
    assert by_name["everything.text"].value == "fine"
    assert by_name["everything.tags"].value == 1.0  # how many
    none = scores_of(_envelope({**VALUE, "tags": []}), types=types)
    assert none is not None and {s.name: s.value for s in none}["everything.tags"] == 0.0
    first = by_name["everything.ok"]
    assert first.trace_id == "ab" * 16 and first.session_id is None
    assert first.timestamp == envelope.time
    assert first.source.participant == "evaluator:judge@3"
    assert first.source.seq == "1:7"
    assert first.source.as_metadata()["target_kind"] == "run"
    assert first.id == score_id(envelope.event_id, "everything.ok")


def test_scores_attach_to_session_without_trace(
    everything: type[Feedback], types: FeedbackRegistry,
) -> None:
    scores = scores_of(_envelope({**VALUE, "maybe": 4}), types=types)
    assert scores is not None
    assert all(s.trace_id is None and s.session_id == "evt_chain" for s in scores)
    assert {s.name for s in scores} >= {"everything.maybe"}


def test_score_ids_are_deterministic_and_distinct() -> None:
    assert score_id("evt_1", "a.b") == score_id("evt_1", "a.b")
    assert score_id("evt_1", "a.b") != score_id("evt_2", "a.b")
    assert score_id("evt_1", "a.b") != score_id("evt_1", "a.c")


def test_unregistered_type_gives_none(types: FeedbackRegistry) -> None:
    event = FeedbackGiven(feedback_type="unknown", target=ChainTarget(correlation_id="e"),
                          value={})
    envelope = Envelope.new(event, tenant="acme", workspace="prod")
    assert scores_of(envelope, types=types) is None


def test_score_id_is_uuid5_of_event_and_name() -> None:
    import uuid

    from streams.core.scores import SCORE_ID_NAMESPACE

    for event_id, name in [("evt_1", "a.b"), ("evt_ü", "x.y"), ("", "")]:
        assert score_id(event_id, name) == str(uuid.uuid5(SCORE_ID_NAMESPACE,
                                                          f"{event_id}/{name}"))


def test_scores_carry_the_rule_and_action_of_the_run_they_judge() -> None:
    from streams.core.actors import UserActor
    from streams.core.events import Envelope, FeedbackGiven
    from streams.core.scores import scores_of
    from streams.core.targets import RunTarget
    from streams.examples.ops import TriageQuality

    event = FeedbackGiven(feedback_type="triage_quality", target=RunTarget(run_id="run_1"),
                          value={"correct": True, "severity": "low", "note": None},
                          target_rule="ops:error-spike", target_action="triage")
    envelope = Envelope.new(event, tenant="acme", workspace="prod", actor=UserActor(id="ada"))
    assert TriageQuality.feedback_name == "triage_quality"
    scores = scores_of(envelope)
    assert scores and {(s.source.rule, s.source.action) for s in scores} == {
        ("ops:error-spike", "triage")}
    metadata = scores[0].source.as_metadata()
    assert (metadata["rule"], metadata["action"]) == ("ops:error-spike", "triage")
    bare = scores_of(Envelope.new(event.model_copy(update={"target_rule": None,
                                                           "target_action": None}),
                                  tenant="acme", workspace="prod", actor=UserActor(id="ada")))
    assert bare and "rule" not in bare[0].source.as_metadata()
