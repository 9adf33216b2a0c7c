"""Langfuse adapters: a score sink that writes its own requests, and a score-config store.

The SDK's `create_score` queues scores and sends them from a background thread, logging errors
it does not report back; a sink that advances a Kafka cursor must know the answer. The SDK's
synchronous `api.scores.create` does answer, but builds and serializes a pydantic model per
score (about 0.46 ms each, which capped the sink at ~1,400 scores/s). So `LangfuseScoreSink`
builds each score's JSON body itself, from the Score's fields straight into a dict serialized
with orjson, with exactly the fields the SDK would send (tests compare the two field for
field), and posts it through one pooled `httpx.AsyncClient` set up like the SDK's (base URL,
Basic auth, timeouts, connection-error retries, a pool as large as the sink's concurrency).

Two server routes take scores, and the sink finds out once which one the server has:

- ``POST /api/public/scores`` with a JSON array (servers matching SDK 5.x): 202, or 207 with
  the rejected scores listed;
- ``POST /api/public/ingestion`` with ``score-create`` events (every server version; used when
  the scores route takes one score only and answers an array with 400 "Invalid request
  data"): 207 with per-event successes and errors.

The first request goes to the scores route; its answer decides, the sink logs one INFO line
naming the route, and keeps to it. In both modes per-score refusals come back as `Rejected`;
429, 5xx and transport errors raise `SinkError` (the runner retries and does not advance);
any other 4xx of a whole request rejects that request's scores. Requests are split by count
(`batch_size`) and by bytes, under each route's body limit.

The SDK is still used for what it does well: score configs (`LangfuseScoreConfigStore`), and
the connection details of a `Langfuse` client.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal

from streams.core.errors import ConfigError, SinkError, ValidationFailed
from streams.core.scores import Category, Score, ScoreConfig
from streams.core.sinks.base import Rejected
from streams.extras import needs

with needs("langfuse", "the Langfuse sink"):
    import httpx
    import orjson
    from langfuse import Langfuse
    from langfuse.api.commons.types.config_category import ConfigCategory
    from langfuse.api.scores.types.create_score_request import CreateScoreRequest

__all__ = [
    "INGESTION_MAX_BYTES",
    "INGESTION_ROUTE",
    "MAX_BATCH",
    "SCORES_MAX_BYTES",
    "SCORES_ROUTE",
    "LangfuseConnection",
    "LangfuseProject",
    "LangfuseScoreConfigStore",
    "LangfuseScoreSink",
    "Route",
    "event_id",
    "iso8601",
    "read_projects",
    "score_body",
    "to_request",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LangfuseProject:
    """One Langfuse project's keys and host (None: the default host)."""

    public_key: str
    secret_key: str
    host: str | None = None


