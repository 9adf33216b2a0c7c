"""The report as data: the measures of a workspace's envelopes, as a JSON-ready dict.

Pure: it imports the core only (no Kafka), so it runs on envelopes from anywhere.

    report = build_report(envelopes, tenant="acme", workspace="prod",
                          resolves="run_succeeded")
    json.dumps(report)

Sections: `rule_outcomes` (per rule), `time_to_resolution` (the distribution of the chains'
times to their first `resolves` event: quantiles and a histogram), `judge_agreement` (per
evaluator version, feedback type and field), `judge_costs` (per evaluator version: verdicts,
reused ones, calls, tokens and their price), `answers` (how people and each evaluator
version answered each field), `trends` (feedback, scores and agreement per UTC day or ISO
week), `quality` (one numeric field's mean per rule and UTC day), `proposals` (proposal
rates per rule, rule drafts' conversion, each artifact's rewrites), `queues` (judge
agreement and answers on each annotation queue's items) and `why` (per rule given, what it
did with the events it watches: counts per outcome, streams.core.rules.why). Definitions:
docs/measures.md and docs/proposals.md.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from streams.core.errors import ValidationFailed
from streams.core.events import Envelope, FeedbackGiven
from streams.core.feedback import FeedbackRegistry, registry
from streams.core.measures import (
    PERIODS,
    FieldAgreement,
    FieldAnswers,
    JudgeCost,
    ModelPrice,
    PeriodTrend,
    fold_judge_costs,
    fold_quality,
    fold_rule_outcomes,
    fold_time_to_resolution,
    fold_trends,
)
from streams.core.measures.agreement import (
    agreement_json,
    agreement_of,
    latest_verdicts,
    verdict_pairs,
    verdict_target,
)
from streams.core.measures.annotators import (
    PeopleAgreement,
    people_agreement,
    people_agreement_json,
)
from streams.core.measures.answers import answers_of, quantile
from streams.core.pairwise import (
    PAIRWISE_PREFERENCE,
    PairwisePreference,
    PreferenceTally,
    preference_tally,
)
from streams.core.proposals import (
    fold_ledger,
    fold_proposal_rates,
    fold_rule_conversion,
    history_of,
    rewrites,
)
from streams.core.rules import Rule
from streams.core.rules.why import fold_why

__all__ = [
    "DEFAULT_QUALITY",
    "DEFAULT_RESOLVES",
    "REPORT_FORMAT",
    "ReportError",
    "build_report",
    "check_window",
    "histogram",
    "in_window",
    "parse_period",
    "parse_quality",
    "parse_time",
    "quantile",
]

REPORT_FORMAT = "feedback-streams.report/1"
DEFAULT_RESOLVES = "run_succeeded"
DEFAULT_QUALITY = "workflow_review.quality_score"


class ReportError(ValidationFailed):
    """A report cannot be made from this input; the message says what to change."""


def parse_time(text: str, option: str) -> datetime:
    """An ISO 8601 date or time (`2026-11-30`, `2026-11-30T09:00`, with or without an
    offset; without one it is UTC); ReportError naming the option otherwise."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ReportError(f"{option} {text!r} is not an ISO 8601 date or time (e.g. "
                          "2026-11-30 or 2026-11-30T09:00:00+00:00)") from exc
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def check_window(since: datetime | None, until: datetime | None) -> None:
    """ReportError when `since` is not before `until`."""
    if since is not None and until is not None and since >= until:
        raise ReportError(f"--since {since.isoformat()} is not before --until "
                          f"{until.isoformat()}: give a window that starts before it ends")


def in_window(envelopes: Iterable[Envelope], since: datetime | None,
              until: datetime | None) -> list[Envelope]:
    """The envelopes whose time is in `[since, until)` (an open side when None)."""
    return [e for e in envelopes
            if (since is None or e.time >= since) and (until is None or e.time < until)]


