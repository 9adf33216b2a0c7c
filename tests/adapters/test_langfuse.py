"""The Langfuse adapters against the Langfuse stand-in (an HTTP server, not Langfuse).

The sink is run against both server behaviours the stand-in plays: score batches on
POST /api/public/scores ("batch"), and one score per request there ("single"), where the sink
falls back to score-create events on POST /api/public/ingestion.
"""

import dataclasses
import json
import logging
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, cast

import httpx
import orjson
import pytest
from langfuse import Langfuse
from langfuse.api.commons.errors.error import Error as BadRequestError
from langfuse.api.core.jsonable_encoder import jsonable_encoder
from langfuse.api.core.serialization import convert_and_respect_annotation_metadata
from langfuse.api.scores.types.create_score_request import CreateScoreRequest
from langfuse.api.scores.types.create_scores_request import CreateScoresRequest

from standins.langfuse_standin import LangfuseStandIn
from streams.adapters.langfuse import (
    INGESTION_MAX_BYTES,
    SCORES_MAX_BYTES,
    LangfuseConnection,
    LangfuseScoreConfigStore,
    LangfuseScoreSink,
    event_id,
    score_body,
    to_request,
)
from streams.core.errors import SinkError, ValidationFailed
from streams.core.scores import Score
from streams.core.sinks.contracts import check_score_config_store, check_score_sink, sample_scores

ROUTES = {"batch": "/api/public/scores", "single": "/api/public/ingestion"}


@pytest.fixture(params=["batch", "single"])
def mode(request: pytest.FixtureRequest) -> str:
    return cast(str, request.param)


@pytest.fixture
def standin(mode: str) -> Iterator[LangfuseStandIn]:
    with LangfuseStandIn(scores_route=cast(Any, mode)) as server:
        yield server


@pytest.fixture
def client(standin: LangfuseStandIn) -> Langfuse:
    # The SDK keeps one resource manager per public key; a fresh key per test avoids reuse.
    standin_key = standin.public_key
    return Langfuse(public_key=standin_key, secret_key=standin.secret_key, host=standin.url,
                    tracing_enabled=False)


def _keys(standin: LangfuseStandIn) -> list[tuple[str, str, str]]:
    return [(s["id"], s["name"], s["timestamp"][:10]) for s in standin.scores()]


def _score_posts(standin: LangfuseStandIn) -> list[tuple[str, int]]:
    return [(r.path, r.status) for r in standin.request_log() if r.method == "POST"]


# -- the body: the SDK's, field for field ---------------------------------------------------


def _sdk_wire(request: CreateScoreRequest) -> dict[str, Any]:
    """What SDK 5.0.4 puts on the wire for one score of `scores.create(request=[...])`: its raw
    client converts with convert_and_respect_annotation_metadata, its HTTP client runs
    jsonable_encoder over that, and httpx writes it with json.dumps."""
    converted = convert_and_respect_annotation_metadata(
        object_=[request], annotation=CreateScoresRequest, direction="write")
    return cast(dict[str, Any], json.loads(json.dumps(jsonable_encoder(converted)))[0])


def _sdk_request(score: Score, **extra: Any) -> CreateScoreRequest:
    """The SDK's request built here from the Score's fields, setting only those with a value."""
    fields: dict[str, Any] = {"id": score.id, "name": score.name, "value": score.value,
                              "data_type": score.data_type, "timestamp": score.timestamp,
                              "metadata": {**score.source.as_metadata(), **score.metadata}}
    if score.trace_id:
        fields["trace_id"] = score.trace_id
    elif score.session_id:
        fields["session_id"] = score.session_id
    for name in ("observation_id", "comment"):
        if getattr(score, name) is not None:
            fields[name] = getattr(score, name)
    return CreateScoreRequest(**fields, **extra)


