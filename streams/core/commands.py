"""Command frames: what every surface (REST, WebSocket, MCP) receives and answers, in pure code.

A client sends a command frame:

    {"type": "command", "command_id": "fb_1",
     "command": {"type": "give_feedback", "feedback_type": "triage_quality",
                 "target": {"kind": "run", "run_id": "run_..."},
                 "value": {"correct": true, "severity": "high"}}}

and gets one answer, an outcome frame

    {"type": "outcome", "command_id": "fb_1",
     "outcome": {"type": "recorded", "seq": {"partition": 3, "offset": 41}, "id": "evt_..."}}

or an error frame with a stable code (ERROR_CODES; HTTP_STATUS gives the matching status):

    {"type": "error", "command_id": "fb_1",
     "error": {"code": "validation_failed", "message": "...",
               "fields": [{"path": "command.value.severity", "message": "..."}]}}

`parse_frame` turns a body (bytes, text or a decoded mapping) into a `CommandFrame` or raises
`CommandFailed`; `check_value` validates a value against its registered feedback type with
field paths; `error_frame_of` maps any project error onto its code. The ledger records of
idempotent commands (`LedgerEntry`, `fold_ledger`) live here too, so the rule that decides
which attempt of a command wins is tested without a broker.

Workspace ids name a tenant's workspace in one path segment: `<tenant>.<workspace>`
(`acme.prod`). A tenant name has no dot, so the first dot separates them; the workspace may
contain dots (`acme.team.prod` is workspace `team.prod` of tenant `acme`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Final, Literal

import msgspec
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from streams.core.errors import (
    Conflict,
    Forbidden,
    KafkaUnavailable,
    NotFound,
    StreamsError,
    TooLarge,
    Unauthorized,
    ValidationFailed,
)
from streams.core.feedback import Feedback, FeedbackRegistry
from streams.core.targets import Target
from streams.core.tenancy import check_tenant, check_workspace

__all__ = [
    "COMMAND_ID_PATTERN",
    "ERROR_CODES",
    "HTTP_STATUS",
    "MAX_BODY_BYTES",
    "CommandFailed",
    "CommandFrame",
    "ErrorBody",
    "ErrorFrame",
    "FieldProblem",
    "GiveFeedback",
    "LedgerEntry",
    "OutcomeFrame",
    "RecordedOutcome",
    "SeqOut",
    "check_value",
    "command_digest",
    "error_frame_of",
    "feedback_digest",
    "fold_ledger",
    "ledger_key",
    "parse_frame",
    "parse_workspace_id",
    "whole_numbers",
    "workspace_id",
]

ErrorCode = Literal["validation_failed", "not_found", "unauthorized", "forbidden", "conflict",
                    "too_large", "unavailable"]

HTTP_STATUS: Final[Mapping[str, int]] = {
    "validation_failed": 422,
    "not_found": 404,
    "unauthorized": 401,
    "forbidden": 403,
    "conflict": 409,
    "too_large": 413,
    "unavailable": 503,
}
"""The HTTP status of each error code; the WebSocket and MCP answer the same codes."""

ERROR_CODES: Final = tuple(HTTP_STATUS)

MAX_BODY_BYTES: Final = 1024 * 1024
"""The largest frame a surface accepts (1 MiB); a larger one is `too_large`."""

COMMAND_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}")


class _Frame(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GiveFeedback(_Frame):
    """The give_feedback command: a value of a registered feedback type on a target."""

    type: Literal["give_feedback"] = "give_feedback"
    feedback_type: str = Field(min_length=1, max_length=200)
    target: Target
    value: dict[str, Any]


class CommandFrame(_Frame):
    """A command and the client's optional id for it (retries with the same id record once)."""

    type: Literal["command"] = "command"
    command_id: str | None = Field(default=None, pattern=f"^{COMMAND_ID_PATTERN.pattern}$")
    command: GiveFeedback  # the one command so far; parse_frame refuses other types first


class SeqOut(_Frame):
    """Where the recorded event sits in the tenant's events topic."""

    partition: int
    offset: int


