"""Rules as data: a rule's JSON form, its JSON Schema, and the way back to a `Rule`.

The JSON form says what the Python DSL says, field for field:

    {"name": "ops:wrong-triage",
     "when": {"on": "feedback_given",
              "where": [{"path": ["event", "value", "correct"], "op": "eq", "value": false},
                        {"path": ["event", "feedback_type"], "op": "eq",
                         "value": "triage_quality"}],
              "sample": 0.5,
              "count": {"n": 3, "within_seconds": 300},
              "at_most": {"n": 20, "per_seconds": 3600},
              "scope": {"service": ["event", "data", "service"]}},
     "then": {"action": "escalate",
              "retry": {"max_attempts": 3, "backoff_seconds": 1, "multiplier": 2,
                        "max_backoff_seconds": 300}}}

- `on`: an event type's name (built-in, or a declared app event type), or `app_event` for
  `on(AppEvent)` (every application event).
- a path is a list: its root (`event`, the payload, or `envelope`), then field names, dict
  keys and list indexes (`F.data.service` is `["event", "data", "service"]`).
- a predicate is `{"path", "op", "value"}` (no `value` for `exists`), or `{"all": [...]}`,
  `{"any": [...]}`, `{"not": {...}}`; values are JSON values (`isin` takes a list).
- durations are seconds (a number); `retry` may be left out (the DSL's default policy).

What has no JSON form is refused by `rule_to_dict` with `InvalidRule`: a plain Python
function used as a predicate (`where(lambda e: ...)`) or as a scope, and comparison values
that are not JSON (a datetime, a set, a non-finite float). `rule_from_dict` refuses, naming
the field's JSON path (`$.when.where[1].op`) and what to write there: anything the schema
does not allow, an event type no one declared, and, given the action registry, an action it
lacks.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping
from datetime import timedelta
from typing import Any, Final

from streams.core.app_events import AppEventTypes, app_event_types, known_event_types
from streams.core.events import EVENT_TYPES, AppEvent, Event
from streams.core.jsonform import schema_problem
from streams.core.rules.actions import Action, RetryPolicy
from streams.core.rules.checks import InvalidRule
from streams.core.rules.engine import Rule
from streams.core.rules.predicates import AllOf, AnyOf, Check, Compare, Not, Path, Predicate
from streams.core.rules.triggers import Scope, ScopeSource, Trigger, on

__all__ = [
    "ANY_APP_EVENT",
    "RULE_SCHEMA",
    "RULE_SCHEMA_ID",
    "parse_rule",
    "rule_from_dict",
    "rule_to_dict",
    "rule_to_json",
]

ANY_APP_EVENT: Final = "app_event"
"""`on` of a rule watching every application event (`on(AppEvent)`)."""

RULE_SCHEMA_ID: Final = "https://feedback-streams.dev/schemas/rule/v1.schema.json"

_PATH: Final[dict[str, Any]] = {
    "type": "array",
    "description": "A place in an envelope: its root, then field names, dict keys, indexes.",
    "prefixItems": [{"enum": ["event", "envelope"]}],
    "items": {"anyOf": [{"type": "string", "minLength": 1},
                        {"type": "integer", "minimum": 0}]},
    "minItems": 2,
}
_SECONDS: Final[dict[str, Any]] = {"type": "number", "exclusiveMinimum": 0}

RULE_SCHEMA: Final[dict[str, Any]] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": RULE_SCHEMA_ID,
    "title": "Rule",
    "description": "A feedback-streams rule as data (streams.core.rules.serialized).",
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "when", "then"],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9:_.-]*$"},
        "description": {"type": "string"},
        "when": {
            "type": "object",
            "additionalProperties": False,
            "required": ["on"],
            "properties": {
                "on": {"type": "string", "minLength": 1,
                       "description": "An event type's name, or 'app_event' for every "
                                      "application event."},
                "where": {"type": "array", "items": {"$ref": "#/$defs/predicate"}},
                "sample": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                "count": {"type": "object", "additionalProperties": False,
                          "required": ["n", "within_seconds"],
                          "properties": {"n": {"type": "integer", "minimum": 1},
                                         "within_seconds": _SECONDS}},
                "at_most": {"type": "object", "additionalProperties": False,
                            "required": ["n", "per_seconds"],
                            "properties": {"n": {"type": "integer", "minimum": 1},
                                           "per_seconds": _SECONDS}},
                "scope": {"type": "object", "minProperties": 1,
                          "additionalProperties": {"$ref": "#/$defs/path"}},
                "completes": {
                    "type": "object", "additionalProperties": False, "minProperties": 1,
                    "description": "Fire once per chain when it ends: on its terminal event, "
                                   "or after quiet_seconds of event time without its events "
                                   "(streams.core.rules.chains).",
                    "properties": {"terminal": {"type": "string", "minLength": 1},
                                   "quiet_seconds": _SECONDS,
                                   "late": {"enum": ["ignore", "rejudge"]}}},
            },
        },
        "then": {
            "type": "object",
            "additionalProperties": False,
            "required": ["action"],
            "properties": {
                "action": {"type": "string", "minLength": 1, "pattern": "^\\S(.*\\S)?$"},
                "retry": {
                    "type": "object", "additionalProperties": False,
                    "properties": {
                        "max_attempts": {"type": "integer", "minimum": 1},
                        "backoff_seconds": {"type": "number", "minimum": 0},
                        "multiplier": {"type": "number", "minimum": 1},
                        "max_backoff_seconds": {"type": "number", "minimum": 0},
                    },
                },
            },
        },
    },
    "$defs": {
        "path": _PATH,
        "predicate": {
            "oneOf": [
                {"type": "object", "additionalProperties": False,
                 "required": ["path", "op"],
                 "properties": {
                     "path": {"$ref": "#/$defs/path"},
                     "op": {"enum": ["eq", "ne", "lt", "le", "gt", "ge", "isin", "contains",
                                     "exists"]},
                     "value": True,
                 }},
                {"type": "object", "additionalProperties": False, "required": ["all"],
                 "properties": {"all": {"type": "array", "minItems": 1,
                                        "items": {"$ref": "#/$defs/predicate"}}}},
                {"type": "object", "additionalProperties": False, "required": ["any"],
                 "properties": {"any": {"type": "array", "minItems": 1,
                                        "items": {"$ref": "#/$defs/predicate"}}}},
                {"type": "object", "additionalProperties": False, "required": ["not"],
                 "properties": {"not": {"$ref": "#/$defs/predicate"}}},
            ],
        },
    },
}
"""The JSON Schema of a rule's JSON form (committed as schemas/rule/v1.schema.json)."""


