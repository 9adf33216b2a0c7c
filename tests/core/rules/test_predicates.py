"""Paths and predicates: comparisons, combinators, missing paths."""

import copy
import pickle

from streams.core.actors import EvaluatorActor
from streams.core.events import (
    AppEvent,
    FeedbackGiven,
)
from streams.core.rules import (
    MISSING,
    F,
    all_of,
    any_of,
    not_,
    on,
)
from tests.core.rules.samples import (
    T0,
    WRONG_TRIAGE,
    envelope,
    feedback,
    spike,
)


def test_eq_keeps_json_booleans_apart_from_numbers() -> None:
    assert not WRONG_TRIAGE.matches(feedback(0))
    assert on(FeedbackGiven).where(F.value.correct.eq(0)).matches(feedback(0))
    assert not on(FeedbackGiven).where(F.value.correct.eq(0)).matches(feedback(False))


def test_f_reaches_envelope_fields() -> None:
    judge = EvaluatorActor(name="triage-judge", version="2")
    env = feedback(False, actor=judge, workspace="prod")
    assert F.actor.eq("evaluator:triage-judge@2").test(env)
    assert F.envelope.actor.eq("evaluator:triage-judge@2").test(env)
    assert F.envelope.workspace.eq("prod").test(env)
    assert F.workspace.isin(["prod", "staging"]).test(env)
    assert F.envelope.time.ge(T0).test(env)
    assert not F.envelope.time.gt(T0).test(env)
    assert F.envelope.correlation_id.eq(env.event_id).test(env)
    assert F.event.feedback_type.eq("triage_quality").test(env)
    assert F.target.run_id.eq("run_1").test(env)


def test_comparisons() -> None:
    env = spike("api")
    assert F.data.errors.gt(5).test(env)
    assert F.data.errors.ge(7).test(env)
    assert F.data.errors.lt(8).test(env)
    assert F.data.errors.le(7).test(env)
    assert not F.data.errors.lt(7).test(env)
    assert F.data.errors.ne(3).test(env)
    assert F.data.service.isin({"api", "web"}).test(env)
    assert F.data.service.contains("pi").test(env)
    assert F.data.contains("service").test(env)
    assert F.data.service.exists().test(env)
    assert not F.data.errors.gt("5").test(env)  # incomparable types do not match, nor raise


def test_contains_on_lists_and_indexes() -> None:
    env = envelope(AppEvent(name="x", data={"tags": ["a", "b"], "nested": [{"k": 1}]}))
    assert F.data.tags.contains("b").test(env)
    assert not F.data.tags.contains("c").test(env)
    assert F.data.tags[0].eq("a").test(env)
    assert F.data.nested[0].k.eq(1).test(env)
    assert not F.data.tags[5].exists().test(env)


def test_missing_paths_never_match_and_never_raise() -> None:
    env = spike("api")
    for pred in (
        F.data.nope.eq(1), F.data.nope.ne(1), F.data.nope.lt(1), F.data.nope.isin([1]),
        F.data.nope.contains("x"), F.data.nope.exists(), F.data.service.deeper.eq("x"),
        F.nonfield.eq(1), F.data.errors.deeper.exists(), F.actor.deeper.eq("x"),
    ):
        assert not pred.test(env), pred
    assert F.data.nope.resolve(env) is MISSING
    assert (~F.data.nope.eq(1)).test(env)  # negation of "no match" matches


def test_combinators() -> None:
    env = spike("api")
    is_api = F.data.service.eq("api")
    many = F.data.errors.gt(5)
    few = F.data.errors.lt(3)
    assert (is_api & many).test(env)
    assert not (is_api & few).test(env)
    assert (few | is_api).test(env)
    assert not (few | F.data.service.eq("web")).test(env)
    assert (~few).test(env)
    assert all_of(is_api, many, ~few).test(env)
    assert any_of(few, many).test(env)
    assert not_(few).test(env)
    assert not_(not_(few)) == few


def test_paths_are_values() -> None:
    assert F.data.service == F.data.service
    assert F.data.service != F.data.region
    assert repr(F.data.tags[0]) == "F.data.tags[0]"
    assert repr(F.envelope.workspace) == "F.envelope.workspace"
    assert pickle.loads(pickle.dumps(F.data.service)) == F.data.service
    assert copy.deepcopy(F.data.service) == F.data.service
