"""`streams serve`'s app served on loopback for a test, on the real broker.

`serve(settings)` starts uvicorn in the test's event loop on a free 127.0.0.1 port with the
service's app (REST, the WebSocket stream, MCP at /mcp/) over a CommandService (a
StreamsClient and a started KeyStore); `Served.key(tenant)` makes an API key.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import uvicorn

from streams.core.actors import UserActor
from streams.core.events import AppEvent, RunStarted
from streams.examples import ops  # noqa: F401  (registers triage_quality)
from streams.runtime.client.commands import CommandService
from streams.runtime.client.keys import KeyStore
from streams.runtime.client.workspace import StreamsClient, Workspace
from streams.runtime.root import Runtime
from streams.settings import Settings
from streams.surfaces.http.app import create_app
from tests.conftest import _free_port as free_port


@dataclass
class Served:
    """A running service: its base URLs, key store and client."""

    port: int
    keys: KeyStore
    client: StreamsClient
    service: CommandService

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def mcp(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp/"

    def key(self, tenant: str, actor: str = "ada",
            capabilities: frozenset[str] = frozenset({"give_feedback", "read"})) -> str:
        """A new API key of `tenant` acting as user `actor`."""
        _key, token = self.keys.create(tenant, UserActor(id=actor), set(capabilities))
        return token


@contextlib.asynccontextmanager
async def serve(settings: Settings) -> AsyncIterator[Served]:
    """The surfaces on a free loopback port, stopped (by this process) on exit."""
    runtime = Runtime(settings)
    client = StreamsClient(runtime)
    keys = KeyStore(runtime)
    await asyncio.to_thread(keys.start)
    service = CommandService(client, keys)
    port = free_port()
    # The service's own app: REST, the stream and the MCP mount (run by its lifespan).
    server = uvicorn.Server(uvicorn.Config(create_app(service=service, settings=settings),
                                           host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on",
                                           # as `streams serve` runs it
                                           ws_per_message_deflate=settings.stream_compression))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.02)
        yield Served(port, keys, client, service)
    finally:
        server.should_exit = True
        await task
        keys.close()
        client.close()


async def start_run(ws: Workspace, run_id: str = "run_1") -> str:
    """A run in the workspace (an app event and the run_started of its chain); its chain id."""
    spike = await ws.append(AppEvent(name="ops:error_spike", data={}))
    await ws.append(RunStarted(run_id=run_id, rule="ops:error-spike", action="triage",
                               firing_id="fir_1"), correlation_id=spike.id,
                    causation_id=spike.id)
    return spike.id


async def post_shed_aware(http: httpx.AsyncClient, url: str, frame: dict[str, object],
                          tries: int = 30) -> httpx.Response:
    """POST a command frame as docs/api.md asks a client to: a 503 with Retry-After (the
    server shed it: too many commands at once, or its loop running late) is sent again, with
    the same command id, after the Retry-After seconds."""
    for _ in range(tries - 1):
        answer = await http.post(url, json=frame)
        if answer.status_code != 503 or "Retry-After" not in answer.headers:
            return answer
        await asyncio.sleep(float(answer.headers["Retry-After"]))
    return await http.post(url, json=frame)


def command(command_id: str | None = "fb_1", run_id: str = "run_1",
            **value: object) -> dict[str, object]:
    """A give_feedback command frame on a run."""
    return {"type": "command", "command_id": command_id,
            "command": {"type": "give_feedback", "feedback_type": "triage_quality",
                        "target": {"kind": "run", "run_id": run_id},
                        "value": value or {"correct": True, "severity": "high"}}}