def _variants() -> list[Score]:
    out: list[Score] = []
    for score in sample_scores(uuid.uuid4().hex):  # every data type, on a trace and a session
        out.append(score)
        out.append(dataclasses.replace(score, metadata={"extra": "yes"}, comment="why",
                                       observation_id="obs-1" if score.trace_id else None))
        out.append(dataclasses.replace(
            score, timestamp=datetime(2026, 3, 1, 9, 30, 15, 123456,
                                      tzinfo=timezone(timedelta(hours=2)))))
    assert {s.data_type for s in out} == {"NUMERIC", "BOOLEAN", "CATEGORICAL", "TEXT"}
    assert any(s.trace_id for s in out) and any(not s.trace_id for s in out)
    return out


def _variants_and_targetless() -> list[Score]:
    """The variants, and those on a trace (every data type) without trace or session (the
    server would refuse them; the body must still match)."""
    out = _variants()
    on_trace = [s for s in out if s.trace_id]
    assert {s.data_type for s in on_trace} == {"NUMERIC", "BOOLEAN", "CATEGORICAL", "TEXT"}
    return out + [dataclasses.replace(s, trace_id=None, session_id=None, observation_id=None)
                  for s in on_trace]


@pytest.mark.parametrize("extra", [{}, {"environment": "staging"}, {"config_id": "cfg-1"},
                                   {"environment": "prod", "config_id": "cfg-2"}])
def test_the_body_is_what_the_sdk_sends(extra: dict[str, str]) -> None:
    for score in _variants_and_targetless():
        ours = orjson.loads(orjson.dumps(score_body(score, **extra)))
        theirs = _sdk_wire(_sdk_request(score, **extra))
        assert ours == theirs, (score, ours, theirs)
        assert _sdk_wire(to_request(score, **extra)) == theirs
        assert None not in ours.values()
        assert not ("traceId" in ours and "sessionId" in ours)
        assert ("traceId" in ours or "sessionId" in ours) == bool(score.trace_id
                                                                  or score.session_id)


def test_explicit_nulls_are_the_only_difference_from_an_sdk_request_with_none() -> None:
    for score in _variants():
        with_nulls = _sdk_wire(CreateScoreRequest(
            id=score.id, name=score.name, value=score.value, data_type=score.data_type,
            trace_id=score.trace_id, observation_id=score.observation_id,
            session_id=None if score.trace_id else score.session_id,
            timestamp=score.timestamp, comment=score.comment,
            metadata={**score.source.as_metadata(), **score.metadata}))
        assert score_body(score) == {k: v for k, v in with_nulls.items() if v is not None}


async def test_the_sink_posts_the_sdks_bytes_as_json(mode: str, standin: LangfuseStandIn,
                                                     client: Langfuse) -> None:
    scores = _variants()
    if mode == "batch":
        client.api.scores.create(request=[_sdk_request(s) for s in scores],
                                 request_options={"max_retries": 0})
    else:  # SDK 5's array is refused by a server taking one score per request
        with pytest.raises(BadRequestError):
            client.api.scores.create(request=[_sdk_request(s) for s in scores],
                                     request_options={"max_retries": 0})
    sdk_body = standin.request_log()[-1].body
    assert isinstance(sdk_body, list) and len(sdk_body) == len(scores)
    sink = LangfuseScoreSink(client, environment=None)
    assert await sink.record(scores) == []
    sent = standin.request_log()[-1]
    assert sent.headers["Authorization"].startswith("Basic ")
    assert sent.headers.get("X-Langfuse-Public-Key") == standin.public_key
    if mode == "batch":
        assert sent.body == sdk_body
    else:
        assert [e["body"] for e in sent.body["batch"]] == sdk_body


# -- the contract, in both modes ------------------------------------------------------------


async def test_sink_meets_the_contract(standin: LangfuseStandIn, client: Langfuse) -> None:
    async def stored() -> list[tuple[str, str, str]]:
        return _keys(standin)

    await check_score_sink(LangfuseScoreSink(client), stored=stored)
    assert standin.received_total == 2 * len(sample_scores())
    assert len(standin.scores()) == len(sample_scores())


@pytest.mark.parametrize("mode", ["batch"])
async def test_store_meets_the_contract(client: Langfuse) -> None:
    await check_score_config_store(LangfuseScoreConfigStore(client))


# -- route detection ------------------------------------------------------------------------


