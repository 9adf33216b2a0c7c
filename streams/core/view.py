"""A view of what exists in a tenant's log: runs, firings, chains and their traces.

The view is a fold over envelopes in log order, so it is as current as the records fed to
it; the workspace handle feeds it up to the log's end before it answers "not found".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streams.core.errors import NotFound, ValidationFailed
from streams.core.events import Envelope, RuleFired, RunStarted
from streams.core.targets import ChainTarget, FiringTarget, RunTarget


@dataclass(frozen=True, slots=True)
class Located:
    """Where a target lives: its workspace, chain, the event that made it, its trace."""

    workspace: str
    correlation_id: str
    event_id: str
    trace_id: str | None
    rule: str | None = None
    action: str | None = None


@dataclass
class LogIndex:
    """Runs, firings and chains seen so far, and every event's chain."""

    runs: dict[str, Located] = field(default_factory=dict)
    firings: dict[str, Located] = field(default_factory=dict)
    chains: dict[str, Located] = field(default_factory=dict)
    event_chain: dict[str, str] = field(default_factory=dict)
    applied: int = 0

    def apply(self, envelope: Envelope) -> None:
        """Fold one envelope into the view."""
        self.applied += 1
        trace_id = envelope.trace.trace_id if envelope.trace else None
        self.event_chain[envelope.event_id] = envelope.correlation_id
        if envelope.event_id == envelope.correlation_id:
            self.chains[envelope.event_id] = Located(
                envelope.workspace, envelope.correlation_id, envelope.event_id, trace_id)
        event = envelope.event
        if isinstance(event, RunStarted) and event.run_id not in self.runs:
            self.runs[event.run_id] = Located(
                envelope.workspace, envelope.correlation_id, envelope.event_id, trace_id,
                rule=event.rule, action=event.action)
        elif isinstance(event, RuleFired):
            self.firings[event.firing_id] = Located(
                envelope.workspace, envelope.correlation_id, envelope.event_id, trace_id,
                rule=event.rule)

    def locate(self, target: RunTarget | FiringTarget | ChainTarget,
               workspace: str) -> Located | None:
        """Where the target is, or None if this view has not seen it in `workspace`.

        A chain target that names an event other than its chain's first raises
        ValidationFailed naming the chain.
        """
        if isinstance(target, RunTarget):
            found = self.runs.get(target.run_id)
        elif isinstance(target, FiringTarget):
            found = self.firings.get(target.firing_id)
        else:
            found = self.chains.get(target.correlation_id)
            if found is None and target.correlation_id in self.event_chain:
                chain = self.event_chain[target.correlation_id]
                raise ValidationFailed(
                    f"event {target.correlation_id} is not the first event of its chain; "
                    f"give chain feedback on ChainTarget(correlation_id={chain!r})"
                )
        if found is None or found.workspace != workspace:
            return None
        return found


def not_found(target: RunTarget | FiringTarget | ChainTarget, tenant: str,
              workspace: str) -> NotFound:
    """The error for a target missing from a workspace's log."""
    return NotFound(f"no {target.kind} {target.id!r} in workspace {tenant}/{workspace}")
