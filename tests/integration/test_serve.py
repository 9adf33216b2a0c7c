"""`streams serve` as real processes on the real broker, driven by real HTTP clients."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from streams.core.actors import UserActor
from streams.core.events import AppEvent, FeedbackGiven, RunStarted
from streams.runtime.client.keys import KeyStore
from streams.runtime.client.workspace import StreamsClient, Workspace
from streams.settings import Settings
from tests.conftest import _free_port as free_port
from tests.integration.conftest import Server
from tests.integration.served import post_shed_aware


async def start_run(ws: Workspace, run_id: str = "run_1") -> None:
    spike = await ws.append(AppEvent(name="ops:error_spike", data={"service": "api"}))
    await ws.append(RunStarted(run_id=run_id, rule="ops:error-spike", action="triage",
                               firing_id="fir_1"), correlation_id=spike.id,
                    causation_id=spike.id)


def command(command_id: str | None = "fb_1", run_id: str = "run_1",
            **value: Any) -> dict[str, Any]:
    frame: dict[str, Any] = {
        "type": "command",
        "command": {"type": "give_feedback", "feedback_type": "triage_quality",
                    "target": {"kind": "run", "run_id": run_id},
                    "value": value or {"correct": True, "severity": "high"}}}
    if command_id is not None:
        frame["command_id"] = command_id
    return frame


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def feedback_events(client: StreamsClient, tenant: str) -> list[str]:
    return [e.event_id for e in await client.workspace(tenant, "prod").read()
            if isinstance(e.event, FeedbackGiven)]


async def test_every_error_code_over_rest(
        tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
        serve_factory: Callable[..., Server], keys: KeyStore) -> None:
    acme, globex = tenant_factory(), tenant_factory()
    client: StreamsClient = client_factory()
    await start_run(client.workspace(acme, "prod"))
    _k, token = keys.create(acme, UserActor(id="ada"), {"give_feedback", "read"})
    _k, reader = keys.create(acme, UserActor(id="rita"), {"read"})
    _k, other = keys.create(globex, UserActor(id="gus"), {"give_feedback", "read"})
    server = serve_factory()
    url = f"{server.url}/v1/workspaces/{acme}.prod/commands"

    async with httpx.AsyncClient(timeout=60) as http:
        async def post(body: Any, headers: dict[str, str] | None = None,
                       raw: bytes | None = None) -> httpx.Response:
            return await http.post(url, headers=headers if headers is not None else auth(token),
                                   content=raw if raw is not None else json.dumps(body))

        ok = await post(command())
        assert ok.status_code == 200, ok.text
        outcome = ok.json()
        assert outcome["type"] == "outcome" and outcome["command_id"] == "fb_1"
        assert outcome["outcome"]["type"] == "recorded"
        assert outcome["outcome"]["id"].startswith("evt_")
        assert set(outcome["outcome"]["seq"]) == {"partition", "offset"}

        def code(response: httpx.Response) -> tuple[int, str]:
            body = response.json()
            assert body["type"] == "error", body
            return response.status_code, body["error"]["code"]

        invalid = await post(command("fb_2", correct="maybe", severity="high"))
        assert code(invalid) == (422, "validation_failed")
        assert [f["path"] for f in invalid.json()["error"]["fields"]] == ["command.value.correct"]
        assert code(await post(None, raw=b'{"type": "command", ')) == (422, "validation_failed")
        unknown = await post({**command("fb_3"), "command": {**command()["command"],
                                                              "type": "delete_run"}})
        assert code(unknown) == (422, "validation_failed")
        assert "give_feedback" in unknown.json()["error"]["message"]
        assert code(await post(command("fb_4", run_id="run_nope"))) == (404, "not_found")
        assert code(await post(command(), headers={})) == (401, "unauthorized")
        assert code(await post(command(), headers=auth("fsk_nope"))) == (401, "unauthorized")
        assert code(await post(command(), headers=auth(other))) == (403, "forbidden")
        assert code(await post(command("fb_5"), headers=auth(reader))) == (403, "forbidden")
        assert code(await post(command(correct=False, severity="low"))) == (409, "conflict")
        huge = await post(command("fb_6", correct=True, severity="high",
                                  note="x" * (1024 * 1024 + 10)))
        assert code(huge) == (413, "too_large")
        oversized_record = await post(command("fb_7", correct=True, severity="high",
                                              note="x" * 950_000))
        assert code(oversized_record) == (413, "too_large")

        # A key of another tenant is forbidden on every route.
        base = f"{server.url}/v1/workspaces/{acme}.prod"
        for path in ("/runs", "/runs/run_1", "/feedback", "/feedback-types"):
            assert code(await http.get(base + path, headers=auth(other))) == (403, "forbidden")
            assert code(await http.get(base + path)) == (401, "unauthorized")

    # unavailable: a server whose broker is unreachable answers 503 (and keeps trying)
    down = serve_factory(503, KAFKA_BOOTSTRAP_SERVERS=f"127.0.0.1:{free_port()}",
                         STREAMS_FEEDBACK_TIMEOUT="3", STREAMS_ADMIN_TIMEOUT="3")
    async with httpx.AsyncClient(timeout=60) as http:
        answer = await http.post(f"{down.url}/v1/workspaces/{acme}.prod/commands",
                                 headers=auth(token), json=command("fb_8"))
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "unavailable"
    assert await feedback_events(client, acme) == [outcome["outcome"]["id"]]


async def test_read_routes(
        tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
        serve_factory: Callable[..., Server], keys: KeyStore) -> None:
    tenant = tenant_factory()
    client: StreamsClient = client_factory()
    ws = client.workspace(tenant, "prod")
    for n in range(3):
        await start_run(ws, f"run_{n}")
    _k, token = keys.create(tenant, UserActor(id="ada"), {"give_feedback", "read"})
    server = serve_factory()
    base = f"{server.url}/v1/workspaces/{tenant}.prod"
    async with httpx.AsyncClient(timeout=60, headers=auth(token)) as http:
        first = (await http.get(f"{base}/runs", params={"rule": "ops:error-spike",
                                                        "limit": 2})).json()
        assert [r["id"] for r in first["runs"]] == ["run_2", "run_1"]
        assert first["next_cursor"]
        rest = (await http.get(f"{base}/runs", params={
            "rule": "ops:error-spike", "limit": 2, "cursor": first["next_cursor"]})).json()
        assert [r["id"] for r in rest["runs"]] == ["run_0"] and rest["next_cursor"] is None
        bad = await http.get(f"{base}/runs", params={"cursor": "not-a-cursor"})
        assert bad.status_code == 422 and "invalid cursor" in bad.text
        one = (await http.get(f"{base}/runs/run_1")).json()
        assert one["run"]["event"]["run_id"] == "run_1"
        assert (await http.get(f"{base}/runs/run_x")).status_code == 404
        given = await http.post(f"{base}/commands", json=command(run_id="run_1"))
        assert given.status_code == 200
        found = (await http.get(f"{base}/feedback", params={
            "feedback_type": "triage_quality", "participant": "user:ada"})).json()
        assert [f["event_id"] for f in found["feedback"]] == [given.json()["outcome"]["id"]]
        assert (await http.get(f"{base}/feedback", params={"participant": "user:bob"})
                ).json()["feedback"] == []
        types = (await http.get(f"{base}/feedback-types")).json()["feedback_types"]
        triage = next(t for t in types if t["name"] == "triage_quality")
        assert triage["targets"] == ["run"]
        assert "severity" in triage["json_schema"]["properties"]
        assert {c["name"] for c in triage["score_configs"]} >= {"triage_quality.correct"}


async def test_retries_record_once_across_two_servers_and_a_revoked_key_stops_on_both(
        tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
        serve_factory: Callable[..., Server], keys: KeyStore) -> None:
    tenant = tenant_factory()
    client: StreamsClient = client_factory()
    await start_run(client.workspace(tenant, "prod"))
    key, token = keys.create(tenant, UserActor(id="ada"), {"give_feedback", "read"})
    servers = [serve_factory(), serve_factory()]
    async with httpx.AsyncClient(timeout=60, headers=auth(token)) as http:
        async def send(n: int, command_id: str = "retry_me") -> httpx.Response:
            server = servers[n % 2]
            return await post_shed_aware(
                http, f"{server.url}/v1/workspaces/{tenant}.prod/commands", command(command_id))

        answers = await asyncio.gather(*(send(n) for n in range(100)))
        assert {a.status_code for a in answers} == {200}, {a.text for a in answers}
        assert len({a.text for a in answers}) == 1
        assert await feedback_events(client, tenant) == [answers[0].json()["outcome"]["id"]]

        keys.revoke(key.key_id)
        started = time.monotonic()
        refused: set[int] = set()
        while len(refused) < 2:
            assert time.monotonic() - started < 10, "a server still accepts a revoked key"
            for n in range(2):
                response = await send(n, f"after_revoke_{n}")
                if response.status_code == 401:
                    refused.add(n)
            await asyncio.sleep(0.1)


async def test_a_server_killed_between_produce_and_answer_records_once_on_retry(
        tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
        serve_factory: Callable[..., Server], keys: KeyStore) -> None:
    tenant = tenant_factory()
    client: StreamsClient = client_factory()
    await start_run(client.workspace(tenant, "prod"))
    _k, token = keys.create(tenant, UserActor(id="ada"), {"give_feedback"})
    doomed = serve_factory(STREAMS_SERVE_FAULT="kill_after_produce")
    url = f"/v1/workspaces/{tenant}.prod/commands"
    async with httpx.AsyncClient(timeout=60, headers=auth(token)) as http:
        with pytest.raises(httpx.HTTPError):
            await http.post(doomed.url + url, json=command("crash_1"))
        assert doomed.proc.wait(timeout=30) == -9
        [landed] = await feedback_events(client, tenant)  # produced before the kill

        survivor = serve_factory()
        retried = await http.post(survivor.url + url, json=command("crash_1"))
    assert retried.status_code == 200, retried.text
    assert retried.json()["outcome"]["id"] == landed
    assert await feedback_events(client, tenant) == [landed]


async def test_several_worker_processes_behind_one_port_record_a_command_once(
        tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
        serve_factory: Callable[..., Server], keys: KeyStore) -> None:
    tenant = tenant_factory()
    client: StreamsClient = client_factory()
    await start_run(client.workspace(tenant, "prod"))
    _k, token = keys.create(tenant, UserActor(id="ada"), {"give_feedback"})
    server = serve_factory(200, "--workers", "2")
    # Until both workers have read the key store, one of them answers 503: wait for 20
    # fresh connections in a row to find a ready worker.
    deadline = time.monotonic() + 60
    ready = 0
    while ready < 20:
        assert time.monotonic() < deadline, "the workers did not all become ready"
        async with httpx.AsyncClient(timeout=5) as fresh:
            ok = (await fresh.get(f"{server.url}/readyz")).status_code == 200
        ready = ready + 1 if ok else 0
    async with httpx.AsyncClient(timeout=60, headers=auth(token)) as http:
        async def send() -> httpx.Response:
            # a connection each, so the kernel spreads them over the workers
            async with httpx.AsyncClient(timeout=60, headers=auth(token)) as own:
                return await post_shed_aware(
                    own, f"{server.url}/v1/workspaces/{tenant}.prod/commands", command("w_1"))

        answers = await asyncio.gather(*(send() for _ in range(40)))
        assert {a.status_code for a in answers} == {200}, {a.text for a in answers}
        assert len({a.text for a in answers}) == 1
        assert (await http.get(f"{server.url}/readyz")).status_code == 200
    assert await feedback_events(client, tenant) == [answers[0].json()["outcome"]["id"]]


async def test_why_over_rest_and_mcp_for_a_module_rule_and_an_installed_rule(
        settings: Settings, tenant_factory: Callable[..., str],
        client_factory: Callable[..., Any], serve_factory: Callable[..., Server],
        keys: KeyStore) -> None:
    from streams.runtime.jobs.rules import Rulebook
    from streams.runtime.root import Runtime

    tenant = tenant_factory()
    client: StreamsClient = client_factory()
    ws = client.workspace(tenant, "prod")
    spike = await ws.append(AppEvent(name="ops:error_spike", data={"service": "api"}))
    serviceless = await ws.append(AppEvent(name="ops:error_spike", data={}))
    runtime = Runtime(settings)
    try:  # a rule installed as data: the server reads the tenant's rulebook
        await Rulebook(runtime).install(
            tenant, "prod", {"name": "t:spikes", "when": {"on": "ops:error_spike",
                                                          "sample": 0.5},
                             "then": {"action": "noop"}}, actions={"noop"})
    finally:
        runtime.close()
    _k, token = keys.create(tenant, UserActor(id="ada"), {"read"})
    server = serve_factory(200, STREAMS_RULE_MODULES="streams.examples.ops_rules")
    base = f"{server.url}/v1/workspaces/{tenant}.prod"
    async with httpx.AsyncClient(timeout=60, headers=auth(token)) as http:
        counted = (await http.get(f"{base}/rules/ops:error-spike/why/{spike.id}")).json()
        assert (counted["outcome"], counted["judged"]) == ("counting", False)
        left = (await http.get(f"{base}/rules/ops:error-spike/why/{serviceless.id}")).json()
        assert left["outcome"] == "filtered_out" and "service" in left["detail"]
        watched = (await http.get(f"{base}/rules/ops:wrong-triage/why/{spike.id}")).json()
        assert watched["outcome"] == "not_watched"
        installed = (await http.get(f"{base}/rules/t:spikes/why/{spike.id}")).json()
        assert installed["outcome"] in ("sampled_out", "undecided"), installed
        assert installed["rule"] == "t:spikes"
        unknown = await http.get(f"{base}/rules/t:nothing/why/{spike.id}")
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "not_found"
        assert "t:nothing" in unknown.json()["error"]["message"]
        missing = await http.get(f"{base}/rules/ops:error-spike/why/evt_nothing")
        assert missing.status_code == 404 and "evt_nothing" in missing.text
    from mcp import Client

    from tests.integration.test_mcp import _frame, _http

    async with Client(_http(f"{server.url}/mcp/", token)) as mcp:
        answer = _frame(await mcp.call_tool("why", {"workspace_id": f"{tenant}.prod",
                                                    "rule": "ops:error-spike",
                                                    "event_id": spike.id}))
        assert answer == counted


@pytest.mark.parametrize(("args", "env", "compressed"), [
    ((), {}, False),
    ((), {"STREAMS_STREAM_COMPRESSION": "true"}, True),
    (("--workers", "2"), {"STREAMS_STREAM_COMPRESSION": "true"}, True),
])
async def test_streams_serve_offers_websocket_compression_only_when_asked(
        tenant_factory: Callable[..., str], serve_factory: Callable[..., Server],
        keys: KeyStore, args: tuple[str, ...], env: dict[str, str],
        compressed: bool) -> None:
    from websockets.asyncio.client import connect

    tenant = tenant_factory()
    _k, token = keys.create(tenant, UserActor(id="ada"), {"read"})
    server = serve_factory(200, *args, **env)
    ws_url = server.url.replace("http://", "ws://")
    # Each worker process of `--workers 2` reads the setting: a few connections reach both.
    for _ in range(1 if not args else 6):
        async with connect(f"{ws_url}/v1/workspaces/{tenant}.prod/stream",
                           additional_headers=auth(token)) as ws:
            assert ws.response is not None
            offered = ws.response.headers.get("Sec-WebSocket-Extensions") or ""
            assert ("permessage-deflate" in offered) is compressed, offered
