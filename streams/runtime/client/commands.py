"""Commands, transport-neutral: the CommandService every surface calls.

`CommandService.execute(token, workspace_id, frame)` is what every surface calls (REST here;
the WebSocket and MCP the same way): it authenticates the bearer token, checks the key's
tenant and capability, parses and validates the frame (streams.core.commands), gives the
feedback through the workspace handle as the key's actor, and returns an `OutcomeFrame` or an
`ErrorFrame`; it never raises for a client's mistake or an outage.

    service = CommandService(client, keys)         # a StreamsClient and a started KeyStore
    answer = await service.execute(token, "acme.prod", body)   # bytes, str or a mapping
    status = 200 if answer.type == "outcome" else answer.status

Command ids record once through the ledger (streams.runtime.client.ledger).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any, Protocol

from streams.core.commands import (
    CommandFrame,
    ErrorFrame,
    OutcomeFrame,
    RecordedOutcome,
    SeqOut,
    check_value,
    error_frame_of,
    parse_frame,
    parse_workspace_id,
    whole_numbers,
)
from streams.core.errors import (
    NotFound,
    Unauthorized,
    ValidationFailed,
)
from streams.core.events import Envelope
from streams.core.keys import ApiKey, authorize, parse_token
from streams.core.measures.calibration import calibration_json
from streams.core.rules import Rule
from streams.core.runs import RunRecord
from streams.core.scores import score_configs
from streams.runtime.client.keys import KeyStore
from streams.runtime.client.workspace import StreamsClient, Workspace

__all__ = ["CHAIN_EVENTS", "CommandService", "RuleSource", "envelope_json", "run_json"]

CHAIN_EVENTS = 500
"""The most envelopes a chain's read answers (its `count` says how many it has)."""

log = logging.getLogger(__name__)

class RuleSource(Protocol):
    """Where the service finds a tenant's rule by name (streams.runtime.jobs.rules.
    RuleFinder: the server's rules modules, then the tenant's installed rules)."""

    def find(self, tenant: str, name: str) -> Rule | None:
        """The rule, or None."""
        ...


