"""A workspace's log with something for every chart of the report: runs of two rules (some
dead-lettered, one in progress), chains resolved after different times, two judge versions
and a person on the same runs, and a reviewer's quality scores over three days."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import streams.core.judges  # registers workflow_review
import streams.examples.ops  # noqa: F401  (registers triage_quality)
from streams.core.actors import EvaluatorActor, SystemActor, UserActor
from streams.core.events import (
    AppEvent,
    Envelope,
    Event,
    FeedbackGiven,
    RunDeadLettered,
    RunStarted,
    RunSucceeded,
)
from streams.core.targets import RunTarget

START = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
RULES = ("ops:error-spike", "ops:judge-triage")
CHAINS = 12
ADA = UserActor(id="ada")
JUDGES = (EvaluatorActor(name="triage-judge", version="1"),
          EvaluatorActor(name="triage-judge", version="2"))
REVIEWER = EvaluatorActor(name="workflow-reviewer", version="2026-11")
SEVERITIES = ("low", "high", "critical")


def sample_log(tenant: str = "acme", workspace: str = "prod") -> list[Envelope]:
    """The log, in time order; event ids are unique per tenant and workspace."""
    out: list[Envelope] = []

    def add(event: Event, when: datetime, chain: str | None, *, actor: Any = None,
            event_id: str | None = None) -> Envelope:
        envelope = Envelope.new(event, tenant=tenant, workspace=workspace,
                                actor=actor or SystemActor(), correlation_id=chain,
                                time=when, event_id=event_id)
        out.append(envelope)
        return envelope

    for i in range(CHAINS):
        begun = START + timedelta(days=i % 3, hours=i)
        chain = f"evt_{workspace}_{i:02d}"
        rule = RULES[i % 2]
        run_id = f"run_{workspace}_{i:02d}"
        add(AppEvent(name="ops:error_spike", data={"service": f"svc-{i}"}), begun, None,
            event_id=chain)
        add(RunStarted(run_id=run_id, rule=rule, action="triage", firing_id=f"fir_{i}"),
            begun + timedelta(seconds=5), chain)
        if i == CHAINS - 1:
            continue  # still in progress
        done = begun + timedelta(seconds=30 * (i + 1))
        if i % 5 == 4:
            add(RunDeadLettered(run_id=run_id, rule=rule, action="triage", attempts=3,
                                error="timeout"), done, chain)
            continue
        add(RunSucceeded(run_id=run_id, rule=rule, action="triage"), done, chain)
        target = RunTarget(run_id=run_id)
        person = {"correct": i % 3 != 0, "severity": SEVERITIES[i % 3], "note": None}
        add(FeedbackGiven(feedback_type="triage_quality", target=target, value=person),
            done + timedelta(minutes=5), chain, actor=ADA)
        for version, judge in enumerate(JUDGES):
            # Version 1 agrees with ada on every other run, version 2 on all but one.
            agrees = i % 2 == 0 if version == 0 else i != 7
            verdict = dict(person) if agrees else {
                "correct": not person["correct"], "severity": SEVERITIES[(i + 1) % 3],
                "note": None}
            add(FeedbackGiven(feedback_type="triage_quality", target=target, value=verdict),
                done + timedelta(minutes=1), chain, actor=judge)
        review = {"approved": True, "quality_score": round(0.4 + 0.05 * i, 2), "issues": [],
                  "recommendation": "ship"}
        add(FeedbackGiven(feedback_type="workflow_review", target=target, value=review),
            done + timedelta(minutes=2), chain, actor=REVIEWER)
    return sorted(out, key=lambda e: e.time)
