"""Online calibration: how far each evaluator version agrees with people *lately*, and when
that calls for people.

The offline report (`streams.core.measures.agreement`) measures a judge over the whole log.
Calibration measures the same thing over a window that moves with the feedback: at most
`window` recent pairs of each evaluator version and feedback type (a pair is an evaluator
version's and a person's latest verdicts on the same target; `calibrate` keeps the newest by
the later of the two times, and the view hands it those on the newest person verdicts:
`streams.runtime.client.views.calibration_pairs`). Each compared field has one *calibration
measure*:

- bool and categorical fields: Cohen's kappa, with the observed agreement beside it;
- numeric fields: Spearman's rank correlation.

Formulas and intervals are `agreement.py`'s (docs/measures.md). A field's state:

- `unwatched`: no threshold is set for the evaluator (still measured and exported);
- `too_few`: fewer than `min_pairs` pairs in the window;
- `undefined`: the measure has no value (kappa when both sides always give one label,
  Spearman without variance);
- `alarm`: the measure fell below the evaluator's threshold. It stays an alarm until the
  measure is back at `threshold + margin` or above, so a measure that wavers around the
  threshold raises one alarm, not one per pair;
- `ok`: otherwise.

An alarm that is raised or cleared is a `CalibrationAlarm` app event (`calibration:alarm`):
rules may watch it like any declared app event type. Each carries its episode (the how-
manieth raise of its key; a clear carries the raise it clears), so every change has an id of
its own. While a raise stands, a row says so (`standing`) whatever its state, until a clear.

    policy = CalibrationPolicy(thresholds=parse_thresholds('{"triage-judge": 0.6}'))
    rows = calibrate(pairs, policy, previous={key: "alarm"})
    for row in changed(previous, rows): ...   # raised or cleared
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from streams.core.app_events import AppEventType
from streams.core.errors import ValidationFailed
from streams.core.feedback import FeedbackRegistry
from streams.core.measures.agreement import FieldAgreement, VerdictPair, agreement_of

__all__ = [
    "ALARM_EVENT",
    "AlarmBook",
    "Calibration",
    "CalibrationAlarm",
    "CalibrationKey",
    "CalibrationPolicy",
    "State",
    "alarm_book",
    "calibrate",
    "calibration_json",
    "changed",
    "evaluator_version",
    "newest_pairs",
    "parse_thresholds",
]

State = Literal["ok", "alarm", "too_few", "undefined", "unwatched"]

CalibrationKey = tuple[str, str, str]
"""(evaluator participant `evaluator:name@version`, feedback type, field)."""

ALARM_EVENT: Final = "calibration:alarm"


class CalibrationAlarm(AppEventType, name=ALARM_EVENT):
    """An evaluator version's agreement with people crossed its threshold: `raised` when it
    fell below, not raised when it came back (`threshold + margin` or above).

    `queue` names the annotation queue the version's disagreements with people enter (created
    with the alarm when none of that name exists), so people look at them first."""

    evaluator: str
    version: str
    feedback_type: str
    field: str
    measure: str
    value: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int
    threshold: float
    raised: bool
    queue: str | None = None
    episode: int = 0
    """The how-manieth raise of this key the event is (a clear carries the raise it clears):
    with the key, it makes the event's id."""

    @property
    def key(self) -> CalibrationKey:
        """(evaluator participant, feedback type, field) the alarm is about."""
        return f"evaluator:{self.evaluator}@{self.version or '0'}", self.feedback_type, \
            self.field


@dataclass(frozen=True)
class AlarmBook:
    """Where each key's alarm stands, as its newest alarm event says: `states` (`alarm`
    after a raise, `ok` after a clear) and `episodes` (that event's episode: the next raise
    is one more)."""

    states: dict[CalibrationKey, State]
    episodes: dict[CalibrationKey, int]

    def next_episode(self, key: CalibrationKey, raised: bool) -> int:
        """The episode of the change to write for `key`: one more than the last for a
        raise, the standing one for a clear."""
        last = self.episodes.get(key, 0)
        return last + 1 if raised else last


