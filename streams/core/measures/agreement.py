"""How far each evaluator version agrees with people, on the same targets.

For each feedback type, each target (kind and id) and each participant, the latest verdict
counts (a person who changed their mind counts once, as they last said). Each evaluator
version's verdict on a target is paired with each person's verdict on it, field by field:

- bool and categorical fields (Literal, Enum): Cohen's kappa
  `kappa = (p_o - p_e) / (1 - p_e)`, where `p_o` is the share of pairs that agree and `p_e`
  the agreement expected by chance from each side's label frequencies; with the normal
  approximation `SE = sqrt(p_o (1 - p_o) / (n (1 - p_e)^2))` for a 95% interval
  `kappa ± 1.96 SE`. Undefined (None) when `p_e = 1` (both sides always say the same one
  label);
- numeric fields: mean absolute error `MAE = mean |e - p|` with `± 1.96 s / sqrt(n)`
  (s the sample standard deviation of |e - p|), and Spearman's rank correlation (Pearson's r
  of the ranks, ties averaged) with a Fisher-z interval `tanh(atanh(r) ± 1.96 / sqrt(n - 3))`
  (None below 4 pairs or without variance).

Free-text fields are not compared. Field kinds come from the registered feedback type's score
configs; for a type this process does not register they are inferred from the values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from streams.core.evaluation import VERDICT_RECORD
from streams.core.events import AppEvent, Envelope, FeedbackGiven
from streams.core.feedback import Feedback, FeedbackRegistry, registry
from streams.core.measures.source import LogSource, envelopes_of
from streams.core.scores import score_configs

__all__ = [
    "CategoricalAgreement",
    "FieldAgreement",
    "NumericAgreement",
    "Verdict",
    "VerdictPair",
    "agreement_json",
    "agreement_of",
    "cohen_kappa",
    "compared_fields",
    "field_kinds",
    "fold_judge_agreement",
    "is_label",
    "judge_agreement",
    "latest_verdicts",
    "spearman",
    "verdict_pairs",
    "verdict_target",
]

Z95 = 1.959963984540054


@dataclass(frozen=True)
class CategoricalAgreement:
    """Kappa of one evaluator version against people on one bool or categorical field."""

    n: int
    observed: float
    expected: float
    kappa: float | None
    ci: tuple[float, float] | None


@dataclass(frozen=True)
class NumericAgreement:
    """MAE and rank correlation of one evaluator version against people on a number."""

    n: int
    mae: float
    mae_ci: tuple[float, float] | None
    spearman: float | None
    spearman_ci: tuple[float, float] | None


@dataclass(frozen=True)
class FieldAgreement:
    """One evaluator version's agreement with people on one field of one feedback type."""

    evaluator: str
    feedback_type: str
    field: str
    kind: str
    categorical: CategoricalAgreement | None = None
    numeric: NumericAgreement | None = None

    @property
    def n(self) -> int:
        """The number of (evaluator, person) pairs compared."""
        part = self.categorical or self.numeric
        return part.n if part else 0


