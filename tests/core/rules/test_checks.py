"""A wrong definition fails where it is written, saying what to change."""

from datetime import timedelta
from typing import Any

import pytest

from streams.core.errors import ValidationFailed
from streams.core.events import (
    AppEvent,
    Event,
    FeedbackGiven,
    RunFailed,
    RunSucceeded,
)
from streams.core.rules import (
    F,
    RetryPolicy,
    Rule,
    all_of,
    on,
    run,
)


class NotOnTheWire(Event):
    event_type = "not_on_the_wire"


@pytest.mark.parametrize(
    ("define", "message"),
    [
        (lambda: Rule(name="", when=on("t:x"), then=run("a")), "must be non-empty and match"),
        (lambda: Rule(name="Ops:Spike", when=on("t:x"), then=run("a")), "must be non-empty"),
        (lambda: Rule(name="a|b", when=on("t:x"), then=run("a")), "must be non-empty"),
        (lambda: Rule(name="r", when="x", then=run("a")), "when= takes"),  # type: ignore[arg-type]
        (lambda: Rule(name="r", when=on("t:x"), then="a"), "then= takes"),  # type: ignore[arg-type]
        (lambda: on(RunSucceeded).sample(0), "0 < fraction <= 1"),
        (lambda: on(RunSucceeded).sample(1.5), "0 < fraction <= 1"),
        (lambda: on(RunSucceeded).sample(float("nan")), "0 < fraction <= 1"),
        (lambda: on(RunSucceeded).sample(0.1).sample(0.2), "already"),
        (lambda: on("t:x").count(0, within=timedelta(minutes=1)), "at least 1"),
        (lambda: on("t:x").count(2, within=timedelta(0)), "positive timedelta"),
        (lambda: on("t:x").at_most(0, per=timedelta(hours=1)), "at least 1"),
        (lambda: on("t:x").at_most(True, per=timedelta(hours=1)), "at least 1"),
        (lambda: on("t:x").at_most(5, per=timedelta(seconds=-1)), "positive timedelta"),
        (lambda: on("t:x").at_most(5, per=3600), "positive"),  # type: ignore[arg-type]
        (lambda: on(NotOnTheWire), "not an event the log carries"),
        (lambda: on(Event), "not an event the log carries"),
        (lambda: on(int), "takes an Event class"),  # type: ignore[arg-type]
        (lambda: on(""), "non-empty"),
        (lambda: on(FeedbackGiven).where(feedback_kind="x"), "has no field 'feedback_kind'"),
        (lambda: on(RunFailed).where(F.eror.contains("x")), "has no field 'eror'"),
        (lambda: on(AppEvent).where(service="api"), "has no field 'service'"),
        (lambda: on(AppEvent).scope(F.servce), "has no field 'servce'"),
        (lambda: on("t:x").where(), "at least one"),
        (lambda: on("t:x").where(F.data.x == 1), "F.x.eq"),  # type: ignore[arg-type]
        (lambda: on("t:x").where(F.data.x), "is a path, not a test"),  # type: ignore[arg-type]
        (lambda: on("t:x").where(3), "predicates built from F"),  # type: ignore[arg-type]
        (lambda: F.envelope.workspce, "envelope has no field 'workspce'"),
        (lambda: F.envelope.eq("x"), "is a root"),
        (lambda: F.data.x.isin("abc"), "not the string"),
        (lambda: on("t:x").scope(), "at least one"),
        (lambda: on("t:x").scope(lambda e: e.tenant), "name the function"),
        (lambda: on("t:x").scope(F.data.a, F.other.a), "names must differ"),
        (lambda: on("t:x").scope(F.data.a).scope(F.data.b), "already"),
        (lambda: on("t:x").scope(key=3), "takes paths"),  # type: ignore[arg-type]
        (lambda: all_of(), "at least one"),
        (lambda: run(""), "non-empty"),
        (lambda: run(object()), "object with a name"),  # type: ignore[arg-type]
        (lambda: RetryPolicy(max_attempts=0), "max_attempts"),
        (lambda: RetryPolicy(backoff=timedelta(seconds=-1)), "backoff"),
        (lambda: RetryPolicy(multiplier=0.5), "multiplier"),
        (lambda: RetryPolicy(max_backoff=timedelta(0)), "max_backoff"),
    ],
)
def test_invalid_definitions_fail_at_definition(define: Any, message: str) -> None:
    with pytest.raises(ValidationFailed, match=message) as raised:
        define()
    assert isinstance(raised.value, ValueError)
