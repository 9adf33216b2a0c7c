"""The Langfuse stand-in, driven through the real langfuse SDK (5.x) over loopback."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, cast

import httpx
import pytest
from langfuse import Langfuse
from langfuse.api.commons.errors.error import Error as BadRequestError
from langfuse.api.commons.errors.not_found_error import NotFoundError
from langfuse.api.commons.errors.unauthorized_error import UnauthorizedError
from langfuse.api.commons.types.config_category import ConfigCategory
from langfuse.api.core.api_error import ApiError
from langfuse.api.health.errors.service_unavailable_error import ServiceUnavailableError
from langfuse.api.scores.types.create_score_batch_response import CreateScoreBatchResponse
from langfuse.api.scores.types.create_score_batch_results import CreateScoreBatchResults
from langfuse.api.scores.types.create_score_request import CreateScoreRequest
from langfuse.api.scores.types.create_scores_request import CreateScoresRequest

from standins.langfuse_standin import LangfuseStandIn

NO_RETRY: Any = {"max_retries": 0}
TS = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


def _client(standin: LangfuseStandIn, **kwargs: Any) -> Langfuse:
    params: dict[str, Any] = {
        "public_key": standin.public_key,
        "secret_key": standin.secret_key,
        "host": standin.url,
        "tracing_enabled": False,
    }
    params.update(kwargs)
    return Langfuse(**params)


@pytest.fixture
def standin() -> Iterator[LangfuseStandIn]:
    # A unique public key per test: the SDK keeps one resource manager per key per process.
    with LangfuseStandIn(public_key=f"pk-lf-test-{uuid.uuid4().hex}") as server:
        yield server


@pytest.fixture
def client(standin: LangfuseStandIn) -> Iterator[Langfuse]:
    langfuse = _client(standin)
    yield langfuse
    langfuse.shutdown()


def _score(**fields: Any) -> CreateScoreRequest:
    fields.setdefault("trace_id", "trace-1")
    fields.setdefault("timestamp", TS)
    return CreateScoreRequest(**fields)


def _raw(scores: list[dict[str, Any]]) -> CreateScoresRequest:
    """Camel-case dicts sent as they are, like the SDK's own background score consumer."""
    return cast(CreateScoresRequest, scores)


# -- health, auth -------------------------------------------------------------------------


def test_health_and_auth_check(standin: LangfuseStandIn, client: Langfuse) -> None:
    health = client.api.health.health()
    assert health.status == "OK"
    assert client.auth_check() is True


def test_wrong_secret_key_is_401_and_stores_nothing(standin: LangfuseStandIn) -> None:
    intruder = Langfuse(
        public_key=standin.public_key + "-other",
        secret_key="wrong",
        host=standin.url,
        tracing_enabled=False,
    )
    try:
        with pytest.raises(UnauthorizedError):
            intruder.api.scores.create(request=[_score(name="x", value=1.0)])
        with pytest.raises(UnauthorizedError):
            intruder.api.score_configs.get()
        assert intruder.api.health.health().status == "OK"  # health needs no credentials
    finally:
        intruder.shutdown()
    assert standin.scores() == []
    assert standin.received_total == 0
    assert [r.status for r in standin.request_log()] == [401, 401, 200]


def test_unknown_path_is_404_json(standin: LangfuseStandIn) -> None:
    response = httpx.get(f"{standin.url}/api/public/traces", auth=(standin.public_key, "x"))
    assert response.status_code == 404
    assert "message" in response.json()
    wrong_method = httpx.delete(
        f"{standin.url}/api/public/scores", auth=(standin.public_key, standin.secret_key)
    )
    assert wrong_method.status_code == 405


# -- scores -------------------------------------------------------------------------------