def cohen_kappa(pairs: Sequence[tuple[object, object]]) -> CategoricalAgreement:
    """Cohen's kappa of labelled pairs (evaluator's label, person's label)."""
    n = len(pairs)
    if n == 0:
        return CategoricalAgreement(0, 0.0, 0.0, None, None)
    observed = sum(a == b for a, b in pairs) / n
    left: dict[object, int] = {}
    right: dict[object, int] = {}
    for a, b in pairs:
        left[a] = left.get(a, 0) + 1
        right[b] = right.get(b, 0) + 1
    expected = sum(count * right.get(label, 0) for label, count in left.items()) / (n * n)
    if expected >= 1.0:
        return CategoricalAgreement(n, observed, expected, None, None)
    kappa = (observed - expected) / (1.0 - expected)
    se = math.sqrt(observed * (1.0 - observed) / (n * (1.0 - expected) ** 2))
    ci = (max(-1.0, kappa - Z95 * se), min(1.0, kappa + Z95 * se))
    return CategoricalAgreement(n, observed, expected, kappa, ci)


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation, ties averaged; None without variance or under 2 pairs."""
    if len(xs) != len(ys) or len(xs) < 2:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = math.fsum(rx) / len(rx), math.fsum(ry) / len(ry)
    sxy = math.fsum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sxx = math.fsum((a - mx) ** 2 for a in rx)
    syy = math.fsum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def _numeric(pairs: Sequence[tuple[float, float]]) -> NumericAgreement:
    n = len(pairs)
    errors = [abs(a - b) for a, b in pairs]
    mae = math.fsum(errors) / n
    mae_ci = None
    if n > 1:
        sd = math.sqrt(math.fsum((e - mae) ** 2 for e in errors) / (n - 1))
        half = Z95 * sd / math.sqrt(n)
        mae_ci = (max(0.0, mae - half), mae + half)
    r = spearman([a for a, _ in pairs], [b for _, b in pairs])
    r_ci = None
    if r is not None and n > 3:
        z = math.atanh(max(-0.999999, min(0.999999, r)))
        half = Z95 / math.sqrt(n - 3)
        r_ci = (math.tanh(z - half), math.tanh(z + half))
    return NumericAgreement(n, mae, mae_ci, r, r_ci)


_COMPARED = {"BOOLEAN": "bool", "CATEGORICAL": "categorical", "NUMERIC": "numeric"}


def compared_fields(cls: type[Feedback]) -> dict[str, str]:
    """The fields of a feedback type that people and evaluators are compared on, with their
    kind (`bool`, `categorical`, `numeric`); free text is not compared."""
    return {c.field: _COMPARED[c.data_type] for c in score_configs(cls)
            if c.data_type in _COMPARED}


def _kinds(feedback_type: str, values: Iterable[dict[str, object]],
           types: FeedbackRegistry) -> dict[str, str]:
    cls = types.get(feedback_type)
    if cls is not None:
        return compared_fields(cls)
    out: dict[str, str] = {}
    for value in values:
        for name, item in value.items():
            if isinstance(item, bool):
                out.setdefault(name, "bool")
            elif isinstance(item, int | float):
                out.setdefault(name, "numeric")
    return out


Target = tuple[str, str]
"""A feedback type and a target (`kind:id`)."""


@dataclass(frozen=True)
class Verdict:
    """A participant's latest feedback of one type on one target."""

    feedback_type: str
    target: str
    participant: str
    person: bool
    value: dict[str, object]
    time: datetime
    event_id: str


@dataclass(frozen=True)
class VerdictPair:
    """An evaluator version's and a person's latest verdicts on the same target, compared
    from `time` on (the later of the two)."""

    evaluator: str
    feedback_type: str
    judged: dict[str, object]
    said: dict[str, object]
    time: datetime


def verdict_target(envelope: Envelope) -> str | None:
    """The `kind:id` a verdict is on: a feedback event's target, or a shadow evaluator
    version's recorded verdict's (`streams.core.evaluation`: never given as feedback); None
    for any other envelope."""
    event = envelope.event
    if isinstance(event, FeedbackGiven):
        return f"{event.target.kind}:{event.target.id}"
    if isinstance(event, AppEvent) and event.name == VERDICT_RECORD \
            and event.data.get("shadow") is True:
        target = event.data.get("target")
        if isinstance(target, dict):
            return f"{target.get('kind')}:{target.get('id')}"
    return None


def latest_verdicts(envelopes: Iterable[Envelope]) -> list[Verdict]:
    """Each person's and evaluator version's latest verdict per feedback type and target (a
    participant who changed their mind counts once, as they last said), shadow versions'
    recorded verdicts included."""
    latest: dict[tuple[str, str, str], Verdict] = {}
    for envelope in envelopes:
        target = verdict_target(envelope)
        if target is None:
            continue
        event = envelope.event
        if isinstance(event, FeedbackGiven):
            if envelope.actor.kind not in ("user", "evaluator"):
                continue
            verdict = Verdict(event.feedback_type, target, envelope.actor.participant,
                              envelope.actor.kind == "user", dict(event.value), envelope.time,
                              envelope.event_id)
        else:  # a shadow's record (verdict_target said so)
            data = cast(AppEvent, event).data
            value = data.get("value")
            if not isinstance(value, dict):
                continue
            verdict = Verdict(str(data.get("feedback_type")), target,
                              f"evaluator:{data.get('evaluator')}@{data.get('version')}",
                              False, dict(value), envelope.time, envelope.event_id)
        key = (verdict.feedback_type, verdict.target, verdict.participant)
        previous = latest.get(key)
        if previous is None or previous.time <= verdict.time:
            latest[key] = verdict
    return list(latest.values())


