"""`streams serve` past its admission limit, on the real broker: bursts of concurrent commands
well beyond `STREAMS_SERVE_MAX_IN_FLIGHT` are partly shed with 503 `unavailable` and a
`Retry-After`, at once and without running; every admitted command is recorded exactly once,
no shed one is recorded, and a shed command retried with its command id records once.

Correctness only: the latency of admitted commands under 3x their capacity is a figure of
`bench/rest_commands.py --overload`, not something a test asserts on a shared machine."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx

from streams.core.actors import UserActor
from streams.settings import Settings
from tests.integration.served import command, serve, start_run

LIMIT = 4  # commands one server runs at once in this test
BURSTS = 3
PER_BURST = 60


async def _send(http: httpx.AsyncClient, url: str, command_id: str) -> httpx.Response:
    frame = command(command_id, correct=True, severity="high", note=command_id)
    return await http.post(url, json=frame)


async def test_past_its_limit_the_server_sheds_and_records_exactly_what_it_admitted(
    settings: Settings, tenant_factory: Callable[..., str],
) -> None:
    tenant = tenant_factory()
    async with serve(settings.replace(serve_max_in_flight=LIMIT)) as served:
        await start_run(served.client.workspace(tenant, "prod"))
        url = f"http://127.0.0.1:{served.port}/v1/workspaces/{tenant}.prod/commands"
        headers = {"Authorization": f"Bearer {served.key(tenant)}"}
        limits = httpx.Limits(max_connections=PER_BURST, max_keepalive_connections=PER_BURST)
        admitted: set[str] = set()
        shed: set[str] = set()
        async with httpx.AsyncClient(headers=headers, timeout=60, limits=limits) as http:
            for burst in range(BURSTS):
                ids = [f"ov_{burst}_{n}" for n in range(PER_BURST)]
                answers = await asyncio.gather(*(_send(http, url, i) for i in ids))
                for command_id, answer in zip(ids, answers, strict=True):
                    body: dict[str, Any] = answer.json()
                    if answer.status_code == 200:
                        assert body["outcome"]["type"] == "recorded", body
                        admitted.add(command_id)
                        continue
                    assert answer.status_code == 503, (answer.status_code, body)
                    assert body["type"] == "error", body
                    assert body["error"]["code"] == "unavailable", body
                    assert "STREAMS_SERVE_MAX_IN_FLIGHT" in body["error"]["message"] or \
                        "STREAMS_SERVE_MAX_LAG" in body["error"]["message"], body
                    assert answer.headers.get("Retry-After") == "1", answer.headers
                    shed.add(command_id)
            assert shed, f"{BURSTS} bursts of {PER_BURST} at a limit of {LIMIT} shed nothing: " \
                         "the test did not overload the server"
            assert admitted, "nothing was admitted"

            ws = served.client.workspace(tenant, "prod", actor=UserActor(id="ada"))
            recorded = Counter(str(e.data["value"]["note"]) for e in await ws.feedback())
            assert set(recorded) == admitted, (
                f"{len(set(recorded) - admitted)} recorded but not admitted, "
                f"{len(admitted - set(recorded))} admitted but not recorded")
            assert set(recorded.values()) == {1}, "an admitted command recorded twice"

            # Retried with their command ids (one at a time, under the limit), the shed
            # commands record once each; the admitted ones, retried, answer their first outcome.
            for command_id in sorted(shed) + sorted(admitted)[:5]:
                answer = await _send(http, url, command_id)
                assert answer.status_code == 200, answer.text
        recorded = Counter(str(e.data["value"]["note"]) for e in await ws.feedback())
        assert recorded == Counter({i: 1 for i in admitted | shed})
    print(f"{BURSTS} bursts of {PER_BURST} commands at a limit of {LIMIT}: {len(admitted)} "
          f"admitted, {len(shed)} shed with 503 and Retry-After; each admitted and each "
          f"retried command recorded once, no shed one before its retry")
