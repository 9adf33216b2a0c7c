"""How far people agree with each other: Krippendorff's alpha per feedback type and field,
over the targets several people judged (an annotation queue with k reviewers per item).

Each person's latest verdict per feedback type and target counts (`agreement.
latest_verdicts`). A target with two values or more of a field is a *unit*; its values are
*pairable*. With `n` pairable values in all and `m_u` in unit `u`:

    D_o = (1 / n) * sum_u (1 / (m_u - 1)) * sum_{i != j in u} delta(v_i, v_j)
    D_e = (1 / (n (n - 1))) * sum_{i != j, all pairable values} delta(v_i, v_j)
    alpha = 1 - D_o / D_e

`delta` is 0 or 1 (equal or not) for bool and categorical fields (nominal alpha), and
`(a - b)^2` for numbers (interval alpha). alpha is 1 when people always agree, about 0 when
they agree as often as chance would, and undefined (None) when every value is the same
(`D_e = 0`). Its 95% interval is a bootstrap over units (`BOOTSTRAP` resamples, a fixed
seed, so a report is the same each time it is made). Beside it, `observed` is the share of
pairs of people that gave the same value (categories), which reads more plainly.
Free-text fields are not compared.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from streams.core.feedback import FeedbackRegistry
from streams.core.measures.agreement import Verdict, field_kinds, is_label
from streams.core.pairwise import PAIRWISE_PREFERENCE

__all__ = ["BOOTSTRAP", "PeopleAgreement", "krippendorff_alpha", "people_agreement",
           "people_agreement_json"]

BOOTSTRAP: Final = 500
"""Resamples of the units for alpha's interval."""

_SEED: Final = 20261206


@dataclass(frozen=True)
class _Unit:
    """One unit's part of alpha: its pairable values' count, its disagreement term, and
    what the expected disagreement needs of it (category counts, or sums of values)."""

    m: int
    d: float
    counts: Counter[object]
    s1: float
    s2: float


def _unit(values: Sequence[object], numeric: bool, centre: float = 0.0) -> _Unit:
    m = len(values)
    if numeric:
        # Centred (interval alpha does not change under a shift): the sums of squares below
        # keep their precision for large values.
        numbers = [float(v) - centre for v in values]  # type: ignore[arg-type]
        s1, s2 = sum(numbers), sum(v * v for v in numbers)
        # sum over ordered pairs i != j of (a - b)^2 = 2 m s2 - 2 s1^2
        return _Unit(m, (2 * m * s2 - 2 * s1 * s1) / (m - 1), Counter(), s1, s2)
    counts = Counter(values)
    disagreeing = m * m - sum(c * c for c in counts.values())
    return _Unit(m, disagreeing / (m - 1), counts, 0.0, 0.0)


def _alpha(units: Sequence[_Unit], numeric: bool) -> float | None:
    n = sum(u.m for u in units)
    if n < 2:
        return None
    observed = sum(u.d for u in units) / n
    if numeric:
        s1, s2 = sum(u.s1 for u in units), sum(u.s2 for u in units)
        expected = (2 * n * s2 - 2 * s1 * s1) / (n * (n - 1))
    else:
        totals: Counter[object] = Counter()
        for u in units:
            totals.update(u.counts)
        expected = (n * n - sum(c * c for c in totals.values())) / (n * (n - 1))
    if expected <= 1e-12:
        return None
    return 1.0 - observed / expected


def krippendorff_alpha(units: Iterable[Sequence[object]], *, numeric: bool = False,
                       bootstrap: int = BOOTSTRAP,
                       ) -> tuple[float | None, tuple[float, float] | None]:
    """Alpha over `units` (each the values people gave one target; units with fewer than
    two are not pairable and left out), nominal or (`numeric`) interval, with its bootstrap
    95% interval (None with fewer than two units, or when alpha is undefined)."""
    pairable = [list(u) for u in units if len(u) >= 2]
    every = [float(v) for u in pairable for v in u] if numeric else []  # type: ignore[arg-type]
    centre = sum(every) / len(every) if every else 0.0
    parts = [_unit(u, numeric, centre) for u in pairable]
    alpha = _alpha(parts, numeric)
    if alpha is None or len(parts) < 2 or bootstrap <= 0:
        return alpha, None
    rng = random.Random(_SEED)
    draws = sorted(a for a in (_alpha(rng.choices(parts, k=len(parts)), numeric)
                               for _ in range(bootstrap)) if a is not None)
    if not draws:
        return alpha, None
    low = draws[round(0.025 * (len(draws) - 1))]
    high = draws[round(0.975 * (len(draws) - 1))]
    return alpha, (low, high)


@dataclass(frozen=True)
class PeopleAgreement:
    """People's agreement with each other on one field of one feedback type: alpha and its
    interval, the units (targets judged by two people or more), the pairable values, and
    for categories the share of pairs of people that agreed."""

    feedback_type: str
    field: str
    kind: str
    alpha: float | None
    ci: tuple[float, float] | None
    units: int
    values: int
    observed: float | None


def _observed(units: Sequence[Sequence[object]]) -> float | None:
    agree = pairs = 0
    for values in units:
        m = len(values)
        pairs += m * (m - 1) // 2
        agree += sum(c * (c - 1) // 2 for c in Counter(values).values())
    return agree / pairs if pairs else None


def people_agreement(verdicts: Iterable[Verdict], *,
                     types: FeedbackRegistry | None = None) -> list[PeopleAgreement]:
    """Alpha per feedback type and compared field over people's latest verdicts (evaluators'
    verdicts and pairwise preferences are left out), the targets two people or more judged;
    sorted by type and field."""
    by_type: dict[str, dict[str, list[dict[str, object]]]] = {}
    for verdict in verdicts:
        # A pairwise preference's `a`/`b` mean different versions on different pairs: it
        # has its own tally (streams.core.pairwise), not an agreement on its fields.
        if verdict.person and verdict.feedback_type != PAIRWISE_PREFERENCE:
            by_type.setdefault(verdict.feedback_type, {}).setdefault(
                verdict.target, []).append(verdict.value)
    out: list[PeopleAgreement] = []
    for feedback_type, targets in sorted(by_type.items()):
        every = [v for values in targets.values() for v in values]
        for name, kind in sorted(field_kinds(feedback_type, every, types).items()):
            numeric = kind == "numeric"
            units: list[list[object]] = []
            for values in targets.values():
                given = [v[name] for v in values if v.get(name) is not None
                         and ((isinstance(v[name], int | float)
                               and not isinstance(v[name], bool)) if numeric
                              else is_label(v[name]))]
                if len(given) >= 2:
                    units.append(given)
            if not units:
                continue
            alpha, ci = krippendorff_alpha(units, numeric=numeric)
            out.append(PeopleAgreement(
                feedback_type, name, kind, alpha, ci, len(units),
                sum(len(u) for u in units), None if numeric else _observed(units)))
    return out


def people_agreement_json(a: PeopleAgreement) -> dict[str, object]:
    """People's agreement on one field as JSON-ready data (the report's rows, and a queue's
    agreement route)."""
    return {"feedback_type": a.feedback_type, "field": a.field, "kind": a.kind,
            "alpha": a.alpha, "alpha_ci": list(a.ci) if a.ci is not None else None,
            "units": a.units, "values": a.values, "observed": a.observed}
