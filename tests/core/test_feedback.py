import enum
from typing import Annotated, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from streams.core.errors import ValidationFailed
from streams.core.feedback import (
    Feedback,
    FeedbackRegistry,
    _refuse_numbers,
    _wire_ok,
    snake_case,
    validate_feedback,
)


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


_CHECKS = FeedbackRegistry()


class _Bounded(Feedback, name="bounded_for_checks", targets={"run"}, registry=_CHECKS):
    minutes: Annotated[int, Field(ge=0, le=1440)] | None = None
    count: int = 0
    ratio: float = 0.0


def test_an_instance_built_without_validation_is_refused() -> None:
    sneaky = _Bounded.model_construct(minutes=99999)
    with pytest.raises(ValidationFailed, match="minutes"):
        validate_feedback(sneaky)


def test_a_value_that_is_not_a_mapping_is_refused_with_what_to_give() -> None:
    with pytest.raises(ValidationFailed, match="must be a mapping"):
        validate_feedback(7, "bounded_for_checks", _CHECKS)  # type: ignore[arg-type]


@pytest.mark.parametrize("big", [2**63, -(2**63) - 1, 10**30])
def test_integers_beyond_avro_long_are_refused_naming_the_field(big: int) -> None:
    with pytest.raises(ValidationFailed, match=r"bounded_for_checks\.count.*64-bit"):
        validate_feedback({"count": big}, "bounded_for_checks", _CHECKS)


def test_avro_long_limits_are_accepted() -> None:
    for edge in (2**63 - 1, -(2**63)):
        assert validate_feedback({"count": edge}, "bounded_for_checks", _CHECKS).count == edge  # type: ignore[attr-defined]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_numbers_that_are_not_finite_are_refused(bad: float) -> None:
    with pytest.raises(ValidationFailed, match=r"ratio.*finite"):
        validate_feedback({"ratio": bad}, "bounded_for_checks", _CHECKS)


def test_a_type_name_that_contradicts_the_instance_is_refused() -> None:
    with pytest.raises(ValidationFailed, match="does not match"):
        validate_feedback(_Bounded(), "triage_quality")


def test_validation_errors_name_the_field() -> None:
    with pytest.raises(ValidationFailed, match=r"minutes: Input should be less than or equal"):
        validate_feedback({"minutes": 2000}, "bounded_for_checks", _CHECKS)


def test_an_empty_registry_is_still_chosen_over_the_default() -> None:
    empty = FeedbackRegistry()
    assert (empty or None) is empty
    with pytest.raises(ValidationFailed, match="unknown feedback type 'triage_quality'"):
        validate_feedback({"correct": True}, "triage_quality", empty)


class _Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class _Nested(BaseModel):
    level: Literal[1, 2]


@pytest.mark.parametrize(("annotation", "named"), [
    (Literal[1, 2], "only Literal of strings"),
    (_Priority, "cannot be Avro enum symbols"),
    (Literal["ok", "not ok"], "cannot be Avro enum symbols"),
    (list[Literal[1, 2]], "only Literal of strings"),
    (_Nested, "x.level: only Literal of strings"),
    (int | str, "unions other than Optional"),
])
def test_a_field_that_could_never_be_written_is_refused_at_definition(
        types: FeedbackRegistry, annotation: object, named: str) -> None:
    with pytest.raises(TypeError, match="cannot be written") as raised:
        type("Unwritable", (Feedback,), {"__annotations__": {"x": annotation}},
             name="unwritable", targets={"run"}, registry=types)
    assert named in str(raised.value)
    assert "x" in str(raised.value)
    # Refused before registration: the name is free for a type that can be written.
    assert types.get("unwritable") is None

    class Writable(Feedback, name="unwritable", targets={"run"}, registry=types):
        x: Literal["p1", "p2"]

    assert types.get("unwritable") is Writable


_wire_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=6)
    | st.sampled_from(["\ud800", "ok \udfff", "é", ""]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.text(max_size=4) | st.sampled_from(["\udc80"]), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(_wire_values)
def test_the_quick_wire_check_agrees_with_the_one_that_names_the_field(value: object) -> None:
    # check_plain_value first asks _wire_ok (no field paths built) and builds the paths only
    # for a value it refuses: the two must refuse exactly the same values.
    try:
        _refuse_numbers(value, "v")
    except ValidationFailed:
        refused = True
    else:
        refused = False
    assert _wire_ok(value) is not refused
