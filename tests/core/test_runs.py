from datetime import timedelta

from streams.core.events import AppEvent, Envelope, RuleFired, RunStarted, RunSucceeded
from streams.core.rules import RetryPolicy, Rule, RuleEngine, on, run
from streams.core.runs import attempt_outcomes, fire_envelopes, run_id_of, run_record_of


def _fire() -> tuple[Envelope, list[Envelope]]:
    rule = Rule(name="ops:x", when=on("ops:spike"), then=run("triage"))
    cause = Envelope.new(AppEvent(name="ops:spike"), tenant="acme", workspace="prod")
    [fire] = RuleEngine([rule]).evaluate(cause)
    return cause, fire_envelopes(fire, cause)  # type: ignore[arg-type]


def test_firing_ids_are_derived_from_rule_and_cause() -> None:
    cause, first = _fire()
    rule = Rule(name="ops:x", when=on("ops:spike"), then=run("triage"))
    [fire] = RuleEngine([rule]).evaluate(cause)
    again = fire_envelopes(fire, cause)  # type: ignore[arg-type]
    assert [e.event_id for e in first] == [e.event_id for e in again]
    fired, started = first
    assert isinstance(fired.event, RuleFired) and isinstance(started.event, RunStarted)
    assert started.event.run_id == run_id_of(fired.event.firing_id)
    assert fired.correlation_id == started.correlation_id == cause.correlation_id
    assert fired.causation_id == cause.event_id
    assert started.causation_id == fired.event_id
    assert started.actor.participant == "agent:rule:ops:x"


def test_attempt_outcomes() -> None:
    _cause, (_fired, started) = _fire()
    ok = attempt_outcomes(started, attempt=1, error=None, output={"a": 1}, will_retry=False,
                          delay_ms=0)
    assert [e.event_type for e in ok] == ["run_succeeded"]
    assert isinstance(ok[0].event, RunSucceeded) and ok[0].event.output == {"a": 1}
    retry = attempt_outcomes(started, attempt=1, error="boom", output=None, will_retry=True,
                             delay_ms=50)
    assert [e.event_type for e in retry] == ["run_failed", "run_retried"]
    dead = attempt_outcomes(started, attempt=3, error="boom", output=None, will_retry=False,
                            delay_ms=0)
    assert [e.event_type for e in dead] == ["run_failed", "run_dead_lettered"]
    assert len({e.event_id for e in retry + dead}) == 4
    assert all(e.causation_id == started.event_id for e in ok + retry + dead)


def test_run_record_of() -> None:
    cause, (fired, started) = _fire()
    emitted = started.follow(AppEvent(name="oncall:incident.opened"))
    done = attempt_outcomes(started, attempt=1, error=None, output={}, will_retry=False,
                            delay_ms=0)
    other = Envelope.new(AppEvent(name="noise"), tenant="acme", workspace="prod")
    assert isinstance(started.event, RunStarted)
    record = run_record_of([cause, other, fired, started, emitted, *done],
                           started.event.run_id)
    assert record is not None
    assert [e.event_id for e in record.matched] == [cause.event_id]
    assert [e.event_id for e in record.emitted] == [emitted.event_id, done[0].event_id]
    assert record.fired == fired
    assert run_record_of([cause], "run_missing") is None


def test_retry_policy_delays() -> None:
    policy = RetryPolicy(max_attempts=3, backoff=timedelta(seconds=1))
    assert policy.retries_after(1) and policy.retries_after(2) and not policy.retries_after(3)
    assert policy.delay(1) == timedelta(seconds=1)
    assert policy.delay(2) == timedelta(seconds=2)
