"""The REST surface's give_feedback commands: throughput, latency, and the floor.

    export KAFKA_BOOTSTRAP_SERVERS=... SCHEMA_REGISTRY_URL=...
    .venv/bin/python -m bench.rest_commands --commands 5000 --clients 50 --rate 500 --seconds 10

1. Seeds a fresh tenant (a topic prefix of its own) with `--runs` runs and starts
   `python -m streams serve` on a free loopback port, with a key of the tenant.
2. Throughput, in `--rounds` rounds alternating with the HTTP ceiling: `--commands`
   commands, each with its own command id, from `--clients` concurrent HTTP clients (one
   connection each, kept alive): commands/s, p50, p99 and the server process's CPU µs per
   command; the ceiling is the same clients posting the same frames to an empty FastAPI
   endpoint under uvicorn, up beside the service (what HTTP alone costs here). Medians.
3. Latency at a fixed rate: `--rate` commands/s, sent on schedule (open loop) for
   `--seconds`: p50, p99 and the rate achieved (by vegeta with `--loadgen vegeta`).
4. The floors: the same feedback given directly through the workspace handle in this
   process, `--clients` calls at a time, with command ids (what the service does per command
   after HTTP and auth) and without (the plain append). Ratios are service / floor, and
   the server CPU per request of the ceiling / that of the service.

5. Overload (`--overload F`, default 3): `F` times the measured throughput offered open loop
   for `--overload-seconds` (default 20). Past `STREAMS_SERVE_MAX_IN_FLIGHT` the server sheds
   with 503 and `Retry-After`: the run prints what was offered, admitted and shed (and what
   the load generator could not send, all its `--overload-connections` busy), the
   admitted commands' p50/p99, and checks in the tenant's feedback that every admitted
   command was recorded exactly once and no shed one was (each carries its id as its note).

Every command is checked: an answer other than 200 (or, under load, 503 `unavailable` with
`Retry-After`) fails the run. The load generator runs on the same machine as the server and
the broker, so it competes with them for the cores: the overload phase prints the rate it
actually managed to offer.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench.served import costed, until_ready
from streams.adapters.kafka.admin import TenantAdmin
from streams.core.actors import UserActor
from streams.core.events import AppEvent, RunStarted
from streams.core.targets import RunTarget
from streams.examples.ops import TriageQuality
from streams.runtime.client.keys import KeyStore
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.root import Runtime
from streams.settings import Settings

TENANT = "bench"
REPO = Path(__file__).resolve().parents[1]


def _say(line: str) -> None:
    print(f"[rest_commands] {line}", file=sys.stderr, flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def _seed(client: StreamsClient, runs: int) -> list[str]:
    ws = client.workspace(TENANT, "prod")
    ids = []
    for i in range(runs):
        spike = await ws.append(AppEvent(name="ops:error_spike", data={"n": i}))
        run_id = f"run_{i}"
        await ws.append(RunStarted(run_id=run_id, rule="ops:error-spike", action="triage",
                                   firing_id=f"fir_{i}"), correlation_id=spike.id,
                        causation_id=spike.id)
        ids.append(run_id)
    return ids


RETRIES = {"transport": 0}
SHED = {"closed_loop": 0}  # closed-loop commands shed and sent again after Retry-After


async def _post(http: httpx.AsyncClient, url: str, frame: dict[str, Any]) -> bool:
    """One command: True when recorded, False when the server shed it (503 `unavailable`
    with Retry-After). A connection error is retried with the same command id (it records
    once), and counted; any other answer ends the run."""
    for attempt in range(5):
        try:
            answer = await http.post(url, json=frame)
        except httpx.TransportError:
            if attempt == 4:
                raise
            RETRIES["transport"] += 1
            continue
        if answer.status_code == 503 and "Retry-After" in answer.headers:
            return False
        if answer.status_code != 200:
            raise SystemExit(f"command {frame['command_id']} failed: {answer.text}")
        return True
    raise AssertionError("unreachable")


def _frame(command_id: str, run_id: str, note: str | None = None) -> dict[str, Any]:
    value: dict[str, Any] = {"correct": True, "severity": "high"}
    if note is not None:
        value["note"] = note
    return {"type": "command", "command_id": command_id,
            "command": {"type": "give_feedback", "feedback_type": "triage_quality",
                        "target": {"kind": "run", "run_id": run_id}, "value": value}}


async def _throughput(url: str, token: str, runs: list[str], commands: int,
                      clients: int) -> dict[str, float]:
    latencies: list[float] = []
    tag = uuid.uuid4().hex[:6]  # new command ids each phase
    queue = iter(range(commands))
    headers = {"Authorization": f"Bearer {token}"}

    async def client() -> None:
        async with httpx.AsyncClient(headers=headers, timeout=60) as http:
            for n in queue:
                started = time.perf_counter()
                frame = _frame(f"tp_{tag}_{n}", runs[n % len(runs)])
                while not await _post(http, url, frame):  # shed: again after Retry-After
                    SHED["closed_loop"] += 1
                    await asyncio.sleep(1.0)
                latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - started
    return {"per_s": commands / elapsed, "p50_ms": _pct(latencies, 0.5),
            "p99_ms": _pct(latencies, 0.99)}


async def _fixed_rate(url: str, token: str, runs: list[str], rate: float,
                      seconds: float, tag: str = "fr", connections: int = 200,
                      ) -> dict[str, Any]:
    """`rate` commands/s on schedule (open loop) for `seconds`: what was sent, admitted and
    shed, and the admitted commands' latency. Each command's note is its id.

    At most `connections` commands are in flight: a command due while all are busy is not
    sent and is counted (`unsent`), not queued in the client. A queue in the load generator
    would be measured as the server's latency, and a client pool thousands of requests deep
    spends its own CPU on the queue (httpcore scans it per request) and stops offering load."""
    latencies: list[float] = []
    admitted: list[str] = []
    shed: list[str] = []
    in_flight = peak = unsent = 0
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(headers=headers, timeout=60, limits=limits) as http:
        async def one(n: int) -> None:
            nonlocal in_flight
            command_id = f"{tag}_{n}"
            started = time.perf_counter()
            try:
                if await _post(http, url, _frame(command_id, runs[n % len(runs)], command_id)):
                    latencies.append(time.perf_counter() - started)
                    admitted.append(command_id)
                else:
                    shed.append(command_id)
            finally:
                in_flight -= 1

        total = int(rate * seconds)
        start = time.perf_counter()
        tasks = []
        for n in range(total):
            due = start + n / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if in_flight >= connections:
                unsent += 1
                continue
            in_flight += 1
            peak = max(peak, in_flight)
            tasks.append(asyncio.create_task(one(n)))
        offered = time.perf_counter() - start
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    sent = total - unsent
    return {"sent_per_s": sent / (elapsed if elapsed > 0 else 1),
            "offered_per_s": total / (offered if offered > 0 else 1),
            "unsent_no_free_connection": unsent, "peak_in_flight": peak,
            "admitted": len(admitted), "shed": len(shed),
            "admitted_per_s": len(admitted) / (elapsed if elapsed > 0 else 1),
            "p50_ms": _pct(latencies, 0.5) if latencies else None,
            "p99_ms": _pct(latencies, 0.99) if latencies else None,
            "admitted_ids": admitted, "shed_ids": shed}


VEGETA = "github.com/tsenart/vegeta/v12@v12.12.0"


def _vegeta() -> str:
    """The vegeta binary: VEGETA, else on PATH, else built into .stack/cache/bin with `go`."""
    found = os.environ.get("VEGETA") or shutil.which("vegeta")
    cached = REPO / ".stack" / "cache" / "bin" / "vegeta"
    if found:
        return found
    if not cached.exists():
        if shutil.which("go") is None:
            raise SystemExit(f"--loadgen vegeta needs vegeta ({VEGETA}): set VEGETA to its "
                             "path, put it on PATH, or install Go so this bench can build it")
        _say(f"building {VEGETA} into {cached.parent}")
        subprocess.run(["go", "install", VEGETA], check=True,
                       env={**os.environ, "GOBIN": str(cached.parent)})
    return str(cached)


def _vegeta_rate(url: str, token: str, runs: list[str], rate: float, seconds: float,
                 tag: str) -> dict[str, Any]:
    """`_fixed_rate` with vegeta (Go) as the load generator: the same commands, on schedule,
    each its own request, no cap on connections. A Python generator on these two cores ran out
    of CPU before the server did (a whole core while the server used half of one), so its
    latencies were its own. Admitted commands are told by their outcome frames' command
    ids; every other command sent was shed (counted by status)."""
    total = int(rate * seconds)
    headers = {"Authorization": [f"Bearer {token}"], "Content-Type": ["application/json"]}
    lines = []
    for n in range(total):
        command_id = f"{tag}_{n}"
        body = json.dumps(_frame(command_id, runs[n % len(runs)], command_id)).encode()
        lines.append(json.dumps({"method": "POST", "url": url, "header": headers,
                                 "body": base64.b64encode(body).decode()}))
    attack = subprocess.run(
        [_vegeta(), "attack", "-format=json", "-lazy", f"-rate={rate:.0f}/s",
         f"-duration={seconds:g}s", "-timeout=60s"],
        input=("\n".join(lines) + "\n").encode(), capture_output=True, check=True)
    encoded = subprocess.run([_vegeta(), "encode", "--to", "json"], input=attack.stdout,
                             capture_output=True, check=True)
    latencies: list[float] = []
    admitted: list[str] = []
    codes: dict[int, int] = {}
    errors: dict[str, int] = {}
    for line in encoded.stdout.splitlines():
        result = json.loads(line)
        if result.get("error") == "no targets to attack":
            continue  # the pacer's last tick or two past rate x seconds: nothing was sent
        code = int(result["code"])
        codes[code] = codes.get(code, 0) + 1
        if code == 200:
            frame = json.loads(base64.b64decode(result["body"]))
            admitted.append(frame["command_id"])
            latencies.append(result["latency"] / 1e9)
        elif code == 0:  # no answer: connection refused, timed out, out of file descriptors
            errors.setdefault(str(result.get("error"))[:200], 0)
            errors[str(result.get("error"))[:200]] += 1
        elif code != 503:
            raise SystemExit(f"a command failed under overload: {code} {result.get('error')} "
                             f"{base64.b64decode(result.get('body') or b'')[:300]!r}")
    sent = sum(codes.values())
    taken = set(admitted)
    # Every answered command not admitted was shed (any other answer ended the run). With
    # unanswered ones (which may have been recorded) the shed ones cannot be told apart.
    shed = [] if errors else [f"{tag}_{n}" for n in range(sent) if f"{tag}_{n}" not in taken]
    return {"sent": sent, "offered_per_s": round(rate, 1), "admitted": len(admitted),
            "shed": codes.get(503, 0), "admitted_per_s": len(admitted) / seconds,
            "p50_ms": _pct(latencies, 0.5) if latencies else None,
            "p99_ms": _pct(latencies, 0.99) if latencies else None,
            "max_ms": max(latencies) * 1000 if latencies else None,
            "unanswered": codes.get(0, 0), "unanswered_errors": errors,
            "admitted_ids": admitted, "shed_ids": shed, "loadgen": "vegeta"}


async def _recorded_once(client: StreamsClient, admitted: list[str],
                         shed: list[str]) -> dict[str, int]:
    """How the overload phase's commands landed: admitted ones recorded once, shed ones not
    at all (read back from the tenant's feedback by their notes)."""
    ws = client.workspace(TENANT, "prod", actor=UserActor(id="check"))
    ours = set(admitted) | set(shed)
    notes: dict[str, int] = {}
    for envelope in await ws.feedback(feedback_type="triage_quality"):
        note = envelope.data["value"].get("note")
        if note in ours:
            notes[note] = notes.get(note, 0) + 1
    return {"admitted_recorded_once": sum(1 for i in admitted if notes.get(i) == 1),
            "admitted_not_recorded": sum(1 for i in admitted if i not in notes),
            "recorded_more_than_once": sum(1 for n in notes.values() if n > 1),
            "shed_but_recorded": sum(1 for i in shed if i in notes)}


async def _floor(client: StreamsClient, runs: list[str], commands: int, clients: int,
                 with_ids: bool) -> dict[str, float]:
    ws = client.workspace(TENANT, "prod", actor=UserActor(id="floor"))
    latencies: list[float] = []
    queue = iter(range(commands))
    tag = uuid.uuid4().hex[:6]

    async def caller() -> None:
        for n in queue:
            started = time.perf_counter()
            await ws.give_feedback(TriageQuality(correct=True, severity="high"),
                                   on=RunTarget(run_id=runs[n % len(runs)]),
                                   command_id=f"fl_{tag}_{n}" if with_ids else None)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(clients)))
    elapsed = time.perf_counter() - started
    return {"per_s": commands / elapsed, "p50_ms": _pct(latencies, 0.5),
            "p99_ms": _pct(latencies, 0.99)}


