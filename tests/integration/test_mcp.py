"""The MCP tools with the official SDK's client, against the service on the real broker:
over streamable HTTP (mounted in `streams serve`'s app) and over stdio (`streams mcp`)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from streams.core.actors import UserActor
from streams.runtime.client.keys import KeyStore
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.root import Runtime
from streams.settings import Settings
from tests.conftest import REPO
from tests.integration.served import serve, start_run


def _http(url: str, token: str | None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers,
                                                                      timeout=30.0))


def _frame(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None
    # The text content carries the same frame, for clients that read only text.
    [text] = result.content
    assert json.loads(text.text) == result.structured_content  # type: ignore[union-attr]
    return dict(result.structured_content)


FEEDBACK = {"feedback_type": "triage_quality", "target": {"kind": "run", "run_id": "run_1"},
            "value": {"correct": False, "severity": "critical"}}


async def test_the_tools_over_streamable_http(settings: Settings,
                                              tenant_factory: Callable[..., str]) -> None:
    tenant = tenant_factory()
    async with serve(settings) as served:
        await start_run(served.client.workspace(tenant, "prod"))
        wid = f"{tenant}.prod"
        async with Client(_http(served.mcp, served.key(tenant))) as mcp:
            tools = {t.name: t for t in (await mcp.list_tools()).tools}
            assert set(tools) == {"give_feedback", "list_runs", "read_feedback", "list_queues",
                          "install_queue", "archive_queue", "queue_progress", "next_item",
                          "submit_item", "skip_item", "why", "calibration", "queue_pair",
                          "queue_agreement"}
            schema = tools["give_feedback"].input_schema
            assert set(schema["required"]) == {"workspace_id", "feedback_type", "target",
                                               "value"}
            assert "command_id" in schema["properties"]

            given = await mcp.call_tool("give_feedback", {"workspace_id": wid, **FEEDBACK,
                                                          "command_id": "mcp_1"})
            outcome = _frame(given)
            assert not given.is_error
            assert outcome["type"] == "outcome" and outcome["command_id"] == "mcp_1"
            assert outcome["outcome"]["type"] == "recorded"
            again = await mcp.call_tool("give_feedback", {"workspace_id": wid, **FEEDBACK,
                                                          "command_id": "mcp_1"})
            assert _frame(again) == outcome  # the same command id: the same outcome
            # Without a command id: recorded again, a new event.
            other = _frame(await mcp.call_tool("give_feedback",
                                               {"workspace_id": wid, **FEEDBACK}))
            assert other["outcome"]["id"] != outcome["outcome"]["id"]

            # The same answers as REST: the REST command route on the same service.
            rest = await served.service.execute(served.key(tenant), wid, {
                "type": "command", "command_id": "mcp_1",
                "command": {"type": "give_feedback", **FEEDBACK}})
            assert rest.model_dump(mode="json")["type"] == "outcome"

            runs = _frame(await mcp.call_tool("list_runs", {"workspace_id": wid}))
            assert [r["id"] for r in runs["runs"]] == ["run_1"]
            feedback = _frame(await mcp.call_tool("read_feedback", {
                "workspace_id": wid, "participant": "user:ada"}))
            ids = [e["event_id"] for e in feedback["feedback"]]
            assert outcome["outcome"]["id"] in ids and other["outcome"]["id"] in ids
            assert {e["actor"]["id"] for e in feedback["feedback"]} == {"ada"}


async def test_tool_errors_are_the_same_error_frames(settings: Settings,
                                                     tenant_factory: Callable[..., str]) -> None:
    tenant = tenant_factory()
    async with serve(settings) as served:
        await start_run(served.client.workspace(tenant, "prod"))
        wid = f"{tenant}.prod"
        async with Client(_http(served.mcp, served.key(tenant))) as mcp:
            cases: list[tuple[dict[str, Any], str, str | None]] = [
                ({**FEEDBACK, "value": {"correct": "maybe", "severity": "high"}},
                 "validation_failed", "command.value.correct"),
                ({**FEEDBACK, "feedback_type": "nope"}, "validation_failed",
                 "command.feedback_type"),
                ({**FEEDBACK, "target": {"kind": "run", "run_id": "run_missing"}},
                 "not_found", None),
                ({**FEEDBACK, "target": {"kind": "planet"}}, "validation_failed", None),
            ]
            for arguments, code, path in cases:
                result = await mcp.call_tool("give_feedback", {"workspace_id": wid,
                                                               **arguments, "command_id": "e"})
                assert result.is_error
                error = _frame(result)
                assert error["type"] == "error" and error["command_id"] == "e"
                assert error["error"]["code"] == code, error
                if path:
                    assert path in [f["path"] for f in error["error"]["fields"]]
            bad_id = _frame(await mcp.call_tool("list_runs", {"workspace_id": f"{tenant}."}))
            assert bad_id["error"]["code"] == "validation_failed"
            bad_limit = _frame(await mcp.call_tool("read_feedback", {"workspace_id": wid,
                                                                     "limit": 0}))
            assert bad_limit["error"]["code"] == "validation_failed"


async def test_a_key_of_another_tenant_or_none_is_refused_by_every_tool(
        settings: Settings, tenant_factory: Callable[..., str]) -> None:
    tenant, other = tenant_factory(), tenant_factory()
    async with serve(settings) as served:
        await start_run(served.client.workspace(tenant, "prod"))
        calls = [("give_feedback", {"workspace_id": f"{tenant}.prod", **FEEDBACK}),
                 ("list_runs", {"workspace_id": f"{tenant}.prod"}),
                 ("read_feedback", {"workspace_id": f"{tenant}.prod"})]
        for token, code in ((served.key(other), "forbidden"), (None, "unauthorized"),
                            ("fsk_nonsense", "unauthorized")):
            async with Client(_http(served.mcp, token)) as mcp:
                for name, arguments in calls:
                    result = await mcp.call_tool(name, arguments)
                    assert result.is_error, (name, token)
                    assert _frame(result)["error"]["code"] == code, (name, token)
        assert await served.client.workspace(tenant, "prod").feedback() == []


async def test_the_tools_over_stdio_act_with_the_processes_key(
        settings: Settings, tenant_factory: Callable[..., str],
        client_factory: Callable[..., Any]) -> None:
    tenant, other = tenant_factory(), tenant_factory()
    client: StreamsClient = client_factory()
    await start_run(client.workspace(tenant, "prod"))
    keys = KeyStore(Runtime(settings))
    keys.start()
    try:
        _key, token = keys.create(tenant, UserActor(id="grace"), {"give_feedback", "read"})
    finally:
        keys.close()
    env = {**settings.child_env(), "STREAMS_MCP_KEY": token,
           "STREAMS_FEEDBACK_MODULES": "streams.examples.ops",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    server = StdioServerParameters(command=sys.executable, args=["-m", "streams", "mcp"],
                                   env=env, cwd=str(REPO))
    async with Client(server, read_timeout_seconds=60) as mcp:
        assert {t.name for t in (await mcp.list_tools()).tools} == {
            "give_feedback", "list_runs", "read_feedback", "list_queues", "install_queue",
            "archive_queue", "queue_progress", "next_item", "submit_item", "skip_item", "why",
            "calibration", "queue_pair", "queue_agreement"}
        given = _frame(await mcp.call_tool("give_feedback", {
            "workspace_id": f"{tenant}.prod", **FEEDBACK, "command_id": "stdio_1"}))
        assert given["type"] == "outcome", given
        runs = _frame(await mcp.call_tool("list_runs", {"workspace_id": f"{tenant}.prod"}))
        assert [r["id"] for r in runs["runs"]] == ["run_1"]
        refused = await mcp.call_tool("read_feedback", {"workspace_id": f"{other}.prod"})
        assert refused.is_error and _frame(refused)["error"]["code"] == "forbidden"
    [fb] = await client.workspace(tenant, "prod").feedback()
    assert fb.event_id == given["outcome"]["id"]
    assert fb.actor.participant == "user:grace"  # the key's actor, never the client's say
