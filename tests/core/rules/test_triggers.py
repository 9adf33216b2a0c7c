"""Triggers: types watched, filters, sampling, rate limits, counts and scopes."""

from datetime import timedelta

import pytest

from streams.core.actors import UserActor
from streams.core.events import (
    AppEvent,
    FeedbackGiven,
    RunSucceeded,
)
from streams.core.rules import (
    CountState,
    CountWindow,
    F,
    Fire,
    InvalidRule,
    RateLimit,
    RateWindow,
    Rule,
    RuleEngine,
    Throttled,
    on,
    run,
    sample_point,
)
from tests.core.rules.samples import JUDGE, SPIKE, T0, WRONG_TRIAGE, feedback, spike, succeeded


def test_wrong_triage_matches_only_wrong_triage_quality() -> None:
    assert WRONG_TRIAGE.matches(feedback(False))
    assert not WRONG_TRIAGE.matches(feedback(True))
    assert not WRONG_TRIAGE.matches(feedback(False, feedback_type="resolution"))
    assert not WRONG_TRIAGE.matches(feedback(None))  # no `correct` at all
    assert not WRONG_TRIAGE.matches(succeeded())


def test_string_trigger_matches_app_event_name_and_builtin_type() -> None:
    assert on("ops:error_spike").matches(spike("api"))
    assert not on("ops:other").matches(spike("api"))
    assert on("run_succeeded").matches(succeeded())
    assert on(AppEvent).matches(spike("api"))
    assert not on(AppEvent).matches(succeeded())


def test_where_on_payload_field_of_run_succeeded() -> None:
    trigger = on(RunSucceeded).where(rule="ops:error-spike")
    assert trigger.matches(succeeded())
    assert not trigger.matches(succeeded(rule="ops:other"))


def test_where_on_envelope_fields() -> None:
    ada = UserActor(id="ada")
    trigger = on(FeedbackGiven).where(workspace="prod", tenant="acme", actor="user:ada")
    assert trigger.matches(feedback(False, actor=ada))
    assert not trigger.matches(feedback(False, actor=UserActor(id="bob")))
    assert not trigger.matches(feedback(False, actor=ada, workspace="staging"))
    assert on(FeedbackGiven).where(actor=ada).matches(feedback(False, actor=ada))
    assert on("ops:error_spike").where(event_type="ops:error_spike").matches(spike("api"))


def test_several_where_calls_and_together() -> None:
    trigger = on("ops:error_spike").where(F.data.service.eq("api")).where(F.data.errors.gt(10))
    assert not trigger.matches(spike("api"))
    assert on("ops:error_spike").where(F.data.service.eq("api")).where(
        F.data.errors.gt(5)
    ).matches(spike("api"))


def test_where_accepts_functions_of_the_envelope() -> None:
    trigger = on("ops:error_spike").where(lambda env: env.tenant == "acme")
    assert trigger.matches(spike("api"))
    assert not trigger.matches(spike("api", tenant="other"))


def test_sampling_is_deterministic_per_event_and_rule() -> None:
    rule = Rule(name="ops:sampled", when=on(RunSucceeded).sample(0.5), then=run("judge"))
    env = succeeded()
    first = rule.matches(env)
    assert all(rule.matches(env) is first for _ in range(20))
    assert sample_point("a", "evt_1") == sample_point("a", "evt_1")
    assert sample_point("a", "evt_1") != sample_point("b", "evt_1")


def test_sampling_keeps_about_the_fraction() -> None:
    rule = Rule(name="ops:sampled", when=on(RunSucceeded).sample(0.1), then=run("judge"))
    kept = sum(rule.matches(succeeded(event_id=f"evt_{i}")) for i in range(10_000))
    assert 800 <= kept <= 1200


def test_sample_one_keeps_everything() -> None:
    rule = Rule(name="ops:all", when=on(RunSucceeded).sample(1), then=run("judge"))
    assert all(rule.matches(succeeded(event_id=f"evt_{i}")) for i in range(200))