async def test_route_is_detected_once_and_logged(mode: str, standin: LangfuseStandIn,
                                                 client: Langfuse,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    sink = LangfuseScoreSink(client, batch_size=2)
    assert sink.route is None
    with caplog.at_level(logging.INFO, logger="streams.adapters.langfuse"):
        assert await sink.record(sample_scores(uuid.uuid4().hex)) == []
        assert await sink.record(sample_scores(uuid.uuid4().hex)) == []
    lines = [r for r in caplog.records if r.name == "streams.adapters.langfuse"]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    assert ROUTES[mode] in lines[0].getMessage()
    assert standin.url in lines[0].getMessage()
    assert sink.route == {"batch": "scores", "single": "ingestion"}[mode]
    posts = _score_posts(standin)
    if mode == "batch":
        assert posts[0] == ("/api/public/scores", 202)
        assert {p for p, _ in posts} == {"/api/public/scores"}
    else:
        assert posts[0] == ("/api/public/scores", 400)  # the probe, answered once
        assert all(p == ("/api/public/ingestion", 207) for p in posts[1:])
    assert len(standin.scores()) == 2 * len(sample_scores())


@pytest.mark.parametrize("mode", ["single"])
async def test_ingestion_events_derive_their_ids_from_the_scores(standin: LangfuseStandIn,
                                                                 client: Langfuse) -> None:
    scores = sample_scores(uuid.uuid4().hex)
    assert await LangfuseScoreSink(client).record(scores) == []
    request = standin.request_log()[-1]
    assert request.path == "/api/public/ingestion"
    events = request.body["batch"]
    assert [e["id"] for e in events] == [event_id(s) for s in scores]
    assert len({e["id"] for e in events}) == len(scores)
    assert all(e["type"] == "score-create" for e in events)
    assert all(datetime.fromisoformat(e["timestamp"]).tzinfo is not None for e in events)
    assert request.body["metadata"]["batch_size"] == len(scores)


async def test_a_route_can_be_fixed(mode: str, standin: LangfuseStandIn,
                                    client: Langfuse) -> None:
    sink = LangfuseScoreSink(client, route="ingestion")
    assert await sink.record(sample_scores()) == []
    assert {p for p, _ in _score_posts(standin)} == {"/api/public/ingestion"}


# -- what is sent ---------------------------------------------------------------------------


async def test_scores_carry_time_source_and_target(standin: LangfuseStandIn,
                                                    client: Langfuse) -> None:
    scores = sample_scores(uuid.uuid4().hex)
    assert await LangfuseScoreSink(client).record(scores) == []
    stored = {s["id"]: s for s in standin.scores()}
    on_trace = next(s for s in scores if s.trace_id)
    on_session = next(s for s in scores if not s.trace_id)
    assert stored[on_trace.id]["traceId"] == on_trace.trace_id
    assert "sessionId" not in stored[on_trace.id] or not stored[on_trace.id]["sessionId"]
    assert stored[on_session.id]["sessionId"] == on_session.session_id
    assert stored[on_trace.id]["timestamp"].startswith("2026-01-15T12:00:00")
    assert stored[on_trace.id]["metadata"]["participant"] == "user:contract"
    assert stored[on_trace.id]["metadata"]["feedback_event_id"] == \
        on_trace.source.feedback_event_id


async def test_environment_is_sent_when_set(standin: LangfuseStandIn, client: Langfuse) -> None:
    assert await LangfuseScoreSink(client, environment="staging").record(sample_scores()) == []
    assert {s["environment"] for s in standin.scores()} == {"staging"}


async def test_replay_replaces_by_id_name_and_utc_date(standin: LangfuseStandIn,
                                                       client: Langfuse) -> None:
    scores = sample_scores(uuid.uuid4().hex)
    sink = LangfuseScoreSink(client)
    assert await sink.record(scores) == []
    assert await sink.record(scores) == []  # a replay: replaced
    assert len(standin.scores()) == len(scores) and standin.received_total == 2 * len(scores)
    later = dataclasses.replace(scores[0], timestamp=scores[0].timestamp + timedelta(hours=1))
    assert await sink.record([later]) == []  # same UTC date: replaced
    assert len(standin.scores()) == len(scores)
    next_day = dataclasses.replace(scores[0], timestamp=scores[0].timestamp + timedelta(days=1))
    assert await sink.record([next_day]) == []  # another date: Langfuse keeps both
    assert len(standin.scores()) == len(scores) + 1


# -- rejections -----------------------------------------------------------------------------


async def test_partial_rejection_names_the_scores(standin: LangfuseStandIn,
                                                  client: Langfuse) -> None:
    scores = sample_scores(uuid.uuid4().hex)
    bad = {scores[0].id, scores[3].id}
    standin.reject_ids(bad, "over quota")
    rejected = await LangfuseScoreSink(client).record(scores)
    assert {r.score.id for r in rejected} == bad
    assert all("over quota" in r.reason for r in rejected)
    assert len(standin.scores()) == len(scores) - 2


async def test_invalid_scores_are_rejected_with_the_servers_reason(
        standin: LangfuseStandIn, client: Langfuse) -> None:
    scores = sample_scores(uuid.uuid4().hex)
    text = next(s for s in scores if s.data_type == "TEXT")
    too_long = dataclasses.replace(text, value="x" * 501)
    no_target = dataclasses.replace(scores[0], id=str(uuid.uuid4()), trace_id=None,
                                    session_id=None)
    rejected = await LangfuseScoreSink(client).record([*scores[:2], too_long, no_target])
    reasons = {r.score.id: r.reason for r in rejected}
    assert set(reasons) == {too_long.id, no_target.id}
    assert "1-500" in reasons[too_long.id]
    assert "exactly one" in reasons[no_target.id]
    assert {s["id"] for s in standin.scores()} == {scores[0].id, scores[1].id}


async def test_bad_credentials_reject_the_batch(standin: LangfuseStandIn) -> None:
    client = Langfuse(public_key=f"pk-{uuid.uuid4().hex}", secret_key="wrong",
                      host=standin.url, tracing_enabled=False)
    sink = LangfuseScoreSink(client)
    rejected = await sink.record(sample_scores())
    assert len(rejected) == len(sample_scores())
    assert all("401" in r.reason for r in rejected)
    assert sink.route is None  # a 401 decides nothing


# -- faults ---------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [503, 500, 429])
async def test_outage_statuses_raise_sink_error(standin: LangfuseStandIn, client: Langfuse,
                                                status: int) -> None:
    standin.fail_next(1, status=status)
    with pytest.raises(SinkError, match=str(status)):
        await LangfuseScoreSink(client).record(sample_scores())
    assert standin.scores() == []
    assert await LangfuseScoreSink(client).record(sample_scores()) == []


@pytest.mark.parametrize("status", [503, 500, 429])
async def test_outage_after_detection_raises_sink_error(standin: LangfuseStandIn,
                                                        client: Langfuse, status: int) -> None:
    sink = LangfuseScoreSink(client)
    first = sample_scores(uuid.uuid4().hex)
    assert await sink.record(first) == []
    standin.fail_next(1, status=status)
    second = sample_scores(uuid.uuid4().hex)
    with pytest.raises(SinkError, match=str(status)):
        await sink.record(second)
    assert len(standin.scores()) == len(first)
    assert await sink.record(second) == []
    assert len(standin.scores()) == len(first) + len(second)


async def test_timeout_raises_sink_error(standin: LangfuseStandIn, client: Langfuse) -> None:
    sink = LangfuseScoreSink(client, timeout=0.3)
    assert await sink.record(sample_scores(uuid.uuid4().hex)) == []
    standin.set_delay(1.0)
    with pytest.raises(SinkError, match="unreachable"):
        await sink.record(sample_scores(uuid.uuid4().hex))
    standin.set_delay(0)
    await sink.flush()


async def test_unreachable_raises_sink_error(standin: LangfuseStandIn) -> None:
    standin.stop()
    client = Langfuse(public_key=f"pk-{uuid.uuid4().hex}", secret_key="sk",
                      host=standin.url, tracing_enabled=False)
    with pytest.raises(SinkError, match="unreachable"):
        await LangfuseScoreSink(client, timeout=2).record(sample_scores())


async def test_a_207_that_is_not_json_raises_sink_error() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(207, content=b"<html>", request=request)

    sink = LangfuseScoreSink(connection=LangfuseConnection("http://langfuse.test", "pk", "sk"),
                             route="scores", transport=httpx.MockTransport(answer))
    with pytest.raises(SinkError, match="not JSON"):
        await sink.record(sample_scores())


@pytest.mark.parametrize("status", [301, 302, 304])
async def test_a_redirect_that_is_not_followed_rejects_the_batch(status: int) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, request=request)

    sink = LangfuseScoreSink(connection=LangfuseConnection("http://langfuse.test", "pk", "sk"),
                             route="scores", transport=httpx.MockTransport(answer))
    scores = sample_scores()
    rejected = await sink.record(scores)
    assert [r.score for r in rejected] == scores
    assert all(str(status) in r.reason for r in rejected)