def read_projects(path: str) -> dict[str, LangfuseProject]:
    """The Langfuse project of each tenant from STREAMS_LANGFUSE_PROJECTS's JSON file,
    `{"<tenant>": {"public_key": "pk-lf-...", "secret_key": "sk-lf-...", "host": "..."}}`
    (`host` optional); ConfigError naming the file, the tenant and the field that is wrong."""
    try:
        with open(path, encoding="utf-8") as file:
            table = json.load(file)
    except OSError as exc:
        raise ConfigError(f"STREAMS_LANGFUSE_PROJECTS: cannot read {path}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"STREAMS_LANGFUSE_PROJECTS: {path} is not JSON: {exc}") from exc
    if not isinstance(table, dict) or not table:
        raise ConfigError(f"STREAMS_LANGFUSE_PROJECTS: {path} must be a JSON object of "
                          'tenants, e.g. {"acme": {"public_key": "pk-lf-...", '
                          '"secret_key": "sk-lf-..."}}')
    projects: dict[str, LangfuseProject] = {}
    for tenant, keys in table.items():
        if not isinstance(keys, dict) or not {"public_key", "secret_key"} <= set(keys) \
                or set(keys) - {"public_key", "secret_key", "host"}:
            raise ConfigError(f"STREAMS_LANGFUSE_PROJECTS: tenant {tenant!r} in {path} needs "
                              '"public_key" and "secret_key" (and optionally "host"), got '
                              f"{sorted(keys) if isinstance(keys, dict) else keys!r}")
        for name in keys:
            if not isinstance(keys[name], str) or not keys[name]:
                raise ConfigError(f"STREAMS_LANGFUSE_PROJECTS: tenant {tenant!r} in {path}: "
                                  f"{name!r} must be a non-empty string")
        projects[tenant] = LangfuseProject(keys["public_key"], keys["secret_key"],
                                           keys.get("host"))
    return projects

# Langfuse's batch limits: at most this many scores per request.
MAX_BATCH: Final = 100

SCORES_ROUTE: Final = "/api/public/scores"
INGESTION_ROUTE: Final = "/api/public/ingestion"
# Body limits: the SDK's 1,000,000-byte batches on the scores route; Langfuse's 3.5 MB batch
# limit on the ingestion route.
SCORES_MAX_BYTES: Final = 1_000_000
INGESTION_MAX_BYTES: Final = 3_500_000

Route = Literal["scores", "ingestion"]
"""Which route the sink sends scores to: score batches, or score-create ingestion events."""

_SDK_NAME: Final = "feedback-streams"
# Room kept for the wrapper around the items: `[` `]` or `{"batch":[...],"metadata":{...}}`.
_ENVELOPE_BYTES: Final = 1_024


def iso8601(moment: datetime) -> str:
    """A timestamp as the SDK writes it: ISO 8601 with its offset, ``Z`` for UTC.

    A naive datetime is taken as UTC (Langfuse needs an offset; scores carry aware times).
    """
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    text = moment.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def score_body(score: Score, *, environment: str | None = None,
               config_id: str | None = None) -> dict[str, Any]:
    """The JSON object of one score, camelCase, None fields omitted: what the SDK sends.

    Deterministic id, the feedback's event time as timestamp, the source as metadata, on the
    target's trace or else its session. The same fields as `to_request` gives the SDK.
    """
    value = score.value
    body: dict[str, Any] = {"id": score.id}
    if score.trace_id:
        body["traceId"] = score.trace_id
    elif score.session_id is not None:
        body["sessionId"] = score.session_id
    if score.observation_id is not None:
        body["observationId"] = score.observation_id
    body["name"] = score.name
    body["value"] = value if isinstance(value, str) else float(value)
    if score.comment is not None:
        body["comment"] = score.comment
    body["metadata"] = {**score.source.as_metadata(), **score.metadata}
    if environment is not None:
        body["environment"] = environment
    body["dataType"] = score.data_type
    if config_id is not None:
        body["configId"] = config_id
    body["timestamp"] = iso8601(score.timestamp)
    return body


def to_request(score: Score, *, environment: str | None = None,
               config_id: str | None = None) -> CreateScoreRequest:
    """The SDK request of one score, with the same fields as `score_body` (None left unset,
    so the SDK omits them too). The sink does not use it; tests compare against it."""
    fields: dict[str, Any] = {
        "id": score.id, "name": score.name, "value": score.value,
        "data_type": score.data_type,
        "trace_id": score.trace_id or None,
        "session_id": None if score.trace_id else score.session_id,
        "observation_id": score.observation_id, "timestamp": score.timestamp,
        "comment": score.comment,
        "metadata": {**score.source.as_metadata(), **score.metadata},
        "environment": environment, "config_id": config_id,
    }
    return CreateScoreRequest(**{k: v for k, v in fields.items() if v is not None})


def event_id(score: Score) -> str:
    """The ingestion event id of a score: its id and the event type, so a resend reuses it
    and no two scores of a batch share one (a plain string: cheaper than a uuid5 per score,
    and Langfuse takes any string)."""
    return f"{score.id}:score-create"


@dataclass(frozen=True, slots=True)
class LangfuseConnection:
    """Where and as whom the sink posts: base URL, keys, and the SDK's identifying headers."""

    base_url: str
    public_key: str
    secret_key: str
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, client: Langfuse) -> LangfuseConnection:
        """The connection a `Langfuse` client was configured with (host, keys, headers)."""
        wrapper = getattr(getattr(client, "async_api", None), "_client_wrapper", None)
        try:
            base_url = str(wrapper.get_base_url())  # type: ignore[union-attr]
            public_key = wrapper._get_username()  # type: ignore[union-attr]
            secret_key = wrapper._get_password()  # type: ignore[union-attr]
            sdk_headers = dict(wrapper.get_headers())  # type: ignore[union-attr]
        except AttributeError as exc:
            raise ValidationFailed(
                "cannot read the host and keys of this Langfuse client (another SDK "
                "version?); pass LangfuseScoreSink(client, connection=LangfuseConnection("
                "base_url=..., public_key=..., secret_key=...))") from exc
        if not public_key or not secret_key:
            raise ValidationFailed(
                "the Langfuse client has no public or secret key; set LANGFUSE_PUBLIC_KEY and "
                "LANGFUSE_SECRET_KEY or pass public_key= and secret_key= to Langfuse(...)")
        headers = {k: v for k, v in sdk_headers.items()
                   if k.lower().startswith("x-langfuse-")}
        return cls(base_url=base_url, public_key=str(public_key), secret_key=str(secret_key),
                   headers=headers)


