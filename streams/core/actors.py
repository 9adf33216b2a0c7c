"""Who does things in a workspace: people, evaluators, agents and the system."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


def participant_of(kind: str, id: str, version: str | None = None) -> str:
    """The participant name of an actor given by its parts (as they travel on the wire)."""
    if kind == "system":
        return "system"
    if kind == "evaluator":
        return f"evaluator:{id}@{version or '0'}"
    return f"{kind}:{id}"


class _Actor(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @property
    def participant(self) -> str:
        """The stable name this actor's feedback is attributed to."""
        raise NotImplementedError


class UserActor(_Actor):
    """A person, by the id your application knows them by."""

    kind: Literal["user"] = "user"
    id: str = Field(min_length=1)

    @property
    def participant(self) -> str:
        return participant_of("user", self.id)


class EvaluatorActor(_Actor):
    """An evaluator; each version is its own participant, so verdicts of versions never mix."""

    kind: Literal["evaluator"] = "evaluator"
    name: str = Field(min_length=1)
    version: str = Field(default="0", min_length=1)

    @property
    def participant(self) -> str:
        return participant_of("evaluator", self.name, self.version)


class AgentActor(_Actor):
    """An automated agent acting on its own account (a rule's action, a bot)."""

    kind: Literal["agent"] = "agent"
    id: str = Field(min_length=1)

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
        name, _, version = rest.rpartition("@")
        return EvaluatorActor(name=name or rest, version=version if name else "0")
    raise ValueError(f"not a participant: {participant!r}")