def test_accepted_batch_is_202(standin: LangfuseStandIn, client: Langfuse) -> None:
    response = client.api.scores.create(
        request=[
            _score(id="s-num", name="quality", value=0.75, data_type="NUMERIC"),
            _score(id="s-bool", name="helpful", value=True, data_type="BOOLEAN"),
            _score(id="s-cat", name="tone", value="friendly", data_type="CATEGORICAL"),
            _score(id="s-text", name="note", value="fine", data_type="TEXT"),
            _score(id="s-sess", name="session score", value=3, trace_id=None, session_id="s1"),
        ]
    )

    assert isinstance(response, CreateScoreBatchResponse)
    assert response.message == "Accepted"
    stored = {score["id"]: score for score in standin.scores()}
    assert set(stored) == {"s-num", "s-bool", "s-cat", "s-text", "s-sess"}
    assert stored["s-bool"]["value"] == 1 and stored["s-bool"]["stringValue"] == "True"
    assert stored["s-cat"]["dataType"] == "CATEGORICAL"
    assert stored["s-cat"]["stringValue"] == "friendly"
    assert stored["s-text"]["stringValue"] == "fine" and stored["s-text"]["value"] == 0
    assert stored["s-sess"]["dataType"] == "NUMERIC"  # inferred from a number
    assert stored["s-num"]["timestamp"] == "2024-05-06T07:08:09.000Z"
    assert stored["s-num"]["environment"] == "default"
    assert standin.received_total == 5

    # What the SDK put on the wire: one POST with a JSON array of camelCase scores.
    (post,) = [r for r in standin.request_log() if r.path == "/api/public/scores"]
    assert post.method == "POST" and post.status == 202
    assert post.headers["Authorization"].startswith("Basic ")
    assert post.body[1] == {
        "id": "s-bool",
        "traceId": "trace-1",
        "name": "helpful",
        "value": 1.0,
        "dataType": "BOOLEAN",
        "timestamp": "2024-05-06T07:08:09Z",
    }


def test_partial_rejection_is_207_and_parsed(standin: LangfuseStandIn, client: Langfuse) -> None:
    standin.reject_ids({"s2"}, reason="quota exceeded")

    response = client.api.scores.create(
        request=[
            _score(id="s1", name="a", value=1.0),
            _score(id="s2", name="b", value=1.0),
            _score(id="s3", name="c", value=1.0),
        ]
    )

    assert isinstance(response, CreateScoreBatchResults)
    assert (response.accepted, response.rejected) == (2, 1)
    (error,) = response.errors
    assert error.message == "quota exceeded"
    assert getattr(error, "index", None) == 1
    assert getattr(error, "id", None) == "s2"
    assert sorted(score["id"] for score in standin.scores()) == ["s1", "s3"]

    standin.reject_ids(lambda score: score.get("name") == "c", "no c")
    again = client.api.scores.create(request=[_score(id="s3", name="c", value=1.0)])
    assert isinstance(again, CreateScoreBatchResults)
    assert (again.accepted, again.rejected) == (0, 1)

    standin.reject_ids(None)
    assert isinstance(
        client.api.scores.create(request=[_score(id="s2", name="b", value=1.0)]),
        CreateScoreBatchResponse,
    )


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ({"name": "flag", "value": 2.0, "dataType": "BOOLEAN"}, "0 or 1"),
        ({"name": "n" * 36, "value": 1.0}, "1-35 characters"),
        ({"name": "bad/name", "value": 1.0}, "invalid characters"),
        ({"name": "", "value": 1.0}, "name"),
        ({"name": "two", "value": 1.0, "sessionId": "s1"}, "exactly one"),
        (
            {"name": "obs", "value": 1.0, "traceId": None, "sessionId": "s", "observationId": "o"},
            "ObservationId requires traceId",
        ),
        ({"name": "none", "value": 1.0, "traceId": None}, "exactly one"),
        ({"name": "num", "value": "high", "dataType": "NUMERIC"}, "NUMERIC"),
        ({"name": "cat", "value": 1.0, "dataType": "CATEGORICAL"}, "CATEGORICAL"),
        ({"name": "txt", "value": "", "dataType": "TEXT"}, "1-500"),
        ({"name": "txt", "value": "x" * 501, "dataType": "TEXT"}, "1-500"),
        ({"name": "dt", "value": 1.0, "dataType": "PERCENT"}, "dataType"),
        ({"name": "ts", "value": 1.0, "timestamp": "2024-05-06T07:08:09"}, "UTC offset"),
        ({"name": "ts", "value": 1.0, "timestamp": "yesterday"}, "ISO 8601"),
        ({"name": "ann", "value": 1.0, "source": "ANNOTATION"}, "configId is required"),
        ({"name": "eval", "value": 1.0, "source": "EVAL"}, "source"),
        ({"name": "cfg", "value": 1.0, "configId": "no-such-config"}, "does not match"),
        ({"name": "fix", "value": "x", "dataType": "CORRECTION", "configId": "c"}, "CORRECTION"),
    ],
)
def test_invalid_scores_are_rejected_with_reasons(
    standin: LangfuseStandIn, client: Langfuse, bad: dict[str, Any], reason: str
) -> None:
    good = {"id": "good", "traceId": "t", "name": "fine", "value": 1.0}
    bad = {"id": "bad", "traceId": "t", **bad}

    response = client.api.scores.create(request=_raw([good, bad]))

    assert isinstance(response, CreateScoreBatchResults)
    assert (response.accepted, response.rejected) == (1, 1)
    assert reason in response.errors[0].message
    assert [score["id"] for score in standin.scores()] == ["good"]