@dataclass(slots=True)
class _Pool:
    """The HTTP client of one event loop (httpx clients cannot move between loops)."""

    loop: asyncio.AbstractEventLoop
    http: httpx.AsyncClient
    limit: asyncio.Semaphore
    detecting: asyncio.Lock


@dataclass(frozen=True, slots=True)
class _Item:
    score: Score
    body: bytes  # the score's JSON object


class LangfuseScoreSink:
    """A ScoreSink posting scores to Langfuse's public API with its own JSON bodies.

    `client` gives the host and keys (or pass `connection`); `batch_size` scores at most per
    request, `concurrency` requests at a time, `timeout` seconds per request, `connect_retries`
    retries of a connection that could not be made. `environment`, when set, is sent with
    every score. `route` fixes the route instead of detecting it. `transport` replaces the
    pooled HTTP transport (tests; then `connect_retries` and the pool limits are its own).
    """

    def __init__(self, client: Langfuse | None = None, *, batch_size: int = MAX_BATCH,
                 timeout: float = 30.0, identity: str = "langfuse", concurrency: int = 4,
                 connection: LangfuseConnection | None = None, environment: str | None = None,
                 connect_retries: int = 2, route: Route | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        if connection is None:
            if client is None:
                raise ValidationFailed(
                    "LangfuseScoreSink needs a Langfuse client or connection=LangfuseConnection"
                    "(...)")
            connection = LangfuseConnection.of(client)
        self.client = client
        self.connection = connection
        self.identity = identity
        self.concurrency = max(1, concurrency)
        self.batch_size = max(1, min(batch_size, MAX_BATCH))
        self.timeout = timeout
        self.environment = environment
        self.connect_retries = max(0, connect_retries)
        self._route: Route | None = route
        self._transport = transport
        self._pool_: _Pool | None = None

    @property
    def route(self) -> Route | None:
        """The route in use, or None until the first answer has decided it."""
        return self._route

    async def record(self, scores: Sequence[Score], /) -> Sequence[Rejected]:
        """Send scores in requests of at most `batch_size` scores and the route's byte limit,
        up to `concurrency` at a time; returns the rejected ones, raises SinkError (after every
        request has answered) to retry the whole call."""
        if not scores:
            return []
        pool = self._pool()
        items = [self._item(s) for s in scores]
        rejected: list[Rejected] = []
        while self._route is None and items:
            async with pool.detecting:
                if self._route is not None:
                    break
                # Probe with the first request's worth of scores that fit the scores route;
                # a larger one waits for the route (ingestion takes more), unless none fits.
                fits = [item for item in items if self._need(item, "scores") is not None]
                if not fits:
                    return rejected + self._chunks(items, "scores")[1]
                first = self._chunks(fits, "scores")[0][0]
                sent = {id(item) for item in first}
                items = [item for item in items if id(item) not in sent]
                rejected += await self._probe(pool, first)
        route = self._route
        if route is None or not items:
            return rejected
        chunks, rejected_now = self._chunks(items, route)
        rejected += rejected_now

        async def send(chunk: list[_Item]) -> list[Rejected]:
            async with pool.limit:
                return await self._post(pool, route, chunk)

        answers = await asyncio.gather(*(send(c) for c in chunks), return_exceptions=True)
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
            rejected += answer
        return rejected

    async def flush(self) -> None:
        """Nothing is buffered (every record() call is answered before it returns); closes
        the connection pool, which the next record() opens again."""
        pool, self._pool_ = self._pool_, None
        if pool is not None:
            await pool.http.aclose()

    async def aclose(self) -> None:
        """Close the connection pool (same as flush)."""
        await self.flush()

    # -- requests --------------------------------------------------------------------------

    def _pool(self) -> _Pool:
        loop = asyncio.get_running_loop()
        pool = self._pool_
        if pool is not None and pool.loop is loop:
            return pool
        limits = httpx.Limits(max_connections=self.concurrency,
                              max_keepalive_connections=self.concurrency)
        http = httpx.AsyncClient(
            base_url=self.connection.base_url.rstrip("/"),
            auth=httpx.BasicAuth(self.connection.public_key, self.connection.secret_key),
            headers={**self.connection.headers, "Content-Type": "application/json"},
            timeout=httpx.Timeout(self.timeout),
            follow_redirects=True,  # as the SDK's client
            transport=self._transport or httpx.AsyncHTTPTransport(
                retries=self.connect_retries, limits=limits),
        )
        self._pool_ = pool = _Pool(loop, http, asyncio.Semaphore(self.concurrency),
                                   asyncio.Lock())
        return pool

    def _item(self, score: Score) -> _Item:
        return _Item(score, orjson.dumps(score_body(score, environment=self.environment)))

    @staticmethod
    def _need(item: _Item, route: Route) -> int | None:
        """The bytes an item adds to a request on the route, None when it cannot fit one."""
        need = len(item.body) + 1  # and a comma
        if route == "ingestion":  # the event around it; its id quoted, escapes at worst
            need += _EVENT_OVERHEAD + 2 * len(item.score.id.encode()) + 2
        return need if need <= _limit(route) else None

    def _chunks(self, items: list[_Item], route: Route
                ) -> tuple[list[list[_Item]], list[Rejected]]:
        """Requests of at most batch_size items and the route's byte limit; a score too large
        for any request is rejected."""
        limit = _limit(route)
        chunks: list[list[_Item]] = []
        rejected: list[Rejected] = []
        chunk: list[_Item] = []
        size = 0
        for item in items:
            need = self._need(item, route)
            if need is None:
                rejected.append(Rejected(item.score, (
                    f"the score is {len(item.body):,} bytes as JSON, more than a request to "
                    f"{_path(route)} may carry ({limit:,}); shorten its comment or metadata")))
                continue
            if chunk and (len(chunk) >= self.batch_size or size + need > limit):
                chunks.append(chunk)
                chunk, size = [], 0
            chunk.append(item)
            size += need
        if chunk:
            chunks.append(chunk)
        return chunks, rejected

    async def _probe(self, pool: _Pool, chunk: list[_Item]) -> list[Rejected]:
        """The first request: an array to the scores route; its answer decides the route."""
        response = await self._send(pool, SCORES_ROUTE, _array(chunk))
        if response.status_code == 400 and _says_invalid_request(response):
            self._route = "ingestion"
            log.info("langfuse at %s takes one score per POST %s (an array got 400 Invalid "
                     "request data); sending scores as score-create events to POST %s",
                     self.connection.base_url, SCORES_ROUTE, INGESTION_ROUTE)
            chunks, rejected = self._chunks(chunk, "ingestion")
            for part in chunks:
                rejected += await self._post(pool, "ingestion", part)
            return rejected
        rejected = self._read(response, "scores", chunk)
        if 200 <= response.status_code < 300:
            self._route = "scores"
            log.info("langfuse at %s takes score batches on POST %s; sending scores there",
                     self.connection.base_url, SCORES_ROUTE)
        return rejected

    async def _post(self, pool: _Pool, route: Route, chunk: list[_Item]) -> list[Rejected]:
        body = _array(chunk) if route == "scores" else self._events(chunk)
        response = await self._send(pool, _path(route), body)
        return self._read(response, route, chunk)

    async def _send(self, pool: _Pool, path: str, body: bytes) -> httpx.Response:
        try:
            return await pool.http.post(path, content=body)
        except httpx.HTTPError as exc:
            raise SinkError(
                f"langfuse unreachable at {self.connection.base_url}{path}: {exc!r}; check "
                "LANGFUSE_HOST and that the server is up (the batch will be retried)") from exc

    def _events(self, chunk: list[_Item]) -> bytes:
        now = orjson.dumps(iso8601(datetime.now(UTC)))
        events = b",".join(
            b'{"id":' + orjson.dumps(event_id(item.score)) + b',"timestamp":' + now
            + b',"type":"score-create","body":' + item.body + b"}"
            for item in chunk)
        metadata = orjson.dumps({"batch_size": len(chunk), "sdk_name": _SDK_NAME,
                                 "public_key": self.connection.public_key})
        return b'{"batch":[' + events + b'],"metadata":' + metadata + b"}"

    def _read(self, response: httpx.Response, route: Route,
              chunk: list[_Item]) -> list[Rejected]:
        """Rejections from an answer; SinkError for answers that ask for a retry."""
        status = response.status_code
        where = f"POST {_path(route)}"
        if status == 429 or status >= 500:
            raise SinkError(f"langfuse answered {status} to {where}: {_text(response)} (the "
                            "batch will be retried)")
        if not 200 <= status < 300:
            # Any other 4xx (or a redirect that could not be followed) refuses the whole
            # request for good: dead-letter every score.
            reason = f"langfuse answered {status} to {where}: {_text(response)}"
            return [Rejected(item.score, reason) for item in chunk]
        if status != 207:
            return []
        try:
            answer = orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise SinkError(f"langfuse answered 207 to {where} with a body that is not JSON: "
                            f"{_text(response)} (the batch will be retried)") from exc
        if route == "scores":
            return _score_errors(answer, chunk)
        return _event_errors(answer, chunk, where)


_EVENT_OVERHEAD: Final = len(
    b'{"id":,"timestamp":"2026-01-01T00:00:00.000000+00:00",'
    b'"type":"score-create","body":}') + len(":score-create")


def _limit(route: Route) -> int:
    """The bytes of scores a request on the route may carry, its wrapper left aside."""
    return (SCORES_MAX_BYTES if route == "scores" else INGESTION_MAX_BYTES) - _ENVELOPE_BYTES


def _path(route: Route) -> str:
    return SCORES_ROUTE if route == "scores" else INGESTION_ROUTE


def _array(chunk: list[_Item]) -> bytes:
    return b"[" + b",".join(item.body for item in chunk) + b"]"


def _text(response: httpx.Response) -> str:
    return response.text[:500]


def _says_invalid_request(response: httpx.Response) -> bool:
    try:
        answer = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return False
    message = answer.get("message") if isinstance(answer, dict) else None
    return isinstance(message, str) and message.startswith("Invalid request data")


def _score_errors(answer: Any, chunk: list[_Item]) -> list[Rejected]:
    """The scores route's 207: errors name a score by index and/or id."""
    errors = answer.get("errors") if isinstance(answer, dict) else None
    by_id = {item.score.id: item.score for item in chunk}
    out: list[Rejected] = []
    for error in errors or []:
        if not isinstance(error, dict):
            log.warning("langfuse rejected a score it did not identify: %s", error)
            continue
        message = str(error.get("message") or error)
        index, score_id = error.get("index"), error.get("id")
        if isinstance(index, int) and 0 <= index < len(chunk):
            out.append(Rejected(chunk[index].score, message))
        elif isinstance(score_id, str) and score_id in by_id:
            out.append(Rejected(by_id[score_id], message))
        else:
            log.warning("langfuse rejected a score it did not identify: %s", message)
    return out


def _event_errors(answer: Any, chunk: list[_Item], where: str) -> list[Rejected]:
    """The ingestion route's 207: errors name an event by id, with a status of their own;
    an error that asks for a retry (429, 5xx) retries the whole request."""
    errors = answer.get("errors") if isinstance(answer, dict) else None
    if not errors:
        return []
    by_event = {event_id(item.score): item.score for item in chunk}
    out: list[Rejected] = []
    for error in errors:
        if not isinstance(error, dict):
            log.warning("langfuse rejected an event it did not identify: %s", error)
            continue
        status = error.get("status")
        detail = error.get("error")
        message = str(error.get("message") or "rejected") + (f": {detail}" if detail else "")
        if isinstance(status, int) and (status == 429 or status >= 500):
            raise SinkError(f"langfuse answered {status} for a score event in {where}: "
                            f"{message} (the batch will be retried)")
        score = by_event.get(str(error.get("id")))
        if score is None:
            log.warning("langfuse rejected an event it did not identify: %s", message)
            continue
        out.append(Rejected(score, f"{status}: {message}" if status else message))
    return out


class LangfuseScoreConfigStore:
    """A ScoreConfigStore over Langfuse's score configs."""

    def __init__(self, client: Langfuse) -> None:
        self.client = client

    async def list(self) -> Sequence[ScoreConfig]:
        """Every config, across pages."""
        out: list[ScoreConfig] = []
        page = 1
        while True:
            answer = await self.client.async_api.score_configs.get(page=page, limit=100)
            for item in answer.data:
                out.append(_from_langfuse(item))
            if page >= (answer.meta.total_pages or 1):
                return out
            page += 1

    async def create(self, config: ScoreConfig, /) -> None:
        """Create one config (Langfuse keeps duplicates: sync_score_configs lists first)."""
        kwargs: dict[str, Any] = {"name": config.name, "data_type": config.data_type}
        if config.data_type == "CATEGORICAL":
            kwargs["categories"] = [ConfigCategory(label=c.label, value=c.value)
                                    for c in config.categories]
        if config.data_type == "NUMERIC":
            if config.min_value is not None:
                kwargs["min_value"] = config.min_value
            if config.max_value is not None:
                kwargs["max_value"] = config.max_value
        if config.description:
            kwargs["description"] = config.description
        await self.client.async_api.score_configs.create(**kwargs)


def _from_langfuse(item: Any) -> ScoreConfig:
    data_type = str(getattr(item.data_type, "value", item.data_type))
    categories = () if data_type != "CATEGORICAL" else tuple(
        Category(label=c.label, value=float(c.value)) for c in (item.categories or []))
    name = str(item.name)
    return ScoreConfig(
        name=name, field=name.rpartition(".")[2], data_type=data_type,  # type: ignore[arg-type]
        categories=categories, min_value=item.min_value, max_value=item.max_value,
        description=item.description,
    )