def test_at_most_admits_n_per_window_and_resets_in_the_next() -> None:
    engine = RuleEngine([JUDGE])
    decisions = engine.replay(
        succeeded(at=T0 + timedelta(seconds=30 * i), event_id=f"evt_{i}") for i in range(100)
    )
    fired = [d for d in decisions if isinstance(d, Fire)]
    throttled = [d for d in decisions if isinstance(d, Throttled)]
    assert len(fired) == 20 and len(throttled) == 80
    assert [d.causation_id for d in fired] == [f"evt_{i}" for i in range(20)]
    assert throttled[0].limit == RateLimit(20, timedelta(hours=1))
    nxt = engine.evaluate(succeeded(at=T0 + timedelta(hours=1), event_id="evt_next"))
    assert len(nxt) == 1 and isinstance(nxt[0], Fire)


def test_rate_windows_are_fixed_by_event_time() -> None:
    limit = RateLimit(2, timedelta(hours=1))
    assert limit.window(T0) == limit.window(T0 + timedelta(minutes=59, seconds=59))
    assert limit.window(T0 + timedelta(hours=1)) == limit.window(T0) + 1
    assert limit.window_start(limit.window(T0 + timedelta(minutes=30))) == T0
    assert limit.window(T0.replace(tzinfo=None)) == limit.window(T0)
    window = RateWindow(limit.window(T0))
    ok1, window = window.admit(limit)
    ok2, window = window.admit(limit)
    ok3, after = window.admit(limit)
    assert (ok1, ok2, ok3) == (True, True, False)
    assert after == window == RateWindow(limit.window(T0), 2)


def test_late_events_are_judged_in_their_own_window() -> None:
    rule = Rule(name="r", when=on(RunSucceeded).at_most(1, per=timedelta(hours=1)),
                then=run("a"))
    engine = RuleEngine([rule])
    assert isinstance(engine.evaluate(succeeded(at=T0 + timedelta(hours=1)))[0], Fire)
    assert isinstance(engine.evaluate(succeeded(at=T0))[0], Fire)
    assert isinstance(engine.evaluate(succeeded(at=T0 + timedelta(minutes=1)))[0], Throttled)


def test_rate_limits_are_per_scope() -> None:
    rule = Rule(
        name="r",
        when=on("ops:error_spike").scope(F.data.service).at_most(1, per=timedelta(hours=1)),
        then=run("a"),
    )
    engine = RuleEngine([rule])
    kinds = [type(d) for e in ("api", "web", "api") for d in engine.evaluate(spike(e))]
    assert kinds == [Fire, Fire, Throttled]


def test_count_fires_on_the_nth_event_within_the_window() -> None:
    engine = RuleEngine([SPIKE])
    events = [
        spike("api", at=T0, event_id="e1"),
        spike("api", at=T0 + timedelta(minutes=1), event_id="e2"),
        spike("api", at=T0 + timedelta(minutes=5), event_id="e3", correlation_id="chain_3"),
    ]
    assert engine.evaluate(events[0]) == []
    assert engine.evaluate(events[1]) == []
    [decision] = engine.evaluate(events[2])
    assert isinstance(decision, Fire)
    assert decision.matched_event_ids == ("e1", "e2", "e3")
    # The firing joins the chain of the event that completed the count.
    assert decision.correlation_id == "chain_3"
    assert decision.causation_id == "e3"
    assert decision.scope_key == "service=api"
    assert decision.scope == {"service": "api"}
    assert decision.rule is SPIKE
    # The count starts over after firing.
    assert engine.evaluate(spike("api", at=T0 + timedelta(minutes=6), event_id="e4")) == []


def test_count_drops_events_older_than_the_window() -> None:
    engine = RuleEngine([SPIKE])
    ids = []
    for i, minute in enumerate((0, 1, 7, 8, 9)):
        ids.append(f"e{i}")
        decisions = engine.evaluate(
            spike("api", at=T0 + timedelta(minutes=minute), event_id=f"e{i}")
        )
        if i < 4:
            assert decisions == [], i
    assert isinstance(decisions[0], Fire)
    assert decisions[0].matched_event_ids == ("e2", "e3", "e4")


