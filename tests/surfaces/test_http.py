"""The REST surface's committed OpenAPI document, without a broker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from streams.surfaces.http.app import openapi_document

DOC = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def test_the_committed_openapi_document_is_the_served_one() -> None:
    served = json.loads(json.dumps(openapi_document(), sort_keys=True))
    assert json.loads(DOC.read_text()) == served, (
        "docs/openapi.json differs from the app's OpenAPI document: regenerate it with "
        "`python -m streams serve --print-openapi > docs/openapi.json`")


def test_the_document_names_every_route_and_the_command_frame() -> None:
    document = openapi_document()
    assert set(document["paths"]) == {
        "/v1/workspaces/{workspace_id}/commands", "/v1/workspaces/{workspace_id}/runs",
        "/v1/workspaces/{workspace_id}/runs/{run_id}",
        "/v1/workspaces/{workspace_id}/feedback",
        "/v1/workspaces/{workspace_id}/feedback-types",
        "/v1/workspaces/{workspace_id}/me"}
    post = document["paths"]["/v1/workspaces/{workspace_id}/commands"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/CommandFrame"}
    assert {"401", "403", "404", "409", "413", "422", "503"} <= set(post["responses"])
    schemas = document["components"]["schemas"]
    assert {"CommandFrame", "GiveFeedback", "RunTarget", "OutcomeFrame", "ErrorFrame"} <= set(
        schemas)


def _served() -> Any:
    from fastapi.testclient import TestClient

    from streams.surfaces.http.app import create_app

    # A stand-in for the started service: these requests fail before any call reaches it.
    return TestClient(create_app(service=object()))  # type: ignore[arg-type]


def test_a_query_value_that_does_not_parse_is_an_error_frame_with_its_path() -> None:
    with _served() as client:
        for route, name in (("runs?limit=abc", "limit"), ("runs?limit=0", "limit"),
                            ("feedback?limit=null", "limit")):
            answer = client.get(f"/v1/workspaces/acme.prod/{route}")
            assert answer.status_code == 422, (route, answer.text)
            body = answer.json()
            assert body["type"] == "error"
            assert body["error"]["code"] == "validation_failed"
            assert [f["path"] for f in body["error"]["fields"]] == [f"query.{name}"]
            assert "detail" not in body


def test_an_unknown_route_is_a_not_found_error_frame() -> None:
    with _served() as client:
        answer = client.get("/v1/nowhere")
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] == "not_found"


def test_a_server_still_starting_is_alive_but_not_ready_and_says_why() -> None:
    from fastapi.testclient import TestClient

    from streams.surfaces.http.app import create_app

    # Liveness answers at once; readiness, and every command, wait for the key store.
    with TestClient(create_app()) as client:
        assert client.get("/healthz").status_code == 200
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json() == {"status": "starting", "detail": "reading the key store"}
        refused = client.post("/v1/workspaces/acme.prod/commands", json={})
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "unavailable"


async def test_past_its_limit_the_server_sheds_commands_at_once_with_retry_after() -> None:
    import asyncio

    import httpx

    from streams.core.commands import OutcomeFrame, RecordedOutcome, SeqOut
    from streams.surfaces.http.app import create_app

    release = asyncio.Event()
    both_running = asyncio.Event()
    ran: list[str] = []

    class Held:
        """A started service whose commands wait until released."""

        async def execute(self, _key: object, _workspace: str, body: bytes) -> OutcomeFrame:
            ran.append("run")
            if len(ran) == 2:
                both_running.set()
            await release.wait()
            return OutcomeFrame(command_id=None, outcome=RecordedOutcome(
                seq=SeqOut(partition=0, offset=len(ran)), id=f"evt_{len(ran)}"))

    app = create_app(service=Held(), max_in_flight=2)  # type: ignore[arg-type]
    url = "/v1/workspaces/acme.prod/commands"
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as client:
        held = [asyncio.create_task(client.post(url, json={})) for _ in range(2)]
        await asyncio.wait_for(both_running.wait(), 5)
        shed = await asyncio.wait_for(client.post(url, json={}), 5)
        assert shed.status_code == 503
        assert shed.headers["Retry-After"] == "1"
        assert shed.json()["error"]["code"] == "unavailable"
        assert "STREAMS_SERVE_MAX_IN_FLIGHT" in shed.json()["error"]["message"]
        assert len(ran) == 2  # the shed command never reached the service
        release.set()
        assert [r.status_code for r in await asyncio.gather(*held)] == [200, 200]
        # Room again once they are done.
        after = await client.post(url, json={})
        assert after.status_code == 200
        assert app.state.admission.running == 0
        assert app.state.admission.shed == 1
