"""The OpenAPI document of the REST surface, exactly what the server validates and answers.

FastAPI writes the routes; this module makes the parts it cannot know precise:

- a queue definition (POST .../queues) is `queue_schema_for(types)`: the queue's JSON Schema
  with the feedback types, evaluators' fields and target kinds the server accepts spelled
  out, so a definition valid by the document is installed;
- the command frame's `command` is a union discriminated by `feedback_type`, one branch per
  registered feedback type (`GiveFeedback_<Class>`): that type's name as a constant, the
  target kinds it takes and its value's JSON schema (`<Class>`), generated from the
  registry the server validates with (`streams.core.commands.check_value`);
- a target's `kind` is required (it tells the targets apart);
- every read answers a declared body (`RunsPage`, `FeedbackPage`, `RunOut`, ...), and a page
  cursor has the pattern of the cursors the server gives out and accepts;
- the key is a bearer security scheme, not a header parameter.

`contract_document(document, types)` does this to FastAPI's document; `app.py` serves it at
/openapi.json for the server's own registry, and `openapi_document()` there writes it for
the project's shipped feedback types (committed as docs/openapi.json).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from streams.core.actors import Actor
from streams.core.commands import CommandFrame
from streams.core.events import Seq, TraceContext
from streams.core.feedback import Feedback
from streams.core.leases import ITEM_PATTERN, LEASE_ID_PATTERN
from streams.core.queues import queue_schema_for
from streams.core.rules.why import Outcome
from streams.core.targets import Target
from streams.core.viewrows import PAGE_CURSOR_PATTERN

__all__ = [
    "BEARER",
    "CalibrationOut",
    "CalibrationRowOut",
    "ChainOut",
    "Cursor",
    "EnvelopeOut",
    "FeedbackPage",
    "FeedbackTypeOut",
    "FeedbackTypes",
    "FiringOut",
    "Identity",
    "JudgeAgreementOut",
    "LeaseOut",
    "NextItem",
    "PairOut",
    "PairSideOut",
    "PeopleAgreementOut",
    "QueueAgreementOut",
    "QueueInstalledOut",
    "QueueOut",
    "QueueOutcome",
    "QueueProgressOut",
    "Queues",
    "RunOut",
    "RunsPage",
    "SkipIn",
    "SkipOut",
    "WhyOut",
    "contract_document",
]

BEARER = "bearer"
"""The name of the security scheme: `Authorization: Bearer fsk_...`."""

_REF = "#/components/schemas/{}"

Cursor = Annotated[str, Field(pattern=PAGE_CURSOR_PATTERN, max_length=64,
                              description="an opaque page cursor: pass a page's next_cursor "
                              "back unchanged")]


class EnvelopeOut(BaseModel):
    """An event as the reads answer it: the envelope's fields and the event's under `event`."""

    event_id: str
    tenant: str
    workspace: str
    event_type: str
    time: datetime
    actor: Actor
    correlation_id: str
    causation_id: str | None = None
    trace: TraceContext | None = None
    seq: Seq | None = None
    event: dict[str, Any]


class RunOut(BaseModel):
    """A run's record: its run_started envelope, the envelopes that made its rule fire and
    the events it emitted."""

    id: str
    run: EnvelopeOut
    matched: list[EnvelopeOut]
    emitted: list[EnvelopeOut]


class FiringOut(BaseModel):
    """A firing: its rule_fired envelope, the envelopes it matched and the run_started
    envelopes of the runs it started (first attempts)."""

    id: str
    firing: EnvelopeOut
    matched: list[EnvelopeOut]
    runs: list[EnvelopeOut]


class ChainOut(BaseModel):
    """A causal chain's envelopes in log order, at most 500 of them; `count` is how many
    the chain has."""

    id: str
    count: int
    events: list[EnvelopeOut]


class WhyOut(BaseModel):
    """What a rule did with an event, and why. `outcome`: not_watched, filtered_out,
    sampled_out (left out by the rule's own checks), counting, throttled, undecided, or,
    once it fired, its run's state: judged (the action ran to completion), handed_off,
    over_budget (its budget refused the claim: no call),
    running, retrying, dead_lettered. `detail` says why in words."""

    rule: str
    event_id: str
    outcome: Outcome
    judged: bool
    detail: str
    firing_id: str | None
    run_id: str | None
    attempts: int
    output: dict[str, Any] | None


class RunsPage(BaseModel):
    """A page of runs, newest first; `next_cursor` is null when there was no more."""

    runs: list[RunOut]
    next_cursor: Cursor | None


class FeedbackPage(BaseModel):
    """A page of feedback_given envelopes, oldest first; `next_cursor` null at the end."""

    feedback: list[EnvelopeOut]
    next_cursor: Cursor | None


class FeedbackTypeOut(BaseModel):
    """A registered feedback type: its targets, its value's JSON schema, its scores."""

    name: str
    targets: list[Literal["run", "firing", "chain"]]
    json_schema: dict[str, Any]
    score_configs: list[dict[str, Any]]


class FeedbackTypes(BaseModel):
    """The registered feedback types."""

    feedback_types: list[FeedbackTypeOut]


class Identity(BaseModel):
    """Who an API key acts as in a workspace, and what it may do there."""

    participant: str
    actor: Actor
    tenant: str
    workspace: str
    capabilities: list[Literal["give_feedback", "manage_queues", "read"]]
    key_id: str


class QueueOut(BaseModel):
    """An annotation queue of the workspace as installed: its definition (the JSON form with
    the defaults spelled out), who installed it and when, whether it is archived."""

    queue: str
    workspace: str
    state: Literal["installed", "archived"]
    installed_at_ms: int
    installed_by: str
    archived_at_ms: int | None
    archived_by: str | None
    definition: dict[str, Any]


class Queues(BaseModel):
    """The workspace's queues, by name."""

    queues: list[QueueOut]


class QueueInstalledOut(BaseModel):
    """An installed queue; `repeat` when it was live already with this definition (nothing
    was written)."""

    queue: QueueOut
    repeat: bool


class QueueOutcome(BaseModel):
    """A queue after a change (archived)."""

    queue: QueueOut


class LeaseOut(BaseModel):
    """An item leased to the key's actor until `ends_ms` (ms since the epoch): its target,
    to give feedback on, and the lease's `request_id`, to submit or skip with."""

    item: str = Field(pattern=ITEM_PATTERN)
    target: Target
    request_id: str = Field(pattern=LEASE_ID_PATTERN)
    ends_ms: int


class NextItem(BaseModel):
    """The next item for the key's actor; `lease` null when none is left for them."""

    lease: LeaseOut | None


class CalibrationRowOut(BaseModel):
    """One evaluator version's calibration on one field: its measure over its newest pairs
    with people, the interval, and where its alarm stands."""

    evaluator: str
    version: str
    feedback_type: str
    field: str
    kind: Literal["bool", "categorical", "numeric"]
    measure: Literal["kappa", "spearman"]
    value: float | None
    ci: list[float] | None = Field(description="the 95% interval [low, high], or null")
    observed: float | None = Field(description="share of pairs that agree (categories)")
    n: int
    threshold: float | None
    state: Literal["ok", "alarm", "too_few", "undefined", "unwatched"]
    alarm: bool = Field(description="whether an alarm stands (raised, not cleared): also "
                        "while the state says nothing either way (too_few, undefined)")


class CalibrationOut(BaseModel):
    """Each evaluator version's calibration in the workspace, and the policy measuring it."""

    calibration: list[CalibrationRowOut]
    window: int
    min_pairs: int
    margin: float


class PeopleAgreementOut(BaseModel):
    """Agreement between people on one field: Krippendorff's alpha and its interval, the
    targets two people or more judged (`units`), their values, the share of agreeing
    pairs (categories)."""

    feedback_type: str
    field: str
    kind: str
    alpha: float | None
    alpha_ci: list[float] | None
    units: int
    values: int
    observed: float | None


class JudgeAgreementOut(BaseModel):
    """One evaluator version's agreement with people on one field: kappa (categories) or
    MAE and Spearman's rho (numbers), with 95% intervals."""

    evaluator: str
    feedback_type: str
    field: str
    kind: str
    n: int
    kappa: float | None
    kappa_ci: list[float] | None
    observed: float | None
    expected: float | None
    mae: float | None
    mae_ci: list[float] | None
    spearman: float | None
    spearman_ci: list[float] | None


class QueueAgreementOut(BaseModel):
    """Agreement on a queue's items: between people, and of each evaluator version with
    people."""

    queue: str
    items: int
    judged: int
    people_agreement: list[PeopleAgreementOut]
    judge_agreement: list[JudgeAgreementOut]


class PairSideOut(BaseModel):
    """One side of a pair: which version (`a` or `b` of the queue) and its latest verdict's
    value (null when that version has none on the target)."""

    side: Literal["a", "b"]
    value: dict[str, Any] | None


class PairOut(BaseModel):
    """The two verdicts a queue of pairs shows for one item, in the order to show them."""

    item: str
    target: dict[str, str]
    feedback_type: str
    a: str
    b: str
    shown: list[PairSideOut]


class QueueProgressOut(BaseModel):
    """Where a queue stands: its items, those `done` (k reviewers submitted), `in_review`
    (leased now or submitted by some, not done) and `left`; `verdicts` accepted on them."""

    queue: str
    items: int
    done: int
    in_review: int
    left: int
    verdicts: int


class SkipIn(BaseModel):
    """A leased item given back."""

    model_config = ConfigDict(extra="forbid")

    item: str = Field(pattern=ITEM_PATTERN)
    request_id: str = Field(pattern=LEASE_ID_PATTERN)


class SkipOut(BaseModel):
    """The item is given back: someone else may get it; never the same reviewer."""

    outcome: Literal["skipped"]


_TARGETS = {"run": "RunTarget", "firing": "FiringTarget", "chain": "ChainTarget"}


def _target(kinds: Iterable[str]) -> dict[str, Any]:
    names = [_TARGETS[k] for k in sorted(kinds, key=list(_TARGETS).index)]
    refs = [{"$ref": _REF.format(n)} for n in names]
    if len(refs) == 1:
        return refs[0]
    return {"oneOf": refs, "discriminator": {"propertyName": "kind", "mapping": {
        kind: _REF.format(name) for kind, name in _TARGETS.items() if name in names}}}


def _commands(types: Iterable[type[Feedback]], schemas: dict[str, Any]) -> dict[str, Any]:
    """GiveFeedback: one branch per feedback type, their value schemas put into `schemas`."""
    branches: dict[str, str] = {}
    for cls in sorted((c for c in types if not c.feedback_abstract),
                      key=lambda c: c.feedback_name):
        name = cls.__name__
        if name in schemas or f"GiveFeedback_{name}" in schemas:
            # Two types of one class name (from two modules): name the value by its type.
            name = "".join(part.title() for part in cls.feedback_name.split("_")) + "Value"
        value = cls.model_json_schema(ref_template=_REF.format(f"{name}_{{model}}"))
        for sub, schema in value.pop("$defs", {}).items():
            schemas[f"{name}_{sub}"] = schema
        schemas[name] = value
        branch = f"GiveFeedback_{name}"
        schemas[branch] = {
            "type": "object", "additionalProperties": False, "title": branch,
            "description": f"give_feedback of a {cls.feedback_name} value",
            "properties": {
                "type": {"const": "give_feedback", "default": "give_feedback",
                         "type": "string", "title": "Type"},
                "feedback_type": {"const": cls.feedback_name, "type": "string",
                                  "title": "Feedback Type"},
                "target": _target(cls.feedback_targets),
                "value": {"$ref": _REF.format(name)},
            },
            "required": ["feedback_type", "target", "value"],
        }
        branches[cls.feedback_name] = _REF.format(branch)
    description = ("The give_feedback command: a value of a registered feedback type on a "
                   "target the type takes (one branch per type, by feedback_type).")
    if not branches:
        return {"description": description + " No feedback type is registered: every "
                "command is refused.", "not": {}}
    return {"description": description, "title": "GiveFeedback",
            "oneOf": [{"$ref": ref} for ref in branches.values()],
            "discriminator": {"propertyName": "feedback_type", "mapping": branches}}


def contract_document(document: dict[str, Any], types: Iterable[type[Feedback]],
                      ) -> dict[str, Any]:
    """FastAPI's `document` made precise for a server validating with `types` (in place;
    returned)."""
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    frame = CommandFrame.model_json_schema(ref_template=_REF.format("{model}"))
    for name, schema in frame.pop("$defs", {}).items():
        if name != "GiveFeedback":
            schemas[name] = schema
    for name in _TARGETS.values():  # `kind` tells the targets apart: always sent
        schemas[name]["required"] = ["kind", *schemas[name].get("required", [])]
    schemas["CommandFrame"] = frame
    types = list(types)
    schemas["GiveFeedback"] = _commands(types, schemas)
    # A queue definition the server installs, exactly: its checks against the registered
    # feedback types are part of the schema (streams.core.queues.queue_schema_for).
    queue = queue_schema_for(types, ref_template=_REF.format("{name}"))
    schemas.update(queue.pop("$defs", {}))
    schemas["QueueDefinition"] = queue
    schemas["QueueSubmit"] = {
        "type": "object", "additionalProperties": False, "title": "QueueSubmit",
        "description": "A verdict on a leased item: the give_feedback command on its target, "
                       "under the lease (recorded once: the command id is the lease's).",
        "required": ["request_id", "command"],
        "properties": {"request_id": {"type": "string", "pattern": LEASE_ID_PATTERN},
                       "command": {"$ref": _REF.format("GiveFeedback")}}}
    components["securitySchemes"] = {BEARER: {
        "type": "http", "scheme": "bearer",
        "description": "an API key from `streams keys create`: `Authorization: Bearer fsk_...`"}}
    for item in document.get("paths", {}).values():
        for operation in item.values():
            operation["parameters"] = [
                p for p in operation.get("parameters", [])
                if not (p["in"] == "header" and p["name"].lower() == "authorization")]
            if not operation["parameters"]:
                del operation["parameters"]
            operation["security"] = [{BEARER: []}]
    components["schemas"] = dict(sorted(schemas.items()))
    return document
