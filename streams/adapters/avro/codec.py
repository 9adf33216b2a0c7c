"""Domain objects to Avro-ready dicts and back; no Kafka here, only the record shapes.

`plain_from_record` gives a decoded event record's plain form (streams.core.plain) without
pydantic, for the hot paths' matching; `envelope_from_record` the Envelope.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from streams.core.actors import AgentActor, AnyActor, EvaluatorActor, SystemActor, UserActor
from streams.core.errors import SchemaError
from streams.core.events import (
    EVENT_TYPES,
    AppEvent,
    Envelope,
    Event,
    FeedbackGiven,
    RunSucceeded,
    Seq,
    TraceContext,
)
from streams.core.plain import TARGET_ID_FIELDS, PlainEvent, layout_of
from streams.core.scores import Score, ScoreConfigs, ScoreSource, score_id, score_value
from streams.core.targets import make_target

_APP_EVENT = "app_event"


def _actor_record(envelope: Envelope) -> dict[str, Any]:
    return actor_record(envelope.actor)


def actor_record(actor: Any) -> dict[str, Any]:
    """The Avro dict of an actor."""
    if isinstance(actor, UserActor | AgentActor):
        return {"kind": actor.kind, "id": actor.id, "version": None}
    if isinstance(actor, EvaluatorActor):
        return {"kind": "evaluator", "id": actor.name, "version": actor.version}
    return {"kind": "system", "id": "system", "version": None}


def actor_from_record(record: Mapping[str, Any]) -> AnyActor:
    """An actor from its Avro dict.

    Actors are frozen, and a log holds few of them, so one object per actor is shared by
    every envelope it wrote (`_actor`, a bounded cache): a report of a million envelopes
    makes a handful of actors, not a million, and validates each once."""
    kind, id_, version = record["kind"], record["id"], record.get("version")
    if isinstance(kind, str) and isinstance(id_, str) and (version is None
                                                           or isinstance(version, str)):
        return _actor(kind, id_, version)
    return _make_actor(kind, id_, version)  # not hashable: the models refuse it


def _make_actor(kind: Any, id_: Any, version: Any) -> AnyActor:
    if kind == "user":
        return UserActor(id=id_)
    if kind == "agent":
        return AgentActor(id=id_)
    if kind == "evaluator":
        return EvaluatorActor(name=id_, version=version or "0")
    return SystemActor()


_actor = lru_cache(maxsize=4096)(_make_actor)


def record_kind(event: Event) -> str:
    """The key of an event's schema: its event type, or `app_event` for application events."""
    return _APP_EVENT if isinstance(event, AppEvent) else event.event_type


def envelope_to_record(envelope: Envelope) -> dict[str, Any]:
    """The Avro dict of an envelope and its payload."""
    head = {
        "event_id": envelope.event_id, "tenant": envelope.tenant,
        "workspace": envelope.workspace, "event_type": envelope.event_type,
        "time": envelope.time, "actor": _actor_record(envelope),
        "correlation_id": envelope.correlation_id, "causation_id": envelope.causation_id,
        "trace": envelope.trace.model_dump() if envelope.trace else None,
    }
    event = envelope.event
    body: dict[str, Any]
    if isinstance(event, AppEvent):
        body = {"name": event.name, "data_json": json.dumps(event.data, default=str)}
    elif isinstance(event, FeedbackGiven):
        return feedback_record(head, event.feedback_type, event.target.kind, event.target.id,
                               event.target_trace_id, event.value, event.target_rule,
                               event.target_action)
    elif isinstance(event, RunSucceeded):
        body = event.model_dump(exclude={"output"})
        body["output_json"] = json.dumps(event.output, default=str)
    else:
        body = event.model_dump()
    return {"envelope": head, **body}


def feedback_record(head: dict[str, Any], feedback_type: str, target_kind: str,
                    target_id: str, target_trace_id: str | None, value: Mapping[str, Any],
                    target_rule: str | None, target_action: str | None) -> dict[str, Any]:
    """The Avro dict of a feedback_given event under the envelope fields `head` (what
    `envelope_to_record` writes for one): give_feedback_many builds it from the parts a batch
    shares, without an Envelope per item."""
    return {"envelope": head, "feedback_type": feedback_type,
            "target": {"kind": target_kind, "id": target_id},
            "target_trace_id": target_trace_id, "value": value,
            "target_rule": target_rule, "target_action": target_action}


