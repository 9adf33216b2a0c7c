"""The WebSocket stream with a real websockets client against the service on the broker:
commands and their answers, every frame error, auth, the subscription and its resume, and
the slow client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from streams.core.events import FeedbackGiven
from streams.settings import Settings
from tests.integration.served import command, serve, start_run


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _recv(ws: ClientConnection, within: float = 30.0) -> dict[str, Any]:
    async with asyncio.timeout(within):
        return dict(json.loads(await ws.recv()))


async def _answer(ws: ClientConnection, frame: Any) -> dict[str, Any]:
    await ws.send(frame if isinstance(frame, str | bytes) else json.dumps(frame))
    return await _recv(ws)


async def test_commands_answer_outcomes_and_a_repeated_command_id_the_same_one(
        settings: Settings, tenant_factory: Callable[..., str]) -> None:
    tenant = tenant_factory()
    async with serve(settings) as served:
        await start_run(served.client.workspace(tenant, "prod"))
        async with connect(f"{served.ws}/v1/workspaces/{tenant}.prod/stream",
                           additional_headers=_auth(served.key(tenant))) as ws:
            first = await _answer(ws, command("fb_1"))
            assert first["type"] == "outcome" and first["command_id"] == "fb_1", first
            assert first["outcome"]["type"] == "recorded"
            assert set(first["outcome"]["seq"]) == {"partition", "offset"}
            assert await _answer(ws, command("fb_1")) == first
            # Pipelined commands: each answered with its own id and seq.
            for i in range(50):
                await ws.send(json.dumps(command(f"p_{i}")))
            answers = [await _recv(ws) for _ in range(50)]
        assert {a["command_id"] for a in answers} == {f"p_{i}" for i in range(50)}
        assert {a["type"] for a in answers} == {"outcome"}
        assert len({a["outcome"]["id"] for a in answers}) == 50
        given = [e for e in await served.client.workspace(tenant, "prod").read()
                 if isinstance(e.event, FeedbackGiven)]
        assert len(given) == 51
        assert {e.actor.participant for e in given} == {"user:ada"}


@pytest.mark.parametrize(("frame", "code", "path"), [
    ("{not json", "validation_failed", "$"),
    ("[1, 2]", "validation_failed", "$"),
    (b"\x00binary", "validation_failed", "$"),
    ({"type": "shout"}, "validation_failed", "type"),
    ({"type": "command", "command": {"type": "delete_everything"}}, "validation_failed",
     "command.type"),
    (command(correct="maybe"), "validation_failed", "command.value.correct"),
    (command(run_id="run_missing"), "not_found", None),
    ({"type": "command", "command_id": "x" * 200, "command": command()["command"]},
     "validation_failed", "command_id"),
    ("x" * (1024 * 1024 + 1), "too_large", None),
    ({"type": "ack", "seq": {"partition": 0, "offset": 0}}, "validation_failed", "type"),
    ({"type": "subscribe", "from": {"99": 0}}, "validation_failed", None),
    ({"type": "subscribe", "from": "middle"}, "validation_failed", None),
])
async def test_every_malformed_frame_gets_an_error_frame_and_the_connection_stays_open(
        settings: Settings, tenant_factory: Callable[..., str], frame: Any, code: str,
        path: str | None) -> None:
    tenant = tenant_factory()
    async with serve(settings) as served:
        await start_run(served.client.workspace(tenant, "prod"))
        async with connect(f"{served.ws}/v1/workspaces/{tenant}.prod/stream",
                           additional_headers=_auth(served.key(tenant)),
                           max_size=4 * 1024 * 1024) as ws:
            error = await _answer(ws, frame)
            assert error["type"] == "error", error
            assert error["error"]["code"] == code, error
            assert error["error"]["message"]
            if path is not None:
                assert path in [f["path"] for f in error["error"]["fields"]], error
            # Still open, still serving.
            assert (await _answer(ws, command("after")))["type"] == "outcome"


async def test_subscribing_twice_and_acking_an_undelivered_seq_are_errors(
        settings: Settings, tenant_factory: Callable[..., str]) -> None:
    tenant = tenant_factory()
    async with serve(settings) as served, connect(
            f"{served.ws}/v1/workspaces/{tenant}.prod/stream",
            additional_headers=_auth(served.key(tenant))) as ws:
        assert (await _answer(ws, {"type": "subscribe"}))["type"] == "subscribed"
        twice = await _answer(ws, {"type": "subscribe"})
        assert twice["error"]["code"] == "validation_failed"
        wrong = await _answer(ws, {"type": "ack", "seq": {"partition": 0, "offset": 5}})
        assert wrong["error"]["code"] == "validation_failed"
        assert "not delivered" in wrong["error"]["message"]


async def test_keys_missing_revoked_or_of_another_tenant_are_refused(
        settings: Settings, tenant_factory: Callable[..., str]) -> None:
    tenant, other = tenant_factory(), tenant_factory()
    async with serve(settings) as served:
        url = f"{served.ws}/v1/workspaces/{tenant}.prod/stream"
        # Another tenant's key: forbidden, then closed.
        async with connect(url, additional_headers=_auth(served.key(other))) as ws:
            error = await _recv(ws)
            assert error["error"]["code"] == "forbidden"
            with pytest.raises(ConnectionClosed) as closed:
                await _recv(ws)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        # No key at all, and a first frame that is not an auth frame: unauthorized.
        async with connect(url) as ws:
            await ws.send(json.dumps(command()))
            assert (await _recv(ws))["error"]["code"] == "unauthorized"
        # The key in an auth frame (for clients that cannot set headers) works.
        await start_run(served.client.workspace(tenant, "prod"))
        async with connect(url) as ws:
            await ws.send(json.dumps({"type": "auth", "token": served.key(tenant)}))
            assert (await _answer(ws, command()))["type"] == "outcome"
        # A read-only key may subscribe but not give feedback.
        reader = served.key(tenant, capabilities=frozenset({"read"}))
        async with connect(url, additional_headers=_auth(reader)) as ws:
            refused = await _answer(ws, command("ro"))
            assert refused["error"]["code"] == "forbidden"
            assert refused["command_id"] == "ro"
            assert (await _answer(ws, {"type": "subscribe"}))["type"] == "subscribed"
        # A key revoked while connected stops working on its next frame.
        token = served.key(tenant)
        async with connect(url, additional_headers=_auth(token)) as ws:
            assert (await _answer(ws, command("before")))["type"] == "outcome"
            served.keys.revoke(token.split("_")[1])
            assert (await _answer(ws, command("after")))["error"]["code"] == "unauthorized"
        # ... and its subscription ends at the next event, with the reason.
        token = served.key(tenant)
        async with connect(url, additional_headers=_auth(token)) as ws:
            assert (await _answer(ws, {"type": "subscribe"}))["type"] == "subscribed"
            served.keys.revoke(token.split("_")[1])
            await served.client.workspace(tenant, "prod").append(_event(0))
            assert (await _recv(ws))["error"]["code"] == "unauthorized"
            with pytest.raises(ConnectionClosed) as closed:
                await _recv(ws)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


async def test_the_subscription_tails_the_workspace_and_resumes_without_gaps_or_repeats(
        settings: Settings, tenant_factory: Callable[..., str]) -> None:
    tenant = tenant_factory()
    async with serve(settings) as served:
        prod = served.client.workspace(tenant, "prod")
        await start_run(prod)
        token = served.key(tenant)
        url = f"{served.ws}/v1/workspaces/{tenant}.prod/stream"
        async with connect(url, additional_headers=_auth(token)) as ws:
            subscribed = await _answer(ws, {"type": "subscribe", "from": "end"})
            assert subscribed["type"] == "subscribed"
            assert set(subscribed["from"]) == {"0", "1", "2"}
            # Feedback given on this connection and events of another workspace.
            await start_run(served.client.workspace(tenant, "other"), "run_other")
            for i in range(20):
                await ws.send(json.dumps(command(f"c_{i}")))
            frames = [await _recv(ws) for _ in range(40)]
            events = [f for f in frames if f["type"] == "event"]
            outcomes = [f for f in frames if f["type"] == "outcome"]
            assert len(events) == 20 and len(outcomes) == 20
            assert {e["envelope"]["event_id"] for e in events} == {
                o["outcome"]["id"] for o in outcomes}
            assert {e["envelope"]["workspace"] for e in events} == {"prod"}
            # The client processed the first 8 (by partition order) and acks them.
            done = events[:8]
            cursor = {p: o for p, o in subscribed["from"].items()}
            for e in done:
                await ws.send(json.dumps({"type": "ack", "seq": e["seq"]}))
                cursor[str(e["seq"]["partition"])] = e["seq"]["offset"] + 1
        # Disconnected. More happens; then resume from the acknowledged cursor.
        later = [r.id for r in [await prod.append(_event(i)) for i in range(5)]]
        async with connect(url, additional_headers=_auth(token)) as ws:
            again = await _answer(ws, {"type": "subscribe", "from": cursor})
            assert again["from"] == cursor
            expected = {e["envelope"]["event_id"] for e in events[8:]} | set(later)
            got = [await _recv(ws) for _ in range(len(expected))]
            assert {g["envelope"]["event_id"] for g in got} == expected
            with pytest.raises(TimeoutError):  # nothing more: no repeats
                await _recv(ws, within=1.5)


def _event(i: int) -> Any:
    from streams.core.events import AppEvent

    return AppEvent(name="app:later", data={"i": i})


async def test_a_client_that_does_not_ack_is_closed_with_a_reason_after_a_bounded_buffer(
        settings: Settings, tenant_factory: Callable[..., str]) -> None:
    tenant = tenant_factory()
    async with serve(settings.replace(stream_buffer=5, stream_slow_timeout=1.0)) as served:
        prod = served.client.workspace(tenant, "prod")
        for i in range(30):
            await prod.append(_event(i))
        async with connect(f"{served.ws}/v1/workspaces/{tenant}.prod/stream",
                           additional_headers=_auth(served.key(tenant))) as ws:
            await ws.send(json.dumps({"type": "subscribe", "from": "start"}))
            frames: list[dict[str, Any]] = []
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    frames.append(await _recv(ws))
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code == 1008
            assert "too slow" in closed.value.rcvd.reason
            assert "resume from your last acknowledged seq" in closed.value.rcvd.reason
            # The server sent no more than the buffer ahead of the (missing) acks.
            assert [f["type"] for f in frames] == ["subscribed"] + ["event"] * 5


async def test_commands_of_a_client_that_leaves_are_recorded_once_and_a_retry_gets_them(
        settings: Settings, tenant_factory: Callable[..., str]) -> None:
    tenant = tenant_factory()
    async with serve(settings) as served:
        await start_run(served.client.workspace(tenant, "prod"))
        token = served.key(tenant)
        url = f"{served.ws}/v1/workspaces/{tenant}.prod/stream"
        async with connect(url, additional_headers=_auth(token)) as ws:
            for i in range(50):
                await ws.send(json.dumps(command(f"gone_{i}")))
        # Left without reading an answer; the retry of every command answers its outcome
        # and nothing is recorded twice.
        async with connect(url, additional_headers=_auth(token)) as ws:
            for i in range(50):
                await ws.send(json.dumps(command(f"gone_{i}")))
            answers = [await _recv(ws) for _ in range(50)]
        assert {a["type"] for a in answers} == {"outcome"}
        given = [e for e in await served.client.workspace(tenant, "prod").read()
                 if isinstance(e.event, FeedbackGiven)]
        assert len(given) == 50
        assert {e.event_id for e in given} == {a["outcome"]["id"] for a in answers}


@pytest.mark.parametrize("compression", [False, True])
async def test_compression_is_offered_only_when_the_setting_asks(
        settings: Settings, tenant_factory: Callable[..., str], compression: bool) -> None:
    tenant = tenant_factory()
    async with serve(settings.replace(stream_compression=compression)) as served:
        await start_run(served.client.workspace(tenant, "prod"))
        # The websockets client offers permessage-deflate by default; the server takes it up
        # only with STREAMS_STREAM_COMPRESSION on. Commands are answered either way.
        async with connect(f"{served.ws}/v1/workspaces/{tenant}.prod/stream",
                           additional_headers=_auth(served.key(tenant))) as ws:
            assert ws.response is not None
            extensions = ws.response.headers.get("Sec-WebSocket-Extensions") or ""
            assert ("permessage-deflate" in extensions) is compression, extensions
            answer = await _answer(ws, command("fb_1"))
            assert answer["type"] == "outcome", answer