def test_correction_score_is_named_output(standin: LangfuseStandIn, client: Langfuse) -> None:
    client.api.scores.create(
        request=[_score(id="c1", name="anything", value="better text", data_type="CORRECTION")]
    )
    (stored,) = standin.scores()
    assert stored["name"] == "output" and stored["stringValue"] == "better text"


def test_strict_names_can_be_relaxed_to_the_servers_rule() -> None:
    with LangfuseStandIn(strict_score_names=False) as lax:
        langfuse = _client(lax)
        try:
            response = langfuse.api.scores.create(request=[_score(name="n/" * 30, value=1.0)])
        finally:
            langfuse.shutdown()
    assert isinstance(response, CreateScoreBatchResponse)


def test_all_rejected_is_207_and_empty_batch_is_400(
    standin: LangfuseStandIn, client: Langfuse
) -> None:
    response = client.api.scores.create(request=_raw([{"name": "x", "value": 1.0}]))
    assert isinstance(response, CreateScoreBatchResults)
    assert (response.accepted, response.rejected) == (0, 1)
    with pytest.raises(BadRequestError):
        client.api.scores.create(request=[])


def test_replacement_key_is_id_name_and_utc_date(
    standin: LangfuseStandIn, client: Langfuse
) -> None:
    client.api.scores.create(request=[_score(id="s", name="q", value=0.1)])
    # Same id, name and UTC date (another time of day, another offset): replaces.
    same_day = datetime(2024, 5, 6, 23, 0, tzinfo=timezone(timedelta(hours=2)))  # 21:00 UTC
    client.api.scores.create(request=[_score(id="s", name="q", value=0.2, timestamp=same_day)])
    assert [score["value"] for score in standin.scores()] == [0.2]

    # Another UTC date, or another name: a second score.
    client.api.scores.create(
        request=[_score(id="s", name="q", value=0.3, timestamp=TS + timedelta(days=1))]
    )
    client.api.scores.create(request=[_score(id="s", name="other", value=0.4)])
    assert sorted(score["value"] for score in standin.scores()) == [0.2, 0.3, 0.4]
    assert standin.received_total == 4  # every accepted score, resends included


def test_fire_and_forget_create_score_reaches_the_standin(standin: LangfuseStandIn) -> None:
    langfuse = _client(standin, tracing_enabled=True)
    try:
        langfuse.create_score(name="thumbs", value=True, trace_id="t-1", data_type="BOOLEAN")
        langfuse.flush()
    finally:
        langfuse.shutdown()
    (stored,) = standin.scores()
    assert stored["name"] == "thumbs" and stored["value"] == 1


def test_single_object_body_as_the_current_server_route(standin: LangfuseStandIn) -> None:
    auth = (standin.public_key, standin.secret_key)
    ok = httpx.post(
        f"{standin.url}/api/public/scores",
        json={"id": "one", "traceId": "t", "name": "q", "value": 1},
        auth=auth,
    )
    assert ok.status_code == 200 and ok.json() == {"id": "one"}
    bad = httpx.post(
        f"{standin.url}/api/public/scores",
        json={"traceId": "t", "name": "q", "value": 3, "dataType": "BOOLEAN"},
        auth=auth,
    )
    assert bad.status_code == 400 and "0 or 1" in bad.json()["message"]


