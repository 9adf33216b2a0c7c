"""What feedback can be given on: a run, a rule firing, or a whole causal chain."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

TargetKind = Literal["run", "firing", "chain"]
TARGET_KINDS: frozenset[str] = frozenset({"run", "firing", "chain"})


class _Target(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @property
    def id(self) -> str:
        """The id of the thing targeted."""
        raise NotImplementedError


class RunTarget(_Target):
    """One run of a rule's action."""

    kind: Literal["run"] = "run"
    run_id: str = Field(min_length=1)

    @property
    def id(self) -> str:
        return self.run_id


class FiringTarget(_Target):
    """One firing of a rule."""

    kind: Literal["firing"] = "firing"
    firing_id: str = Field(min_length=1)

    @property
    def id(self) -> str:
        return self.firing_id


class ChainTarget(_Target):
    """A causal chain, named by the event id of its first event (its correlation id)."""

    kind: Literal["chain"] = "chain"
    correlation_id: str = Field(min_length=1)

    @property
    def id(self) -> str:
        return self.correlation_id


Target = Annotated[RunTarget | FiringTarget | ChainTarget, Field(discriminator="kind")]
"""Any target; the `kind` field tells them apart."""


def make_target(kind: str, target_id: str) -> RunTarget | FiringTarget | ChainTarget:
    """Build a target from its kind and id (as stored on the wire)."""
    if kind == "run":
        return RunTarget(run_id=target_id)
    if kind == "firing":
        return FiringTarget(firing_id=target_id)
    if kind == "chain":
        return ChainTarget(correlation_id=target_id)
    raise ValueError(f"unknown target kind {kind!r}; expected one of {sorted(TARGET_KINDS)}")
