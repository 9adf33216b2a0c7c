"""The rules module of the rules-as-data integration tests: one module rule (`t:warm`, to
see that a worker is up and has processed a chain) and the action registry installed rules
name. `act` appends a `t:acted` event in a chain of its own, with a fresh id, for every
execution, so the tests count executions, not runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streams.core.app_events import app_event_type
from streams.core.events import AppEvent
from streams.core.rules import Rule, on, run
from streams.core.runs import Reaction

APP_EVENT_TYPES = [app_event_type(name) for name in ("t:ping", "t:warm", "t:acted")]


async def act(reaction: Reaction) -> Mapping[str, Any]:
    cause = reaction.events[-1].event_id if reaction.events else None
    await reaction.workspace.append(AppEvent(name="t:acted", data={
        "run_id": reaction.run.run_id, "cause": cause}))
    return {"acted_on": cause}


async def noop(reaction: Reaction) -> Mapping[str, Any]:
    return {}


RULES = [Rule(name="t:warm", when=on("t:warm"), then=run("noop"))]
ACTIONS = {"act": act, "noop": noop}
