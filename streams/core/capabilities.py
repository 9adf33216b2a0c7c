"""Capabilities: what an actor may do in a workspace, enforced by every workspace handle.

Most actors may do everything (`EVERYTHING`). Some are restricted: the proposal-outcome
evaluator acts for the application but may only give feedback and read (`FEEDBACK_ONLY`), so
an action acting as it cannot, by mistake or by a forged rule, propose, resolve, install or
emit anything else. `Grants` maps restricted actors to what they may do; a workspace handle
checks it before any I/O and raises `Forbidden` naming the actor, what it tried and what it
may do. A handle can narrow itself further (`as_actor(actor, capabilities=...)`), never widen
past the actor's grant.

This is the pipeline's own least privilege, inside the process; the broker's ACLs (per-tenant
principals) are the boundary against other processes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from streams.core.actors import AnyActor
from streams.core.errors import Forbidden

__all__ = ["EVERYTHING", "FEEDBACK_ONLY", "Capability", "Grants", "builtin_grants",
           "needed_to_append"]


class Capability(StrEnum):
    """One thing an actor may do in a workspace."""

    GIVE_FEEDBACK = "give_feedback"
    """Append `feedback_given` (through give_feedback)."""
    APPEND = "append"
    """Append any other event: runs, proposals, resolutions, rule facts, app events."""
    READ = "read"
    """Read the workspace's log, runs and feedback."""


EVERYTHING: frozenset[Capability] = frozenset(Capability)
FEEDBACK_ONLY: frozenset[Capability] = frozenset({Capability.GIVE_FEEDBACK, Capability.READ})


def needed_to_append(event_type: str) -> Capability:
    """The capability an append of `event_type` needs."""
    return Capability.GIVE_FEEDBACK if event_type == "feedback_given" else Capability.APPEND


def _names(capabilities: Iterable[Capability]) -> str:
    return ", ".join(sorted(c.value for c in capabilities)) or "nothing"


@dataclass(frozen=True)
class Grants:
    """Restricted actors (by participant name) and what each may do; others may do all."""

    restricted: Mapping[str, frozenset[Capability]] = field(default_factory=dict)

    def of(self, actor: AnyActor) -> frozenset[Capability]:
        """What `actor` may do."""
        return self.restricted.get(actor.participant, EVERYTHING)

    def with_grant(self, actor: AnyActor, capabilities: Iterable[Capability]) -> Grants:
        """These grants with `actor` restricted to `capabilities`."""
        return Grants({**self.restricted, actor.participant: frozenset(capabilities)})

    def check(self, actor: AnyActor, capability: Capability, *, doing: str,
              narrowed: frozenset[Capability] | None = None) -> None:
        """Forbidden unless `actor` (and the handle's narrowing, when given) allows
        `capability`; `doing` says what was attempted, for the message."""
        allowed = self.of(actor)
        if narrowed is not None:
            allowed = allowed & narrowed
        if capability not in allowed:
            raise Forbidden(
                f"{actor.participant} may only {_names(allowed)}; {doing} needs "
                f"{capability.value!r}: act as another actor for it (a workspace handle's "
                "as_actor), or grant the capability where the grants are built")

    def check_append(self, actor: AnyActor, event_type: str, *,
                     narrowed: frozenset[Capability] | None = None) -> None:
        """Forbidden unless `actor` may append an event of `event_type`."""
        self.check(actor, needed_to_append(event_type), doing=f"appending {event_type}",
                   narrowed=narrowed)


def builtin_grants() -> Grants:
    """The grants the pipeline ships: the proposal-outcome evaluator gives feedback only."""
    # Imported here: the proposals package builds on the core's base modules, this one too.
    from streams.core.proposals.evaluator import EVALUATOR

    return Grants().with_grant(EVALUATOR, FEEDBACK_ONLY)