def test_concurrent_batches_are_all_counted(standin: LangfuseStandIn, client: Langfuse) -> None:
    def post(worker: int) -> None:
        for batch in range(5):
            client.api.scores.create(
                request=[
                    _score(id=f"w{worker}-b{batch}-{i}", name="q", value=1.0) for i in range(3)
                ]
            )

    threads = [threading.Thread(target=post, args=(worker,)) for worker in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert standin.received_total == 8 * 5 * 3
    assert len(standin.scores()) == 8 * 5 * 3
    assert standin.requests == 8 * 5


# -- score configs ------------------------------------------------------------------------


def test_score_config_create_get_and_list(standin: LangfuseStandIn, client: Langfuse) -> None:
    numeric = client.api.score_configs.create(
        name="quality", data_type="NUMERIC", min_value=0, max_value=1, description="0..1"
    )
    categorical = client.api.score_configs.create(
        name="tone",
        data_type="CATEGORICAL",
        categories=[ConfigCategory(label="rude", value=0), ConfigCategory(label="kind", value=1)],
    )
    boolean = client.api.score_configs.create(name="helpful", data_type="BOOLEAN")
    text = client.api.score_configs.create(name="note", data_type="TEXT")

    assert numeric.min_value == 0 and numeric.max_value == 1 and not numeric.is_archived
    assert numeric.project_id == standin.project_id
    assert [(c.label, c.value) for c in boolean.categories or []] == [("True", 1), ("False", 0)]
    assert text.categories is None

    fetched = client.api.score_configs.get_by_id(categorical.id)
    assert fetched.name == "tone" and fetched.data_type == "CATEGORICAL"
    listing = client.api.score_configs.get()
    assert [c.name for c in listing.data] == ["note", "helpful", "tone", "quality"]
    assert listing.meta.total_items == 4 and listing.meta.total_pages == 1
    assert len(standin.score_configs()) == 4

    with pytest.raises(NotFoundError):
        client.api.score_configs.get_by_id("no-such-id")


def test_score_config_names_are_not_unique(standin: LangfuseStandIn, client: Langfuse) -> None:
    first = client.api.score_configs.create(name="dup", data_type="NUMERIC")
    second = client.api.score_configs.create(name="dup", data_type="NUMERIC")
    assert first.id != second.id
    assert client.api.score_configs.get().meta.total_items == 2


def test_score_config_pagination(standin: LangfuseStandIn, client: Langfuse) -> None:
    for i in range(5):
        client.api.score_configs.create(name=f"c{i}", data_type="NUMERIC")

    pages = [client.api.score_configs.get(page=page, limit=2) for page in (1, 2, 3, 4)]

    assert [[c.name for c in page.data] for page in pages] == [
        ["c4", "c3"],
        ["c2", "c1"],
        ["c0"],
        [],
    ]
    meta = pages[0].meta
    assert (meta.page, meta.limit, meta.total_items, meta.total_pages) == (1, 2, 5, 3)
    for bad in ({"limit": 0}, {"limit": 101}, {"page": 0}):
        with pytest.raises(BadRequestError):
            client.api.score_configs.get(**bad)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"name": "x" * 36, "data_type": "NUMERIC"}, "1-35"),
        ({"name": "", "data_type": "NUMERIC"}, "1-35"),
        ({"name": "a/b", "data_type": "NUMERIC"}, "invalid characters"),
        ({"name": "n", "data_type": "NUMERIC", "min_value": 1, "max_value": 1}, "greater"),
        ({"name": "n", "data_type": "NUMERIC", "categories": [("a", 1)]}, "categories"),
        ({"name": "c", "data_type": "CATEGORICAL"}, "categories"),
        ({"name": "c", "data_type": "CATEGORICAL", "categories": [("a", 0), ("a", 1)]}, "label"),
        ({"name": "c", "data_type": "CATEGORICAL", "categories": [("a", 0), ("b", 0)]}, "value"),
        ({"name": "c", "data_type": "CATEGORICAL", "categories": [("", 0)]}, "label"),
        (
            {"name": "c", "data_type": "CATEGORICAL", "categories": [("a", 0)], "max_value": 3},
            "maxValue",
        ),
        ({"name": "b", "data_type": "BOOLEAN", "categories": [("yes", 1)]}, "BOOLEAN"),
        ({"name": "b", "data_type": "BOOLEAN", "categories": None}, "BOOLEAN"),
        ({"name": "t", "data_type": "TEXT", "max_value": 3}, "TEXT"),
        ({"name": "t", "data_type": "CORRECTION"}, "dataType"),
    ],
)
def test_score_config_validation_errors(
    standin: LangfuseStandIn, client: Langfuse, kwargs: dict[str, Any], reason: str
) -> None:
    if kwargs.get("categories"):
        kwargs["categories"] = [ConfigCategory(label=lb, value=v) for lb, v in kwargs["categories"]]
    with pytest.raises(BadRequestError) as raised:
        client.api.score_configs.create(**kwargs)
    assert raised.value.status_code == 400
    assert reason in str(raised.value.body)
    assert standin.score_configs() == []


