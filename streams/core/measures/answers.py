"""How people and each evaluator version answered, and how feedback and agreement moved
over time: the report's distributions and trends.

- `fold_answers`: per feedback type, compared field and side (`people`, or one evaluator
  version `evaluator:name@version`), the latest verdicts' answers: counts per label for
  yes/no and categorical fields, quantiles and the mean for numbers. The same verdicts as
  the agreement (a participant's latest per target), so the two read together.
- `fold_trends`: per UTC day or ISO week, the feedback events people and evaluators gave,
  the scores they carried (one per field with a value, as the mirror writes them), and the
  agreement of each evaluator version with people on the pairs that became comparable in
  that period (the later of the two verdicts' times falls in it). Each pair counts in one
  period, so the periods' pairs add up to the whole report's.

Pure: envelopes in, dataclasses out (docs/measures.md has the definitions).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from streams.core.events import Envelope, FeedbackGiven
from streams.core.feedback import FeedbackRegistry, registry
from streams.core.measures.agreement import (
    FieldAgreement,
    Verdict,
    VerdictPair,
    agreement_of,
    field_kinds,
    latest_verdicts,
    verdict_pairs,
)
from streams.core.scores import score_configs, score_value

__all__ = [
    "PERIODS",
    "FieldAnswers",
    "NumberSummary",
    "PeriodTrend",
    "answers_of",
    "fold_answers",
    "fold_trends",
    "label_of",
    "period_of",
    "quantile",
]

PERIODS = ("day", "week")
PEOPLE = "people"


@dataclass(frozen=True)
class NumberSummary:
    """A numeric field's answers: quantiles (linear between ranks) and the mean."""

    min: float
    p25: float
    p50: float
    p75: float
    max: float
    mean: float


@dataclass(frozen=True)
class FieldAnswers:
    """How one side answered one field of one feedback type: `counts` (label, count), most
    given first, for yes/no and categorical fields; `numbers` for numeric ones."""

    feedback_type: str
    field: str
    kind: str
    who: str
    n: int
    counts: tuple[tuple[str, int], ...] = ()
    numbers: NumberSummary | None = None


@dataclass(frozen=True)
class PeriodTrend:
    """One period's feedback, scores and agreement (`period` is `2026-11-30` for a day,
    `2026-W49` for an ISO week; `starts` its first day)."""

    period: str
    starts: date
    people: int
    evaluators: int
    scores: int
    agreement: tuple[FieldAgreement, ...]


def label_of(value: object) -> str:
    """An answer as a label: `yes`/`no` for booleans, an enum's or a text's value as is,
    anything else as JSON."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    value = getattr(value, "value", value)
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def period_of(when: datetime, period: str) -> tuple[str, date]:
    """The UTC day or ISO week `when` falls in: (its name, its first day)."""
    day = when.date() if when.tzinfo is None else when.astimezone(UTC).date()
    if period == "day":
        return day.isoformat(), day
    if period == "week":
        year, week, weekday = day.isocalendar()
        return f"{year}-W{week:02d}", day - timedelta(days=weekday - 1)
    raise ValueError(f"period {period!r} is one of {list(PERIODS)}")


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values, linear between the closest ranks."""
    if not values:
        raise ValueError("quantile of nothing")
    position = (len(values) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (position - low)


def _summary(values: list[float]) -> NumberSummary:
    ordered = sorted(values)
    return NumberSummary(ordered[0], quantile(ordered, 0.25), quantile(ordered, 0.5),
                         quantile(ordered, 0.75), ordered[-1],
                         math.fsum(ordered) / len(ordered))


def _side(verdict: Verdict) -> str:
    return PEOPLE if verdict.person else verdict.participant


def fold_answers(envelopes: Iterable[Envelope], *,
                 types: FeedbackRegistry | None = None) -> list[FieldAnswers]:
    """Per feedback type, field and side, how the latest verdicts answered (sorted by type,
    field, then people before the evaluator versions)."""
    return answers_of(latest_verdicts(envelopes), types=types)


def answers_of(verdicts: Iterable[Verdict], *,
               types: FeedbackRegistry | None = None) -> list[FieldAnswers]:
    """`fold_answers` of verdicts already found (`latest_verdicts`), for a caller that
    measures them in other ways too."""
    by_type: dict[str, list[Verdict]] = {}
    for verdict in verdicts:
        by_type.setdefault(verdict.feedback_type, []).append(verdict)
    out: list[FieldAnswers] = []
    for feedback_type, given in sorted(by_type.items()):
        kinds = field_kinds(feedback_type, (v.value for v in given), types)
        sides = sorted({_side(v) for v in given}, key=lambda s: (s != PEOPLE, s))
        for name, kind in sorted(kinds.items()):
            for side in sides:
                answers = [v.value[name] for v in given
                           if _side(v) == side and v.value.get(name) is not None]
                if not answers:
                    continue
                if kind == "numeric":
                    numbers = [float(a) for a in answers
                               if isinstance(a, int | float) and not isinstance(a, bool)]
                    if numbers:
                        out.append(FieldAnswers(feedback_type, name, kind, side, len(numbers),
                                                numbers=_summary(numbers)))
                    continue
                counts: dict[str, int] = {}
                for answer in answers:
                    label = label_of(answer)
                    counts[label] = counts.get(label, 0) + 1
                out.append(FieldAnswers(
                    feedback_type, name, kind, side, len(answers),
                    counts=tuple(sorted(counts.items(), key=lambda c: (-c[1], c[0])))))
    return out


def _score_count(event: FeedbackGiven, types: FeedbackRegistry) -> int:
    cls = types.get(event.feedback_type)
    if cls is None:  # not registered here: one score per field with a value
        return sum(1 for value in event.value.values() if value not in (None, ""))
    return sum(1 for config in score_configs(cls)
               if score_value(config, event.value.get(config.field)) is not None)


def fold_trends(envelopes: Iterable[Envelope], *, period: str = "day",
                types: FeedbackRegistry | None = None) -> list[PeriodTrend]:
    """Per period (`day` or `week`, UTC), oldest first: feedback events by people and by
    evaluators (repeats of an event id once), the scores they carried, and each evaluator
    version's agreement with people on the pairs that became comparable in it."""
    if period not in PERIODS:
        raise ValueError(f"period {period!r} is one of {list(PERIODS)}")
    known = types or registry
    every = list(envelopes)
    seen: set[str] = set()
    counts: dict[tuple[str, date], list[int]] = {}
    for envelope in every:
        event = envelope.event
        if not isinstance(event, FeedbackGiven) or envelope.event_id in seen \
                or envelope.actor.kind not in ("user", "evaluator"):
            continue
        seen.add(envelope.event_id)
        row = counts.setdefault(period_of(envelope.time, period), [0, 0, 0])
        row[0 if envelope.actor.kind == "user" else 1] += 1
        row[2] += _score_count(event, known)
    pairs_by: dict[tuple[str, date], list[VerdictPair]] = {}
    for pair in verdict_pairs(latest_verdicts(every)):
        pairs_by.setdefault(period_of(pair.time, period), []).append(pair)
    out = []
    for key in sorted(set(counts) | set(pairs_by), key=lambda k: k[1]):
        people, evaluators, scores = counts.get(key, [0, 0, 0])
        out.append(PeriodTrend(key[0], key[1], people, evaluators, scores,
                               tuple(agreement_of(pairs_by.get(key, []), types=types))))
    return out