class RecordedOutcome(_Frame):
    """The command was recorded: the feedback event's seq and id."""

    type: Literal["recorded"] = "recorded"
    seq: SeqOut
    id: str


class OutcomeFrame(_Frame):
    """The answer to a command that succeeded (or had succeeded, for a repeated command id)."""

    type: Literal["outcome"] = "outcome"
    command_id: str | None = None
    outcome: RecordedOutcome


class FieldProblem(_Frame):
    """One invalid field: its dotted path in the frame and what is wrong with it."""

    path: str
    message: str


class ErrorBody(_Frame):
    """A stable code (one of ERROR_CODES), a message saying what to fix, and field problems."""

    code: ErrorCode
    message: str
    fields: list[FieldProblem] = Field(default_factory=list)


class ErrorFrame(_Frame):
    """The answer to a command that was not recorded."""

    type: Literal["error"] = "error"
    command_id: str | None = None
    error: ErrorBody

    @property
    def status(self) -> int:
        """The HTTP status of this error's code."""
        return HTTP_STATUS[self.error.code]


class CommandFailed(StreamsError):
    """A frame or command refused with a stable code; `frame(command_id)` is its answer."""

    def __init__(self, code: ErrorCode, message: str,
                 fields: list[FieldProblem] | None = None) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message
        self.fields = fields or []
        # The frame's command_id when it could be read, so the error frame carries it.
        self.command_id: str | None = None

    def frame(self, command_id: str | None = None) -> ErrorFrame:
        """The error frame answering this failure."""
        return ErrorFrame(command_id=command_id or self.command_id,
                          error=ErrorBody(code=self.code, message=self.message,
                                          fields=self.fields))


def _path(loc: tuple[int | str, ...], prefix: str = "") -> str:
    # Pydantic puts the tag of a tagged union in the path (target.run.run_id); clients know
    # the field as target.run_id.
    parts: list[str] = []
    for part in loc:
        if parts and parts[-1] == "target" and part in ("run", "firing", "chain"):
            continue
        parts.append(str(part))
    return ".".join([prefix, *parts] if prefix else parts) or (prefix or "$")


def _problems(exc: ValidationError, prefix: str = "") -> list[FieldProblem]:
    return [FieldProblem(path=_path(tuple(e["loc"]), prefix), message=e["msg"])
            for e in exc.errors()]


def parse_frame(body: bytes | str | Mapping[str, Any]) -> CommandFrame:
    """The command frame in a body, or CommandFailed: too_large over MAX_BODY_BYTES,
    validation_failed for malformed JSON, a frame that is not a command, an unknown command
    type or a bad field (with the field paths)."""
    if isinstance(body, bytes | str):
        if len(body) > MAX_BODY_BYTES:
            raise CommandFailed("too_large", f"the frame is {len(body)} bytes, over the limit "
                                f"of {MAX_BODY_BYTES} bytes (1 MiB): send a smaller value")
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise CommandFailed("validation_failed", f"the body is not valid JSON: {exc}",
                                [FieldProblem(path="$", message=str(exc))]) from exc
    else:
        data = body
    try:
        return _parse_mapping(data)
    except CommandFailed as exc:
        if isinstance(data, Mapping) and isinstance(data.get("command_id"), str):
            exc.command_id = data["command_id"][:128]
        raise


def _parse_mapping(data: Any) -> CommandFrame:
    if not isinstance(data, Mapping):
        raise CommandFailed("validation_failed", "a frame is a JSON object such as "
                            '{"type": "command", "command_id": "fb_1", "command": {...}}',
                            [FieldProblem(path="$", message="expected an object")])
    # The two `type` fields default as the published document says (a client generated from
    # it may leave defaults out); only another value is refused.
    if data.get("type", "command") != "command":
        raise CommandFailed("validation_failed",
                            f"unknown frame type {data.get('type')!r}: send a frame of type "
                            "'command'", [FieldProblem(path="type", message="expected 'command'")])
    command = data.get("command")
    if isinstance(command, Mapping) and command.get("type", "give_feedback") != "give_feedback":
        raise CommandFailed(
            "validation_failed",
            f"unknown command type {command.get('type')!r}: the commands are ['give_feedback']",
            [FieldProblem(path="command.type", message="expected 'give_feedback'")])
    try:
        return CommandFrame.model_validate(data)
    except ValidationError as exc:
        problems = _problems(exc)
        raise CommandFailed("validation_failed", "invalid command frame: " + "; ".join(
            f"{p.path}: {p.message}" for p in problems), problems) from exc