class CommandService:
    """The transport-neutral service every surface calls (REST, WebSocket, MCP).

    Holds a StreamsClient (the workspace handle's) and a started KeyStore. Every method takes
    the caller's bearer token (`fsk_...`, or None) and a workspace id (`<tenant>.<workspace>`);
    the actor is always the key's, never something the client sends.
    """

    def __init__(self, client: StreamsClient, keys: KeyStore, *,
                 rules: RuleSource | None = None) -> None:
        self.client = client
        self.keys = keys
        self.rules = rules

    def authorize(self, token: str | None, workspace_id: str, capability: str,
                  ) -> tuple[ApiKey, Workspace]:
        """The key and a handle on the workspace acting as the key's actor; Unauthorized (no,
        unknown, malformed or revoked key), Forbidden (another tenant's key, or a missing
        capability) or ValidationFailed (a malformed workspace id)."""
        if not token:
            raise Unauthorized("missing API key: send `Authorization: Bearer fsk_...` with a "
                               "key from `streams keys create`")
        key_id, secret = parse_token(token)
        # The key is checked against the id's tenant part before the id is parsed, so a bad
        # key is unauthorized whatever the path says.
        key = authorize(self.keys.get(key_id), secret, workspace_id.partition(".")[0],
                        capability)
        tenant, workspace = parse_workspace_id(workspace_id)
        return key, self.client.workspace(tenant, workspace, actor=key.actor)

    def whoami(self, token: str | None, workspace_id: str) -> dict[str, Any]:
        """Who the key acts as in the workspace and what it may do (the page signs in with
        it): Unauthorized or Forbidden as for any read."""
        key, ws = self.authorize(token, workspace_id, "read")
        return {"participant": key.actor.participant,
                "actor": key.actor.model_dump(mode="json"), "tenant": ws.tenant,
                "workspace": ws.workspace, "capabilities": sorted(key.capabilities),
                "key_id": key.key_id}

    async def execute(self, token: str | None, workspace_id: str,
                      frame: bytes | str | Mapping[str, Any]) -> OutcomeFrame | ErrorFrame:
        """Run one command frame; the outcome frame, or an error frame with its code. Never
        raises for a client's mistake or an outage (an unexpected error is `unavailable`)."""
        command_id: str | None = None
        if isinstance(frame, Mapping) and isinstance(frame.get("command_id"), str):
            command_id = frame["command_id"]
        try:
            _key, ws = self.authorize(token, workspace_id, "give_feedback")
            parsed: CommandFrame = parse_frame(frame)
            command_id = parsed.command_id
            command = parsed.command
            check_value(command, self.client.types)
            seq, event_id = await ws.record_command(whole_numbers(command.value),
                                                    on=command.target,
                                                    feedback_type=command.feedback_type,
                                                    command_id=parsed.command_id)
        except Exception as exc:
            answer = error_frame_of(exc, command_id)
            if answer.error.message.startswith("internal error"):
                log.exception("command on %s failed", workspace_id)
            return answer
        return OutcomeFrame(command_id=command_id, outcome=RecordedOutcome(
            seq=SeqOut(partition=seq.partition, offset=seq.offset), id=event_id))

    # -- reads ------------------------------------------------------------------------------

    async def runs(self, token: str | None, workspace_id: str, *, rule: str | None = None,
                   limit: int = 50, cursor: str | None = None) -> dict[str, Any]:
        """A page of the workspace's runs (of `rule`), newest first, after `cursor` (the
        `next_cursor` of the page before; none for the first): {"runs": [...],
        "next_cursor": str | None}. Runs started while a client pages are newer than its
        first page, so later pages have no gaps or repeats."""
        _key, ws = self.authorize(token, workspace_id, "read")
        if not 1 <= limit <= 500:
            raise ValidationFailed("limit must be 1-500")
        await self.client.log.require_tenant(ws.tenant)
        page = await ws.runs_page(rule=rule, limit=limit, cursor=cursor or None)
        # Off the event loop: a page of runs is up to 500 records' envelopes to dump.
        runs = await asyncio.to_thread(lambda: [run_json(r) for r in page.runs])
        return {"runs": runs, "next_cursor": page.next_cursor}

    async def run(self, token: str | None, workspace_id: str, run_id: str) -> dict[str, Any]:
        """One run's record: its run_started, the matched envelopes and what it emitted."""
        _key, ws = self.authorize(token, workspace_id, "read")
        await self.client.log.require_tenant(ws.tenant)
        record = await ws.run_record(run_id)
        return await asyncio.to_thread(run_json, record)

    async def firing(self, token: str | None, workspace_id: str,
                     firing_id: str) -> dict[str, Any]:
        """One firing: its rule_fired envelope, the envelopes it matched and the run_started
        envelopes of the runs it started: {"id", "firing", "matched", "runs"}."""
        _key, ws = self.authorize(token, workspace_id, "read")
        await self.client.log.require_tenant(ws.tenant)
        fired, matched, runs = await ws.firing_record(firing_id)
        return await asyncio.to_thread(lambda: {
            "id": firing_id, "firing": envelope_json(fired),
            "matched": [envelope_json(e) for e in matched],
            "runs": [envelope_json(e) for e in runs]})

    async def why(self, token: str | None, workspace_id: str, rule: str,
                  event_id: str) -> dict[str, Any]:
        """What the rule called `rule` did with the event, and why (see Workspace.why):
        {"rule", "event_id", "outcome", "judged", "detail", "firing_id", "run_id",
        "attempts", "output"}; NotFound for an unknown rule or event."""
        _key, ws = self.authorize(token, workspace_id, "read")
        await self.client.log.require_tenant(ws.tenant)
        found = None if self.rules is None else \
            await asyncio.to_thread(self.rules.find, ws.tenant, rule)
        if found is None:
            raise NotFound(f"no rule {rule!r} for tenant {ws.tenant}: neither installed "
                           "(streams rules list) nor in the server's rules modules "
                           "(STREAMS_RULE_MODULES)")
        return (await ws.why(found, event_id)).as_dict()

    async def chain(self, token: str | None, workspace_id: str, correlation_id: str, *,
                    limit: int = CHAIN_EVENTS) -> dict[str, Any]:
        """A chain's envelopes in log order, the first `limit` of them: {"id", "events",
        "count"} (`count` is all of them); NotFound when the workspace has no such chain."""
        _key, ws = self.authorize(token, workspace_id, "read")
        await self.client.log.require_tenant(ws.tenant)
        envelopes = await ws.chain_events(correlation_id)
        if not envelopes:
            raise NotFound(f"no chain {correlation_id!r} in workspace {workspace_id}")
        return await asyncio.to_thread(lambda: {
            "id": correlation_id, "count": len(envelopes),
            "events": [envelope_json(e) for e in envelopes[:limit]]})

    async def feedback(self, token: str | None, workspace_id: str, *,
                       feedback_type: str | None = None, participant: str | None = None,
                       limit: int = 100, cursor: str | None = None) -> dict[str, Any]:
        """A page of the workspace's feedback (by type and participant), oldest first (by
        time, partition and offset), after `cursor`: {"feedback": [...], "next_cursor": ...}."""
        _key, ws = self.authorize(token, workspace_id, "read")
        if not 1 <= limit <= 1000:
            raise ValidationFailed("limit must be 1-1000")
        await self.client.log.require_tenant(ws.tenant)
        page = await ws.feedback_page(feedback_type=feedback_type, participant=participant,
                                      limit=limit, cursor=cursor or None)
        given = await asyncio.to_thread(lambda: [envelope_json(e) for e in page.feedback])
        return {"feedback": given, "next_cursor": page.next_cursor}

    async def calibration(self, token: str | None, workspace_id: str) -> dict[str, Any]:
        """How far each evaluator version agrees with people lately, per feedback type and
        field, with its alarm state: {"calibration": [...], "window": ..., "min_pairs": ...,
        "margin": ...} (`streams.core.measures.calibration`)."""
        _key, ws = self.authorize(token, workspace_id, "read")
        await self.client.log.require_tenant(ws.tenant)
        policy = self.client.settings.calibration_policy()
        rows = await ws.calibration(policy)
        return {"calibration": [calibration_json(r) for r in rows], "window": policy.window,
                "min_pairs": policy.min_pairs, "margin": policy.margin}

    def feedback_types(self, token: str | None, workspace_id: str) -> dict[str, Any]:
        """The registered feedback types: name, targets, JSON schema and score configs."""
        self.authorize(token, workspace_id, "read")
        return {"feedback_types": [
            {"name": cls.feedback_name, "targets": sorted(cls.feedback_targets),
             "json_schema": cls.model_json_schema(),
             "score_configs": [asdict(c) for c in score_configs(cls)]}
            for cls in sorted(self.client.types, key=lambda c: c.feedback_name)
            if not cls.feedback_abstract]}


def envelope_json(envelope: Envelope) -> dict[str, Any]:
    """An envelope as JSON-ready data (the event's fields under `event`)."""
    data = envelope.model_dump(mode="json", exclude={"event"})
    data["event"] = envelope.event.model_dump(mode="json")
    return data


def run_json(record: RunRecord) -> dict[str, Any]:
    """A run record as JSON-ready data."""
    return {"id": record.id,
            "run": envelope_json(record.started),
            "matched": [envelope_json(e) for e in record.matched],
            "emitted": [envelope_json(e) for e in record.emitted]}
