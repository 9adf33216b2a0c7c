"""Avro schemas of every record the pipeline writes, generated from the domain types.

Each event type is its own top-level record, `{"envelope": Envelope, ...payload}`, registered
under its full name in its tenant's subject (streams.core.subjects), so one topic carries
many event types and each evolves on its own. A feedback type's `feedback_given` record is
generated from its Pydantic model: its value is a typed record with real fields, not a JSON string.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache
from typing import Any

from pydantic import BaseModel

from streams.core.errors import SchemaError
from streams.core.events import (
    ARTIFACT_ARCHIVED,
    ARTIFACT_CREATED,
    ARTIFACT_REVISED,
    PROPOSAL_MADE,
    PROPOSAL_RESOLVED,
    RULE_ARCHIVED,
    RULE_FIRED,
    RULE_INSTALLED,
    RUN_DEAD_LETTERED,
    RUN_FAILED,
    RUN_RETRIED,
    RUN_STARTED,
    RUN_SUCCEEDED,
)
from streams.core.feedback import Feedback, FeedbackRegistry
from streams.core.typeinfo import Shape, UnsupportedType, field_shape

Schema = dict[str, Any]
NAMESPACE = "streams"
_AVRO_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

TIMESTAMP = {"type": "long", "logicalType": "timestamp-millis"}


def _field(name: str, avro_type: Any, doc: str | None = None, **extra: Any) -> Schema:
    out: Schema = {"name": name, "type": avro_type}
    if doc:
        out["doc"] = doc
    out.update(extra)
    return out


def _optional_field(name: str, avro_type: Any, doc: str | None = None) -> Schema:
    return _field(name, ["null", avro_type], doc, default=None)


@cache
def envelope_schema() -> Schema:
    """The envelope every event record carries as its first field."""
    return {
        "type": "record", "name": "Envelope", "namespace": f"{NAMESPACE}.events",
        "doc": "Who did what, when, where, and in which causal chain.",
        "fields": [
            _field("event_id", "string"),
            _field("tenant", "string"),
            _field("workspace", "string"),
            _field("event_type", "string"),
            _field("time", TIMESTAMP, "When the event happened (UTC, milliseconds)."),
            _field("actor", {
                "type": "record", "name": "Actor",
                "fields": [
                    _field("kind", {"type": "enum", "name": "ActorKind",
                                    "symbols": ["user", "evaluator", "agent", "system"]}),
                    _field("id", "string", "User or agent id, evaluator name, or 'system'."),
                    _optional_field("version", "string", "An evaluator's version."),
                ],
            }),
            _field("correlation_id", "string", "The event id of the chain's first event."),
            _optional_field("causation_id", "string", "The event this one reacts to."),
            _optional_field("trace", {
                "type": "record", "name": "TraceContext",
                "fields": [_field("traceparent", "string"),
                           _optional_field("tracestate", "string")],
            }),
        ],
    }


def _event_record(name: str, doc: str, fields: list[Schema]) -> Schema:
    return {
        "type": "record", "name": name, "namespace": f"{NAMESPACE}.events", "doc": doc,
        "fields": [_field("envelope", f"{NAMESPACE}.events.Envelope"), *fields],
    }


_TARGET = {
    "type": "record", "name": "Target", "namespace": f"{NAMESPACE}.events",
    "fields": [
        _field("kind", {"type": "enum", "name": "TargetKind",
                        "symbols": ["run", "firing", "chain"]}),
        _field("id", "string", "Run id, firing id, or a chain's correlation id."),
    ],
}


def _change() -> Schema:
    return {
        "type": "record", "name": "Change", "namespace": f"{NAMESPACE}.events",
        "doc": "A change to an artifact's text fields: set, then unset.",
        "fields": [
            _field("set", {"type": "map", "values": "string"}, "Fields and their new text.",
                   default={}),
            _field("unset", {"type": "array", "items": "string"}, "Fields removed.",
                   default=[]),
        ],
    }


def _artifact_records() -> dict[str, Schema]:
    """The records of artifacts, proposals and rule installs (streams.core.proposals)."""
    artifact = _field("artifact_id", "string")
    return {
        ARTIFACT_CREATED: _event_record("ArtifactCreated", "An artifact's first version.", [
            artifact, _field("kind", "string"),
            _field("content", {"type": "map", "values": "string"}, "Its text fields."),
        ]),
        ARTIFACT_REVISED: _event_record("ArtifactRevised", "A new version of an artifact.", [
            artifact, _field("change", _change()),
        ]),
        ARTIFACT_ARCHIVED: _event_record("ArtifactArchived", "An artifact archived.",
                                         [artifact]),
        PROPOSAL_MADE: _event_record("ProposalMade", "A proposal to revise or archive.", [
            _field("proposal_id", "string", "Chosen by the proposer."), artifact,
            _field("kind", "string"),
            _field("action", {"type": "enum", "name": "ProposalAction",
                              "symbols": ["revise", "archive"]}),
            _optional_field("change", _change(), "The proposed change (revise only)."),
            _optional_field("run_id", "string", "The run the proposer says proposed it."),
        ]),
        PROPOSAL_RESOLVED: _event_record("ProposalResolved", "A proposal resolved.", [
            _field("proposal_id", "string"),
            _field("resolution", {"type": "enum", "name": "Resolution",
                                  "symbols": ["accepted", "rejected"]}),
            _optional_field("changes", _change(), "The resolver's changes on acceptance."),
        ]),
        RULE_INSTALLED: _event_record("RuleInstalled", "A rule put live.", [
            _field("rule", "string"), _optional_field("artifact_id", "string"),
            _optional_field("definition", "string", "The rule's JSON form (rules as data)."),
            _field("start_offsets", {"type": "map", "values": "long"},
                   "The installation point: per events partition, the first offset live.",
                   default={}),
        ]),
        RULE_ARCHIVED: _event_record("RuleArchived", "A live rule taken down.", [
            _field("rule", "string"),
        ]),
    }


def _with_envelope(schema: Schema) -> Schema:
    """Inline the envelope's definition at its first use, so each record stands alone."""
    fields = list(schema["fields"])
    fields[0] = _field("envelope", envelope_schema())
    return {**schema, "fields": fields}


