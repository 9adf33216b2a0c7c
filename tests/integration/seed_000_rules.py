"""Seed 000's rules for a worker (`--types tests.seed_000 --rules THIS`): the rule that
escalates a wrong triage, and the error-spike rule whose runs the seed gives feedback on.

The seed names the error-spike rule's `triage` action and the `escalate` action without
showing them; these are this test's, in the spirit of streams/examples/ops_rules.py (which
cannot be loaded beside the seed: it imports the project's same-named feedback types).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from streams import AppEvent, F, Reaction, RetryPolicy, Rule, app_event_type, on, run
from tests.seed_000 import AppDeps, deps, wrong_triage

# The application's own event types, declared so a worker accepts rules that watch them.
for _name in ("ops:error_spike", "oncall:incident.opened", "oncall:escalated"):
    app_event_type(_name)

# Triage opens an incident when a spike's events add up to this many errors.
INCIDENT_AT = 10


async def triage(reaction: Reaction[AppDeps]) -> Mapping[str, Any]:
    """Open an incident when the spike's errors add up; the judge reads what it emitted."""
    errors = sum(int(e.data.get("errors", 1)) for e in reaction.events)
    service = reaction.run.scope["service"]
    if errors >= INCIDENT_AT:
        await reaction.emit(AppEvent(name="oncall:incident.opened",
                                     data={"service": service, "errors": errors}))
    return {"service": service, "errors": errors}


async def escalate(reaction: Reaction[AppDeps]) -> Mapping[str, Any]:
    """Page whoever the deps name: someone said a triage was wrong."""
    await reaction.emit(AppEvent(name="oncall:escalated", data={
        "because": reaction.events[-1].event_id, "pager": reaction.deps["pager"]}))
    return {"escalated": True}


error_spike = Rule(
    name="ops:error-spike",
    when=on("ops:error_spike").count(3, within=timedelta(minutes=5)).scope(F.data.service),
    then=run("triage", retry=RetryPolicy(max_attempts=3, backoff=timedelta(milliseconds=200))),
)

RULES = [error_spike, wrong_triage]
ACTIONS = {"triage": triage, "escalate": escalate}
DEPS = deps