def _answering(status: int, payload: Any, route: Any) -> LangfuseScoreSink:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json=payload, request=request)

    return LangfuseScoreSink(connection=LangfuseConnection("http://langfuse.test", "pk", "sk"),
                             route=route, transport=httpx.MockTransport(answer))


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_an_ingestion_event_error_asking_for_a_retry_raises_sink_error(
        status: int) -> None:
    scores = sample_scores()
    sink = _answering(207, {"successes": [], "errors": [
        {"id": event_id(scores[0]), "status": 400, "message": "Invalid request data"},
        {"id": event_id(scores[1]), "status": status, "message": "Internal Server Error"}]},
        "ingestion")
    with pytest.raises(SinkError, match=str(status)):
        await sink.record(scores)


async def test_errors_map_back_by_event_id_or_score_id_and_unknown_ones_are_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    scores = sample_scores()
    events = _answering(207, {"successes": [], "errors": [
        {"id": event_id(scores[2]), "status": 404, "message": "Invalid request data",
         "error": "config not found"},
        {"id": "nobody", "status": 400, "message": "Invalid request data"}]}, "ingestion")
    with caplog.at_level(logging.WARNING, logger="streams.adapters.langfuse"):
        rejected = await events.record(scores)
    assert [(r.score, r.reason) for r in rejected] == [
        (scores[2], "404: Invalid request data: config not found")]
    assert "did not identify" in caplog.text
    by_id = _answering(207, {"accepted": 7, "rejected": 1, "errors": [
        {"id": scores[5].id, "message": "over quota"}]}, "scores")
    assert [(r.score, r.reason) for r in await by_id.record(scores)] == [
        (scores[5], "over quota")]