@cache
def event_schemas() -> dict[str, Schema]:
    """The fixed event records, by event type."""
    run = [_field("run_id", "string"), _field("rule", "string"), _field("action", "string")]
    records = {
        RUN_STARTED: _event_record("RunStarted", "A rule's action began an attempt.", [
            *run, _field("firing_id", "string"), _field("attempt", "int"),
            _field("scope", {"type": "map", "values": "string"}, default={}),
        ]),
        RUN_SUCCEEDED: _event_record("RunSucceeded", "A run's attempt finished.", [
            *run, _field("attempt", "int"),
            _field("output_json", "string", "The action's output as a JSON object."),
        ]),
        RUN_FAILED: _event_record("RunFailed", "A run's attempt raised.", [
            *run, _field("attempt", "int"), _field("error", "string"),
            _field("will_retry", "boolean"),
        ]),
        RUN_RETRIED: _event_record("RunRetried", "A failed run is tried again.", [
            *run, _field("attempt", "int"), _field("delay_ms", "long"),
        ]),
        RUN_DEAD_LETTERED: _event_record("RunDeadLettered", "A run spent its retries.", [
            *run, _field("attempts", "int"), _field("error", "string"),
        ]),
        RULE_FIRED: _event_record("RuleFired", "A rule's trigger matched.", [
            _field("firing_id", "string"), _field("rule", "string"),
            _field("matched", {"type": "array", "items": "string"}),
            _optional_field("scope_key", "string"),
        ]),
        "app_event": _event_record("AppEvent", "An application's own event.", [
            _field("name", "string", "The application's event type, e.g. ops:error_spike."),
            _field("data_json", "string", "The event's body as a JSON object."),
        ]),
        **_artifact_records(),
    }
    return {k: _with_envelope(v) for k, v in records.items()}


