"""Feedback as scores: one score per scorable field, named `{type}.{field}`.

bool is BOOLEAN, Literal and Enum are CATEGORICAL, numbers are NUMERIC (with their range when
bounded), str is TEXT, and a list is NUMERIC: how many items it holds (a reviewer's `issues`,
scored as their count, 0 for none). Optional fields are scored only when they hold a value;
maps and nested models are not scored. Score ids derive from the feedback event's id and the score's
name, so mirroring the same feedback again yields the same ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from streams.core.errors import ValidationFailed
from streams.core.events import Envelope, FeedbackGiven
from streams.core.feedback import Feedback, FeedbackRegistry, registry
from streams.core.ids import SCORE_ID_NAMESPACE as SCORE_ID_NAMESPACE  # re-exported: old home
from streams.core.ids import score_id as score_id  # re-exported: old home
from streams.core.typeinfo import Shape, field_shape

ScoreDataType = Literal["NUMERIC", "BOOLEAN", "CATEGORICAL", "TEXT"]


@dataclass(frozen=True, slots=True)
class Category:
    """One category of a CATEGORICAL score: its label and numeric value."""

    label: str
    value: float


@dataclass(frozen=True, slots=True)
class ScoreConfig:
    """How one field of a feedback type is scored: type, range and categories."""

    name: str
    field: str
    data_type: ScoreDataType
    categories: tuple[Category, ...] = ()
    min_value: float | None = None
    max_value: float | None = None
    optional: bool = False
    description: str | None = None


@dataclass(frozen=True, slots=True)
class ScoreConfigs:
    """The score configs of one feedback type, in field order."""

    feedback_type: str
    configs: tuple[ScoreConfig, ...]

    def __iter__(self) -> Any:
        return iter(self.configs)

    def __len__(self) -> int:
        return len(self.configs)

    def names(self) -> list[str]:
        """The score names, `{type}.{field}`."""
        return [c.name for c in self.configs]


@dataclass(frozen=True, slots=True)
class ScoreSource:
    """Where a score came from; sinks record it as the score's metadata."""

    tenant: str
    workspace: str
    feedback_type: str
    target_kind: str
    target_id: str
    participant: str
    feedback_event_id: str
    seq: str | None = None
    rule: str | None = None
    action: str | None = None

    def as_metadata(self) -> dict[str, str]:
        """The source as a flat mapping of strings."""
        out = {
            "tenant": self.tenant, "workspace": self.workspace,
            "feedback_type": self.feedback_type, "target_kind": self.target_kind,
            "target_id": self.target_id, "participant": self.participant,
            "feedback_event_id": self.feedback_event_id,
        }
        for key in ("seq", "rule", "action"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


@dataclass(frozen=True, slots=True)
class Score:
    """One score: a float for NUMERIC and BOOLEAN (1.0 / 0.0), a string otherwise.

    Exactly one of `trace_id` and `session_id` is set: the target's trace when known, else its
    causal chain as the session.
    """

    id: str
    name: str
    data_type: ScoreDataType
    value: float | str
    timestamp: datetime
    source: ScoreSource
    trace_id: str | None = None
    session_id: str | None = None
    observation_id: str | None = None
    comment: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)


def _config_for(feedback_type: str, name: str, shape: Shape, description: str | None) -> (
    ScoreConfig | None
):
    full = f"{feedback_type}.{name}"
    if shape.kind == "bool":
        return ScoreConfig(full, name, "BOOLEAN", optional=shape.optional,
                           description=description)
    if shape.kind == "enum":
        cats = tuple(Category(label=s, value=float(i)) for i, s in enumerate(shape.symbols))
        return ScoreConfig(full, name, "CATEGORICAL", categories=cats, optional=shape.optional,
                           description=description)
    if shape.kind in ("int", "float"):
        return ScoreConfig(full, name, "NUMERIC", min_value=shape.minimum,
                           max_value=shape.maximum, optional=shape.optional,
                           description=description)
    if shape.kind == "str":
        return ScoreConfig(full, name, "TEXT", optional=shape.optional, description=description)
    if shape.kind == "list":
        return ScoreConfig(full, name, "NUMERIC", min_value=0, optional=shape.optional,
                           description=description or f"how many {name}")
    return None


_CONFIG_CACHE: dict[type[Feedback], ScoreConfigs] = {}


def score_configs(feedback_type: type[Feedback]) -> ScoreConfigs:
    """The score configs of a feedback type, named by its registered name."""
    cached = _CONFIG_CACHE.get(feedback_type)
    if cached is not None:
        return cached
    configs = []
    for name, info in feedback_type.model_fields.items():
        config = _config_for(feedback_type.feedback_name, name, field_shape(info),
                             info.description)
        if config is not None:
            configs.append(config)
    result = ScoreConfigs(feedback_type.feedback_name, tuple(configs))
    _CONFIG_CACHE[feedback_type] = result
    return result


def score_value(config: ScoreConfig, raw: Any) -> float | str | None:
    """A field's value as its score's value: 1.0/0.0, a float, a label or a text; None when
    the field is unset or an empty text (nothing to score)."""
    if raw is None:
        return None
    if config.data_type == "BOOLEAN":
        return 1.0 if raw else 0.0
    if config.data_type == "NUMERIC":
        # A list field's score is its length (its config says so in `_config_for`).
        return float(len(raw)) if isinstance(raw, list | tuple) else float(raw)
    if config.data_type == "CATEGORICAL":
        return str(getattr(raw, "value", raw))
    text = str(raw)
    return text if text else None


def scores_of(
    envelope: Envelope, *, types: FeedbackRegistry | None = None
) -> list[Score] | None:
    """The scores of a feedback_given envelope; None when its type is not registered here."""
    event = envelope.event
    if not isinstance(event, FeedbackGiven):
        raise ValidationFailed(f"not feedback: {envelope.event_type}")
    cls = (types or registry).get(event.feedback_type)
    if cls is None:
        return None
    return scores_from_value(
        score_configs(cls), event.value,
        feedback_event_id=envelope.event_id, timestamp=envelope.time,
        tenant=envelope.tenant, workspace=envelope.workspace,
        target_kind=event.target.kind, target_id=event.target.id,
        participant=envelope.actor.participant,
        trace_id=event.target_trace_id, session_id=envelope.correlation_id,
        seq=str(envelope.seq) if envelope.seq is not None else None,
        rule=event.target_rule, action=event.target_action,
    )


def scores_from_value(
    configs: ScoreConfigs,
    value: Mapping[str, Any],
    *,
    feedback_event_id: str,
    timestamp: datetime,
    tenant: str,
    workspace: str,
    target_kind: str,
    target_id: str,
    participant: str,
    trace_id: str | None,
    session_id: str,
    seq: str | None = None,
    rule: str | None = None,
    action: str | None = None,
) -> list[Score]:
    """Map a feedback value (a mapping of its fields) to scores; the hot path of the mirror."""
    source = ScoreSource(
        tenant=tenant, workspace=workspace, feedback_type=configs.feedback_type,
        target_kind=target_kind, target_id=target_id, participant=participant,
        feedback_event_id=feedback_event_id, seq=seq, rule=rule, action=action,
    )
    out: list[Score] = []
    for config in configs.configs:
        scored = score_value(config, value.get(config.field))
        if scored is None:
            continue
        out.append(Score(
            id=score_id(feedback_event_id, config.name), name=config.name,
            data_type=config.data_type, value=scored, timestamp=timestamp, source=source,
            trace_id=trace_id, session_id=None if trace_id else session_id,
        ))
    return out