def envelope_from_record(record: Mapping[str, Any], seq: Seq | None = None) -> Envelope:
    """An envelope from its Avro dict (as any reader schema of it decodes)."""
    try:
        head = record["envelope"]
        event_type = head["event_type"]
        body = {k: v for k, v in record.items() if k != "envelope"}
        event: Event
        if event_type == "feedback_given":
            target = body["target"]
            event = FeedbackGiven(
                feedback_type=body["feedback_type"],
                target=make_target(target["kind"], target["id"]),
                target_trace_id=body.get("target_trace_id"),
                value=dict(body["value"]),
                target_rule=body.get("target_rule"),
                target_action=body.get("target_action"),
            )
        elif event_type in EVENT_TYPES:
            cls = EVENT_TYPES[event_type]
            if cls is RunSucceeded:
                body["output"] = json.loads(body.pop("output_json") or "{}")
            event = cls.model_validate(body)
        else:
            event = AppEvent(name=body["name"], data=json.loads(body["data_json"] or "{}"))
        trace = head.get("trace")
        return Envelope(
            event_id=head["event_id"], tenant=head["tenant"], workspace=head["workspace"],
            event_type=event_type, time=utc_time(head["time"]),
            actor=actor_from_record(head["actor"]),
            correlation_id=head["correlation_id"], causation_id=head.get("causation_id"),
            trace=TraceContext(**trace) if trace else None, event=event, seq=seq,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise SchemaError(f"record is not an event envelope: {exc}") from exc


def plain_from_record(record: Mapping[str, Any], partition: int = 0,
                      offset: int = 0) -> PlainEvent | None:
    """A decoded event record's plain form, built without pydantic: the envelope's fields in
    `head` (the actor as its participant, the time as an aware UTC datetime), the event's in
    `payload` as its model lays them out. None when the record is not laid out as a plain
    event can hold it exactly (an app event whose data is not a JSON object, a typed event
    with fields its model lacks or without ones it requires, ...): the caller decodes such a
    record into an Envelope, which says what is wrong. The values are the record's own (its
    envelope dict is the head), so the envelope built from the same record holds the same
    ones."""
    try:
        head = record["envelope"]
        event_type = head["event_type"]
        if not head.keys() >= _HEAD_FIELDS or type(head["actor"]) is not dict:
            return None
        payload: dict[str, Any]
        if event_type == "feedback_given":
            target, value = record["target"], record["value"]
            if target["kind"] not in TARGET_ID_FIELDS or type(value) is not dict:
                return None
            payload = {
                "feedback_type": record["feedback_type"],
                "target": {"kind": target["kind"], "id": target["id"]},
                "target_trace_id": record.get("target_trace_id"), "value": value,
                "target_rule": record.get("target_rule"),
                "target_action": record.get("target_action"),
            }
        elif event_type not in EVENT_TYPES:
            data = json.loads(record["data_json"] or "{}")
            if type(data) is not dict:
                return None
            payload = {"name": record["name"], "data": data}
        else:
            layout = layout_of(event_type)
            payload = {k: v for k, v in record.items() if k != "envelope"}
            if event_type == "run_succeeded":
                output = json.loads(payload.pop("output_json") or "{}")
                if type(output) is not dict:
                    return None
                payload["output"] = output
            if not payload.keys() <= layout.fields or not layout.required <= payload.keys():
                return None
            for name in layout.fields - payload.keys():
                payload[name] = layout.default(name)
        return _AvroPlainEvent(head, payload, partition=partition, offset=offset)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


# The Avro envelope's fields: the Envelope's, the actor as a record, the time as written.
_HEAD_FIELDS = frozenset({"event_id", "tenant", "workspace", "event_type", "time", "actor",
                          "correlation_id"})


class _AvroPlainEvent(PlainEvent):
    """A plain event over the Avro envelope dict itself: the participant and the time are
    computed from it when a rule reads them, as `envelope_from_record` computes them."""

    __slots__ = ()

    def participant(self) -> str:
        actor = self.head["actor"]
        kind = actor["kind"]
        # As actor_from_record reads it: an unknown kind is the system.
        if kind == "user" or kind == "agent":
            return f"{kind}:{actor['id']}"
        if kind == "evaluator":
            return f"evaluator:{actor['id']}@{actor.get('version') or '0'}"
        return "system"

    def time(self) -> datetime:
        return utc_time(self.head["time"])


def utc_time(value: Any) -> datetime:
    """A UTC datetime from what fastavro returns for timestamp-millis (or epoch millis)."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromtimestamp(int(value) / 1000, UTC)


def score_to_record(score: Score) -> dict[str, Any]:
    """The Avro dict of a score for the scores topic."""
    numeric = isinstance(score.value, float)
    src = score.source
    return {
        "id": score.id, "name": score.name, "data_type": score.data_type,
        "numeric_value": score.value if numeric else None,
        "string_value": None if numeric else score.value,
        "timestamp": score.timestamp, "trace_id": score.trace_id,
        "session_id": score.session_id, "observation_id": score.observation_id,
        "comment": score.comment,
        "source": {
            "tenant": src.tenant, "workspace": src.workspace,
            "feedback_type": src.feedback_type, "target_kind": src.target_kind,
            "target_id": src.target_id, "participant": src.participant,
            "feedback_event_id": src.feedback_event_id, "seq": src.seq,
            "rule": src.rule, "action": src.action,
        },
    }


SCORES_SHARE_FROM = "timestamp"
"""The first field of the Score record from which on a feedback's scores agree (its time,
trace, session and source): `FastCodec.encode_all(..., shared_from=SCORES_SHARE_FROM)` writes
those once for all of a feedback's scores."""


