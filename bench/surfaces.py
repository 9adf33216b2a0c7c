"""give_feedback through every surface of `streams serve`, with real clients, against the floor.

    export KAFKA_BOOTSTRAP_SERVERS=... SCHEMA_REGISTRY_URL=...
    .venv/bin/python -m bench.surfaces --commands 5000

1. Seeds a fresh tenant (a topic prefix of its own) with `--runs` runs, makes an API key and
   starts `python -m streams serve` on a free loopback port.
2. WebSocket (the `websockets` client): one connection, `--commands` commands pipelined with at
   most `--window` unanswered at a time; each command's latency is from its send to its
   answer.
3. REST (httpx): the same number of commands from `--rest-clients` concurrent clients, one
   kept-alive connection each.
4. MCP (the official SDK's client, streamable HTTP): `--mcp-commands` give_feedback tool calls
   from `--mcp-clients` concurrent sessions.
5. The floor: the same feedback (same types, targets, command ids) given through the
   workspace handle directly in this process, `--window` calls at a time: what the service
   does per command, without a transport. Ratios are surface / floor commands per second.

`--without-ids` adds the WebSocket and the floor without command ids: no idempotency ledger
(its claim and outcome records per command), so what the transport carries when the service
does only the append; answers then cannot be told apart, so only the WebSocket's rate is
measured.

Every answer is checked: anything but a recorded outcome fails the run. The load generator
shares the machine's cores with the server and the broker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from websockets.asyncio.client import connect

from bench.served import costed, start_serve, until_ready
from streams.adapters.kafka.admin import TenantAdmin
from streams.core.actors import UserActor
from streams.core.events import AppEvent, RunStarted
from streams.core.targets import RunTarget
from streams.examples.ops import TriageQuality
from streams.runtime.client.keys import KeyStore
from streams.runtime.client.workspace import StreamsClient, Workspace
from streams.runtime.root import Runtime
from streams.settings import Settings

TENANT = "bench"

Result = dict[str, float]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def _summary(latencies: list[float], elapsed: float) -> Result:
    return {"per_s": len(latencies) / elapsed, "p50_ms": _pct(latencies, 0.5),
            "p99_ms": _pct(latencies, 0.99)}


def _command(command_id: str, run_id: str) -> dict[str, Any]:
    return {"type": "give_feedback", "feedback_type": "triage_quality",
            "target": {"kind": "run", "run_id": run_id},
            "value": {"correct": True, "severity": "high"}, "command_id": command_id}


def _frame(command_id: str, run_id: str) -> dict[str, Any]:
    command = _command(command_id, run_id)
    del command["command_id"]
    return {"type": "command", "command_id": command_id, "command": command}


async def _seed(client: StreamsClient, runs: int) -> list[str]:
    ws = client.workspace(TENANT, "prod")
    ids = []
    for i in range(runs):
        spike = await ws.append(AppEvent(name="ops:error_spike", data={"n": i}))
        await ws.append(RunStarted(run_id=f"run_{i}", rule="ops:error-spike",
                                   action="triage", firing_id=f"fir_{i}"),
                        correlation_id=spike.id, causation_id=spike.id)
        ids.append(f"run_{i}")
    return ids


async def websocket(base: str, token: str, runs: list[str], commands: int,
                    window: int, tag: str = "ws") -> Result:
    """One connection, commands pipelined, at most `window` unanswered."""
    sent: dict[str, float] = {}
    latencies: list[float] = []
    room = asyncio.Semaphore(window)
    async with connect(f"{base}/v1/workspaces/{TENANT}.prod/stream",
                       additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        async def receive() -> None:
            while len(latencies) < commands:
                answer = json.loads(await ws.recv())
                if answer.get("type") != "outcome":
                    raise SystemExit(f"a command failed: {answer}")
                latencies.append(time.perf_counter() - sent.pop(answer["command_id"]))
                room.release()

        started = time.perf_counter()
        reader = asyncio.create_task(receive())
        for n in range(commands):
            await room.acquire()
            command_id = f"{tag}_{n}"
            sent[command_id] = time.perf_counter()
            await ws.send(json.dumps(_frame(command_id, runs[n % len(runs)])))
        await reader
        return _summary(latencies, time.perf_counter() - started)


async def websocket_without_ids(base: str, token: str, runs: list[str], commands: int,
                                window: int) -> Result:
    """The same, with no command ids (no idempotency ledger): answers are not told apart, so
    only the rate is measured."""
    answered = 0
    room = asyncio.Semaphore(window)
    async with connect(f"{base}/v1/workspaces/{TENANT}.prod/stream",
                       additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        async def receive() -> None:
            nonlocal answered
            while answered < commands:
                answer = json.loads(await ws.recv())
                if answer.get("type") != "outcome":
                    raise SystemExit(f"a command failed: {answer}")
                answered += 1
                room.release()

        started = time.perf_counter()
        reader = asyncio.create_task(receive())
        for n in range(commands):
            await room.acquire()
            frame = _frame("", runs[n % len(runs)])
            del frame["command_id"]
            await ws.send(json.dumps(frame))
        await reader
        return {"per_s": commands / (time.perf_counter() - started), "p50_ms": float("nan"),
                "p99_ms": float("nan")}


async def floor_without_ids(ws: Workspace, runs: list[str], commands: int,
                            window: int) -> Result:
    """The floor with no command ids."""
    latencies: list[float] = []
    room = asyncio.Semaphore(window)

    async def one(n: int) -> None:
        async with room:
            began = time.perf_counter()
            await ws.give_feedback(TriageQuality(correct=True, severity="high"),
                                   on=RunTarget(run_id=runs[n % len(runs)]))
            latencies.append(time.perf_counter() - began)

    started = time.perf_counter()
    await asyncio.gather(*(one(n) for n in range(commands)))
    return _summary(latencies, time.perf_counter() - started)


async def rest(base: str, token: str, runs: list[str], commands: int, clients: int) -> Result:
    """`clients` concurrent HTTP clients, one command at a time each."""
    latencies: list[float] = []
    todo = iter(range(commands))
    url = f"{base}/v1/workspaces/{TENANT}.prod/commands"

    async def one_client() -> None:
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                     timeout=60) as http:
            for n in todo:
                began = time.perf_counter()
                answer = await http.post(url, json=_frame(f"rest_{n}", runs[n % len(runs)]))
                if answer.status_code != 200:
                    raise SystemExit(f"command {n} failed: {answer.text}")
                latencies.append(time.perf_counter() - began)

    started = time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(clients)))
    return _summary(latencies, time.perf_counter() - started)


async def mcp(base: str, token: str, runs: list[str], commands: int, clients: int) -> Result:
    """`clients` concurrent MCP sessions over streamable HTTP, one tool call at a time each."""
    latencies: list[float] = []
    todo = iter(range(commands))

    async def one_client() -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
        async with Client(streamable_http_client(f"{base}/mcp/", http_client=http)) as session:
            for n in todo:
                began = time.perf_counter()
                result = await session.call_tool(
                    "give_feedback", {"workspace_id": f"{TENANT}.prod",
                                      **_command(f"mcp_{n}", runs[n % len(runs)])})
                if result.is_error:
                    raise SystemExit(f"tool call {n} failed: {result.content}")
                latencies.append(time.perf_counter() - began)

    started = time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(clients)))
    return _summary(latencies, time.perf_counter() - started)


async def floor(ws: Workspace, runs: list[str], commands: int, window: int,
                tag: str = "floor") -> Result:
    """The same feedback through the workspace handle, `window` calls in flight."""
    latencies: list[float] = []
    room = asyncio.Semaphore(window)

    async def one(n: int) -> None:
        async with room:
            began = time.perf_counter()
            await ws.give_feedback(TriageQuality(correct=True, severity="high"),
                                   on=RunTarget(run_id=runs[n % len(runs)]),
                                   command_id=f"{tag}_{n}")
            latencies.append(time.perf_counter() - began)

    started = time.perf_counter()
    await asyncio.gather(*(one(n) for n in range(commands)))
    return _summary(latencies, time.perf_counter() - started)


async def _warm(name: str, call: Callable[[], Awaitable[Result]]) -> None:
    # A first small round per surface: connections, the service's index partitions, the
    # ledger's first claims; not measured.
    try:
        await call()
    except BaseException as exc:
        raise SystemExit(f"warming {name} failed: {exc}") from exc


async def main_async(args: argparse.Namespace) -> None:
    settings = Settings.from_env(topic_prefix=f"bs{uuid.uuid4().hex[:8]}")
    TenantAdmin(settings).create_tenant(TENANT)
    seeding = StreamsClient(Runtime(settings))
    runs = await _seed(seeding, args.runs)
    seeding.close()
    keys = KeyStore(Runtime(settings))
    keys.start()
    _key, token = keys.create(TENANT, UserActor(id="bench"), {"give_feedback", "read"})
    keys.close()

    port = _free_port()
    server = await start_serve(settings, port)
    base = f"127.0.0.1:{port}"
    try:
        await until_ready(f"http://{base}")
        results: dict[str, Result] = {}
        handle = StreamsClient(Runtime(settings))
        ws = handle.workspace(TENANT, "prod", actor=UserActor(id="floor"))
        await _warm("floor", lambda: floor(ws, runs, 500, args.window, "floor_warm"))
        n, pid = args.commands, server.pid
        results["floor (handle)"] = await costed(None, n, floor(ws, runs, n, args.window))
        if args.without_ids:
            results["floor, no ids"] = await costed(
                None, n, floor_without_ids(ws, runs, n, args.window))
        handle.close()
        await _warm("websocket", lambda: websocket(f"ws://{base}", token, runs, 500,
                                                   args.window, "ws_warm"))
        results["websocket (1 conn)"] = await costed(
            pid, n, costed(None, n, websocket(f"ws://{base}", token, runs, n, args.window),
                           key="client_us"))
        if args.without_ids:
            results["websocket, no ids"] = await costed(pid, n, websocket_without_ids(
                f"ws://{base}", token, runs, n, args.window))
        results[f"rest ({args.rest_clients} clients)"] = await costed(
            pid, n, costed(None, n, rest(f"http://{base}", token, runs, n, args.rest_clients),
                           key="client_us"))
        results[f"mcp ({args.mcp_clients} sessions)"] = await costed(
            pid, args.mcp_commands, costed(
                None, args.mcp_commands,
                mcp(f"http://{base}", token, runs, args.mcp_commands, args.mcp_clients),
                key="client_us"))
    finally:
        server.terminate()  # the server this run started, by its handle
        await server.wait()

    floors = {name: result["per_s"] for name, result in results.items()
              if name.startswith("floor")}
    print(f"give_feedback commands, {args.commands} per surface (MCP {args.mcp_commands}), "
          f"command ids on, {args.runs} runs")

    def rate_of(name: str) -> float:
        # A surface without command ids is compared with the floor without them.
        return floors["floor, no ids" if "no ids" in name else "floor (handle)"]

    print("CPU µs per command: the server process's for a surface, this process's for a "
          "floor; client µs: this process's (the real clients') for a surface")
    print(f"{'surface':<24}{'commands/s':>12}{'p50 ms':>10}{'p99 ms':>10}{'vs floor':>10}"
          f"{'CPU µs':>9}{'client µs':>11}")
    for name, result in results.items():
        client = result.get("client_us")
        print(f"{name:<24}{result['per_s']:>12.0f}{result['p50_ms']:>10.1f}"
              f"{result['p99_ms']:>10.1f}{result['per_s'] / rate_of(name):>10.2f}"
              f"{result['cpu_us']:>9.0f}{'' if client is None else f'{client:.0f}':>11}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--commands", type=int, default=5000)
    parser.add_argument("--window", type=int, default=500,
                        help="unanswered commands on the WebSocket, and the floor's calls "
                        "in flight")
    parser.add_argument("--rest-clients", type=int, default=50)
    parser.add_argument("--mcp-commands", type=int, default=1000)
    parser.add_argument("--mcp-clients", type=int, default=10)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--without-ids", action="store_true",
                        help="also measure the WebSocket and the floor without command ids "
                        "(no idempotency ledger; rates only for the WebSocket)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
