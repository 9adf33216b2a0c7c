"""Seed 000's examples that need no broker, run as written (tests/seed_000.py holds the seed's
module-level code with only its imports changed); the awaited examples, the two mirror blocks
(`FeedbackMirror` into the PrintingSink, and into Langfuse) among them, run against the real
broker in tests/integration/test_seed_examples.py, whose docstring lists what differs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from types import ModuleType
from typing import Any

import pytest
from pydantic import ValidationError

from streams import (
    AppEvent,
    Envelope,
    EvaluatorActor,
    Feedback,
    FeedbackGiven,
    Reaction,
    RuleEngine,
    RunStarted,
    RunSucceeded,
    RunTarget,
    Seq,
    UserActor,
    ValidationFailed,
)
from streams.core.rules import Fire
from streams.core.runs import attempt_outcomes, fire_envelopes, latest_runs
from streams.core.sinks.contracts import check_score_sink, sample_scores
from tests.seed_loader import load_seed


@pytest.fixture
def seed() -> Iterator[ModuleType]:
    yield from load_seed()


def test_the_three_feedback_types(seed: ModuleType) -> None:
    assert seed.TriageQuality.feedback_name == "triage_quality"
    assert seed.ShouldHaveFired.feedback_name == "should_have_fired"
    assert seed.Resolution.feedback_name == "resolution"
    assert seed.TriageQuality.feedback_targets == {"run"}
    assert seed.ShouldHaveFired.feedback_targets == {"firing"}
    assert seed.Resolution.feedback_targets == {"chain"}
    assert seed.Resolution(resolved=True, minutes_to_mitigate=1440).minutes_to_mitigate == 1440
    with pytest.raises(ValidationError):
        seed.Resolution(resolved=True, minutes_to_mitigate=1441)
    with pytest.raises(ValidationError):
        seed.TriageQuality(correct=True, severity="medium")
    # "A type must declare at least one target, or defining it raises TypeError; an
    # intermediate base class passes abstract=True instead."
    with pytest.raises(TypeError, match="declares no targets"):
        class NoTargets(Feedback):
            ok: bool

    class Base(Feedback, abstract=True):
        ok: bool

    assert Base.feedback_abstract


def _feedback(seed: ModuleType, **value: Any) -> Envelope:
    verdict = seed.TriageQuality(**value)
    return Envelope.new(FeedbackGiven(feedback_type="triage_quality",
                                      target=RunTarget(run_id="run_1"),
                                      value=verdict.model_dump()),
                        tenant="acme", workspace="prod", actor=UserActor(id="ada"))


def test_wrong_triage_fires_on_a_wrong_verdict_only(seed: ModuleType) -> None:
    engine = RuleEngine([seed.wrong_triage])
    assert engine.evaluate(_feedback(seed, correct=True, severity="low")) == []
    [fire] = engine.evaluate(_feedback(seed, correct=False, severity="critical"))
    assert fire.rule.name == "ops:wrong-triage"  # type: ignore[union-attr]
    assert fire.rule.then.name == "escalate"  # type: ignore[union-attr]


async def test_printing_sink_is_a_score_sink(seed: ModuleType,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    sink = seed.PrintingSink()
    assert not hasattr(sink, "flush")  # the seed's sink has only record, returning None
    await check_score_sink(sink)
    printed = capsys.readouterr().out.splitlines()
    scores = sample_scores()
    # The contract records its sample batch twice; each score is printed as the seed says.
    assert printed == [f"{s.name} {s.value} {s.trace_id or s.session_id}"
                       for s in scores] * 2


def test_envelope_data_is_the_payload_read_only() -> None:
    spike = Envelope.new(AppEvent(name="ops:error_spike", data={"service": "api"}),
                         tenant="acme", workspace="prod")
    assert dict(spike.data) == {"service": "api"}
    succeeded = Envelope.new(RunSucceeded(run_id="run_1", rule="ops:error-spike",
                                          action="triage", output={"errors": 3}),
                             tenant="acme", workspace="prod")
    assert succeeded.data["run_id"] == "run_1"
    assert succeeded.data["output"] == {"errors": 3}
    with pytest.raises(TypeError):
        succeeded.data["run_id"] = "other"  # type: ignore[index]
    assert succeeded.event.run_id == "run_1"  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Appended:
    """Where an append landed in the in-memory log (what the real handle's Recorded says)."""

    seq: Seq
    id: str
    envelope: Envelope


class LogWorkspace:
    """A workspace over an in-memory log, for running actions without a broker: appends and
    feedback land in `log`, with the actor that gave them."""

    def __init__(self, log: list[Envelope], actor: Any = None) -> None:
        self.tenant, self.workspace = "acme", "prod"
        self.log = log
        self.actor = actor or UserActor(id="ada")

    async def append(self, event: Any, *, correlation_id: str | None = None,
                     causation_id: str | None = None, trace: Any = None,
                     event_id: str | None = None) -> Appended:
        envelope = Envelope.new(event, tenant=self.tenant, workspace=self.workspace,
                                actor=self.actor, correlation_id=correlation_id,
                                causation_id=causation_id, trace=trace, event_id=event_id)
        self.log.append(envelope)
        return Appended(Seq(partition=0, offset=len(self.log) - 1), envelope.event_id, envelope)

    async def give_feedback(self, value: Any, *, on: Any, feedback_type: str | None = None,
                            ) -> Any:
        return await self.append(FeedbackGiven(feedback_type=value.feedback_name, target=on,
                                               value=value.model_dump()))

    def as_actor(self, actor: Any) -> LogWorkspace:
        return LogWorkspace(self.log, actor)

    async def read(self) -> list[Envelope]:
        return list(self.log)


def _triage_run(seed: ModuleType, log: list[Envelope], service: str, *,
                opens_incident: bool) -> Envelope:
    """Three spikes fire the error-spike rule; its run emits an incident (or not) and
    succeeds. Returns the run_succeeded envelope."""
    from tests.integration.seed_000_rules import error_spike

    engine = RuleEngine([error_spike])
    fires = []
    for _ in range(3):
        spike = Envelope.new(AppEvent(name="ops:error_spike", data={"service": service}),
                             tenant="acme", workspace="prod")
        log.append(spike)
        fires += engine.evaluate(spike)
    [fire] = fires
    fired, started = fire_envelopes(fire, log[-1])  # type: ignore[arg-type]
    log += [fired, started]
    if opens_incident:
        log.append(started.follow(AppEvent(name="oncall:incident.opened",
                                           data={"service": service})))
    [succeeded] = attempt_outcomes(started, attempt=1, error=None, output={}, will_retry=False,
                                   delay_ms=0)
    log.append(succeeded)
    return succeeded


@pytest.mark.parametrize("opens_incident", [True, False])
async def test_evaluator_as_a_rule_judges_the_run(seed: ModuleType,
                                                  opens_incident: bool) -> None:
    log: list[Envelope] = []
    succeeded = _triage_run(seed, log, "api", opens_incident=opens_incident)
    [fire] = RuleEngine([seed.judge_triage]).evaluate(succeeded)
    assert fire.rule.name == "ops:judge-triage"  # type: ignore[union-attr]
    judge_run = RunStarted(run_id="run_judge", rule="ops:judge-triage", action=seed.judge.name,
                           firing_id="fir_judge")
    reaction: Reaction[Any] = Reaction(
        run=judge_run, started=succeeded.follow(judge_run), events=[succeeded],
        workspace=LogWorkspace(log, UserActor(id="rule")), deps=seed.deps)
    output = await seed.judge(reaction)
    assert seed.judge.name == "opened-incident"
    judged = await seed.judged_input(reaction)
    assert judged == seed.TriageInput(service="api", errors=3, opened_incident=opens_incident)
    verdict = log[-1]
    assert isinstance(verdict.event, FeedbackGiven)
    assert verdict.actor == EvaluatorActor(name="opened-incident", version="1")
    assert verdict.event.target == RunTarget(run_id=succeeded.data["run_id"])
    assert verdict.event.value == {"correct": opens_incident, "severity": "high", "note": None}
    assert output["value"] == verdict.event.value
    assert output["feedback_id"] == verdict.event_id
    assert (output["evaluator"], output["version"]) == ("opened-incident", "1")


def test_the_judge_rule_judges_at_most_twenty_an_hour(seed: ModuleType) -> None:
    from datetime import UTC, datetime

    engine = RuleEngine([seed.judge_triage])
    start = datetime(2026, 9, 28, 12, 0, tzinfo=UTC)

    def succeeded(i: int, rule: str = "ops:error-spike", minutes: int = 0) -> Envelope:
        return Envelope.new(RunSucceeded(run_id=f"run_{i}", rule=rule, action="triage"),
                            tenant="acme", workspace="prod",
                            time=start + timedelta(minutes=minutes))

    assert engine.evaluate(succeeded(0, rule="ops:other")) == []
    fired = sum(isinstance(d, Fire) for i in range(25)
                for d in engine.evaluate(succeeded(i, minutes=i)))
    assert fired == 20
    [next_hour] = engine.evaluate(succeeded(99, minutes=61))
    assert isinstance(next_hour, Fire)


def _started(run_id: str, rule: str, ms: int) -> Envelope:
    from datetime import UTC, datetime

    return Envelope.new(RunStarted(run_id=run_id, rule=rule, action="triage",
                                   firing_id=f"fir_{run_id}"),
                        tenant="acme", workspace="prod",
                        time=datetime(2026, 9, 28, 12, 0, 0, ms * 1000, tzinfo=UTC))


def test_latest_runs_are_newest_first() -> None:
    log = [_started("run_b", "ops:error-spike", 5), _started("run_x", "other", 9),
           _started("run_a", "ops:error-spike", 1), _started("run_c", "ops:error-spike", 7)]
    log.append(log[0])  # a run_started recorded again after a crash is the same run
    assert [r.id for r in latest_runs(log, rule="ops:error-spike")] == [
        "run_c", "run_b", "run_a"]
    [latest] = latest_runs(log, rule="ops:error-spike", limit=1)
    assert latest.id == "run_c" and latest.run.rule == "ops:error-spike"
    assert [r.id for r in latest_runs(log)] == ["run_x", "run_c", "run_b", "run_a"]
    assert latest_runs(log, rule="nothing") == []
    with pytest.raises(ValidationFailed, match="limit must be at least 1"):
        latest_runs(log, limit=0)