def alarm_book(changes: Iterable[tuple[CalibrationKey, bool, int]]) -> AlarmBook:
    """Fold alarm changes `(key, raised, episode)`, oldest first (the alarm events, or the
    view's one standing row per key): each key's newest stands. A repeated change (two
    keepers writing the same event, the same id) changes nothing."""
    states: dict[CalibrationKey, State] = {}
    episodes: dict[CalibrationKey, int] = {}
    for key, raised, episode in changes:
        states[key] = "alarm" if raised else "ok"
        episodes[key] = episode
    return AlarmBook(states, episodes)


def evaluator_version(participant: str) -> tuple[str, str]:
    """(name, version) of an evaluator participant `evaluator:name@version` (the version is
    "" when the participant names none)."""
    name = participant.removeprefix("evaluator:")
    base, _, version = name.rpartition("@")
    return (base, version) if base else (name, "")


@dataclass(frozen=True)
class CalibrationPolicy:
    """How calibration is measured and when it alarms.

    `thresholds` maps an evaluator's name (every version) or `name@version` (that version,
    which wins) to the lowest measure that is not an alarm; `window` is how many newest pairs
    per evaluator version and feedback type are measured; `min_pairs` how many are needed
    before a state other than `too_few`; `margin` how far above the threshold an alarm's
    measure must come back to clear it."""

    thresholds: Mapping[str, float] = field(default_factory=dict)
    window: int = 200
    min_pairs: int = 30
    margin: float = 0.05

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValidationFailed(f"calibration window must be at least 1, got {self.window}")
        if not 1 <= self.min_pairs <= self.window:
            raise ValidationFailed(
                f"calibration min_pairs must be between 1 and the window ({self.window}), "
                f"got {self.min_pairs}")
        if self.margin < 0:
            raise ValidationFailed(f"calibration margin must be 0 or more, got {self.margin}")

    def threshold_for(self, participant: str) -> float | None:
        """The threshold of an evaluator participant (`evaluator:name@version`): its
        version's, else its name's, else None (not watched)."""
        name, version = evaluator_version(participant)
        if version and f"{name}@{version}" in self.thresholds:
            return self.thresholds[f"{name}@{version}"]
        return self.thresholds.get(name)


def parse_thresholds(text: str) -> dict[str, float]:
    """Thresholds from their JSON form, `{"<evaluator or name@version>": <number>}`: kappa
    or Spearman's rho, between -1 and 1; ValidationFailed naming the entry that is wrong."""
    if not text.strip():
        return {}
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationFailed(
            f"calibration thresholds are not JSON ({exc.msg} at {exc.pos}): write "
            '{"<evaluator>": 0.6, "<evaluator>@<version>": 0.5}') from exc
    if not isinstance(loaded, dict):
        raise ValidationFailed('calibration thresholds must be a JSON object, '
                               '{"<evaluator>": 0.6}')
    out: dict[str, float] = {}
    for key, value in loaded.items():
        if not key or key.startswith("evaluator:") or key.count("@") > 1:
            raise ValidationFailed(
                f"calibration threshold key {key!r}: write the evaluator's name, or "
                "name@version, without the 'evaluator:' prefix")
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not -1.0 <= float(value) <= 1.0:
            raise ValidationFailed(
                f"calibration threshold of {key!r} is {value!r}: write a number between -1 "
                "and 1 (kappa or Spearman's rho)")
        out[key] = float(value)
    return out


@dataclass(frozen=True)
class Calibration:
    """One evaluator version's calibration on one field of one feedback type, now."""

    agreement: FieldAgreement
    measure: str
    value: float | None
    ci: tuple[float, float] | None
    threshold: float | None
    state: State
    standing: bool = False
    """Whether an alarm stands: raised and not cleared. True in state `alarm`, and also
    while the state says nothing either way (`too_few`, `undefined`, `unwatched`) about a
    key whose last word was a raise."""

    @property
    def key(self) -> CalibrationKey:
        """(evaluator participant, feedback type, field)."""
        a = self.agreement
        return a.evaluator, a.feedback_type, a.field

    @property
    def n(self) -> int:
        """Pairs measured."""
        return self.agreement.n

    @property
    def observed(self) -> float | None:
        """The share of pairs that agree, for a categorical field (None for numbers)."""
        part = self.agreement.categorical
        return part.observed if part else None

    def alarm_event(self, *, episode: int, queue: str | None = None) -> CalibrationAlarm:
        """The app event saying this row's alarm was raised (state `alarm`) or cleared, as
        the key's `episode`-th raise (`AlarmBook.next_episode`)."""
        if self.threshold is None:
            raise ValueError(f"{self.key} is not watched: it has no alarm")
        name, version = evaluator_version(self.agreement.evaluator)
        return CalibrationAlarm(
            evaluator=name, version=version, feedback_type=self.agreement.feedback_type,
            field=self.agreement.field, measure=self.measure, value=self.value,
            ci_low=self.ci[0] if self.ci else None, ci_high=self.ci[1] if self.ci else None,
            n=self.n, threshold=self.threshold, raised=self.state == "alarm",
            queue=queue if self.state == "alarm" else None, episode=episode)