_EMPTY_ENDPOINT = """
import sys
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
app = FastAPI()
@app.post("/v1/workspaces/{workspace_id}/commands")
async def command(workspace_id: str, request: Request) -> JSONResponse:
    body = await request.body()
    return JSONResponse({"type": "outcome", "size": len(body)})
@app.get("/readyz")
async def readyz() -> dict[str, str]:
    return {"status": "ok"}
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning",
            access_log=False)
"""


def _spawn_empty_endpoint(port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", _EMPTY_ENDPOINT, str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _median(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(r[key] for r in rounds), 1) for key in rounds[0]}


def _start_server(settings: Settings, port: int, workers: int = 1,
                  ) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "streams", "serve", "--port", str(port), "--workers",
         str(workers)],
        env=settings.child_env(STREAMS_FEEDBACK_MODULES="streams.examples.ops"),
        cwd=str(REPO), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    settings = Settings.from_env(topic_prefix=f"bench{uuid.uuid4().hex[:6]}")
    admin = TenantAdmin(settings)
    admin.create_tenant(TENANT)
    runtime = Runtime(settings)
    client = StreamsClient(runtime)
    keys = KeyStore(runtime)
    server: subprocess.Popen[bytes] | None = None
    ceiling_server: subprocess.Popen[bytes] | None = None
    try:
        runs = await _seed(client, args.runs)
        keys.start()
        _key, token = keys.create(TENANT, UserActor(id="ada"), {"give_feedback"})
        port = _free_port()
        server = _start_server(settings, port, args.workers)
        base = f"http://127.0.0.1:{port}"
        await until_ready(base)
        url = f"{base}/v1/workspaces/{TENANT}.prod/commands"
        # The HTTP ceiling: an empty endpoint, up beside the service, measured in rounds
        # alternating with the service's (the machine's load moves rates between rounds).
        ceiling_port = _free_port()
        ceiling_server = _spawn_empty_endpoint(ceiling_port)
        ceiling_url = f"http://127.0.0.1:{ceiling_port}/v1/workspaces/{TENANT}.prod/commands"
        await until_ready(f"http://127.0.0.1:{ceiling_port}")
        _say("warming up")
        await _throughput(url, token, runs, min(500, args.commands), args.clients)  # warm up
        await _throughput(ceiling_url, "x", runs, min(500, args.commands), args.clients)
        rest_rounds: list[dict[str, float]] = []
        ceiling_rounds: list[dict[str, float]] = []
        for r in range(args.rounds):
            _say(f"round {r + 1}: {args.commands} commands from {args.clients} clients, to "
                 "the service and to the empty endpoint")
            measure = _throughput(url, token, runs, args.commands, args.clients)
            # Several worker processes: their CPU is not the parent's, so it is left out.
            rest_rounds.append(await costed(server.pid, args.commands, measure, "server_cpu_us")
                               if args.workers == 1 else await measure)
            ceiling_rounds.append(await costed(ceiling_server.pid, args.commands, _throughput(
                ceiling_url, "x", runs, args.commands, args.clients), "server_cpu_us"))
            cpu = rest_rounds[-1].get("server_cpu_us")
            _say(f"  service {rest_rounds[-1]['per_s']:,.0f}/s "
                 f"({'?' if cpu is None else f'{cpu:,.0f}'} µs server CPU per command), "
                 f"empty endpoint {ceiling_rounds[-1]['per_s']:,.0f}/s "
                 f"({ceiling_rounds[-1]['server_cpu_us']:,.0f} µs)")
        rest, ceiling = _median(rest_rounds), _median(ceiling_rounds)
        _say(f"fixed rate {args.rate:g}/s for {args.seconds:g} s")
        # With --loadgen vegeta the fixed rate is offered by vegeta too: the Python generator
        # cannot offer 500/s here beside the server (it ran out of connections and CPU).
        rate = await asyncio.to_thread(
            _vegeta_rate, url, token, runs, args.rate, args.seconds,
            f"fr{uuid.uuid4().hex[:6]}") if args.loadgen == "vegeta" else \
            await _fixed_rate(url, token, runs, args.rate, args.seconds)
        for key in ("admitted_ids", "shed_ids"):
            rate.pop(key)
        overload: dict[str, Any] = {}
        if args.overload > 0:
            offered = args.overload * rest["per_s"]
            _say(f"overload: {offered:,.0f}/s offered for {args.overload_seconds:g} s")
            tag = f"ov{uuid.uuid4().hex[:6]}"
            overload = await asyncio.to_thread(
                _vegeta_rate, url, token, runs, offered, args.overload_seconds, tag) \
                if args.loadgen == "vegeta" else await _fixed_rate(
                    url, token, runs, offered, args.overload_seconds, tag=tag,
                    connections=args.overload_connections)
            _say(f"  {overload['admitted']} admitted (p50 {overload['p50_ms']} ms, p99 "
                 f"{overload['p99_ms']} ms), {overload['shed']} shed, "
                 f"{overload.get('unsent_no_free_connection', 0)} unsent; checking what was "
                 "recorded")
            check = await _recorded_once(client, overload.pop("admitted_ids"),
                                         overload.pop("shed_ids"))
            overload = {"factor": args.overload, "asked_per_s": round(offered, 1),
                        **overload, **check}
        _say("floors: the handle with and without command ids")
        floor_ids = await _floor(client, runs, args.commands, args.clients, True)
        floor_plain = await _floor(client, runs, args.commands, args.clients, False)
    finally:
        for process in (server, ceiling_server):  # the servers this run started
            if process is not None:
                process.terminate()
                process.wait(30)
        keys.close()
        client.close()
        admin.delete_tenant(TENANT)
    return {
        "commands": args.commands, "clients": args.clients, "workers": args.workers,
        "rounds": args.rounds,
        "rest": rest, "rest_rounds": rest_rounds,
        "rest_at_fixed_rate": {"rate": args.rate, **rate},
        "rest_overloaded": overload,
        "floor_handle_with_command_ids": floor_ids, "floor_handle_plain": floor_plain,
        "http_ceiling_empty_endpoint": ceiling, "http_ceiling_rounds": ceiling_rounds,
        "ratio_rest_to_http_ceiling": round(rest["per_s"] / ceiling["per_s"], 3),
        "ratio_rounds_rest_to_http_ceiling": [
            round(a["per_s"] / b["per_s"], 3) for a, b in zip(rest_rounds, ceiling_rounds,
                                                              strict=True)],
        "ratio_server_cpu_http_ceiling_to_rest": round(
            ceiling["server_cpu_us"] / rest["server_cpu_us"], 3)
        if "server_cpu_us" in rest else None,
        "ratio_rest_to_handle_with_ids": round(rest["per_s"] / floor_ids["per_s"], 3),
        "ratio_rest_to_handle_plain": round(rest["per_s"] / floor_plain["per_s"], 3),
        "http_retries_after_connection_errors": RETRIES["transport"],
        "closed_loop_commands_shed_and_sent_again": SHED["closed_loop"],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commands", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=1, help="streams serve --workers")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of the service's and the empty endpoint's throughput, "
                        "alternating (medians are reported)")
    parser.add_argument("--overload", type=float, default=3.0,
                        help="offer this many times the measured throughput (0: skip)")
    parser.add_argument("--overload-seconds", type=float, default=20.0)
    parser.add_argument("--loadgen", choices=("python", "vegeta"), default="python",
                        help="the fixed-rate and overload phases' load generator: this process "
                        f"(httpx), or vegeta ({VEGETA}; built with go when missing)")
    parser.add_argument("--overload-connections", type=int, default=400,
                        help="the overload phase's connections: a command due while all "
                        "are busy is counted unsent, not queued")
    result = asyncio.run(main(parser.parse_args()))
    print(json.dumps(result, indent=2))
