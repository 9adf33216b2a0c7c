from typing import Literal

import pytest

from streams.core.errors import ValidationFailed
from streams.core.feedback import Feedback, FeedbackRegistry, snake_case, validate_feedback


@pytest.fixture
def types() -> FeedbackRegistry:
    return FeedbackRegistry()


def test_registered_by_explicit_name(types: FeedbackRegistry) -> None:
    class Quality(Feedback, name="quality_x", targets={"run"}, registry=types):
        ok: bool

    assert Quality.feedback_name == "quality_x"
    assert types.get("quality_x") is Quality
    assert Quality.feedback_targets == frozenset({"run"})


def test_registered_by_snake_case_of_class_name(types: FeedbackRegistry) -> None:
    class ShouldHaveFiredX(Feedback, targets={"firing"}, registry=types):
        fired_rightly: bool

    assert ShouldHaveFiredX.feedback_name == "should_have_fired_x"
    assert "should_have_fired_x" in types


def test_snake_case() -> None:
    assert snake_case("ShouldHaveFired") == "should_have_fired"
    assert snake_case("HTTPError") == "http_error"


def test_type_without_targets_raises_at_definition(types: FeedbackRegistry) -> None:
    with pytest.raises(TypeError, match="declares no targets"):
        class NoTargets(Feedback, registry=types):
            ok: bool


def test_unknown_target_kind_raises(types: FeedbackRegistry) -> None:
    with pytest.raises(TypeError, match="targets must be a set"):
        class Bad(Feedback, targets={"trace"}, registry=types):
            ok: bool


def test_abstract_base_is_not_registered_and_passes_targets_down(
    types: FeedbackRegistry,
) -> None:
    class Judged(Feedback, abstract=True, targets={"run", "chain"}, registry=types):
        confidence: float = 1.0

    class Verdict(Judged, registry=types):
        correct: bool

    assert len(types) == 1
    assert Verdict.feedback_targets == frozenset({"run", "chain"})
    assert set(Verdict.model_fields) == {"confidence", "correct"}


def test_second_type_with_registered_name_is_refused(types: FeedbackRegistry) -> None:
    class First(Feedback, name="dup", targets={"run"}, registry=types):
        ok: bool

    with pytest.raises(TypeError, match="already registered"):
        class Second(Feedback, name="dup", targets={"run"}, registry=types):
            ok: bool

    assert types.get("dup") is First


def test_invalid_name_refused(types: FeedbackRegistry) -> None:
    with pytest.raises(TypeError, match="must match"):
        class Named(Feedback, name="Has Space", targets={"run"}, registry=types):
            ok: bool


def test_validate_mapping_against_registered_type(types: FeedbackRegistry) -> None:
    class Sev(Feedback, name="sev", targets={"run"}, registry=types):
        level: Literal["low", "high"]

    value = validate_feedback({"level": "high"}, "sev", types)
    assert isinstance(value, Sev)
    with pytest.raises(ValidationFailed, match="invalid sev value"):
        validate_feedback({"level": "medium"}, "sev", types)
    with pytest.raises(ValidationFailed, match="unknown feedback type"):
        validate_feedback({"level": "high"}, "nope", types)