def _avro_type(shape: Shape, name_hint: str, namespace: str, seen: set[str]) -> Any:
    kind = shape.kind
    base: Any
    if kind == "bool":
        base = "boolean"
    elif kind == "int":
        base = {"type": "long", **_bounds(shape)} if _bounds(shape) else "long"
    elif kind == "float":
        base = {"type": "double", **_bounds(shape)} if _bounds(shape) else "double"
    elif kind == "str":
        base = "string"
    elif kind == "datetime":
        base = dict(TIMESTAMP)
    elif kind == "enum":
        bad = [s for s in shape.symbols if not _AVRO_NAME.match(s)]
        if bad:
            raise SchemaError(
                f"{name_hint}: enum symbols {bad} are not valid Avro names "
                f"(letters, digits and _ only, not starting with a digit)"
            )
        base = {"type": "enum", "name": _unique_name(_camel(name_hint), namespace, seen),
                "symbols": list(shape.symbols)}
    elif kind == "list":
        assert shape.item is not None
        base = {"type": "array", "items": _avro_type(shape.item, name_hint + "_item",
                                                     namespace, seen)}
    elif kind == "map":
        assert shape.item is not None
        base = {"type": "map", "values": _avro_type(shape.item, name_hint + "_value",
                                                    namespace, seen)}
    else:
        assert shape.model is not None
        base = model_record(shape.model, shape.model.__name__, namespace, seen)
    return ["null", base] if shape.optional else base


def _bounds(shape: Shape) -> dict[str, Any]:
    # Avro ignores unknown attributes; these keep a field's range in its schema for readers.
    out: dict[str, Any] = {}
    cast = int if shape.kind == "int" else float
    if shape.minimum is not None:
        out["exclusiveMinimum" if shape.exclusive[0] else "minimum"] = cast(shape.minimum)
    if shape.maximum is not None:
        out["exclusiveMaximum" if shape.exclusive[1] else "maximum"] = cast(shape.maximum)
    return out


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


def _unique_name(name: str, namespace: str, seen: set[str]) -> str:
    """`name`, or `name2`, `name3`... when the namespace has it already: fields `b` and `b_`
    (or a field `value` beside the record `Value`) camel-case to one name, and Avro refuses a
    named type defined twice. Names without a clash are as they always were."""
    candidate, n = name, 2
    while f"{namespace}.{candidate}" in seen:
        candidate, n = f"{name}{n}", n + 1
    seen.add(f"{namespace}.{candidate}")
    return candidate


def model_record(model: type[BaseModel], name: str, namespace: str,
                 seen: set[str] | None = None) -> Schema:
    """An Avro record for a Pydantic model: bool, Literal/Enum as enums, bounded numbers
    with their range, str, Optional as a union with null, lists, maps and nested models."""
    seen = set() if seen is None else seen
    full = f"{namespace}.{name}"
    if full in seen:
        return full  # type: ignore[return-value]
    seen.add(full)
    fields = []
    for field_name, info in model.model_fields.items():
        if not _AVRO_NAME.match(field_name):
            raise SchemaError(f"{model.__qualname__}.{field_name} is not a valid Avro name")
        try:
            shape = field_shape(info)
        except UnsupportedType as exc:
            raise SchemaError(f"{model.__qualname__}.{field_name}: {exc}") from exc
        avro = _avro_type(shape, field_name, namespace, seen)
        entry = _field(field_name, avro, info.description)
        if not info.is_required():
            default = info.get_default(call_default_factory=True)
            if default is None and shape.optional:
                entry["default"] = None
            elif isinstance(default, bool | int | float | str) and not shape.optional:
                entry["default"] = getattr(default, "value", default)
        fields.append(entry)
    record: Schema = {"type": "record", "name": name, "namespace": namespace, "fields": fields}
    if model.__doc__:
        record["doc"] = " ".join(model.__doc__.split())
    return record


def feedback_namespace(feedback_type: str) -> str:
    """The Avro namespace of a feedback type's records."""
    return f"{NAMESPACE}.feedback.{feedback_type}"


