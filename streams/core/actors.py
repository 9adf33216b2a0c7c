"""Who does things in a workspace: people, evaluators, agents and the system.

Each actor has a participant name (`user:ada`, `evaluator:triage-judge@2026-09-28`,
`agent:bot`, `system`) that its feedback is attributed to. Two actors never share one: ids
carry no control characters, and an evaluator's name and version carry no `@`, the separator
between them (a person's id may, as in an e-mail address, since nothing follows it).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from streams.core.errors import ValidationFailed

__all__ = [
    "Actor",
    "AgentActor",
    "AnyActor",
    "EvaluatorActor",
    "SystemActor",
    "UserActor",
    "actor_from_participant",
    "participant_of",
]

# Pydantic's patterns use search semantics; these anchor both ends.
_ID = r"^[^\x00-\x1f\x7f]+$"
_EVALUATOR_PART = r"^[^@\x00-\x1f\x7f]+$"


def participant_of(kind: str, id: str, version: str | None = None) -> str:
    """The participant name of an actor given by its parts (as they travel on the wire)."""
    if kind == "system":
        return "system"
    if kind == "evaluator":
        return f"evaluator:{id}@{version or '0'}"
    return f"{kind}:{id}"


class _Actor(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'actor'}: {e['msg']}"
                for e in exc.errors())
            raise ValidationFailed(
                f"invalid {type(self).__name__}: {problems} (ids are non-empty and have no "
                "control characters; an evaluator's name and version have no '@')") from exc

    @property
    def participant(self) -> str:
        """The stable name this actor's feedback is attributed to."""
        raise NotImplementedError


class UserActor(_Actor):
    """A person, by the id your application knows them by."""

    kind: Literal["user"] = "user"
    id: str = Field(min_length=1, pattern=_ID)

    @property
    def participant(self) -> str:
        return participant_of("user", self.id)


class EvaluatorActor(_Actor):
    """An evaluator; each version is its own participant, so verdicts of versions never mix."""

    kind: Literal["evaluator"] = "evaluator"
    name: str = Field(min_length=1, pattern=_EVALUATOR_PART)
    version: str = Field(default="0", min_length=1, pattern=_EVALUATOR_PART)

    @property
    def participant(self) -> str:
        return participant_of("evaluator", self.name, self.version)


class AgentActor(_Actor):
    """An automated agent acting on its own account (a rule's action, a bot)."""

    kind: Literal["agent"] = "agent"
    id: str = Field(min_length=1, pattern=_ID)

    @property
    def participant(self) -> str:
        return participant_of("agent", self.id)


class SystemActor(_Actor):
    """The pipeline itself (rule firings, run lifecycle events)."""

    kind: Literal["system"] = "system"

    @property
    def participant(self) -> str:
        return "system"


AnyActor = UserActor | EvaluatorActor | AgentActor | SystemActor
Actor = Annotated[AnyActor, Field(discriminator="kind")]
"""Any actor; the `kind` field tells them apart."""


def actor_from_participant(participant: str) -> AnyActor:
    """Parse a participant string (`user:ada`, `evaluator:judge@2`, `agent:x`, `system`)."""
    if participant == "system":
        return SystemActor()
    kind, _, rest = participant.partition(":")
    if kind == "user" and rest:
        return UserActor(id=rest)
    if kind == "agent" and rest:
        return AgentActor(id=rest)
    if kind == "evaluator" and rest:
        name, _, version = rest.partition("@")
        return EvaluatorActor(name=name, version=version or "0")
    raise ValidationFailed(f"not a participant: {participant!r} (expected user:<id>, "
                           "agent:<id>, evaluator:<name>@<version> or system)")
