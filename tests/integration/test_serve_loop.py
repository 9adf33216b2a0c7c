"""Reads never hold `streams serve`'s event loop: a read whose work is held (the
`hold_reads` fault blocks the read's thread, as a slow view query or a large page's JSON
would) leaves /healthz and commands answering, and a read past STREAMS_SERVE_READ_TIMEOUT is
answered 503 unavailable. Ordering, not speed: /healthz answers while the read is still
held, and the read answers only once released."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from streams.core.actors import UserActor
from streams.runtime.client.keys import KeyStore
from streams.runtime.client.workspace import StreamsClient
from tests.integration.conftest import Server
from tests.integration.served import command, start_run


async def _wait_for(path: Path, what: str) -> None:
    for _ in range(3000):
        if await asyncio.to_thread(path.exists):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{what}: {path} never appeared")


async def test_a_held_read_leaves_health_and_commands_answering_and_times_out(
        tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
        serve_factory: Callable[..., Server], keys: KeyStore, tmp_path: Path) -> None:
    tenant = tenant_factory()
    client: StreamsClient = client_factory()
    await start_run(client.workspace(tenant, "prod"))
    _k, token = keys.create(tenant, UserActor(id="ada"), {"give_feedback", "read"})
    state = tmp_path / "held"
    server = serve_factory(STREAMS_SERVE_FAULT="hold_reads", STREAMS_STATE_DIR=str(state))
    base = f"{server.url}/v1/workspaces/{tenant}.prod"
    async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {token}"}
                                 ) as http:
        read = asyncio.create_task(http.get(f"{base}/runs"))
        await _wait_for(state / "reads-held", "the read was never held")
        assert (await http.get(f"{server.url}/healthz")).status_code == 200
        given = await http.post(f"{base}/commands", json=command("loop_1"))
        assert given.status_code == 200, given.text
        assert not read.done(), "the read answered while its work was held"
        (state / "reads-released").touch()
        answered = await read
    assert answered.status_code == 200, answered.text
    assert [r["id"] for r in answered.json()["runs"]] == ["run_1"]

    slow = tmp_path / "slow"
    limited = serve_factory(STREAMS_SERVE_FAULT="hold_reads", STREAMS_STATE_DIR=str(slow),
                            STREAMS_SERVE_READ_TIMEOUT="1")
    try:
        async with httpx.AsyncClient(timeout=60, headers={
                "Authorization": f"Bearer {token}"}) as http:
            late = await http.get(f"{limited.url}/v1/workspaces/{tenant}.prod/feedback")
            assert (slow / "reads-held").exists()  # it was held, and answered meanwhile
            assert (await http.get(f"{limited.url}/healthz")).status_code == 200
    finally:
        (slow / "reads-released").touch()  # lets the abandoned read's thread end
    assert late.status_code == 503, late.text
    assert late.json()["error"]["code"] == "unavailable"
    assert "STREAMS_SERVE_READ_TIMEOUT" in late.json()["error"]["message"]