def test_scores_against_configs(standin: LangfuseStandIn, client: Langfuse) -> None:
    quality = client.api.score_configs.create(
        name="quality", data_type="NUMERIC", min_value=0, max_value=1
    )
    tone = client.api.score_configs.create(
        name="tone",
        data_type="CATEGORICAL",
        categories=[ConfigCategory(label="rude", value=0), ConfigCategory(label="kind", value=1)],
    )
    response = client.api.scores.create(
        request=[
            _score(id="ok-num", name="whatever", value=0.5, config_id=quality.id),
            _score(id="ok-cat", name="tone", value="kind", config_id=tone.id),
            _score(id="too-high", name="quality", value=1.5, config_id=quality.id),
            _score(id="bad-label", name="tone", value="meh", config_id=tone.id),
            _score(id="wrong-type", name="tone", value="kind", config_id=tone.id, data_type="TEXT"),
        ]
    )
    assert isinstance(response, CreateScoreBatchResults)
    reasons = {getattr(e, "id", None): e.message for e in response.errors}
    assert "maximum value of 1" in reasons["too-high"]
    assert "does not map to a valid category" in reasons["bad-label"]
    assert "Data type mismatch" in reasons["wrong-type"]
    stored = {score["id"]: score for score in standin.scores()}
    assert stored["ok-num"]["name"] == "quality"  # overwritten with the config's name
    assert stored["ok-cat"]["value"] == 1 and stored["ok-cat"]["stringValue"] == "kind"

    client.api.score_configs.update(quality.id, is_archived=True)
    archived = client.api.scores.create(
        request=[_score(id="late", name="quality", value=0.5, config_id=quality.id)]
    )
    assert isinstance(archived, CreateScoreBatchResults)
    assert "archived" in archived.errors[0].message


# -- fault injection ----------------------------------------------------------------------


def test_fail_next_503_then_recovers(standin: LangfuseStandIn, client: Langfuse) -> None:
    standin.fail_next(2, status=503)
    batch = [_score(id="s", name="q", value=1.0)]
    for _ in range(2):
        with pytest.raises(ApiError) as raised:
            client.api.scores.create(request=batch, request_options=NO_RETRY)
        assert raised.value.status_code == 503
    assert standin.scores() == []

    assert isinstance(client.api.scores.create(request=batch), CreateScoreBatchResponse)
    assert standin.received_total == 1
    assert standin.requests == 3


def test_fail_next_429_is_retried_by_the_sdk(standin: LangfuseStandIn, client: Langfuse) -> None:
    standin.fail_next(1, status=429, retry_after=1)

    response = client.api.scores.create(request=[_score(id="s", name="q", value=1.0)])

    assert isinstance(response, CreateScoreBatchResponse)
    assert [r.status for r in standin.request_log()] == [429, 202]
    assert standin.request_log()[0].body == standin.request_log()[1].body
    assert standin.received_total == 1


def test_fail_next_only_touches_score_posts(standin: LangfuseStandIn, client: Langfuse) -> None:
    standin.fail_next(1, status=500)
    client.api.score_configs.create(name="unaffected", data_type="NUMERIC")
    with pytest.raises(ApiError) as raised:
        client.api.scores.create(request=[_score(name="q", value=1.0)], request_options=NO_RETRY)
    assert raised.value.status_code == 500