@cache
def feedback_given_schema(cls: type[Feedback]) -> Schema:
    """The feedback_given record of one feedback type, its value a typed record."""
    namespace = feedback_namespace(cls.feedback_name)
    value = model_record(cls, "Value", namespace)
    return _with_envelope({
        "type": "record", "name": "FeedbackGiven", "namespace": namespace,
        "doc": f"Feedback of type {cls.feedback_name}.",
        "fields": [
            _field("envelope", f"{NAMESPACE}.events.Envelope"),
            _field("feedback_type", "string"),
            _field("target", _TARGET),
            _optional_field("target_trace_id", "string", "The target's trace, when known."),
            _optional_field("target_rule", "string",
                            "The rule whose run or firing the feedback is about."),
            _optional_field("target_action", "string",
                            "The action of the run the feedback is about."),
            _field("value", value),
        ],
    })


@cache
def score_schema() -> Schema:
    """The record of the downstream scores topic: the analytics interface."""
    return {
        "type": "record", "name": "Score", "namespace": f"{NAMESPACE}.scores",
        "doc": "One score of one field of one piece of feedback.",
        "fields": [
            _field("id", "string", "Deterministic: uuid5 of the feedback event id and name."),
            _field("name", "string", "{feedback_type}.{field}"),
            _field("data_type", {"type": "enum", "name": "ScoreDataType",
                                 "symbols": ["NUMERIC", "BOOLEAN", "CATEGORICAL", "TEXT"]}),
            _optional_field("numeric_value", "double", "NUMERIC, and BOOLEAN as 1.0 or 0.0."),
            _optional_field("string_value", "string", "CATEGORICAL label or TEXT."),
            _field("timestamp", TIMESTAMP, "The feedback's event time."),
            _optional_field("trace_id", "string"),
            _optional_field("session_id", "string", "The chain, when no trace is known."),
            _optional_field("observation_id", "string"),
            _optional_field("comment", "string"),
            _field("source", {
                "type": "record", "name": "ScoreSource",
                "fields": [
                    _field("tenant", "string"), _field("workspace", "string"),
                    _field("feedback_type", "string"), _field("target_kind", "string"),
                    _field("target_id", "string"), _field("participant", "string"),
                    _field("feedback_event_id", "string"),
                    _optional_field("seq", "string", "partition:offset of the feedback."),
                    _optional_field("rule", "string",
                                    "The rule whose run or firing the feedback is about."),
                    _optional_field("action", "string",
                                    "The action of the run the feedback is about."),
                ],
            }),
        ],
    }


@cache
def dead_letter_schema() -> Schema:
    """The record of a tenant's dead-letter topic."""
    return {
        "type": "record", "name": "DeadLetter", "namespace": f"{NAMESPACE}.deadletter",
        "doc": "A record the pipeline could not handle, with why.",
        "fields": [
            _field("source_topic", "string"), _field("partition", "int"),
            _field("offset", "long"),
            _optional_field("key", "bytes"), _optional_field("value", "bytes"),
            _field("stage", "string", "Which component gave up: mirror, rules, sink..."),
            _field("reason", "string"),
            _field("time", TIMESTAMP),
        ],
    }


def all_schemas(types: Iterable[type[Feedback]] | FeedbackRegistry) -> dict[str, Schema]:
    """Every schema the project commits, by record full name."""
    out: dict[str, Schema] = {}
    for schema in [*event_schemas().values(), score_schema(), dead_letter_schema()]:
        out[f"{schema['namespace']}.{schema['name']}"] = schema
    for cls in types:
        schema = feedback_given_schema(cls)
        out[f"{schema['namespace']}.{schema['name']}"] = schema
    return out


def fullname(schema: Schema) -> str:
    """A record schema's full name."""
    return f"{schema['namespace']}.{schema['name']}"


__all__ = [
    "all_schemas", "dead_letter_schema", "envelope_schema", "event_schemas",
    "feedback_given_schema", "fullname", "model_record", "score_schema",
]