def test_counts_are_kept_per_scope() -> None:
    engine = RuleEngine([SPIKE])
    for i in range(2):
        assert engine.evaluate(spike("api", event_id=f"a{i}")) == []
        assert engine.evaluate(spike("web", event_id=f"w{i}")) == []
    [fire] = engine.evaluate(spike("web", event_id="w2"))
    assert isinstance(fire, Fire)
    assert fire.matched_event_ids == ("w0", "w1", "w2")
    assert fire.scope_key == "service=web"


def test_count_window_ignores_a_redelivered_event_and_sorts_by_time() -> None:
    state = CountState(SPIKE.when.counting)  # type: ignore[arg-type]
    assert state.add(spike("api", at=T0 + timedelta(minutes=2), event_id="b")) is None
    assert state.add(spike("api", at=T0 + timedelta(minutes=2), event_id="b")) is None
    assert state.add(spike("api", at=T0, event_id="a")) is None
    assert state.windows[None].entries == (
        (T0, "a"), (T0 + timedelta(minutes=2), "b"),
    )
    assert state.add(spike("api", at=T0 + timedelta(minutes=3), event_id="c")) == [
        "a", "b", "c",
    ]
    assert state.windows == {}


def test_an_event_too_late_for_the_window_completes_nothing() -> None:
    count = SPIKE.when.counting
    assert count is not None
    window = CountWindow()
    _, window = window.add(count, T0 + timedelta(minutes=10), "x")
    _, window = window.add(count, T0 + timedelta(minutes=11), "y")
    done, window = window.add(count, T0, "old")
    assert done is None
    assert [e for _, e in window.entries] == ["x", "y"]


def test_events_without_a_scope_value_do_not_match() -> None:
    assert not SPIKE.matches(spike(None))
    assert SPIKE.scope_key(spike(None)) is None
    assert SPIKE.scope_key(spike("api")) == "service=api"
    assert RuleEngine([SPIKE]).evaluate(spike(None)) == []


def test_scope_keys() -> None:
    env = spike("api", workspace="prod")
    assert on("t:x").scope_key(env) is None
    by_two = on("ops:error_spike").scope(F.data.service, F.workspace)
    assert by_two.scope_key(env) == "service=api&workspace=prod"
    # Declaration order does not change the key.
    assert on("ops:error_spike").scope(F.workspace, F.data.service).scope_key(env) == (
        by_two.scope_key(env)
    )
    named = on("ops:error_spike").scope(svc=lambda e: str(F.data.service.resolve(e)).upper())
    assert named.scope_key(env) == "svc=API"
    assert on("ops:error_spike").scope(F.data.errors).scope_key(env) == "errors=7"
    assert on("ops:error_spike").scope(F.data.service).scope_values(env) == {"service": "api"}


def test_string_triggers_skip_the_field_check() -> None:
    trigger = on("feedback_given").where(whatever="x")
    assert not trigger.matches(feedback(False))


def test_a_weighted_limit_admits_while_the_weights_fit_and_refuses_bad_weights() -> None:
    budget = Rule(name="t:budget", when=on("ops:error_spike").at_most(
        20, per=timedelta(hours=1), weight=F.data.errors), then=run("judge"))
    engine = RuleEngine([budget])
    kinds = [type(d).__name__ for _ in range(4) for d in engine.evaluate(spike("api"))]
    assert kinds == ["Fire", "Fire", "Throttled", "Throttled"]  # 7 + 7 fit, 21 would not
    for bad in (0, -3, 2.5, True, "7", None):
        data: dict[str, object] = {"service": "api"}
        if bad is not None:
            data["errors"] = bad
        [decision] = RuleEngine([budget]).evaluate(
            spike("api").model_copy(update={"event": AppEvent(name="ops:error_spike",
                                                                data=data)}))
        assert isinstance(decision, Throttled), bad
    with pytest.raises(InvalidRule, match=r"weight=\) takes a path"):
        on("ops:error_spike").at_most(2, per=timedelta(hours=1), weight="tokens")  # type: ignore[arg-type]
