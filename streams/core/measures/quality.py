"""Average quality per agent and over time (seed 004's aggregation): the mean of one numeric
field of one feedback type (by default the workflow reviewer's `quality_score`), per rule whose
run was judged, and per UTC day. Feedback on a run or firing belongs to that run's rule;
feedback on a chain belongs to `chain`. Repeats of an event (same event id) count once."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date

from streams.core.events import Envelope, FeedbackGiven, RunStarted
from streams.core.measures.source import LogSource, envelopes_of

__all__ = ["QualitySeries", "fold_quality", "quality"]


@dataclass(frozen=True)
class QualitySeries:
    """One rule's (agent's) mean quality, overall and per UTC day."""

    rule: str
    n: int
    mean: float
    by_day: dict[date, tuple[int, float]] = field(default_factory=dict)


def fold_quality(envelopes: Iterable[Envelope], *, feedback_type: str = "workflow_review",
                 field_name: str = "quality_score") -> dict[str, QualitySeries]:
    """Mean of `feedback_type.field_name` per rule and per day."""
    rule_of_run: dict[str, str] = {}
    rule_of_firing: dict[str, str] = {}
    judged: dict[str, tuple[Envelope, FeedbackGiven]] = {}
    for envelope in envelopes:
        event = envelope.event
        if isinstance(event, RunStarted):
            rule_of_run[event.run_id] = event.rule
            rule_of_firing[event.firing_id] = event.rule
        elif isinstance(event, FeedbackGiven) and event.feedback_type == feedback_type:
            judged[envelope.event_id] = (envelope, event)
    sums: dict[str, list[float]] = {}
    days: dict[str, dict[date, list[float]]] = {}
    for envelope, event in judged.values():
        raw = event.value.get(field_name)
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            continue
        target = event.target
        if target.kind == "run":
            rule = rule_of_run.get(target.id, "unknown run")
        elif target.kind == "firing":
            rule = rule_of_firing.get(target.id, "unknown firing")
        else:
            rule = "chain"
        sums.setdefault(rule, []).append(float(raw))
        days.setdefault(rule, {}).setdefault(envelope.time.date(), []).append(float(raw))
    return {
        rule: QualitySeries(
            rule=rule, n=len(values), mean=math.fsum(values) / len(values),
            by_day={d: (len(v), math.fsum(v) / len(v)) for d, v in sorted(days[rule].items())})
        for rule, values in sorted(sums.items())
    }


async def quality(source: LogSource, *, feedback_type: str = "workflow_review",
                  field_name: str = "quality_score") -> dict[str, QualitySeries]:
    """Average quality per rule (agent) and per day."""
    return fold_quality(await envelopes_of(source), feedback_type=feedback_type,
                        field_name=field_name)
