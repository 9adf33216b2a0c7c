"""Annotation queues as data: what enters a queue, what people give on its items, and how.

A queue's JSON form (its JSON Schema is `QUEUE_SCHEMA`, committed as
schemas/queue/v1.schema.json):

    {"name": "triage-review",
     "description": "wrong triage verdicts, seen by two people",
     "enters": {"runs_of": "ops:wrong-triage"},
     "sample": 0.25,
     "feedback_types": ["triage_quality"],
     "reviewers": 2,
     "blind": true,
     "lease_seconds": 600}

`enters` names one source of items, by kind:
- `{"runs_of": rule}`: the runs of a rule; `{"firings_of": rule}`: its firings;
  `{"chains": {}}`: every chain (a correlation of an app event, its firings and runs);
- `{"judged_below": {"evaluator", "feedback_type", "field", "threshold", "on"}}`: targets an
  evaluator scored below `threshold` on a numeric `field` of its `feedback_type`;
- `{"disagreements": {"evaluator", "feedback_type", "on"}}`: targets where the evaluator and
  a person gave different values of the same feedback type;
- `{"pairs": {"evaluator", "versions": [a, b], "feedback_type", "on"}}`: targets both
  versions of the evaluator judged, reviewed side by side: the queue's feedback types must
  include `pairwise_preference` (streams.core.pairwise).
`on` is the kind of target those verdicts are on (`run`, the default, `firing`, `chain`).
`sample` keeps that share of what enters, uniformly (1, the default, keeps all).

`reviewers` (k, default 1) is how many different people review each item; `blind` hides the
other reviewers' and the evaluators' verdicts from a reviewer until they submit;
`lease_seconds` is how long a reviewer holds an item before it returns to the queue.

`queue_from_dict` refuses, naming the JSON path (`$.feedback_types[0]`) and what to write
there: anything the schema does not allow, a feedback type nobody registered, one that cannot
be given on the queue's items, an evaluator's feedback type that is unknown, or a field of it
that is not a number.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Final, Literal

from streams.core.errors import Conflict, ValidationFailed
from streams.core.feedback import Feedback, FeedbackRegistry
from streams.core.feedback import registry as default_registry
from streams.core.jsonform import schema_problem
from streams.core.pairwise import PAIRWISE_PREFERENCE
from streams.core.rules.engine import RULE_NAME
from streams.core.typeinfo import UnsupportedType, field_shape

__all__ = [
    "ITEM_KINDS",
    "QUEUE_NAME_PATTERN",
    "QUEUE_SCHEMA",
    "QUEUE_SCHEMA_ID",
    "Entry",
    "InvalidQueue",
    "Queue",
    "QueueEntry",
    "QueueNameTaken",
    "check_install",
    "entry_json",
    "entry_key",
    "numeric_fields",
    "parse_queue",
    "queue_from_dict",
    "queue_schema_for",
    "queue_to_dict",
]

QUEUE_SCHEMA_ID: Final = "https://feedback-streams.dev/schemas/queue/v1.schema.json"

ITEM_KINDS: Final = ("run", "firing", "chain")
"""The kinds of items a queue holds: the kinds of targets feedback is given on."""

QUEUE_NAME_PATTERN: Final = "^[a-z0-9][a-z0-9:_.-]*$"
"""A queue's name (at most 128 characters): its JSON form's `name`, the REST path's."""
_ON: Final[dict[str, Any]] = {"enum": list(ITEM_KINDS), "default": "run",
                              "description": "The kind of target the evaluator's verdicts "
                                             "are on."}
_EVALUATOR: Final[dict[str, Any]] = {
    "type": "string", "minLength": 1, "pattern": "^[^\\x00-\\x1f\\x7f]+$",
    "description": "The evaluator's name, or name@version for one version only."}


_NAME_PART: Final = "^[^\\x00-\\x1f\\x7f@]+$"
_PAIRS: Final[dict[str, Any]] = {
    "type": "object", "additionalProperties": False,
    "required": ["evaluator", "versions", "feedback_type"],
    "description": "Targets two versions of an evaluator both judged, shown side by side "
                   "for a pairwise_preference (streams.core.pairwise).",
    "properties": {
        "evaluator": {"type": "string", "minLength": 1, "pattern": _NAME_PART,
                      "description": "The evaluator's name."},
        "versions": {"type": "array", "minItems": 2, "maxItems": 2, "uniqueItems": True,
                     "items": {"type": "string", "minLength": 1, "pattern": _NAME_PART},
                     "description": "The two versions compared: a, then b."},
        "feedback_type": {"type": "string", "minLength": 1,
                          "description": "The feedback type of the verdicts compared."},
        "on": _ON}}