def test_down_answers_503_everywhere(standin: LangfuseStandIn, client: Langfuse) -> None:
    standin.set_down(True)
    with pytest.raises(ServiceUnavailableError):
        client.api.health.health(request_options=NO_RETRY)
    with pytest.raises(ApiError) as raised:
        client.api.scores.create(request=[_score(name="q", value=1.0)], request_options=NO_RETRY)
    assert raised.value.status_code == 503
    with pytest.raises(ApiError):
        client.api.score_configs.get(request_options=NO_RETRY)

    standin.set_down(False)
    assert isinstance(
        client.api.scores.create(request=[_score(name="q", value=1.0)]), CreateScoreBatchResponse
    )


def test_delay_slows_answers_and_a_timed_out_batch_may_be_stored(
    standin: LangfuseStandIn, client: Langfuse
) -> None:
    standin.set_delay(0.3)
    started = time.monotonic()
    client.api.health.health()
    assert time.monotonic() - started >= 0.3

    standin.set_delay(1.5)
    with pytest.raises(httpx.TimeoutException):
        client.api.scores.create(
            request=[_score(id="slow", name="q", value=1.0)],
            request_options={"timeout_in_seconds": 1, "max_retries": 0},
        )
    # The stand-in processed the batch before holding the answer back.
    assert [score["id"] for score in standin.scores()] == ["slow"]


def test_stop_and_start_keep_the_url(standin: LangfuseStandIn, client: Langfuse) -> None:
    url = standin.url
    standin.stop()
    with pytest.raises(httpx.ConnectError):
        client.api.health.health()
    standin.start()
    assert standin.url == url
    assert client.api.health.health().status == "OK"


def test_reset_forgets_everything(standin: LangfuseStandIn, client: Langfuse) -> None:
    client.api.scores.create(request=[_score(name="q", value=1.0)])
    client.api.score_configs.create(name="c", data_type="NUMERIC")
    standin.set_down(True)

    standin.reset()

    assert standin.scores() == [] and standin.score_configs() == []
    assert standin.received_total == 0 and standin.requests == 0
    assert client.api.health.health().status == "OK"  # no longer down


# -- scores route choice and the ingestion route -------------------------------------------


def _post(standin: LangfuseStandIn, path: str, body: Any) -> httpx.Response:
    return httpx.post(f"{standin.url}{path}", json=body,
                      auth=(standin.public_key, standin.secret_key))


def _event(event_id: str | None, body: Any, *, kind: str = "score-create",
           timestamp: str | None = "2024-05-06T07:08:09.000Z") -> dict[str, Any]:
    event: dict[str, Any] = {"type": kind, "body": body}
    if event_id is not None:
        event["id"] = event_id
    if timestamp is not None:
        event["timestamp"] = timestamp
    return event


def test_single_scores_route_answers_an_array_with_400_and_takes_one_object() -> None:
    with LangfuseStandIn(scores_route="single") as standin:
        array = _post(standin, "/api/public/scores",
                      [{"id": "a", "traceId": "t", "name": "q", "value": 1}])
        assert array.status_code == 400
        assert array.json()["message"] == "Invalid request data"
        assert standin.scores() == []
        one = _post(standin, "/api/public/scores",
                    {"id": "a", "traceId": "t", "name": "q", "value": 1})
        assert one.status_code == 200 and one.json() == {"id": "a"}
        assert [s["id"] for s in standin.scores()] == ["a"]


def test_scores_route_must_be_batch_or_single() -> None:
    with pytest.raises(ValueError, match="scores_route"):
        LangfuseStandIn(scores_route=cast(Any, "both"))


