"""The ops example of the docs, as rules and actions a worker runs (`--rules`).

An error spike (three `ops:error_spike` events for one service within five minutes) starts a
triage run; triage opens an incident when the errors are many. A judge evaluates every
successful triage, at most twenty an hour; people and the judge give `triage_quality`
feedback, and feedback saying a triage was wrong starts an escalation.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from streams.core.evaluation import EvaluatorAction, run_record
from streams.core.evaluators import FunctionEvaluator, HandOff
from streams.core.events import AppEvent, FeedbackGiven, RunSucceeded
from streams.core.rules import F, RetryPolicy, Rule, on, run
from streams.core.runs import Reaction
from streams.core.targets import RunTarget
from streams.examples.ops import ErrorSpike, Escalated, IncidentOpened, TriageQuality


async def triage(reaction: Reaction) -> Mapping[str, Any]:
    """Look at the spike's events; open an incident when they add up to many errors."""
    errors = sum(int(e.event.data.get("errors", 1)) for e in reaction.events
                 if isinstance(e.event, AppEvent))
    service = reaction.run.scope.get("service", "?")
    opened = errors >= 30
    if opened:
        await reaction.emit(IncidentOpened(service=service, errors=errors).to_event())
    return {"service": service, "errors": errors, "opened_incident": opened}


async def escalate(reaction: Reaction) -> Mapping[str, Any]:
    """Page a human: someone said a triage was wrong."""
    cause = reaction.events[-1] if reaction.events else None
    await reaction.emit(Escalated(because=cause.event_id if cause else None).to_event())
    return {"escalated": True}


class TriageInput(BaseModel):
    """What the judge looks at."""

    service: str
    errors: int
    opened_incident: bool


def opened_an_incident(judged: TriageInput) -> TriageQuality:
    """A cheap judge: a triage was right if it opened an incident exactly when errors were
    many; too few errors to go on hands off to a person."""
    if judged.errors < 3:
        raise HandOff("not enough errors to judge")
    return TriageQuality(correct=judged.opened_incident == (judged.errors >= 30),
                         severity="critical" if judged.errors >= 30 else "low")


triage_judge = FunctionEvaluator(opened_an_incident, verdict_type=TriageQuality,
                                 name="opened-incident", version="1")


async def judged_input(reaction: Reaction) -> TriageInput:
    """The judged run, read back from the log."""
    succeeded = reaction.events[-1].event
    assert isinstance(succeeded, RunSucceeded)
    record = await run_record(reaction.workspace, succeeded.run_id)
    return TriageInput(
        service=str(record.run.scope.get("service", "?")),
        errors=int(succeeded.output.get("errors", len(record.matched))),
        opened_incident=any(isinstance(e.event, AppEvent)
                            and e.event.name == IncidentOpened.app_event_name
                            for e in record.emitted),
    )


async def judged_run(reaction: Reaction) -> RunTarget:
    """The run the judge's verdict is about."""
    succeeded = reaction.events[-1].event
    assert isinstance(succeeded, RunSucceeded)
    return RunTarget(run_id=succeeded.run_id)


judge = EvaluatorAction(triage_judge, input=judged_input, target=judged_run)

error_spike = Rule(
    name="ops:error-spike",
    when=on(ErrorSpike).count(3, within=timedelta(minutes=5)).scope(F.data.service),
    then=run("triage", retry=RetryPolicy(max_attempts=3, backoff=timedelta(milliseconds=200))),
)
judge_triage = Rule(
    name="ops:judge-triage",
    when=on(RunSucceeded).where(rule="ops:error-spike").at_most(20, per=timedelta(hours=1)),
    then=run(judge),
)
wrong_triage = Rule(
    name="ops:wrong-triage",
    when=on(FeedbackGiven).where(F.value.correct.eq(False), feedback_type="triage_quality"),
    then=run("escalate"),
)

RULES = [error_spike, judge_triage, wrong_triage]
ACTIONS = {"triage": triage, "escalate": escalate, judge.name: judge}
