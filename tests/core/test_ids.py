"""Derived ids keep their values: replays rely on a repeated decision writing the same ids.

The values below were computed by the code before the derivations moved into one module, so
a change of any derivation (its input text, hash, prefix or length) fails here.
"""

import uuid
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core import ids
from streams.core.events import AppEvent, Envelope, new_id
from streams.core.ids import SCORE_ID_NAMESPACE
from streams.core.rules import (
    F,
    Rule,
    RuleEngine,
    Scope,
    count_key,
    firing_id,
    on,
    rate_key,
    run,
    sample_point,
)
from streams.core.runs import attempt_outcomes, fire_envelopes, run_id_of
from streams.core.scores import score_id

FIRING = "fir_cfce8b62658f013a5c9702415adf0efd"
RUN = "run_ac0e5c54b48b718cab508a99"


def test_rule_ids_keep_their_values() -> None:
    assert firing_id("ops:error-spike", "evt_1") == FIRING
    assert run_id_of(FIRING) == RUN
    assert sample_point("ops:x", "evt_1") == 0.3174806787674762
    assert count_key("r", None) == "r"
    assert count_key("r", "service=api") == "r|service=api"
    assert rate_key("r", None, 5) == "r|5"
    assert rate_key("r", "s=a", 5) == "r|5|s=a"
    assert Scope.key_of({"workspace": "prod", "service": "a b&c"}) == (
        "service=a+b%26c&workspace=prod")


def test_score_ids_keep_their_values() -> None:
    assert score_id("evt_1", "triage_quality.correct") == "4ce4c4af-212e-5308-bca7-db76e54e15a1"


@settings(max_examples=500, deadline=None)
@given(event_id=st.text(), name=st.text())
def test_a_score_id_is_the_version_5_uuid_of_its_event_and_name(event_id: str,
                                                                name: str) -> None:
    assert score_id(event_id, name) == str(uuid.uuid5(SCORE_ID_NAMESPACE,
                                                      f"{event_id}/{name}"))


def test_firing_run_and_outcome_event_ids_keep_their_values() -> None:
    cause = Envelope.new(AppEvent(name="ops:error_spike", data={"service": "api"}),
                         tenant="acme", workspace="prod", event_id="evt_1",
                         time=datetime(2026, 9, 28, 12, tzinfo=UTC))
    rule = Rule(name="ops:error-spike", when=on("ops:error_spike").scope(F.data.service),
                then=run("triage"))
    [fire] = RuleEngine([rule]).evaluate(cause)
    fired, started = fire_envelopes(fire, cause)
    assert (fire.firing_id, fire.scope_key) == (FIRING, "service=api")
    assert fired.event_id == "evt_95933ee5c165bca0b12efee7ae219e9c"
    assert started.event_id == "evt_98d3cd1116cbf62b3b4c497515504d58"
    assert started.event.run_id == RUN  # type: ignore[attr-defined]
    failed = attempt_outcomes(started, attempt=1, error="boom", output=None, will_retry=True,
                              delay_ms=1000)
    assert [e.event_id for e in failed] == ["evt_b5c8034f4033abd8573216c713d0cf93",
                                            "evt_16c59958cddf00068dca0a8bcdcd7e92"]
    succeeded = attempt_outcomes(started, attempt=2, error=None, output={}, will_retry=False,
                                 delay_ms=0)
    assert [e.event_id for e in succeeded] == ["evt_776febebebc0ae9fc96359abe77f4972"]


def test_verdict_record_ids_keep_their_values() -> None:
    assert ids.verdict_event_id("prod", "grader@1:abc") == "evt_739e0fa170788b459f03094bc837c99a"
    assert ids.verdict_event_id("staging", "grader@1:abc") != ids.verdict_event_id(
        "prod", "grader@1:abc")  # workspaces keep their own records


def test_one_encoding_of_the_scope_key() -> None:
    # The rules engine's scope key and the reactor's per-scope lock both use ids.scope_key:
    # order-free, and a value cannot forge a separator.
    assert ids.scope_key({"b": "2", "a": "1"}) == ids.scope_key({"a": "1", "b": "2"}) == "a=1&b=2"
    assert ids.scope_key({"a": "1&b=2"}) != ids.scope_key({"a": "1", "b": "2"})
    assert ids.scope_key({"a": "x|y"}) == "a=x%7Cy"
    assert ids.scope_key({}) == ""
    assert Scope.key_of({"service": "api"}) == ids.scope_key({"service": "api"})


def test_the_old_homes_are_the_ids_module() -> None:
    assert (firing_id, sample_point, count_key, rate_key) == (
        ids.firing_id, ids.sample_point, ids.count_key, ids.rate_key)
    assert (run_id_of, score_id, new_id) == (ids.run_id_of, ids.score_id, ids.new_id)
    assert ids.fired_event_id(FIRING) == "evt_95933ee5c165bca0b12efee7ae219e9c"
    assert ids.started_event_id(RUN) == "evt_98d3cd1116cbf62b3b4c497515504d58"
    assert ids.outcome_event_id(RUN, "succeeded", 2) == "evt_776febebebc0ae9fc96359abe77f4972"


def test_new_ids_are_fresh_and_prefixed() -> None:
    first, second = ids.new_id("evt"), ids.new_id("evt")
    assert first != second
    assert first.startswith("evt_") and len(first) == 4 + 32