def whole_numbers(value: Any) -> Any:
    """`value` (JSON) with every float that is a whole number (1.0) as an integer: JSON
    Schema counts 1.0 as an integer, and strict validation of JSON would refuse it for an int
    field (a float field takes the integer as it is). A command's value is checked and
    recorded so."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_numbers(v) for v in value]
    return value


def check_value(command: GiveFeedback, types: FeedbackRegistry) -> type[Feedback]:
    """The registered type of a give_feedback command, once its value (strictly, as JSON: its
    type's JSON schema) and target kind are valid for it; CommandFailed (validation_failed,
    with paths under `command.`) otherwise."""
    cls = types.get(command.feedback_type)
    if cls is None or cls.feedback_abstract:
        raise CommandFailed(
            "validation_failed",
            f"unknown feedback type {command.feedback_type!r}; the registered types are "
            f"{types.names()}: load the module that defines {command.feedback_type!r} "
            f"(`streams serve --types <module>`, or STREAMS_FEEDBACK_MODULES)",
            [FieldProblem(path="command.feedback_type", message="not a registered type")])
    if command.target.kind not in cls.feedback_targets:
        raise CommandFailed(
            "validation_failed",
            f"{cls.feedback_name} feedback cannot be given on a {command.target.kind}; it "
            f"targets {sorted(cls.feedback_targets)}",
            [FieldProblem(path="command.target.kind",
                          message=f"expected one of {sorted(cls.feedback_targets)}")])
    try:
        # Strictly, as JSON: the value's published JSON schema is the contract, so "true" is
        # not a boolean nor "1" an integer (lax validation accepted what the schema refuses).
        cls.model_validate_json(json.dumps(whole_numbers(command.value)), strict=True)
    except ValidationError as exc:
        problems = _problems(exc, "command.value")
        raise CommandFailed("validation_failed", f"invalid {cls.feedback_name} value: "
                            + "; ".join(f"{p.path}: {p.message}" for p in problems),
                            problems) from exc
    return cls


def error_frame_of(exc: BaseException, command_id: str | None = None) -> ErrorFrame:
    """The error frame answering a project error (an unexpected error is `unavailable`)."""
    if isinstance(exc, CommandFailed):
        return exc.frame(command_id)
    code: ErrorCode
    if isinstance(exc, TooLarge):
        code = "too_large"
    elif isinstance(exc, ValidationFailed):
        code = "validation_failed"
    elif isinstance(exc, NotFound):
        code = "not_found"
    elif isinstance(exc, Unauthorized):
        code = "unauthorized"
    elif isinstance(exc, Forbidden):
        code = "forbidden"
    elif isinstance(exc, Conflict):
        code = "conflict"
    elif isinstance(exc, KafkaUnavailable):
        code = "unavailable"
    else:
        return CommandFailed("unavailable", f"internal error ({type(exc).__name__}); retry "
                             "with the same command_id, it records at most once").frame(command_id)
    return CommandFailed(code, str(exc)).frame(command_id)


def workspace_id(tenant: str, workspace: str) -> str:
    """The workspace id of a tenant's workspace: `<tenant>.<workspace>`."""
    return f"{check_tenant(tenant)}.{check_workspace(workspace)}"


def parse_workspace_id(value: str) -> tuple[str, str]:
    """(tenant, workspace) of a workspace id `<tenant>.<workspace>`; ValidationFailed saying
    the format otherwise."""
    tenant, dot, workspace = value.partition(".")
    if not dot:
        raise ValidationFailed(f"invalid workspace id {value!r}: use <tenant>.<workspace>, "
                               "e.g. acme.prod")
    return check_tenant(tenant), check_workspace(workspace)


