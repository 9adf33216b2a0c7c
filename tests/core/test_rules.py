import copy
import pickle
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from streams.core.actors import EvaluatorActor, UserActor
from streams.core.errors import ValidationFailed
from streams.core.events import (
    AppEvent,
    Envelope,
    Event,
    FeedbackGiven,
    RuleFired,
    RunFailed,
    RunSucceeded,
)
from streams.core.rules import (
    MISSING,
    CountState,
    CountWindow,
    F,
    Fire,
    RateLimit,
    RateWindow,
    RetryPolicy,
    Rule,
    RuleEngine,
    RuleSet,
    RuleState,
    Throttled,
    all_of,
    any_of,
    count_key,
    evaluate,
    firing_id,
    not_,
    on,
    rate_key,
    run,
    sample_point,
)
from streams.core.targets import RunTarget

T0 = datetime(2026, 9, 28, 12, 0, tzinfo=UTC)


def envelope(event: Event, *, at: datetime = T0, **kw: Any) -> Envelope:
    kw.setdefault("tenant", "acme")
    kw.setdefault("workspace", "prod")
    return Envelope.new(event, time=at, **kw)


def feedback(correct: object, feedback_type: str = "triage_quality", **kw: Any) -> Envelope:
    value: dict[str, Any] = {"severity": "high"}
    if correct is not None:
        value["correct"] = correct
    event = FeedbackGiven(
        feedback_type=feedback_type, target=RunTarget(run_id="run_1"), value=value
    )
    return envelope(event, **kw)


def spike(service: str | None, at: datetime = T0, **kw: Any) -> Envelope:
    data: dict[str, Any] = {"errors": 7}
    if service is not None:
        data["service"] = service
    return envelope(AppEvent(name="ops:error_spike", data=data), at=at, **kw)


def succeeded(rule: str = "ops:error-spike", at: datetime = T0, **kw: Any) -> Envelope:
    event = RunSucceeded(run_id="run_1", rule=rule, action="triage", output={"ok": True})
    return envelope(event, at=at, **kw)


WRONG_TRIAGE = Rule(
    name="ops:wrong-triage",
    when=on(FeedbackGiven).where(F.value.correct.eq(False), feedback_type="triage_quality"),
    then=run("escalate"),
)


def test_wrong_triage_matches_only_wrong_triage_quality() -> None:
    assert WRONG_TRIAGE.matches(feedback(False))
    assert not WRONG_TRIAGE.matches(feedback(True))
    assert not WRONG_TRIAGE.matches(feedback(False, feedback_type="resolution"))
    assert not WRONG_TRIAGE.matches(feedback(None))  # no `correct` at all
    assert not WRONG_TRIAGE.matches(succeeded())


def test_eq_keeps_json_booleans_apart_from_numbers() -> None:
    assert not WRONG_TRIAGE.matches(feedback(0))
    assert on(FeedbackGiven).where(F.value.correct.eq(0)).matches(feedback(0))
    assert not on(FeedbackGiven).where(F.value.correct.eq(0)).matches(feedback(False))


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


def test_paths_are_values() -> None:
    assert F.data.service == F.data.service
    assert F.data.service != F.data.region
    assert repr(F.data.tags[0]) == "F.data.tags[0]"
    assert repr(F.envelope.workspace) == "F.envelope.workspace"
    assert pickle.loads(pickle.dumps(F.data.service)) == F.data.service
    assert copy.deepcopy(F.data.service) == F.data.service


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


JUDGE = Rule(
    name="ops:judge-triage",
    when=on(RunSucceeded).where(rule="ops:error-spike").at_most(20, per=timedelta(hours=1)),
    then=run("opened-incident"),
)


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


SPIKE = Rule(
    name="ops:error-spike",
    when=on("ops:error_spike").count(3, within=timedelta(minutes=5)).scope(F.data.service),
    then=run("triage", retry=RetryPolicy(max_attempts=3, backoff=timedelta(seconds=1))),
)


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


