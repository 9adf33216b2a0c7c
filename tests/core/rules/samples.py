"""Envelopes and rules the rules tests share."""

from datetime import UTC, datetime, timedelta
from typing import Any

from streams.core.events import (
    AppEvent,
    Envelope,
    Event,
    FeedbackGiven,
    RunStarted,
    RunSucceeded,
)
from streams.core.rules import (
    F,
    RetryPolicy,
    Rule,
    on,
    run,
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


JUDGE = Rule(
    name="ops:judge-triage",
    when=on(RunSucceeded).where(rule="ops:error-spike").at_most(20, per=timedelta(hours=1)),
    then=run("opened-incident"),
)


SPIKE = Rule(
    name="ops:error-spike",
    when=on("ops:error_spike").count(3, within=timedelta(minutes=5)).scope(F.data.service),
    then=run("triage", retry=RetryPolicy(max_attempts=3, backoff=timedelta(seconds=1))),
)


def limited_log() -> tuple[Rule, list[Envelope]]:
    """A rule firing at most twice an hour on api spikes, and the log a worker writes for
    five api and two web spikes: two firings, three throttle records, one run succeeded."""
    from streams.core.matching import Matcher
    from streams.core.rules import RuleSet, RuleState

    limited = Rule(name="t:two", when=on("ops:error_spike").where(F.data.service.eq("api"))
                   .at_most(2, per=timedelta(hours=1)), then=run("a"))
    matcher = Matcher(RuleSet([limited]))
    state = RuleState()
    log: list[Envelope] = []
    for service in ["api"] * 5 + ["web"] * 2:
        cause = spike(service)
        log.append(cause)
        for item in matcher.match(cause):
            for decision in matcher.decide(limited.name, item.envelope, state):
                log += matcher.fired(decision, cause)
    run_id = next(e.event.run_id for e in log if isinstance(e.event, RunStarted))
    log.append(envelope(RunSucceeded(run_id=run_id, rule="t:two", action="a")))
    return limited, log

