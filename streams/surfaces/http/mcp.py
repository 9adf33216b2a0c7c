"""MCP: the give_feedback, list_runs, read_feedback and calibration tools; list_queues,
install_queue, archive_queue, queue_progress, queue_agreement and queue_pair; next_item,
submit_item and skip_item (a reviewer's work through a queue), with the official MCP SDK.

`mcp_server(backend, key=...)` builds an `MCPServer` whose tools answer exactly what the REST
and WebSocket surfaces answer: give_feedback takes the command's fields (and an optional
command_id) and returns the same outcome frame, or the same error frame as an error result
(`is_error`, the frame as structured content and as JSON text). `streams serve` mounts it at
`/mcp` (streamable HTTP; each request carries `Authorization: Bearer <key>`) on the app's
service; `streams mcp` serves it over stdio with `serve_stdio(runtime, key)`, on a service it
builds on the Runtime, acting with the key in STREAMS_MCP_KEY. A key of another tenant gets
`forbidden` from every tool.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import Field

from streams.core.commands import ErrorFrame, OutcomeFrame, error_frame_of
from streams.core.errors import KafkaUnavailable
from streams.core.leases import ITEM_PATTERN
from streams.extras import needs
from streams.runtime.client.commands import CommandService
from streams.runtime.client.keys import KeyStore
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.jobs.queues import QueueBook, QueueService
from streams.runtime.jobs.rules import RuleFinder
from streams.runtime.root import Runtime
from streams.surfaces.modules import module_rules

with needs("mcp", "the MCP tools"):
    from fastapi import FastAPI
    from mcp.server.mcpserver import Context, MCPServer
    from mcp_types import CallToolResult, TextContent

__all__ = ["INSTRUCTIONS", "MCP_PATH", "mcp_server", "mount_mcp", "serve_stdio"]

MCP_PATH = "/mcp"
"""Where `streams serve` serves the tools over streamable HTTP."""

INSTRUCTIONS = (
    "Give typed feedback on the runs, rule firings and causal chains of a feedback-streams "
    "workspace, and read what exists. A workspace_id is '<tenant>.<workspace>' (acme.prod). "
    "Find a run with list_runs, then give_feedback with target {\"kind\": \"run\", \"run_id\": "
    "...}. Pass a command_id to make a retried give_feedback record once.")


def _result(frame: OutcomeFrame | ErrorFrame | Mapping[str, Any]) -> CallToolResult:
    data = (frame.model_dump(mode="json") if isinstance(frame, OutcomeFrame | ErrorFrame)
            else dict(frame))
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(data))],
                          structured_content=data, is_error=isinstance(frame, ErrorFrame))


def _token(ctx: Context, key: str | None) -> str | None:
    """The stdio process's key, or the bearer key of the HTTP request (None without one: the
    service answers unauthorized)."""
    if key is not None:
        return key
    headers = ctx.headers or {}
    scheme, _, token = (headers.get("authorization") or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def mcp_server(service: CommandService | Callable[[], CommandService], *,
               key: str | None = None,
               queues: QueueService | Callable[[], QueueService] | None = None,
               ) -> MCPServer:
    """The MCP server of the tools over the command service and the queue service (or
    functions returning them, for an app that builds its services at startup); with `key`
    every call acts with that key (stdio), without it with the bearer key of each HTTP
    request. Without `queues`, the queue tools answer unavailable."""
    server = MCPServer("feedback-streams", instructions=INSTRUCTIONS)

    def get() -> CommandService:
        return service if isinstance(service, CommandService) else service()

    def get_queues() -> QueueService:
        if queues is None:
            raise KafkaUnavailable("this MCP server has no queue service")
        return queues if isinstance(queues, QueueService) else queues()

    @server.tool()
    async def give_feedback(
        workspace_id: str, feedback_type: str,
        target: Annotated[dict[str, Any], Field(description=(
            'what the feedback is about: {"kind": "run", "run_id": ...}, {"kind": "firing", '
            '"firing_id": ...} or {"kind": "chain", "correlation_id": ...}'))],
        value: Annotated[dict[str, Any], Field(description="the feedback's fields, as its "
                                               "type declares them")],
        ctx: Context,
        command_id: str | None = None,
    ) -> CallToolResult:
        """Give feedback of a registered type on a run, a firing or a chain of the workspace,
        as the API key's actor. Answers {"type": "outcome", "outcome": {"type": "recorded",
        "seq": ..., "id": ...}} or an error frame {"type": "error", "error": {"code": ...,
        "message": ..., "fields": [...]}}. The same command_id records once and answers the
        same outcome."""
        frame = {"type": "command", "command_id": command_id,
                 "command": {"type": "give_feedback", "feedback_type": feedback_type,
                             "target": target, "value": value}}
        try:
            ready = get()
        except Exception as exc:  # the service is starting
            return _result(error_frame_of(exc, command_id))
        return _result(await ready.execute(_token(ctx, key), workspace_id, frame))

    @server.tool()
    async def list_runs(workspace_id: str, ctx: Context, rule: str | None = None, limit: int = 20,
                        cursor: str | None = None) -> CallToolResult:
        """The workspace's runs, newest first (of one rule when `rule` is given), `limit`
        (1-500) after `cursor` (a page's next_cursor): {"runs": [{"id", "run", "matched",
        "emitted"}], "next_cursor": ...}. A run's id is what give_feedback's run target
        names."""
        try:
            page = await get().runs(_token(ctx, key), workspace_id, rule=rule, limit=limit,
                                      cursor=cursor)
        except Exception as exc:
            return _result(error_frame_of(exc))
        return _result(page)

    @server.tool()
    async def read_feedback(workspace_id: str, ctx: Context,
                            feedback_type: str | None = None, participant: str | None = None,
                            limit: int = 100, cursor: str | None = None) -> CallToolResult:
        """The workspace's feedback oldest first, of one type and/or one participant
        (`user:ada`, `evaluator:judge@v1`) when given, `limit` (1-1000) after `cursor` (a
        page's next_cursor): {"feedback": [envelope, ...], "next_cursor": ...}."""
        try:
            page = await get().feedback(_token(ctx, key), workspace_id,
                                          feedback_type=feedback_type,
                                          participant=participant, limit=limit, cursor=cursor)
        except Exception as exc:
            return _result(error_frame_of(exc))
        return _result(page)

    @server.tool()
    async def calibration(workspace_id: str, ctx: Context) -> CallToolResult:
        """How far each evaluator version agrees with people lately (read): {"calibration":
        [{"evaluator", "version", "feedback_type", "field", "measure", "value", "ci", "n",
        "threshold", "state"}, ...], "window", "min_pairs", "margin"}; state is ok, alarm,
        too_few, undefined or unwatched. As REST's calibration route."""
        try:
            return _result(await get().calibration(_token(ctx, key), workspace_id))
        except Exception as exc:
            return _result(error_frame_of(exc))

    @server.tool()
    async def why(workspace_id: str, rule: str, event_id: str,
                  ctx: Context) -> CallToolResult:
        """What a rule did with one event, and why: {"outcome", "judged", "detail",
        "firing_id", "run_id", "attempts", "output", ...}; outcome is not_watched,
        filtered_out, sampled_out, counting, throttled, undecided, judged, handed_off,
        over_budget, running, retrying or dead_lettered."""
        try:
            return _result(await get().why(_token(ctx, key), workspace_id, rule, event_id))
        except Exception as exc:
            return _result(error_frame_of(exc))

    @server.tool()
    async def list_queues(workspace_id: str, ctx: Context,
                          archived: bool = False) -> CallToolResult:
        """The workspace's annotation queues by name (archived ones too with `archived`):
        {"queues": [{"queue", "state", "definition", "installed_by", ...}]}."""
        try:
            return _result(await get_queues().list(_token(ctx, key), workspace_id,
                                                   archived=archived))
        except Exception as exc:
            return _result(error_frame_of(exc))

    @server.tool()
    async def install_queue(
        workspace_id: str,
        definition: Annotated[dict[str, Any], Field(description=(
            'the queue\'s JSON form: {"name": ..., "enters": {"runs_of": RULE} | '
            '{"firings_of": RULE} | {"chains": {}} | {"judged_below": {...}} | '
            '{"disagreements": {...}}, "feedback_types": [...], "reviewers": k, "blind": '
            'bool, "lease_seconds": s, "sample": share} (schemas/queue/v1.schema.json)'))],
        ctx: Context,
    ) -> CallToolResult:
        """Install an annotation queue (the key needs manage_queues): {"queue": entry,
        "repeat": bool}; repeat when it was live already with this definition. A live queue
        of that name with another definition is a conflict error; archive it first."""
        try:
            answer, _created = await get_queues().install(_token(ctx, key), workspace_id,
                                                          definition)
        except Exception as exc:
            return _result(error_frame_of(exc))
        return _result(answer)

    @server.tool()
    async def archive_queue(workspace_id: str, name: str, ctx: Context) -> CallToolResult:
        """Archive a live queue (the key needs manage_queues): {"queue": entry}. Its items
        stay in the log; not_found names the live queues when there is none of that name."""
        try:
            return _result(await get_queues().archive(_token(ctx, key), workspace_id, name))
        except Exception as exc:
            return _result(error_frame_of(exc))

    @server.tool()
    async def queue_progress(workspace_id: str, queue: str, ctx: Context) -> CallToolResult:
        """Where a live queue stands (read): {"queue", "items", "done", "in_review", "left",
        "verdicts"}, as REST's progress route."""
        try:
            return _result(await get_queues().progress(_token(ctx, key), workspace_id, queue))
        except Exception as exc:
            return _result(error_frame_of(exc))

    @server.tool()
    async def queue_agreement(workspace_id: str, queue: str, ctx: Context) -> CallToolResult:
        """Agreement on a live queue's items (read): {"queue", "items", "judged",
        "people_agreement": [{"feedback_type", "field", "alpha", "alpha_ci", ...}],
        "judge_agreement": [{"evaluator", "field", "kappa", ...}]}, as REST's agreement
        route."""
        try:
            return _result(await get_queues().agreement(_token(ctx, key), workspace_id,
                                                        queue))
        except Exception as exc:
            return _result(error_frame_of(exc))

    @server.tool()
    async def queue_pair(workspace_id: str, queue: str, item: str,
                         ctx: Context) -> CallToolResult:
        """The two versions' verdicts a queue of pairs shows for an item (read): {"item",
        "target", "feedback_type", "a", "b", "shown": [{"side", "value"}, ...]}; give a
        pairwise_preference ({"a", "b", "preferred": "a" | "b" | "tie"}) on it with
        submit_item. As REST's pair route."""
        try:
            return _result(await get_queues().pair(_token(ctx, key), workspace_id, queue,
                                                   item))
        except Exception as exc:
            return _result(error_frame_of(exc))

    @server.tool()
    async def next_item(
        workspace_id: str, queue: str, ctx: Context,
        besides: Annotated[str | None, Field(description="an item not to hand back (the one "
                                             "being judged, to lease the next one ahead)",
                                             pattern=ITEM_PATTERN)] = None,
    ) -> CallToolResult:
        """Lease the queue's next item to the key's actor (give_feedback): {"lease": {"item",
        "target", "request_id", "ends_ms"}}, or {"lease": null} when none is left for them.
        Give feedback on it with submit_item before ends_ms."""
        try:
            return _result(await get_queues().next(_token(ctx, key), workspace_id, queue,
                                                   besides))
        except Exception as exc:
            return _result(error_frame_of(exc))

    @server.tool()
    async def submit_item(
        workspace_id: str, queue: str, request_id: str, feedback_type: str,
        target: Annotated[dict[str, Any], Field(description="the lease's target, as "
                                                "next_item gave it")],
        value: Annotated[dict[str, Any], Field(description="the feedback's fields")],
        ctx: Context,
    ) -> CallToolResult:
        """Give feedback on a leased item under its lease: the outcome frame (recorded once;
        a retry answers the same), or a conflict error when the lease is not running."""
        body = {"request_id": request_id, "command": {
            "type": "give_feedback", "feedback_type": feedback_type, "target": target,
            "value": value}}
        try:
            service = get_queues()
        except Exception as exc:
            return _result(error_frame_of(exc))
        return _result(await service.submit(_token(ctx, key), workspace_id, queue, body))

    @server.tool()
    async def skip_item(workspace_id: str, queue: str, item: str, request_id: str,
                        ctx: Context) -> CallToolResult:
        """Give a leased item back: {"outcome": "skipped"}; the reviewer never gets it
        again."""
        try:
            return _result(await get_queues().skip(_token(ctx, key), workspace_id, queue,
                                                   item, request_id))
        except Exception as exc:
            return _result(error_frame_of(exc))

    return server


def mount_mcp(app: FastAPI, service: Callable[[], CommandService],
              queues: Callable[[], QueueService] | None = None, path: str = MCP_PATH,
              ) -> MCPServer:
    """Mount the tools over streamable HTTP at `path` on `app`. The app's lifespan must run
    the returned server's `session_manager.run()` (an async context manager)."""
    server = mcp_server(service, queues=queues)
    app.mount(path, server.streamable_http_app(streamable_http_path="/"))
    return server


async def serve_stdio(runtime: Runtime, *, key: str) -> None:
    """Serve the tools over stdio until the client hangs up, acting with `key`, on a
    service built on the runtime's clients (the key store is read first; the caller closes
    the runtime)."""
    import anyio.to_thread

    client = StreamsClient(runtime)
    keys = KeyStore(runtime)
    service = CommandService(client, keys, rules=RuleFinder(
        runtime, module_rules(runtime.settings.rule_modules, "STREAMS_RULE_MODULES")))
    queues = QueueService(service, QueueBook(runtime, follow=True))
    try:
        await anyio.to_thread.run_sync(keys.start)
        await mcp_server(service, key=key, queues=queues).run_stdio_async()
    finally:
        queues.close()
        keys.close()
        client.close()