# -- rule -> JSON ------------------------------------------------------------------------------


def _seconds(value: timedelta) -> int | float:
    seconds = value.total_seconds()
    return int(seconds) if seconds.is_integer() else seconds


def _json_value(value: object, where: str, rule: str) -> Any:
    """`value` as a JSON value, or InvalidRule saying it has no JSON form."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidRule(f"rule {rule!r}: {where} compares with {value!r}, which JSON "
                              f"cannot hold; use a finite number")
        return value
    if isinstance(value, list | tuple):
        return [_json_value(v, where, rule) for v in value]
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {k: _json_value(v, where, rule) for k, v in value.items()}
    raise InvalidRule(
        f"rule {rule!r}: {where} compares with {value!r} ({type(value).__name__}), which has "
        f"no JSON form; compare with strings, numbers, booleans, null, lists or objects")


def _path_to_list(path: Path) -> list[str | int]:
    return ["envelope" if path.on_envelope else "event", *path.names]


def _predicate_to_dict(pred: Predicate, where: str, rule: str) -> dict[str, Any]:
    if isinstance(pred, Compare):
        out: dict[str, Any] = {"path": _path_to_list(pred.path), "op": pred.op}
        if pred.op != "exists":
            out["value"] = _json_value(pred.operand, where, rule)
        return out
    if isinstance(pred, AllOf):
        return {"all": [_predicate_to_dict(p, f"{where}.all[{i}]", rule)
                        for i, p in enumerate(pred.parts)]}
    if isinstance(pred, AnyOf):
        return {"any": [_predicate_to_dict(p, f"{where}.any[{i}]", rule)
                        for i, p in enumerate(pred.parts)]}
    if isinstance(pred, Not):
        return {"not": _predicate_to_dict(pred.part, f"{where}.not", rule)}
    what = f"the Python function {pred.fn!r}" if isinstance(pred, Check) else repr(pred)
    raise InvalidRule(
        f"rule {rule!r}: {where} is {what}, which has no JSON form; write the test with F "
        f"paths and comparisons (F.value.x.eq(...), &, |, ~) to install the rule as data")


def _scope_to_dict(scope: Scope, rule: str) -> dict[str, list[str | int]]:
    out: dict[str, list[str | int]] = {}
    for name, source in scope.parts:
        if not isinstance(source, Path):
            raise InvalidRule(
                f"rule {rule!r}: when.scope.{name} is the Python function {source!r}, which "
                f"has no JSON form; scope by a path such as F.data.service")
        out[name] = _path_to_list(source)
    return out


def rule_to_dict(rule: Rule) -> dict[str, Any]:
    """The rule's JSON form (a dict of JSON values); InvalidRule for what has none."""
    when = rule.when
    source = when.source
    trigger: dict[str, Any] = {
        "on": ANY_APP_EVENT if source is AppEvent
        else source if isinstance(source, str) else source.event_type,
    }
    if when.predicates:
        trigger["where"] = [_predicate_to_dict(p, f"when.where[{i}]", rule.name)
                            for i, p in enumerate(when.predicates)]
    if when.sample_fraction is not None:
        trigger["sample"] = when.sample_fraction
    if when.counting is not None:
        trigger["count"] = {"n": when.counting.n,
                            "within_seconds": _seconds(when.counting.within)}
    if when.rate_limit is not None:
        if when.rate_limit.weight is not None:
            raise InvalidRule(f"rule {rule.name!r}: at_most(weight=) has no JSON form; "
                              "keep the rule in a rules module")
        trigger["at_most"] = {"n": when.rate_limit.n,
                              "per_seconds": _seconds(when.rate_limit.per)}
    if when.scope_by is not None:
        trigger["scope"] = _scope_to_dict(when.scope_by, rule.name)
    if when.completion is not None:
        completes: dict[str, Any] = {}
        if when.completion.terminal is not None:
            completes["terminal"] = when.completion.terminal
        if when.completion.quiet is not None:
            completes["quiet_seconds"] = _seconds(when.completion.quiet)
        if when.completion.late != "ignore":
            completes["late"] = when.completion.late
        trigger["completes"] = completes
    retry = rule.then.retry
    out: dict[str, Any] = {"name": rule.name}
    if rule.description is not None:
        out["description"] = rule.description
    out["when"] = trigger
    then: dict[str, Any] = {"action": rule.then.name}
    if retry != RetryPolicy():
        then["retry"] = {
            "max_attempts": retry.max_attempts,
            "backoff_seconds": _seconds(retry.backoff),
            "multiplier": retry.multiplier,
            "max_backoff_seconds": _seconds(retry.max_backoff),
        }
    out["then"] = then
    return out