def parse_quality(text: str) -> tuple[str, str]:
    """`feedback_type.field` as a pair; ReportError otherwise."""
    kind, dot, name = text.rpartition(".")
    if not dot or not kind or not name:
        raise ReportError(f"--quality {text!r} must be FEEDBACK_TYPE.FIELD, e.g. "
                          f"{DEFAULT_QUALITY}")
    return kind, name


def parse_period(text: str) -> str:
    """`day` or `week`; ReportError otherwise."""
    if text not in PERIODS:
        raise ReportError(f"--per {text!r} is one of {', '.join(PERIODS)}")
    return text


def _nice(step: float) -> float:
    """The smallest of 1, 2, 5 times a power of ten not below `step`."""
    if step <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(step))
    for factor in (1.0, 2.0, 5.0, 10.0):
        if factor * power >= step:
            return factor * power
    return 10.0 * power


def histogram(values: Sequence[float], bins: int = 12) -> list[dict[str, float]]:
    """Equal-width bins of round width (1, 2 or 5 times a power of ten) from 0 covering
    every value, about max(5, sqrt(n)) of them and at most `bins`: [{from, to, count}]."""
    if not values:
        return []
    top = max(values)
    count = max(1, min(bins, max(5, math.ceil(math.sqrt(len(values))))))
    width = _nice(top / count) if top > 0 else 1.0
    edges = max(1, math.floor(top / width) + 1)
    counts = [0] * edges
    for value in values:
        counts[min(edges - 1, int(value // width))] += 1
    return [{"from": i * width, "to": (i + 1) * width, "count": c}
            for i, c in enumerate(counts)]


def _pair(value: tuple[float, float] | None) -> list[float] | None:
    return [value[0], value[1]] if value is not None else None


def build_report(
    envelopes: Iterable[Envelope], *, tenant: str, workspace: str,
    since: datetime | None = None, until: datetime | None = None,
    resolves: str = DEFAULT_RESOLVES, quality_of: str = DEFAULT_QUALITY,
    types: FeedbackRegistry | None = None, generated_at: datetime | None = None,
    survival: timedelta = timedelta(days=30), per: str = "day",
    prices: Mapping[str, ModelPrice] | None = None,
    queues: Mapping[str, Collection[str]] | None = None,
    rules: Sequence[Rule] = (),
) -> dict[str, Any]:
    """The measures of the envelopes in `[since, until)` as a JSON-ready dict; the judges'
    cost priced with `prices` (STREAMS_LLM_PRICES; without it, tokens only); judge agreement
    and answers again for each of `queues` (name: its items, `kind:id`), on the verdicts
    given on its items; for each of `rules`, what it did with the events it watches in the
    window (`why`: counts per outcome).

    The proposal measures fold every envelope given (a proposal may be older than the
    window): rates count first resolutions in the window; the rule drafts' conversion counts
    what was logged before `until` (else `generated_at`), with `survival`. The trends are
    per UTC day or ISO week (`per`)."""
    check_window(since, until)
    parse_period(per)
    quality_type, quality_field = parse_quality(quality_of)
    every = list(envelopes)
    chosen = in_window(every, since, until)
    generated_at = generated_at or datetime.now(UTC)
    outcomes = fold_rule_outcomes(chosen)
    times = sorted(t.total_seconds() for t in fold_time_to_resolution(
        chosen, lambda envelope: envelope.event_type == resolves).values())
    # Each verdict's target, once. Judge and people agreement, answers, trends and the
    # queues' parts read verdicts alone (feedback, and shadows' recorded verdicts), so they
    # fold the envelopes that carry one, and the latest verdicts are found once, not a pass
    # over every envelope each: the same answers, from a fraction of a log.
    verdicts = [(target, e) for e in chosen if (target := verdict_target(e)) is not None]
    judged = [e for _target, e in verdicts]
    latest = latest_verdicts(judged)
    agreement = agreement_of(verdict_pairs(latest), types=types)
    known = types or registry
    # Feedback of a type this process does not register is measured by what its values look
    # like (numbers, booleans), so its categorical fields drop out: name the types, so the
    # reader can load them (`--types`) instead of trusting a table with rows missing.
    unregistered = sorted({e.event.feedback_type for e in judged
                           if isinstance(e.event, FeedbackGiven)
                           and known.get(e.event.feedback_type) is None})
    series = fold_quality(chosen, feedback_type=quality_type, field_name=quality_field)
    return {
        "format": REPORT_FORMAT,
        "tenant": tenant,
        "workspace": workspace,
        "since": since.isoformat() if since else None,
        "until": until.isoformat() if until else None,
        "generated_at": generated_at.isoformat(timespec="seconds"),
        "events": len(chosen),
        "first_event": min(e.time for e in chosen).isoformat() if chosen else None,
        "last_event": max(e.time for e in chosen).isoformat() if chosen else None,
        "rule_outcomes": [{
            "rule": o.rule, "runs": o.runs, "succeeded": o.succeeded,
            "dead_lettered": o.dead_lettered, "in_progress": o.in_progress,
            "finished": o.finished, "failed_attempts": o.failed_attempts,
            "dead_letter_rate": o.dead_letter_rate, "retry_rate": o.retry_rate,
            "intervention_rate": o.intervention_rate,
        } for o in outcomes.values()],
        "time_to_resolution": {
            "resolves": resolves,
            "chains": len(times),
            "seconds": {
                "p50": quantile(times, 0.5), "p90": quantile(times, 0.9),
                "mean": math.fsum(times) / len(times), "max": times[-1],
            } if times else None,
            "histogram": histogram(times),
        },
        "unregistered_feedback_types": unregistered,
        "judge_agreement": [_agreement_row(a) for a in agreement],
        "people_agreement": [_people_row(a) for a in people_agreement(latest, types=types)],
        "judge_costs": [_cost_row(c) for c in fold_judge_costs(chosen, prices)],
        "answers": [_answers_row(a) for a in answers_of(latest, types=types)],
        "trends": {
            "per": per,
            "periods": [_trend_row(t) for t in fold_trends(judged, period=per, types=types)],
        },
        "quality": {
            "feedback_type": quality_type,
            "field": quality_field,
            "agents": [{
                "rule": s.rule, "n": s.n, "mean": s.mean,
                "by_day": [{"day": d.isoformat(), "n": n, "mean": m}
                           for d, (n, m) in sorted(s.by_day.items())],
            } for s in series.values()],
        },
        "proposals": _proposals(every, since=since, until=until,
                                now=until or generated_at, survival=survival),
        "queues": [_queue_section(name, items, verdicts, types)
                   for name, items in sorted((queues or {}).items())],
        "why": [{"rule": name, "watched": sum(counts.values()), "outcomes": counts}
                for name, counts in fold_why(rules, every, chosen).items()],
        "preferences": [_preference_row(t) for t in preference_tally(_preferences(chosen))],
    }


def _preferences(envelopes: Iterable[Envelope]) -> Iterable[tuple[str, str,
                                                                  PairwisePreference]]:
    """People's pairwise preferences, oldest first: (participant, target, preference); a
    value that does not validate (an older shape) is left out."""
    for e in envelopes:
        event = e.event
        if isinstance(event, FeedbackGiven) and event.feedback_type == PAIRWISE_PREFERENCE \
                and e.actor.kind == "user":
            try:
                preference = PairwisePreference.model_validate(event.value)
            except ValueError:
                continue
            yield e.actor.participant, f"{event.target.kind}:{event.target.id}", preference


def _preference_row(t: PreferenceTally) -> dict[str, Any]:
    return {"a": t.a, "b": t.b, "n": t.n, "a_wins": t.a_wins, "b_wins": t.b_wins,
            "ties": t.ties, "a_rate": t.a_rate, "a_rate_ci": _pair(t.a_rate_ci)}


def _queue_section(name: str, items: Collection[str], verdicts: list[tuple[str, Envelope]],
                   types: FeedbackRegistry | None) -> dict[str, Any]:
    """Judge agreement and answers on the verdicts (target, envelope) given on a queue's
    items."""
    wanted = set(items)
    on_items = [(target, e) for target, e in verdicts if target in wanted]
    latest = latest_verdicts(e for _target, e in on_items)
    return {
        "queue": name, "items": len(wanted), "judged": len({t for t, _e in on_items}),
        "people_agreement": [_people_row(a) for a in people_agreement(latest, types=types)],
        "judge_agreement": [_agreement_row(a) for a in agreement_of(verdict_pairs(latest),
                                                                    types=types)],
        "answers": [_answers_row(a) for a in answers_of(latest, types=types)],
    }


def _people_row(a: PeopleAgreement) -> dict[str, Any]:
    return people_agreement_json(a)


def _agreement_row(a: FieldAgreement) -> dict[str, Any]:
    return agreement_json(a)


def _cost_row(c: JudgeCost) -> dict[str, Any]:
    return {
        "evaluator": c.evaluator, "version": c.version, "models": list(c.models),
        "verdicts": c.given, "reused": c.reused, "calls": c.calls,
        "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
        "cost": c.cost, "unpriced_calls": c.unpriced,
        "cost_per_verdict": c.cost_per_verdict, "cost_per_call": c.cost_per_call,
    }


def _answers_row(a: FieldAnswers) -> dict[str, Any]:
    numbers = a.numbers
    return {
        "feedback_type": a.feedback_type, "field": a.field, "kind": a.kind, "who": a.who,
        "n": a.n,
        "counts": [{"label": label, "count": count, "share": count / a.n}
                   for label, count in a.counts],
        "numbers": None if numbers is None else {
            "min": numbers.min, "p25": numbers.p25, "p50": numbers.p50, "p75": numbers.p75,
            "max": numbers.max, "mean": numbers.mean},
    }


def _trend_row(t: PeriodTrend) -> dict[str, Any]:
    return {
        "period": t.period, "starts": t.starts.isoformat(), "people": t.people,
        "evaluators": t.evaluators, "scores": t.scores,
        "agreement": [_agreement_row(a) for a in t.agreement],
    }


def _proposals(envelopes: list[Envelope], *, since: datetime | None, until: datetime | None,
               now: datetime, survival: timedelta) -> dict[str, Any]:
    # The ledger folded once for the three (each folded it on its own before).
    ledger = fold_ledger(envelopes)
    rates = fold_proposal_rates(envelopes, since=since, until=until, ledger=ledger)
    conversion = fold_rule_conversion(envelopes, now=now, survival=survival, ledger=ledger)
    artifacts = []
    for artifact in ledger.artifacts.values():
        versions = history_of(artifact)
        measured = rewrites(versions)
        artifacts.append({
            "artifact_id": artifact.artifact_id, "kind": artifact.kind,
            "versions": len(versions),
            "transitions": measured.transitions, "rewrites": measured.rewrites,
            "rewrite_share": measured.rewrite_share,
            "mean_edit_ratio": measured.mean_edit_ratio,
        })
    return {
        "rates": [{
            "rule": r.rule, "accepted": r.accepted, "edited": r.edited,
            "rejected": r.rejected, "resolved": r.resolved,
            "acceptance_rate": r.acceptance_rate, "edit_rate": r.edit_rate,
            "rejection_rate": r.rejection_rate,
        } for r in rates.values()],
        "rule_conversion": {
            "now": conversion.now.isoformat(timespec="seconds"),
            "survival_days": conversion.survival / timedelta(days=1),
            "proposed": conversion.proposed, "accepted": conversion.accepted,
            "installed": conversion.installed, "survived": conversion.survived,
            "pending": conversion.pending,
        },
        "artifacts": sorted(artifacts, key=lambda a: str(a["artifact_id"])),
    }
