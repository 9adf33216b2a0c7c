"""The WebSocket stream and the MCP tools on `streams serve`'s app (beside REST)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from streams.extras import needs
from streams.runtime.client.commands import CommandService
from streams.runtime.jobs.queues import QueueService

with needs("serve", "streams serve"):
    from fastapi import FastAPI
    from mcp.server.mcpserver import MCPServer

    from streams.surfaces.http.mcp import mount_mcp
    from streams.surfaces.http.stream import add_stream_route

__all__ = ["install_realtime"]


def install_realtime(app: FastAPI, service: Callable[[], CommandService],
                     queues: Callable[[], QueueService]) -> MCPServer:
    """Add the stream route and mount the MCP tools (streamable HTTP at /mcp/) on `app`,
    over the services `service()` and `queues()` return; the app's lifespan then also runs
    the MCP session manager."""
    add_stream_route(app, service)
    mcp = mount_mcp(app, service, queues)
    inner: Callable[[Any], AbstractAsyncContextManager[Any]] = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(instance: Any) -> AsyncIterator[Any]:
        async with mcp.session_manager.run(), inner(instance) as state:
            yield state

    app.router.lifespan_context = lifespan
    return mcp