def rule_to_json(rule: Rule) -> str:
    """The rule's JSON form as text (keys in a fixed order, two-space indents)."""
    return json.dumps(rule_to_dict(rule), indent=2)


# -- JSON -> rule ------------------------------------------------------------------------------


def _path_from_list(parts: list[str | int], at: str) -> Path:
    try:
        return Path(str(parts[0]), tuple(parts[1:]))
    except InvalidRule as exc:
        raise InvalidRule(f"rule JSON at {at}: {exc}") from exc


def _predicate_from_dict(data: Mapping[str, Any], at: str) -> Predicate:
    if "all" in data:
        return AllOf(tuple(_predicate_from_dict(p, f"{at}.all[{i}]")
                           for i, p in enumerate(data["all"])))
    if "any" in data:
        return AnyOf(tuple(_predicate_from_dict(p, f"{at}.any[{i}]")
                           for i, p in enumerate(data["any"])))
    if "not" in data:
        return Not(_predicate_from_dict(data["not"], f"{at}.not"))
    op = data["op"]
    path = _path_from_list(data["path"], f"{at}.path")
    if op == "exists":
        if "value" in data:
            raise InvalidRule(f"rule JSON at {at}.value: 'exists' takes no value; remove it")
        return Compare(path, op, None)
    if "value" not in data:
        raise InvalidRule(f"rule JSON at {at}: op {op!r} needs a 'value' to compare with")
    value = data["value"]
    if op == "isin":
        if not isinstance(value, list):
            raise InvalidRule(f"rule JSON at {at}.value: 'isin' takes a list of values, got "
                              f"{value!r}")
        value = tuple(value)
    if len(path.names) == 0:
        raise InvalidRule(f"rule JSON at {at}.path: name a field after the root")
    return Compare(path, op, value)


def _source(name: str, types: AppEventTypes) -> type[Event] | str:
    if name == ANY_APP_EVENT:
        return AppEvent
    if name in EVENT_TYPES:
        return EVENT_TYPES[name]
    if name not in types:
        raise InvalidRule(
            f"rule JSON at $.when.on: no event type {name!r}; name a built-in event type, "
            f"{ANY_APP_EVENT!r} (every application event), or an app event type declared in a "
            f"module the worker loads (--types/--rules). Known event types: "
            f"{known_event_types(types)}")
    return name