def test_state_keys() -> None:
    assert count_key("ops:error-spike", None) == "ops:error-spike"
    assert count_key("ops:error-spike", "service=api") == "ops:error-spike|service=api"
    assert rate_key("ops:judge", None, 7) == "ops:judge|7"
    assert rate_key("ops:judge", "service=a|b", 7) == "ops:judge|7|service=a|b"


def test_evaluate_plain_rule_fires_in_the_triggering_chain() -> None:
    env = feedback(False, correlation_id="chain_1")
    state = RuleState()
    [fire] = evaluate([WRONG_TRIAGE], env, state)
    assert isinstance(fire, Fire)
    assert fire.matched_event_ids == (env.event_id,)
    assert fire.correlation_id == "chain_1"
    assert fire.causation_id == env.event_id
    assert fire.scope_key is None
    assert fire.firing_id == firing_id("ops:wrong-triage", env.event_id)
    event = fire.to_event()
    assert isinstance(event, RuleFired)
    assert event.rule == "ops:wrong-triage" and event.matched == [env.event_id]
    assert evaluate([WRONG_TRIAGE], feedback(True), state) == []


def test_evaluate_several_rules_in_order() -> None:
    also = Rule(name="ops:any-feedback", when=on(FeedbackGiven), then=run("log"))
    decisions = evaluate(RuleSet([WRONG_TRIAGE, also]), feedback(False), RuleState())
    assert [d.rule.name for d in decisions] == ["ops:wrong-triage", "ops:any-feedback"]


def test_firing_ids_are_derived() -> None:
    assert firing_id("r", "evt_1") == firing_id("r", "evt_1")
    assert firing_id("r", "evt_1") != firing_id("s", "evt_1")
    assert firing_id("r", "evt_1").startswith("fir_")


def test_state_expiry() -> None:
    engine = RuleEngine([SPIKE, JUDGE])
    engine.evaluate(spike("api", at=T0))
    engine.evaluate(succeeded(at=T0))
    engine.state.expire(T0 + timedelta(minutes=4))
    assert engine.state.counts["ops:error-spike"].windows
    assert engine.state.rates["ops:judge-triage"].windows
    engine.state.expire(T0 + timedelta(hours=1))
    assert engine.state.counts["ops:error-spike"].windows == {}
    assert engine.state.rates["ops:judge-triage"].windows == {}


def test_ruleset_requires_unique_names() -> None:
    rules = RuleSet([WRONG_TRIAGE, SPIKE])
    assert rules.names() == ["ops:wrong-triage", "ops:error-spike"]
    assert "ops:error-spike" in rules and rules["ops:error-spike"] is SPIKE
    assert rules.get("nope") is None and len(rules) == 2
    with pytest.raises(ValidationFailed, match=r"unique.*ops:wrong-triage"):
        RuleSet([WRONG_TRIAGE, SPIKE, WRONG_TRIAGE])
    with pytest.raises(ValidationFailed, match="unique"):
        RuleEngine([SPIKE, SPIKE])


def test_retry_policy_delays() -> None:
    policy = RetryPolicy(max_attempts=5, backoff=timedelta(seconds=1), multiplier=2,
                         max_backoff=timedelta(seconds=5))
    assert [policy.delay(a) for a in range(1, 6)] == [
        timedelta(seconds=s) for s in (1, 2, 4, 5, 5)
    ]
    assert policy.delay(10**9) == timedelta(seconds=5)
    assert policy.retries_after(4) and not policy.retries_after(5)
    flat = RetryPolicy(multiplier=1, backoff=timedelta(seconds=3))
    assert flat.delay(10**9) == timedelta(seconds=3)
    with pytest.raises(ValueError, match="from 1"):
        policy.delay(0)


def test_run_takes_a_name_or_a_named_action() -> None:
    class Judge:
        name = "opened-incident"

    action = run(Judge())
    assert action.name == "opened-incident"
    assert action.retry == RetryPolicy()
    assert run("triage", retry=RetryPolicy(max_attempts=1)).retry.max_attempts == 1


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


def test_string_triggers_skip_the_field_check() -> None:
    trigger = on("feedback_given").where(whatever="x")
    assert not trigger.matches(feedback(False))