# -- request sizes --------------------------------------------------------------------------


async def test_requests_are_split_by_count(standin: LangfuseStandIn, client: Langfuse) -> None:
    scores = [s for i in range(32) for s in sample_scores(f"{uuid.uuid4().hex}{i}")]
    sink = LangfuseScoreSink(client, batch_size=100)
    assert len(scores) == 256 and await sink.record(scores) == []
    await sink.record(scores)
    posts = [r for r in standin.request_log() if r.status in (202, 207)]
    sizes = [len(r.body) if isinstance(r.body, list) else len(r.body["batch"]) for r in posts]
    assert max(sizes) <= 100 and sum(sizes) == 2 * 256
    assert len(standin.scores()) == 256


async def test_requests_are_split_by_bytes_and_oversized_scores_rejected(
        mode: str, standin: LangfuseStandIn, client: Langfuse) -> None:
    limit = SCORES_MAX_BYTES if mode == "batch" else INGESTION_MAX_BYTES
    scores = sample_scores(uuid.uuid4().hex)
    big = [dataclasses.replace(s, comment="c" * (limit // 3)) for s in scores[:5]]
    huge = dataclasses.replace(scores[5], comment="h" * (limit + 1))
    sink = LangfuseScoreSink(client, route="scores" if mode == "batch" else "ingestion")
    rejected = await sink.record([*big, huge, *scores[6:]])
    assert [r.score.id for r in rejected] == [huge.id]
    assert "bytes" in rejected[0].reason and "comment" in rejected[0].reason
    assert len(standin.scores()) == len(scores) - 1
    posts = [r for r in standin.request_log() if r.method == "POST"]
    assert len(posts) >= 3 and all(r.status in (202, 207) for r in posts)
    assert all(int(r.headers["Content-Length"]) <= limit for r in posts)


async def test_a_score_too_large_for_the_scores_route_waits_for_detection(
        mode: str, standin: LangfuseStandIn, client: Langfuse) -> None:
    scores = sample_scores(uuid.uuid4().hex)
    large = dataclasses.replace(scores[0], comment="l" * (SCORES_MAX_BYTES + 10))
    sink = LangfuseScoreSink(client)  # route not known yet
    rejected = await sink.record([large, *scores[1:]])
    stored = {s["id"] for s in standin.scores()}
    if mode == "batch":  # 1,000,000 bytes at most on the scores route
        assert [r.score.id for r in rejected] == [large.id]
        assert stored == {s.id for s in scores[1:]}
    else:  # the ingestion route carries it
        assert rejected == []
        assert stored == {s.id for s in scores}
    alone = LangfuseScoreSink(client)
    rejected = await alone.record([large])  # nothing to probe with: refused, route unknown
    assert [r.score.id for r in rejected] == [large.id] and alone.route is None


# -- connection -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["batch"])
def test_connection_comes_from_the_sdk_client(standin: LangfuseStandIn,
                                              client: Langfuse) -> None:
    connection = LangfuseConnection.of(client)
    assert connection.base_url == standin.url
    assert (connection.public_key, connection.secret_key) == (standin.public_key,
                                                              standin.secret_key)
    assert connection.headers["X-Langfuse-Public-Key"] == standin.public_key
    with pytest.raises(ValidationFailed, match="connection="):
        LangfuseScoreSink()
    with pytest.raises(ValidationFailed, match="connection=LangfuseConnection"):
        LangfuseConnection.of(cast(Any, object()))


async def test_one_pool_per_loop_closed_by_flush(standin: LangfuseStandIn,
                                                 client: Langfuse) -> None:
    sink = LangfuseScoreSink(client, concurrency=3)
    assert await sink.record(sample_scores()) == []
    pool = sink._pool()
    assert sink._pool() is pool
    await sink.flush()
    assert pool.http.is_closed
    assert await sink.record(sample_scores()) == []  # opens again
    await sink.aclose()
    assert standin.received_total == 2 * len(sample_scores())


def test_each_tenants_langfuse_project_is_read_from_the_projects_file(tmp_path: Path) -> None:
    from streams.adapters.langfuse import LangfuseProject, read_projects

    path = tmp_path / "projects.json"
    path.write_text(json.dumps({
        "acme": {"public_key": "pk-lf-a", "secret_key": "sk-lf-a"},
        "beta": {"public_key": "pk-lf-b", "secret_key": "sk-lf-b",
                 "host": "https://eu.example"}}))
    assert read_projects(str(path)) == {
        "acme": LangfuseProject("pk-lf-a", "sk-lf-a"),
        "beta": LangfuseProject("pk-lf-b", "sk-lf-b", "https://eu.example")}


@pytest.mark.parametrize(("text", "says"), [
    (None, "cannot read"),
    ("{not json", "is not JSON"),
    ("[]", "JSON object of tenants"),
    ("{}", "JSON object of tenants"),
    ('{"acme": {"public_key": "pk"}}', "tenant 'acme'.*needs \"public_key\" and \"secret_key\""),
    ('{"acme": {"public_key": "pk", "secret_key": "sk", "hots": "x"}}', "tenant 'acme'"),
    ('{"acme": {"public_key": "", "secret_key": "sk"}}', "'public_key' must be a non-empty"),
])
def test_a_bad_projects_file_is_a_config_error_naming_the_setting_and_tenant(
        tmp_path: Path, text: str | None, says: str) -> None:
    from streams.adapters.langfuse import read_projects
    from streams.core.errors import ConfigError

    path = tmp_path / "projects.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError, match=f"STREAMS_LANGFUSE_PROJECTS.*{says}"):
        read_projects(str(path))