def command_digest(command: GiveFeedback) -> str:
    """A digest of what a command asks, to tell a retry (same digest) from a different command
    under a reused id (a conflict). Canonical JSON, so key order does not matter."""
    data = command.model_dump(mode="json")
    return feedback_digest(data["feedback_type"], data["target"], data["value"])


def feedback_digest(feedback_type: str, target: Mapping[str, Any],
                    value: Mapping[str, Any]) -> str:
    """`command_digest` of a give_feedback command from its parts in JSON form (a target's
    and a value's `model_dump(mode="json")`), without building the command: what a batch
    computes per item, sharing each target's form."""
    text = _CANONICAL.encode({"type": "give_feedback", "feedback_type": feedback_type,
                              "target": target, "value": value})
    return hashlib.sha256(text.encode()).hexdigest()


# json.dumps with these options builds an encoder per call; a batch digests every item.
_CANONICAL: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def ledger_key(workspace: str, participant: str, command_id: str) -> str:
    """The key of a command in its tenant's ledger topic. Workspaces and command ids carry no
    newline, and a participant's id no control character, so keys cannot collide."""
    return f"{workspace}\n{participant}\n{command_id}"


class LedgerEntry(msgspec.Struct, frozen=True, omit_defaults=True,
                  forbid_unknown_fields=True):
    """One record of a tenant's command ledger (`<prefix>.<tenant>.commands`).

    `claimed`: a process (`owner`) is about to record the command; `claim` names this attempt,
    `supersedes` the stale claim it takes over. `recorded`: the command's outcome (its
    feedback's seq and event id). `released`: the claim's attempt failed before it produced
    anything (a validation error, a target not found), so the next claim may go ahead.

    A msgspec struct, not a pydantic model: every command writes two of these and every
    process reads each one back, so its cost is on the path of every command (about 1 µs to
    make and encode against 6 µs as a model; `bench.feedback_many`). Decoding is as strict as
    the model's was, stricter on types (no text for a number); the JSON is byte for byte what
    the model wrote.
    """

    state: Literal["claimed", "recorded", "released"]
    digest: str
    claim: str = ""
    supersedes: str | None = None
    owner: str = ""
    at_ms: int = 0
    partition: int | None = None
    offset: int | None = None
    event_id: str | None = None

    def outcome(self, command_id: str | None) -> OutcomeFrame:
        """The outcome frame of a recorded entry."""
        if self.state != "recorded" or self.event_id is None or self.partition is None \
                or self.offset is None:
            raise ValueError("only a recorded entry has an outcome")
        return OutcomeFrame(command_id=command_id, outcome=RecordedOutcome(
            seq=SeqOut(partition=self.partition, offset=self.offset), id=self.event_id))

    def replace(self, **changes: Any) -> LedgerEntry:
        """A copy with `changes` applied (the entry is frozen)."""
        return msgspec.structs.replace(self, **changes)

    def encode(self) -> bytes:
        """The record value: compact JSON without the fields at their defaults."""
        return _LEDGER_ENCODER.encode(self)

    @classmethod
    def decode(cls, value: bytes) -> LedgerEntry | None:
        """The entry of a record value; None for one this version cannot read."""
        try:
            return _LEDGER_DECODER.decode(value)
        except msgspec.DecodeError:  # ValidationError is a DecodeError
            return None


_LEDGER_ENCODER: Final = msgspec.json.Encoder()
_LEDGER_DECODER: Final = msgspec.json.Decoder(LedgerEntry)


def fold_ledger(current: LedgerEntry | None, record: LedgerEntry) -> LedgerEntry | None:
    """The state of a command after one more of its ledger records, in log order.

    Every record of one command is in one partition, so every process folds them in the same
    order and agrees on the winner: the first claim wins; a later claim counts only if it
    supersedes the current claim by name (taking over an attempt whose owner died), so of two
    processes taking over the same stale claim, the first again wins. A released claim lets
    the next claim win. Once recorded, a command stays recorded: its outcome never changes.
    """
    if current is None or current.state == "released":
        return record if record.state != "released" else current
    if current.state == "recorded":
        return current
    if record.state == "recorded":
        return record
    if record.state == "released":
        return record if record.claim == current.claim else current
    if record.supersedes is not None and record.supersedes == current.claim:
        return record
    return current
