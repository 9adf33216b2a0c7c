"""The stream and MCP surfaces' pure parts, without a broker: event frames, the tool list
and schemas, and `streams mcp` refusing to start without a key."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

from typer.testing import CliRunner

from streams.core.actors import UserActor
from streams.core.events import AppEvent, Envelope, Seq
from streams.surfaces.cli.app import app
from streams.surfaces.cli.base import ExitCode
from streams.surfaces.http.mcp import mcp_server
from streams.surfaces.http.stream import event_frame


def test_an_event_frame_carries_the_seq_and_the_envelope_as_json() -> None:
    envelope = Envelope.new(AppEvent(name="app:x", data={"n": 1}), tenant="acme",
                            workspace="prod", actor=UserActor(id="ada"),
                            time=datetime(2026, 1, 2, tzinfo=UTC)).model_copy(
        update={"seq": Seq(partition=2, offset=7)})
    frame = event_frame(envelope)
    assert frame["type"] == "event"
    assert frame["seq"] == {"partition": 2, "offset": 7}
    assert frame["envelope"]["event_id"] == envelope.event_id
    assert frame["envelope"]["workspace"] == "prod"
    assert "seq" not in frame["envelope"]
    json.dumps(frame)  # JSON as it is


def test_the_mcp_tools_and_their_inputs() -> None:
    server = mcp_server(lambda: None)  # type: ignore[arg-type,return-value]  # never called
    tools = {t.name: t for t in asyncio.run(server.list_tools())}
    assert set(tools) == {"give_feedback", "list_runs", "read_feedback", "list_queues",
                          "install_queue", "archive_queue", "queue_progress", "next_item",
                          "submit_item", "skip_item", "why", "calibration", "queue_pair",
                          "queue_agreement"}
    give = tools["give_feedback"].input_schema
    assert set(give["required"]) == {"workspace_id", "feedback_type", "target", "value"}
    assert "ctx" not in give["properties"]
    assert "command_id" in give["properties"]
    assert set(tools["read_feedback"].input_schema["properties"]) == {
        "workspace_id", "feedback_type", "participant", "limit", "cursor"}


def test_streams_mcp_without_a_key_says_how_to_get_one() -> None:
    result = CliRunner().invoke(app, ["mcp"], env={"STREAMS_MCP_KEY": ""})
    assert result.exit_code == ExitCode.CONFIG
    assert "STREAMS_MCP_KEY" in result.output


def test_the_stream_of_a_service_still_starting_answers_unavailable_and_try_again_later(
        ) -> None:
    from fastapi.testclient import TestClient
    from starlette.websockets import WebSocketDisconnect

    from streams.surfaces.http.app import create_app

    with TestClient(create_app()) as client, client.websocket_connect(
            "/v1/workspaces/acme.prod/stream") as ws:
        frame = ws.receive_json()
        assert frame["error"]["code"] == "unavailable"
        try:
            ws.receive_text()
        except WebSocketDisconnect as closed:
            assert closed.code == 1013
        else:
            raise AssertionError("the connection stayed open")


def test_an_event_frame_carries_the_events_own_fields() -> None:
    # The envelope types its event as the base Event, whose dump is {}: the frame must dump
    # the event itself (a subscriber that got {} could not tell one run from another).
    from streams.core.actors import SystemActor
    from streams.core.events import Envelope, RunStarted, Seq
    from streams.surfaces.http.stream import event_frame

    envelope = Envelope.new(RunStarted(run_id="run_1", rule="ops:error-spike",
                                       action="triage", firing_id="fir_1"),
                            tenant="acme", workspace="prod", actor=SystemActor()
                            ).model_copy(update={"seq": Seq(partition=2, offset=7)})
    frame = event_frame(envelope)
    assert frame["type"] == "event"
    assert frame["seq"] == {"partition": 2, "offset": 7}
    assert frame["envelope"]["event_type"] == "run_started"
    assert frame["envelope"]["event"]["run_id"] == "run_1"
    assert frame["envelope"]["event"]["rule"] == "ops:error-spike"