@pytest.mark.parametrize("route", ["batch", "single"])
def test_ingestion_stores_score_create_events_and_answers_207(route: str) -> None:
    with LangfuseStandIn(scores_route=cast(Any, route)) as standin:
        answer = _post(standin, "/api/public/ingestion", {
            "batch": [
                _event("e1", {"id": "s1", "traceId": "t", "name": "q", "value": 1,
                              "dataType": "BOOLEAN", "timestamp": "2024-05-06T07:08:09Z"}),
                _event("e2", {"id": "s2", "sessionId": "c", "name": "note", "value": "ok",
                              "dataType": "TEXT", "metadata": {"tenant": "acme"}}),
            ],
            "metadata": {"batch_size": 2},
        })
        assert answer.status_code == 207
        assert answer.json() == {"successes": [{"id": "e1", "status": 201},
                                               {"id": "e2", "status": 201}], "errors": []}
        stored = {s["id"]: s for s in standin.scores()}
        assert stored["s1"]["dataType"] == "BOOLEAN" and stored["s1"]["stringValue"] == "True"
        assert stored["s1"]["timestamp"] == "2024-05-06T07:08:09.000Z"
        assert stored["s2"]["sessionId"] == "c" and stored["s2"]["metadata"] == {"tenant": "acme"}
        assert standin.received_total == 2


def test_ingestion_event_errors_are_entries_not_4xx(standin: LangfuseStandIn) -> None:
    valid = {"id": "s-ok", "traceId": "t", "name": "q", "value": 0.5}
    answer = _post(standin, "/api/public/ingestion", {"batch": [
        _event("e-ok", valid),
        _event("e-type", valid, kind="trace-create"),
        _event(None, valid),
        _event("e-nobody", None),
        _event("e-notime", valid, timestamp=None),
        _event("e-bool", {"id": "s-bool", "traceId": "t", "name": "q", "value": 3,
                          "dataType": "BOOLEAN"}),
        _event("e-target", {"id": "s-target", "name": "q", "value": 1}),
        _event("e-config", {"id": "s-config", "traceId": "t", "name": "q", "value": 1,
                            "configId": "missing"}),
        "not an event",
    ]})
    assert answer.status_code == 207
    result = answer.json()
    assert result["successes"] == [{"id": "e-ok", "status": 201}]
    errors = {e["id"]: e for e in result["errors"]}
    assert len(result["errors"]) == 8
    assert all(e["message"] == "Invalid request data" for e in result["errors"])
    assert "score-create" in errors["e-type"]["error"]
    assert "body" in errors["e-nobody"]["error"]
    assert "timestamp" in errors["e-notime"]["error"]
    assert "0 or 1" in errors["e-bool"]["error"]
    assert "exactly one" in errors["e-target"]["error"]
    assert errors["e-config"]["status"] == 404
    assert errors["e-bool"]["status"] == 400
    assert [s["id"] for s in standin.scores()] == ["s-ok"]


def test_ingestion_rejects_by_id_and_faults_apply(standin: LangfuseStandIn) -> None:
    body = {"batch": [_event("e1", {"id": "s1", "traceId": "t", "name": "q", "value": 1}),
                      _event("e2", {"id": "s2", "traceId": "t", "name": "q", "value": 2})]}
    standin.fail_next(1, status=503)
    assert _post(standin, "/api/public/ingestion", body).status_code == 503
    standin.reject_ids({"s2"}, "over quota")
    answer = _post(standin, "/api/public/ingestion", body).json()
    assert answer["successes"] == [{"id": "e1", "status": 201}]
    assert answer["errors"] == [{"id": "e2", "status": 400, "message": "Invalid request data",
                                 "error": "over quota"}]
    assert [s["id"] for s in standin.scores()] == ["s1"]


def test_ingestion_body_shape_and_size(standin: LangfuseStandIn) -> None:
    not_a_batch = _post(standin, "/api/public/ingestion", [{"id": "x"}])
    assert not_a_batch.status_code == 400
    assert not_a_batch.json()["message"] == "Invalid request data"
    huge = {"batch": [_event("e", {"id": "s", "traceId": "t", "name": "q",
                                   "value": "x" * 3_600_000})]}
    assert _post(standin, "/api/public/ingestion", huge).status_code == 413
    unauthorized = httpx.post(f"{standin.url}/api/public/ingestion", json={"batch": []})
    assert unauthorized.status_code == 401
    assert _post(standin, "/api/public/ingestion", {"batch": []}).json() == {
        "successes": [], "errors": []}
    assert standin.scores() == []