def calibration_json(row: Calibration) -> dict[str, object]:
    """A row as JSON-ready data (the REST, MCP and CLI answer's item)."""
    name, version = evaluator_version(row.agreement.evaluator)
    return {"evaluator": name, "version": version,
            "feedback_type": row.agreement.feedback_type, "field": row.agreement.field,
            "kind": row.agreement.kind, "measure": row.measure, "value": row.value,
            "ci": list(row.ci) if row.ci else None, "observed": row.observed, "n": row.n,
            "threshold": row.threshold, "state": row.state, "alarm": row.standing}


def newest_pairs(pairs: Iterable[VerdictPair], window: int) -> list[VerdictPair]:
    """The newest `window` pairs of each evaluator version and feedback type (ties by time
    keep the order given)."""
    grouped: dict[tuple[str, str], list[VerdictPair]] = {}
    for pair in pairs:
        grouped.setdefault((pair.evaluator, pair.feedback_type), []).append(pair)
    out: list[VerdictPair] = []
    for group in grouped.values():
        out.extend(sorted(group, key=lambda p: p.time, reverse=True)[:window])
    return out


def _state(value: float | None, n: int, threshold: float | None, was: State | None,
           policy: CalibrationPolicy) -> State:
    if threshold is None:
        return "unwatched"
    if n < policy.min_pairs:
        return "too_few"
    if value is None:
        return "undefined"
    if value < threshold:
        return "alarm"
    if was == "alarm" and value < threshold + policy.margin:
        return "alarm"
    return "ok"


def calibrate(pairs: Iterable[VerdictPair], policy: CalibrationPolicy, *,
              previous: Mapping[CalibrationKey, State] | None = None,
              types: FeedbackRegistry | None = None) -> list[Calibration]:
    """Each evaluator version's calibration per feedback type and field over its newest
    `policy.window` pairs; `previous` (each key's last state) keeps an alarm until it clears
    by the margin. Sorted by key."""
    was = previous or {}
    out: list[Calibration] = []
    for agreement in agreement_of(newest_pairs(pairs, policy.window), types=types):
        if agreement.categorical is not None:
            measure, value, ci = ("kappa", agreement.categorical.kappa,
                                  agreement.categorical.ci)
        else:
            numeric = agreement.numeric
            assert numeric is not None  # agreement_of gives one of the two
            measure, value, ci = "spearman", numeric.spearman, numeric.spearman_ci
        threshold = policy.threshold_for(agreement.evaluator)
        key = (agreement.evaluator, agreement.feedback_type, agreement.field)
        state = _state(value, agreement.n, threshold, was.get(key), policy)
        standing = state == "alarm" or (state != "ok" and was.get(key) == "alarm")
        out.append(Calibration(agreement, measure, value, ci, threshold, state, standing))
    return out


def changed(previous: Mapping[CalibrationKey, State],
            rows: Iterable[Calibration]) -> list[Calibration]:
    """The rows whose alarm was raised (now `alarm`, before anything else) or cleared (now
    `ok`, before `alarm`) since `previous`. Too few pairs, or an undefined measure, neither
    raises nor clears: the alarm stands until the measure says otherwise."""
    out: list[Calibration] = []
    for row in rows:
        was = previous.get(row.key)
        if (row.state == "alarm" and was != "alarm") or (row.state == "ok" and was == "alarm"):
            out.append(row)
    return out
