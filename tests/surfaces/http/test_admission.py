"""ShedCommands and Admission without a server: what is counted, what is shed and how."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from streams.surfaces.http.admission import Admission, ShedCommands, is_command

COMMAND = {"type": "http", "method": "POST", "path": "/v1/workspaces/acme.prod/commands"}


class _Held:
    """An ASGI app that answers 200 once released, and notes what it was handed."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.seen: list[str] = []
        self.entered = asyncio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.seen.append(scope["path"])
        self.entered.set()
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


async def _call(app: ShedCommands, scope: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    sent: list[dict[str, Any]] = []
    reads = 0

    async def receive() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent, reads


def test_only_posts_to_a_workspace_s_commands_are_commands() -> None:
    assert is_command(COMMAND)
    assert not is_command({**COMMAND, "method": "GET"})
    assert not is_command({**COMMAND, "path": "/v1/workspaces/acme.prod/runs"})
    assert not is_command({"type": "websocket", "path": COMMAND["path"]})
    assert not is_command({**COMMAND, "path": "/mcp/commands"})


async def test_past_the_limit_a_command_is_answered_at_once_and_its_body_never_read() -> None:
    inner = _Held()
    admission = Admission(limit=1)
    app = ShedCommands(inner, admission)
    first = asyncio.create_task(_call(app, COMMAND))
    await asyncio.wait_for(inner.entered.wait(), 5)
    assert admission.running == 1
    sent, reads = await asyncio.wait_for(_call(app, COMMAND), 5)
    assert reads == 0 and inner.seen == [COMMAND["path"]]
    start, body = sent
    assert start["status"] == 503
    headers = dict(start["headers"])
    assert headers[b"retry-after"] == b"1"
    frame = json.loads(body["body"])
    assert int(headers[b"content-length"]) == len(body["body"])
    assert frame["type"] == "error" and frame["error"]["code"] == "unavailable"
    assert "STREAMS_SERVE_MAX_IN_FLIGHT" in frame["error"]["message"]
    assert "same command_id" in frame["error"]["message"]
    # Reads are not commands: they pass while the limit is reached, and are not counted.
    read = asyncio.create_task(_call(app, {**COMMAND, "method": "GET",
                                           "path": "/v1/workspaces/acme.prod/runs"}))
    inner.entered.clear()
    await asyncio.wait_for(inner.entered.wait(), 5)
    assert admission.running == 1 and admission.shed == 1
    inner.release.set()
    await asyncio.gather(first, read)
    assert admission.running == 0


async def test_a_command_whose_app_fails_is_counted_out() -> None:
    async def failing(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("boom")

    admission = Admission(limit=1)
    app = ShedCommands(failing, admission)
    for _ in range(3):
        with contextlib.suppress(RuntimeError):
            await _call(app, COMMAND)
    assert admission.running == 0 and admission.shed == 0