def _source(key: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "required": [key],
            "properties": {key: body}}


QUEUE_SCHEMA: Final[dict[str, Any]] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": QUEUE_SCHEMA_ID,
    "title": "Queue",
    "description": "A feedback-streams annotation queue as data (streams.core.queues).",
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "enters", "feedback_types"],
    "properties": {
        "name": {"type": "string", "pattern": QUEUE_NAME_PATTERN, "maxLength": 128},
        "description": {"type": "string"},
        "enters": {
            "description": "Where the queue's items come from: exactly one source.",
            "oneOf": [
                _source("runs_of", {"type": "string", "pattern": RULE_NAME.pattern,
                                    "description": "A rule's name: its runs."}),
                _source("firings_of", {"type": "string", "pattern": RULE_NAME.pattern,
                                       "description": "A rule's name: its firings."}),
                _source("chains", {"type": "object", "additionalProperties": False,
                                   "description": "Every chain."}),
                _source("judged_below", {
                    "type": "object", "additionalProperties": False,
                    "required": ["evaluator", "feedback_type", "field", "threshold"],
                    "properties": {"evaluator": _EVALUATOR,
                                   "feedback_type": {"type": "string", "minLength": 1},
                                   "field": {"type": "string", "minLength": 1},
                                   "threshold": {"type": "number"},
                                   "on": _ON}}),
                _source("disagreements", {
                    "type": "object", "additionalProperties": False,
                    "required": ["evaluator", "feedback_type"],
                    "properties": {"evaluator": _EVALUATOR,
                                   "feedback_type": {"type": "string", "minLength": 1},
                                   "on": _ON}}),
                _source("pairs", _PAIRS),
            ],
        },
        "sample": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 1},
        "feedback_types": {"type": "array", "minItems": 1, "uniqueItems": True,
                           "items": {"type": "string", "minLength": 1}},
        "reviewers": {"type": "integer", "minimum": 1, "maximum": 100, "default": 1},
        "blind": {"type": "boolean", "default": False},
        "lease_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": 86400,
                          "default": 900},
    },
}
"""The JSON Schema of a queue's JSON form (committed as schemas/queue/v1.schema.json)."""


class InvalidQueue(ValidationFailed, ValueError):
    """A queue definition that cannot be used; the message names the JSON path and the fix."""


class QueueNameTaken(Conflict):
    """A live queue of that name has another definition: archive it first, or rename."""


EntryKind = Literal["runs_of", "firings_of", "chains", "judged_below", "disagreements",
                    "pairs"]


@dataclass(frozen=True)
class Entry:
    """What enters a queue: `kind`, and for its kind the rule, or the evaluator, its feedback
    type, the numeric field and threshold (judged_below), and the targets' kind (`on`)."""

    kind: EntryKind
    rule: str | None = None
    evaluator: str | None = None
    feedback_type: str | None = None
    field: str | None = None
    threshold: float | None = None
    on: str = "run"
    versions: tuple[str, str] | None = None

    @property
    def pair(self) -> tuple[str, str] | None:
        """The participants a pairs entry compares (`evaluator:name@version`, a then b)."""
        if self.versions is None:
            return None
        a, b = self.versions
        return f"evaluator:{self.evaluator}@{a}", f"evaluator:{self.evaluator}@{b}"

    @property
    def item_kind(self) -> str:
        """The kind of the items this entry brings: run, firing or chain."""
        return {"runs_of": "run", "firings_of": "firing", "chains": "chain"}.get(
            self.kind, self.on)


@dataclass(frozen=True)
class Queue:
    """An annotation queue (see the module's docstring for each field)."""

    name: str
    enters: Entry
    feedback_types: tuple[str, ...]
    sample: float = 1.0
    reviewers: int = 1
    blind: bool = False
    lease_seconds: float = 900.0
    description: str | None = None

    @property
    def item_kind(self) -> str:
        """The kind of the queue's items: run, firing or chain."""
        return self.enters.item_kind


def numeric_fields(cls: type[Feedback]) -> list[str]:
    """The fields of a feedback type a `judged_below` threshold may read: numbers (the same
    reading of a field's type as the Avro schema and the score mapping use)."""
    found = []
    for name, info in cls.model_fields.items():
        try:
            if field_shape(info).kind in ("int", "float"):
                found.append(name)
        except UnsupportedType:
            continue
    return sorted(found)