def verdict_pairs(verdicts: Iterable[Verdict]) -> list[VerdictPair]:
    """Every (evaluator version, person) pair of verdicts on the same type and target."""
    by_target: dict[Target, tuple[list[Verdict], list[Verdict]]] = {}
    for verdict in verdicts:
        people, evaluators = by_target.setdefault((verdict.feedback_type, verdict.target),
                                                  ([], []))
        (people if verdict.person else evaluators).append(verdict)
    return [VerdictPair(judged.participant, judged.feedback_type, judged.value, said.value,
                        max(judged.time, said.time))
            for people, evaluators in by_target.values()
            for judged in evaluators for said in people]


def field_kinds(feedback_type: str, values: Iterable[dict[str, object]],
                types: FeedbackRegistry | None = None) -> dict[str, str]:
    """The compared fields of a feedback type and their kinds: from its registered class,
    else inferred from the values given (numbers and booleans; categories drop out)."""
    return _kinds(feedback_type, values, types or registry)


def is_label(value: object) -> bool:
    """Whether a value can be a category: a scalar (str, number, bool), hashable and shown
    as it is. A list or an object (a value of another shape, from an older version of the
    type or an unregistered one) is left out of the measures, not a failure."""
    return isinstance(value, str | int | float)


def agreement_of(pairs: Iterable[VerdictPair], *,
                 types: FeedbackRegistry | None = None) -> list[FieldAgreement]:
    """Agreement per evaluator version, feedback type and field of the pairs given."""
    grouped: dict[tuple[str, str], list[tuple[dict[str, object], dict[str, object]]]] = {}
    values: dict[str, list[dict[str, object]]] = {}
    for pair in pairs:
        grouped.setdefault((pair.evaluator, pair.feedback_type), []).append(
            (pair.judged, pair.said))
        values.setdefault(pair.feedback_type, []).extend([pair.judged, pair.said])
    out: list[FieldAgreement] = []
    for (evaluator, feedback_type), compared in sorted(grouped.items()):
        for name, kind in sorted(field_kinds(feedback_type, values[feedback_type],
                                             types).items()):
            present = [(a[name], b[name]) for a, b in compared
                       if a.get(name) is not None and b.get(name) is not None]
            if not present:
                continue
            if kind == "numeric":
                numbers = [(float(a), float(b)) for a, b in present
                           if isinstance(a, int | float) and isinstance(b, int | float)]
                if not numbers:  # a type unregistered here, its values not numbers
                    continue
                out.append(FieldAgreement(evaluator, feedback_type, name, kind,
                                          numeric=_numeric(numbers)))
            else:
                labels = [(a, b) for a, b in present if is_label(a) and is_label(b)]
                if not labels:
                    continue
                out.append(FieldAgreement(evaluator, feedback_type, name, kind,
                                          categorical=cohen_kappa(labels)))
    return out


def fold_judge_agreement(
    envelopes: Iterable[Envelope], *, types: FeedbackRegistry | None = None,
) -> list[FieldAgreement]:
    """Agreement of every evaluator version with people, per feedback type and field."""
    return agreement_of(verdict_pairs(latest_verdicts(envelopes)), types=types)


async def judge_agreement(
    source: LogSource, *, types: FeedbackRegistry | None = None,
) -> list[FieldAgreement]:
    """Per evaluator version (`evaluator:name@version`), its agreement with people."""
    return fold_judge_agreement(await envelopes_of(source), types=types)


def _listed(value: tuple[float, float] | None) -> list[float] | None:
    return [value[0], value[1]] if value is not None else None


def agreement_json(a: FieldAgreement) -> dict[str, object]:
    """One evaluator version's agreement on one field as JSON-ready data (the report's
    rows, and a queue's agreement route)."""
    return {
        "evaluator": a.evaluator, "feedback_type": a.feedback_type, "field": a.field,
        "kind": a.kind, "n": a.n,
        "kappa": a.categorical.kappa if a.categorical else None,
        "kappa_ci": _listed(a.categorical.ci) if a.categorical else None,
        "observed": a.categorical.observed if a.categorical else None,
        "expected": a.categorical.expected if a.categorical else None,
        "mae": a.numeric.mae if a.numeric else None,
        "mae_ci": _listed(a.numeric.mae_ci) if a.numeric else None,
        "spearman": a.numeric.spearman if a.numeric else None,
        "spearman_ci": _listed(a.numeric.spearman_ci) if a.numeric else None,
    }