def _seconds_of(value: float) -> timedelta:
    return timedelta(seconds=value)


def rule_from_dict(
    data: object,
    *,
    actions: Collection[str] | None = None,
    types: AppEventTypes | None = None,
) -> Rule:
    """The rule a JSON form describes, checked as the DSL checks it.

    `actions`: the action registry's names (the worker's `ACTIONS`); when given, a rule
    naming another action is refused. `types`: the declared app event types (the
    process-wide registry by default). Every refusal is `InvalidRule` naming the JSON path.
    """
    problem = schema_problem(RULE_SCHEMA, data)
    if problem is not None:
        raise InvalidRule(f"rule JSON {problem}. The rule's JSON Schema is "
                          f"schemas/rule/v1.schema.json (docs/rules.md, 'Rules as data')")
    assert isinstance(data, dict)
    known = types if types is not None else app_event_types
    when: dict[str, Any] = data["when"]
    then: dict[str, Any] = data["then"]
    try:
        trigger: Trigger = on(_source(when["on"], known))
        preds = [_predicate_from_dict(p, f"$.when.where[{i}]")
                 for i, p in enumerate(when.get("where", []))]
        if preds:
            trigger = trigger.where(*preds)
        if "sample" in when:
            trigger = trigger.sample(when["sample"])
        if "count" in when:
            trigger = trigger.count(when["count"]["n"],
                                    within=_seconds_of(when["count"]["within_seconds"]))
        if "at_most" in when:
            trigger = trigger.at_most(when["at_most"]["n"],
                                      per=_seconds_of(when["at_most"]["per_seconds"]))
        if "scope" in when:
            named: dict[str, ScopeSource] = {
                name: _path_from_list(parts, f"$.when.scope.{name}")
                for name, parts in when["scope"].items()}
            trigger = trigger.scope(**named)
        if "completes" in when:
            completes = when["completes"]
            terminal = completes.get("terminal")
            if terminal == ANY_APP_EVENT:
                raise InvalidRule(f"rule JSON at $.when.completes.terminal: name one event "
                                  f"type that ends a chain, not {terminal!r}")
            try:
                terminal_type = None if terminal is None else _source(terminal, known)
            except InvalidRule as exc:
                raise InvalidRule(str(exc).replace("$.when.on", "$.when.completes.terminal")
                                  ) from None
            trigger = trigger.completes(
                terminal=terminal_type,
                quiet=_seconds_of(completes["quiet_seconds"])
                if "quiet_seconds" in completes else None,
                late=completes.get("late", "ignore"))
    except InvalidRule as exc:
        text = str(exc)
        raise (exc if text.startswith("rule JSON at") else
               InvalidRule(f"rule JSON at $.when: {text}")) from None
    action_name: str = then["action"]
    if actions is not None and action_name not in actions:
        raise InvalidRule(
            f"rule JSON at $.then.action: no action {action_name!r} in the action registry "
            f"(known: {sorted(actions)}); name one of those, or register it in the ACTIONS "
            f"of a --rules module the workers load")
    retry_data: dict[str, Any] = then.get("retry", {})
    default = RetryPolicy()
    try:
        retry = RetryPolicy(
            max_attempts=retry_data.get("max_attempts", default.max_attempts),
            backoff=_seconds_of(retry_data["backoff_seconds"])
            if "backoff_seconds" in retry_data else default.backoff,
            multiplier=retry_data.get("multiplier", default.multiplier),
            max_backoff=_seconds_of(retry_data["max_backoff_seconds"])
            if "max_backoff_seconds" in retry_data else default.max_backoff,
        )
        return Rule(name=data["name"], when=trigger, then=Action(action_name, retry),
                    description=data.get("description"))
    except InvalidRule as exc:
        raise InvalidRule(f"rule JSON at $.then: {exc}") from None


def parse_rule(
    text: str | bytes,
    *,
    actions: Collection[str] | None = None,
    types: AppEventTypes | None = None,
) -> Rule:
    """The rule of a JSON text (see `rule_from_dict`); text that is not JSON is refused with
    the line and column of the mistake."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRule(f"rule JSON is not valid JSON: {exc.msg} at line {exc.lineno} "
                          f"column {exc.colno}") from exc
    return rule_from_dict(data, actions=actions, types=types)