def _camel(*words: str) -> str:
    # RunQueue, JudgedBelow, RetrievalVerdict, MinutesToMitigate: the names of the parts.
    return "".join(part[:1].upper() + part[1:] for word in words
                   for part in word.replace(":", "_").replace(".", "_").replace("-", "_")
                   .split("_"))


def _kind_branch(kind: str, types: list[type[Feedback]],
                 ref: Callable[[str, dict[str, Any]], dict[str, Any]],
                 ) -> list[dict[str, Any]]:
    """The queues of one item kind `types` allow: their sources and the feedback types that
    can be given on that kind, and a queue of pairs when `pairwise_preference` is among
    them; none when no type can be given on the kind. Each part is named and referenced
    through `ref` (a client generated from the document names its classes by them)."""
    given = sorted(c.feedback_name for c in types if kind in c.feedback_targets)
    if not given:
        return []
    on: dict[str, Any] = {"const": kind}
    # `on` defaults to run: a run queue may leave it out, a firing or chain queue must say it.
    needs_on = [] if kind == "run" else ["on"]
    own = {"run": "runs_of", "firing": "firings_of", "chain": "chains"}[kind]
    prefix = _camel(kind, "queue")
    sources: list[dict[str, Any]] = [ref(_camel(prefix, own), QUEUE_SCHEMA["properties"][
        "enters"]["oneOf"][["runs_of", "firings_of", "chains"].index(own)])]

    def named(source: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return ref(name, _source(source, ref(f"{name}Body", body)))

    for cls in sorted(types, key=lambda c: c.feedback_name):
        if kind not in cls.feedback_targets:
            continue
        for field in numeric_fields(cls):
            sources.append(named("judged_below", _camel(
                prefix, "judged_below", cls.feedback_name, field), {
                "type": "object", "additionalProperties": False,
                "required": ["evaluator", "feedback_type", "field", "threshold", *needs_on],
                "properties": {"evaluator": _EVALUATOR,
                               "feedback_type": {"const": cls.feedback_name},
                               "field": {"const": field}, "threshold": {"type": "number"},
                               "on": on}}))
    sources.append(named("disagreements", _camel(prefix, "disagreements"), {
        "type": "object", "additionalProperties": False,
        "required": ["evaluator", "feedback_type", *needs_on],
        "properties": {"evaluator": _EVALUATOR, "feedback_type": {"enum": given}, "on": on}}))
    properties = dict(QUEUE_SCHEMA["properties"])
    properties["enters"] = {"description": f"Where the {kind}s come from.",
                            "anyOf": sources}
    properties["feedback_types"] = {**properties["feedback_types"],
                                    "items": {"enum": given}}
    branches = [ref(prefix, {"type": "object", "additionalProperties": False,
                             "required": QUEUE_SCHEMA["required"], "properties": properties})]
    if PAIRWISE_PREFERENCE in given:
        # Pairs of versions: the verdicts compared are of any type given on the kind, and
        # the queue records a preference between them.
        pairs = dict(properties)
        pairs["enters"] = named("pairs", _camel(prefix, "pairs"), {
            **_PAIRS, "required": [*_PAIRS["required"], *needs_on],
            "properties": {**_PAIRS["properties"], "feedback_type": {"enum": given},
                           "on": on}})
        pairs["feedback_types"] = {**properties["feedback_types"],
                                   "contains": {"const": PAIRWISE_PREFERENCE}}
        branches.append(ref(_camel(prefix, "of_pairs"), {
            "type": "object", "additionalProperties": False,
            "required": QUEUE_SCHEMA["required"], "properties": pairs}))
    return branches


def queue_schema_for(types: Iterable[type[Feedback]], *,
                     ref_template: str = "#/$defs/{name}") -> dict[str, Any]:
    """The JSON Schema of exactly the queue definitions `queue_from_dict` accepts with these
    feedback types registered: QUEUE_SCHEMA with the checks against the types spelled out
    (one branch per item kind; its sources, the evaluators' feedback types and numeric
    fields, and the feedback types that can be given on that kind). The REST document
    publishes it, so a definition valid by the document is one the server installs.

    Its named parts are under `$defs`, referenced by `ref_template` (a document moves them
    to its components, as it does with pydantic's)."""
    defs: dict[str, Any] = {}

    def ref(name: str, schema: dict[str, Any]) -> dict[str, Any]:
        defs[name] = {**schema, "title": name}
        return {"$ref": ref_template.format(name=name)}

    concrete = [c for c in types if not c.feedback_abstract]
    branches = [b for kind in ITEM_KINDS for b in _kind_branch(kind, concrete, ref)]
    described = {"description": QUEUE_SCHEMA["description"], "title": "QueueDefinition"}
    if not branches:
        return {**described, "not": {}}
    return {**described, "anyOf": branches, "$defs": defs}


def _registered(types: FeedbackRegistry, name: str, at: str) -> type[Feedback]:
    cls = types.get(name)
    if cls is None or cls.feedback_abstract:
        raise InvalidQueue(
            f"queue JSON at {at}: no feedback type {name!r}; the registered types are "
            f"{types.names()}: load the module that defines {name!r} (`--types <module>`, "
            "or STREAMS_FEEDBACK_MODULES)")
    return cls


def _entry(data: Mapping[str, Any], types: FeedbackRegistry) -> Entry:
    ((kind, body),) = data.items()
    if kind == "runs_of":
        return Entry(kind="runs_of", rule=body)
    if kind == "firings_of":
        return Entry(kind="firings_of", rule=body)
    if kind == "chains":
        return Entry(kind="chains")
    at = f"$.enters.{kind}"
    cls = _registered(types, body["feedback_type"], f"{at}.feedback_type")
    on = body.get("on", "run")
    if on not in cls.feedback_targets:
        raise InvalidQueue(
            f"queue JSON at {at}.on: {cls.feedback_name} feedback is never given on a {on}; "
            f"it targets {sorted(cls.feedback_targets)}")
    if kind == "pairs":
        a, b = body["versions"]
        return Entry(kind="pairs", evaluator=body["evaluator"], versions=(a, b),
                     feedback_type=cls.feedback_name, on=on)
    if kind == "judged_below":
        numbers = numeric_fields(cls)
        if body["field"] not in numbers:
            raise InvalidQueue(
                f"queue JSON at {at}.field: {body['field']!r} is not a numeric field of "
                f"{cls.feedback_name}; its numeric fields are {numbers}")
        return Entry(kind="judged_below", evaluator=body["evaluator"],
                     feedback_type=cls.feedback_name, field=body["field"],
                     threshold=float(body["threshold"]), on=on)
    return Entry(kind="disagreements", evaluator=body["evaluator"],
                 feedback_type=cls.feedback_name, on=on)


def queue_from_dict(data: object, *, types: FeedbackRegistry | None = None) -> Queue:
    """The queue a JSON form describes, checked against `types` (the process-wide feedback
    registry by default). Every refusal is `InvalidQueue` naming the JSON path."""
    problem = schema_problem(QUEUE_SCHEMA, data)
    if problem is not None:
        raise InvalidQueue(f"queue JSON {problem}. The queue's JSON Schema is "
                           "schemas/queue/v1.schema.json (docs/ui.md, 'Queues as data')")
    assert isinstance(data, dict)
    registered = types if types is not None else default_registry
    entry = _entry(data["enters"], registered)
    if entry.kind == "pairs" and PAIRWISE_PREFERENCE not in data["feedback_types"]:
        raise InvalidQueue(
            f"queue JSON at $.feedback_types: a queue of pairs records a person's preference: "
            f"list {PAIRWISE_PREFERENCE!r} (streams.core.pairwise) among its feedback types")
    for n, name in enumerate(data["feedback_types"]):
        cls = _registered(registered, name, f"$.feedback_types[{n}]")
        if entry.item_kind not in cls.feedback_targets:
            raise InvalidQueue(
                f"queue JSON at $.feedback_types[{n}]: {name} feedback cannot be given on "
                f"a {entry.item_kind}, and this queue's items are {entry.item_kind}s; it "
                f"targets {sorted(cls.feedback_targets)}")
    return Queue(name=data["name"], enters=entry,
                 feedback_types=tuple(data["feedback_types"]),
                 sample=float(data.get("sample", 1.0)), reviewers=data.get("reviewers", 1),
                 blind=data.get("blind", False),
                 lease_seconds=float(data.get("lease_seconds", 900.0)),
                 description=data.get("description"))


def queue_to_dict(queue: Queue) -> dict[str, Any]:
    """A queue's JSON form (defaults spelled out); `queue_from_dict` gives the queue back."""
    entry = queue.enters
    body: Any
    if entry.kind in ("runs_of", "firings_of"):
        body = entry.rule
    elif entry.kind == "chains":
        body = {}
    elif entry.kind == "pairs":
        body = {"evaluator": entry.evaluator, "versions": list(entry.versions or ()),
                "feedback_type": entry.feedback_type, "on": entry.on}
    else:
        body = {"evaluator": entry.evaluator, "feedback_type": entry.feedback_type,
                "on": entry.on}
        if entry.kind == "judged_below":
            body.update(field=entry.field, threshold=entry.threshold)
    data: dict[str, Any] = {"name": queue.name, "enters": {entry.kind: body},
                            "feedback_types": list(queue.feedback_types),
                            "sample": queue.sample, "reviewers": queue.reviewers,
                            "blind": queue.blind, "lease_seconds": queue.lease_seconds}
    if queue.description is not None:
        data["description"] = queue.description
    return data


def parse_queue(text: str | bytes, *, types: FeedbackRegistry | None = None) -> Queue:
    """The queue of a JSON text (see `queue_from_dict`); text that is not JSON is refused
    with the line and column of the mistake."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidQueue(f"queue JSON is not valid JSON: {exc.msg} at line {exc.lineno} "
                           f"column {exc.colno}") from exc
    return queue_from_dict(data, types=types)


# -- installed queues -----------------------------------------------------------------------


def entry_key(workspace: str, name: str) -> str:
    """The key of a queue's entry in its tenant's queues topic: queue names are unique per
    workspace (workspaces carry no newline)."""
    return f"{workspace}\n{name}"


@dataclass(frozen=True)
class QueueEntry:
    """The newest word on one queue of a workspace, as its tenant's queues topic
    (`<prefix>.<tenant>.queues`, compacted, keyed by `entry_key`) keeps it: the definition
    (its JSON form), who installed it and when (ms since the epoch), and whether it has been
    archived since."""

    workspace: str
    name: str
    state: Literal["installed", "archived"]
    definition: dict[str, Any]
    installed_at_ms: int
    installed_by: str
    archived_at_ms: int | None = None
    archived_by: str | None = None

    @property
    def live(self) -> bool:
        """Installed and not archived since."""
        return self.state == "installed"

    @property
    def key(self) -> str:
        """Its key in the queues topic."""
        return entry_key(self.workspace, self.name)

    def archived(self, at_ms: int, by: str) -> QueueEntry:
        """This entry, archived at `at_ms` by `by`."""
        return replace(self, state="archived", archived_at_ms=at_ms, archived_by=by)

    def encode(self) -> bytes:
        """The record value."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes) -> QueueEntry:
        """The entry of a record value; InvalidQueue naming what is wrong otherwise."""
        try:
            data = json.loads(value)
            entry = cls(**data)
        except (ValueError, TypeError) as exc:
            raise InvalidQueue(f"not a queue entry: {exc}") from exc
        if entry.state not in ("installed", "archived") or not isinstance(entry.definition,
                                                                         dict):
            raise InvalidQueue(f"not a queue entry: state {entry.state!r}")
        return entry


def entry_json(entry: QueueEntry) -> dict[str, Any]:
    """A queue's entry as JSON, as `streams queues` prints it."""
    return {"queue": entry.name, "workspace": entry.workspace, "state": entry.state,
            "installed_at_ms": entry.installed_at_ms, "installed_by": entry.installed_by,
            "archived_at_ms": entry.archived_at_ms, "archived_by": entry.archived_by,
            "definition": entry.definition}


def check_install(definition: object, workspace: str,
                  installed: Mapping[str, QueueEntry], *,
                  types: FeedbackRegistry | None = None) -> tuple[Queue, bool]:
    """The queue a definition describes and whether it repeats the live queue of that name
    (same definition: nothing to write). InvalidQueue if the definition is refused (see
    `queue_from_dict`); QueueNameTaken if a live queue of that name has another
    definition."""
    queue = queue_from_dict(definition, types=types)
    canonical = queue_to_dict(queue)
    current = installed.get(entry_key(workspace, queue.name))
    if current is None or not current.live:
        return queue, False
    if current.definition == canonical:
        return queue, True
    raise QueueNameTaken(
        f"queue {queue.name!r} is live in workspace {workspace!r} with another definition: "
        f"archive it first (streams queues archive {queue.name}) or give this one another "
        "name")