def score_records(
    configs: ScoreConfigs,
    value: Mapping[str, Any],
    *,
    feedback_event_id: str,
    timestamp: Any,
    tenant: str,
    workspace: str,
    target_kind: str,
    target_id: str,
    participant: str,
    trace_id: str | None,
    session_id: str,
    seq: str | None,
    rule: str | None = None,
    action: str | None = None,
) -> list[dict[str, Any]]:
    """The Avro dicts of a feedback value's scores, built directly (the batch mirror's hot
    path): the same records as `score_to_record` over `scores_from_value`, without a Score
    object per score. `timestamp` is written as given (epoch millis on the fast path)."""
    source = {
        "tenant": tenant, "workspace": workspace, "feedback_type": configs.feedback_type,
        "target_kind": target_kind, "target_id": target_id, "participant": participant,
        "feedback_event_id": feedback_event_id, "seq": seq, "rule": rule, "action": action,
    }
    session = None if trace_id else session_id
    out: list[dict[str, Any]] = []
    for config in configs.configs:
        scored = score_value(config, value.get(config.field))
        if scored is None:
            continue
        numeric = isinstance(scored, float)
        out.append({
            "id": score_id(feedback_event_id, config.name), "name": config.name,
            "data_type": config.data_type,
            "numeric_value": scored if numeric else None,
            "string_value": None if numeric else scored,
            "timestamp": timestamp, "trace_id": trace_id, "session_id": session,
            "observation_id": None, "comment": None, "source": source,
        })
    return out


def score_from_record(record: Mapping[str, Any]) -> Score:
    """A score from its Avro dict."""
    src = record["source"]
    value = record["numeric_value"]
    return Score(
        id=record["id"], name=record["name"], data_type=record["data_type"],
        value=value if value is not None else record["string_value"],
        timestamp=utc_time(record["timestamp"]), trace_id=record.get("trace_id"),
        session_id=record.get("session_id"), observation_id=record.get("observation_id"),
        comment=record.get("comment"),
        source=ScoreSource(
            tenant=src["tenant"], workspace=src["workspace"],
            feedback_type=src["feedback_type"], target_kind=src["target_kind"],
            target_id=src["target_id"], participant=src["participant"],
            feedback_event_id=src["feedback_event_id"], seq=src.get("seq"),
            rule=src.get("rule"), action=src.get("action"),
        ),
    )
