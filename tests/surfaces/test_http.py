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
        "/v1/workspaces/{workspace_id}/firings/{firing_id}",
        "/v1/workspaces/{workspace_id}/chains/{correlation_id}",
        "/v1/workspaces/{workspace_id}/rules/{rule}/why/{event_id}",
        "/v1/workspaces/{workspace_id}/feedback",
        "/v1/workspaces/{workspace_id}/feedback-types",
        "/v1/workspaces/{workspace_id}/calibration",
        "/v1/workspaces/{workspace_id}/me", "/v1/workspaces/{workspace_id}/queues",
        "/v1/workspaces/{workspace_id}/queues/{name}/archive",
        "/v1/workspaces/{workspace_id}/queues/{name}/next",
        "/v1/workspaces/{workspace_id}/queues/{name}/progress",
        "/v1/workspaces/{workspace_id}/queues/{name}/pair/{item}",
        "/v1/workspaces/{workspace_id}/queues/{name}/agreement",
        "/v1/workspaces/{workspace_id}/queues/{name}/submit",
        "/v1/workspaces/{workspace_id}/queues/{name}/skip"}
    submit = document["paths"]["/v1/workspaces/{workspace_id}/queues/{name}/submit"]["post"]
    assert submit["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/QueueSubmit"}
    install = document["paths"]["/v1/workspaces/{workspace_id}/queues"]["post"]
    assert install["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/QueueDefinition"}
    # 201 installed, 200 a repeat, 409 another definition under a live name.
    assert {"200", "201", "409", "422"} <= set(install["responses"])
    post = document["paths"]["/v1/workspaces/{workspace_id}/commands"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/CommandFrame"}
    assert {"401", "403", "404", "409", "413", "422", "503"} <= set(post["responses"])
    schemas = document["components"]["schemas"]
    assert {"CommandFrame", "GiveFeedback", "RunTarget", "OutcomeFrame", "ErrorFrame",
            "QueueDefinition", "QueueOut"} <= set(schemas)


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
    await app.state.admission.close()


async def test_while_its_event_loop_runs_late_the_server_sheds_commands_at_once() -> None:
    import asyncio
    import time

    import httpx

    from streams.core.commands import OutcomeFrame, RecordedOutcome, SeqOut
    from streams.surfaces.http.app import create_app

    ran: list[str] = []

    class Quick:
        """A started service whose commands are recorded at once."""

        async def execute(self, _key: object, _workspace: str, body: bytes) -> OutcomeFrame:
            ran.append("run")
            return OutcomeFrame(command_id=None, outcome=RecordedOutcome(
                seq=SeqOut(partition=0, offset=len(ran)), id=f"evt_{len(ran)}"))

    app = create_app(service=Quick(), max_in_flight=100)  # type: ignore[arg-type]
    admission = app.state.admission
    admission.max_lag = 0.5
    url = "/v1/workspaces/acme.prod/commands"
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as client:
        assert (await client.post(url, json={})).status_code == 200  # starts the ticker
        await asyncio.sleep(admission.TICK / 2)  # the ticker is asleep now
        time.sleep(1.2)  # noqa: ASYNC251  (the point: the loop is held, the ticker wakes late)
        for _ in range(3):  # let the ticker run, not yet a whole tick
            await asyncio.sleep(0)
        assert admission.lag > admission.max_lag
        shed = await client.post(url, json={})
        assert shed.status_code == 503 and shed.headers["Retry-After"] == "1"
        assert shed.json()["error"]["code"] == "unavailable"
        assert "STREAMS_SERVE_MAX_LAG" in shed.json()["error"]["message"]
        assert len(ran) == 1 and admission.shed_for_lag == 1
        # On time again: admitted again.
        for _ in range(200):
            await asyncio.sleep(admission.TICK)
            if admission.lag <= admission.max_lag:
                break
        assert (await client.post(url, json={})).status_code == 200
        assert len(ran) == 2 and admission.running == 0
    await admission.close()


# -- what Schemathesis found, each fixed in the document or the server ----------------------


def _frame_validator() -> Any:
    import jsonschema

    document = openapi_document()
    return jsonschema.Draft202012Validator(
        {"$ref": "#/components/schemas/CommandFrame", "components": document["components"]})


def _server_takes(frame: dict[str, Any]) -> bool:
    from streams.adapters.avro.files import project_types
    from streams.core.commands import CommandFailed, check_value, parse_frame
    from streams.core.feedback import FeedbackRegistry

    types = FeedbackRegistry()
    for cls in project_types():
        types.register(cls)
    try:
        check_value(parse_frame(frame).command, types)
    except CommandFailed:
        return False
    return True


def _give(feedback_type: str, target: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    return {"command": {"feedback_type": feedback_type, "target": target, "value": value}}


def test_the_document_and_the_server_agree_on_command_frames() -> None:
    # Schemathesis: `{"target": {"run_id": ...}}` (kind left out, optional in the document)
    # was refused by the server; and the document took any feedback_type with any value. Now
    # each registered type is a branch: its name, its target kinds, its value's schema.
    document = json.loads(DOC.read_text())
    validator = _frame_validator()
    run = {"kind": "run", "run_id": "run_1"}
    cases = [
        (_give("triage_quality", run, {"correct": True, "severity": "high"}), True),
        (_give("triage_quality", run, {"correct": True, "severity": "high", "note": None}),
         True),
        (_give("triage_quality", {"run_id": "run_1"}, {"correct": True, "severity": "high"}),
         False),
        (_give("triage_quality", {"kind": "chain", "correlation_id": "evt_1"},
               {"correct": True, "severity": "high"}), False),
        (_give("triage_quality", run, {"correct": "true", "severity": "high"}), False),
        (_give("triage_quality", run, {"correct": True, "severity": "high", "x": 1}), False),
        (_give("triage_quality", run, {"correct": 1, "severity": "high"}), False),
        (_give("resolution", {"kind": "chain", "correlation_id": "evt_1"},
               {"resolved": False, "minutes_to_mitigate": 1440}), True),
        (_give("resolution", {"kind": "chain", "correlation_id": "evt_1"},
               {"resolved": False, "minutes_to_mitigate": "5"}), False),
        (_give("resolution", {"kind": "chain", "correlation_id": "evt_1"},
               {"resolved": False, "minutes_to_mitigate": 1441}), False),
        (_give("workflow_review", {"kind": "chain", "correlation_id": "evt_1"},
               {"approved": True, "quality_score": 1, "issues": [], "recommendation": ""}),
         True),
        (_give("nope", run, {}), False),
        ({"type": "command", "command": {"type": "give_feedback", "feedback_type":
                                         "should_have_fired", "target": {
                                             "kind": "firing", "firing_id": "fir_1"},
                                         "value": {"fired_rightly": False}}}, True),
    ]
    for frame, valid in cases:
        assert validator.is_valid(frame) is valid, frame
        assert _server_takes(frame) is valid, frame
    branches = document["components"]["schemas"]["GiveFeedback"]["discriminator"]["mapping"]
    from streams.adapters.avro.files import project_types

    assert sorted(branches) == sorted(c.feedback_name for c in project_types())


def test_a_page_cursor_is_declared_by_its_pattern() -> None:
    # Schemathesis: any cursor up to 200 characters was valid by the document and refused.
    from streams.core.viewrows import PAGE_CURSOR_PATTERN

    document = openapi_document()
    for route in ("runs", "feedback"):
        get = document["paths"][f"/v1/workspaces/{{workspace_id}}/{route}"]["get"]
        [cursor] = [p for p in get["parameters"] if p["name"] == "cursor"]
        assert cursor["schema"]["anyOf"][0]["pattern"] == PAGE_CURSOR_PATTERN
    with _served() as client:
        answer = client.get("/v1/workspaces/acme.prod/runs?cursor=0000")
    assert answer.status_code == 422
    assert [f["path"] for f in answer.json()["error"]["fields"]] == ["query.cursor"]
    assert "pass the next_cursor of an earlier page unchanged" in answer.json()["error"][
        "message"]


def test_reads_declare_their_bodies_and_every_route_the_bearer_key() -> None:
    document = openapi_document()
    assert document["components"]["securitySchemes"]["bearer"] == {
        "type": "http", "scheme": "bearer", "description": document["components"][
            "securitySchemes"]["bearer"]["description"]}
    bodies = {}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            assert operation["security"] == [{"bearer": []}]
            assert not [p for p in operation.get("parameters", []) if p["in"] == "header"]
            bodies[method, path.rsplit("/", 1)[-1]] = operation["responses"]["200"][
                "content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    assert bodies == {("post", "commands"): "OutcomeFrame", ("get", "runs"): "RunsPage",
                      ("get", "{run_id}"): "RunOut", ("get", "{firing_id}"): "FiringOut",
                      ("get", "{correlation_id}"): "ChainOut", ("get", "{event_id}"): "WhyOut",
                      ("get", "feedback"): "FeedbackPage",
                      ("get", "feedback-types"): "FeedbackTypes", ("get", "me"): "Identity",
                      ("get", "queues"): "Queues", ("post", "queues"): "QueueInstalledOut",
                      ("post", "archive"): "QueueOutcome", ("post", "next"): "NextItem",
                      ("get", "progress"): "QueueProgressOut",
                      ("get", "calibration"): "CalibrationOut", ("get", "{item}"): "PairOut",
                      ("get", "agreement"): "QueueAgreementOut",
                      ("post", "submit"): "OutcomeFrame", ("post", "skip"): "SkipOut"}


def test_another_method_on_a_route_is_an_error_frame_with_allow() -> None:
    with _served() as client:
        answer = client.delete("/v1/workspaces/acme.prod/runs")
    assert answer.status_code == 405
    assert answer.headers["Allow"] == "GET"
    assert answer.json()["type"] == "error" and answer.json()["error"]["code"] == "not_found"


async def test_a_read_past_its_time_limit_is_unavailable_and_health_answers_meanwhile() -> None:
    import asyncio

    import httpx

    from streams.settings import Settings
    from streams.surfaces.http.app import create_app

    started, release = asyncio.Event(), asyncio.Event()

    class Slow:
        """A started service whose reads wait until released."""

        async def runs(self, *_args: Any, **_kwargs: Any) -> dict[str, Any]:
            started.set()
            await release.wait()
            return {"runs": [], "next_cursor": None}

    app = create_app(service=Slow(), settings=Settings(  # type: ignore[arg-type]
        serve_read_timeout=30))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as client:
        read = asyncio.create_task(client.get("/v1/workspaces/acme.prod/runs"))
        await asyncio.wait_for(started.wait(), 5)
        assert (await client.get("/healthz")).status_code == 200
        assert not read.done()
        release.set()
        assert (await read).json() == {"runs": [], "next_cursor": None}

        release.clear()
        app.state.settings = Settings(serve_read_timeout=0.05)
        late = await asyncio.wait_for(client.get("/v1/workspaces/acme.prod/runs"), 10)
        release.set()
    assert late.status_code == 503
    assert late.json()["error"]["code"] == "unavailable"
    assert "STREAMS_SERVE_READ_TIMEOUT" in late.json()["error"]["message"]


async def test_commands_run_before_the_router_answer_what_the_route_answers() -> None:
    import httpx

    from streams.core.commands import CommandFailed, OutcomeFrame, RecordedOutcome, SeqOut
    from streams.surfaces.http.app import create_app

    # Commands to a started service are run by CommandsFirst, before the router: the same
    # status, frames and headers the route answers, and the same refusals around them.
    calls: list[tuple[object, str, bytes]] = []

    class Recording:
        """A started service that answers an outcome, or an error for a bad workspace."""

        async def execute(self, key: object, workspace: str, body: bytes) -> object:
            calls.append((key, workspace, body))
            if workspace == "nope":
                return CommandFailed("validation_failed", "bad workspace id").frame("c1")
            return OutcomeFrame(command_id="c1", outcome=RecordedOutcome(
                seq=SeqOut(partition=2, offset=7), id="evt_1"))

    app = create_app(service=Recording())  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as client:
        answer = await client.post("/v1/workspaces/acme.prod/commands", content=b'{"a": 1}',
                                   headers={"Authorization": "Bearer fsk_x_y"})
        assert (answer.status_code, answer.json()) == (200, {
            "type": "outcome", "command_id": "c1",
            "outcome": {"type": "recorded", "seq": {"partition": 2, "offset": 7},
                        "id": "evt_1"}})
        assert answer.headers["content-type"] == "application/json"
        assert calls == [("fsk_x_y", "acme.prod", b'{"a": 1}')]
        refused = await client.post("/v1/workspaces/nope/commands", content=b"{}")
        assert refused.status_code == 422
        assert refused.json()["error"]["code"] == "validation_failed"
        # Not a command path: the router answers, as it always did.
        missing = await client.post("/v1/workspaces/a/b/commands", content=b"{}")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "not_found"
        too_large = await client.post("/v1/workspaces/acme.prod/commands",
                                      content=b"x" * (1024 * 1024 + 1))
        assert too_large.status_code == 413
    assert len(calls) == 2  # the too large body never reached the service
    await app.state.admission.close()
