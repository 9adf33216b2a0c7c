"""A Langfuse stand-in HTTP server for tests. It is NOT Langfuse.

A real Langfuse server needs Postgres, ClickHouse, Redis and S3, so tests talk to this small
loopback server instead. It plays the part of the public API that the langfuse Python SDK 5.x
uses for scores, score configs and datasets, and it applies the server's rules listed below.
It was checked against the langfuse 5.0.4 wheel (what the SDK sends, which response models it
parses) and the langfuse server sources (validation rules, storage key). Anything it does not
list, it does not do: no observations or traces through the ingestion route, no reading
scores or traces back through the API, no asynchronous worker (rules the real server applies
later in its worker are applied here at once, in the answer).

Endpoints (standard library only: ``http.server.ThreadingHTTPServer`` on a background thread,
bound to 127.0.0.1, port 0 = chosen by the OS):

- ``GET /api/public/health``: ``{"status": "OK", "version": ...}``; needs no credentials.
- ``GET /api/public/projects``: one project, enough for ``Langfuse.auth_check()``.
- ``POST /api/public/scores``: a JSON array of camelCase scores, as the SDK sends it
  (``langfuse.api.scores.create(request=[...])`` and the background ``create_score`` queue).
  Answers 202 ``{"message": "Accepted"}`` when every score is valid, else 207
  ``{"accepted": n, "rejected": m, "errors": [{"index": i, "id": ..., "message": ...}]}``
  (the SDK parses both into ``CreateScoresResponse``). A single JSON object is also taken, as
  the current public server route takes it: 200 ``{"id": ...}`` or 400 ``{"message": ...}``.
  Bodies over 1,000,000 bytes get 413; a body that is not JSON, or an empty array, gets 400.
  With ``scores_route="single"`` the route behaves as the public server code does: it takes
  ONE score object only, and an array gets 400 ``{"message": "Invalid request data", ...}``.
- ``POST /api/public/ingestion``: ``{"batch": [event, ...], "metadata": {...}}``, the batched
  route every server version has (SDK <= 4.x sent scores this way). Each event is
  ``{"id", "timestamp", "type": "score-create", "body": <score as above>}``; the score body is
  checked with the same rules as on the scores route. Always 207 ``{"successes": [{"id",
  "status": 201}], "errors": [{"id", "status", "message": "Invalid request data",
  "error"}]}``: an event that is not an object, lacks an id, timestamp or body, has another
  type (the stand-in keeps no traces or observations, so it takes ``score-create`` only,
  where Langfuse would accept the other types), or whose score breaks a rule is an error entry
  (status 400, or 404 for a missing config), never a 4xx of the request. A body that is not
  ``{"batch": [...]}`` gets 400; a body over 3,500,000 bytes (Langfuse's 3.5 MB batch limit)
  gets 413.
- ``POST /api/public/otel/v1/traces``: OpenTelemetry spans over OTLP/HTTP, as Langfuse takes
  them: an ``ExportTraceServiceRequest`` in binary protobuf (``Content-Type:
  application/x-protobuf``, what the OTLP HTTP exporter sends) or its JSON mapping
  (``application/json``), optionally ``Content-Encoding: gzip``. Answers 200 with an empty
  ``ExportTraceServiceResponse`` (in the request's encoding); a body that does not parse gets
  400, another content type 415. Every span is kept for this project (``traces()``): trace
  and span ids in hex, name, attributes and the resource's ``service.name``. One stand-in is
  one project: its keys are the project's, so two stand-ins are two projects, kept apart.
- ``POST/GET /api/public/score-configs`` (create; paginated list) and
  ``GET/PATCH /api/public/score-configs/{id}``.
- Datasets, as SDK 5.0.4 calls them (``api.datasets``, ``api.dataset_items``):
  ``POST/GET /api/public/v2/datasets`` (create; paginated list), ``GET
  /api/public/v2/datasets/{name}``, ``POST/GET /api/public/dataset-items`` (create; paginated
  list, ``datasetName`` filter) and ``GET /api/public/dataset-items/{id}``. Scores on a
  dataset run are scores with a ``datasetRunId`` on the scores route (above).
- Anything else: 404 ``{"message": ...}``; a known path with another method: 405.

Every endpoint but health checks HTTP Basic auth ``public_key:secret_key`` and answers 401 on a
missing or wrong key.

Score rules enforced (each failing score is rejected with its reason; the others are stored):

- ``name`` a non-empty string. With ``strict_score_names=True`` (the default) also 1-35
  characters of letters, digits, ``_ . ( ) -`` and space. The real server applies that rule to
  score config names only; the stand-in applies it to scores too so that a name which could
  never carry a config is caught early. Pass ``strict_score_names=False`` to follow the server.
- ``dataType`` one of NUMERIC, BOOLEAN, CATEGORICAL, TEXT, CORRECTION. When absent it is the
  config's type with a ``configId``, else NUMERIC for a number and CATEGORICAL for a string.
- ``value``: NUMERIC a finite number; BOOLEAN 0 or 1; CATEGORICAL a string; TEXT a string of
  1-500 characters; CORRECTION a string, never with a config, only on a trace (its name becomes
  ``output``).
- Exactly one of ``traceId``, ``sessionId``, ``datasetRunId``; ``observationId`` only with
  ``traceId``.
- ``source`` API (default) or ANNOTATION; ANNOTATION needs a ``configId`` unless CORRECTION.
- ``timestamp`` (optional, default: time received) an ISO 8601 datetime WITH a UTC offset.
- ``environment`` normalised as the server does: lower case, leading ``langfuse`` prefixes
  stripped, cut to 40 characters, ``default`` when empty or not ``[a-z0-9-_]``.
- With ``configId``: the config must exist and not be archived; a given ``dataType`` must match
  the config's; NUMERIC within [minValue, maxValue]; CATEGORICAL one of the category labels
  (stored value = the category's value); the score's name is replaced by the config's name.

Storage follows Langfuse's replacement key ``(id, name, UTC date of timestamp)``: a score with
the same key replaces the stored one, anything else adds a score (so a resend on another day
duplicates). ``received_total`` counts every accepted score, resends included. Stored scores
are dicts with the server's fields: ``value`` is numeric (0 for TEXT, the category's value for
CATEGORICAL with a config), ``stringValue`` holds labels and texts.

Dataset rules: a dataset's ``name`` is a non-empty string; creating a dataset whose name
exists updates it (``description``, ``metadata`` and the schemas when given) and keeps its id,
as Langfuse's upsert does; the schemas are stored, not applied to items. A dataset item needs
``datasetName`` naming an existing dataset (404 ``Dataset not found`` otherwise); its ``id``
(optional, default a new uuid) is at most 255 characters and upserts the item, but an id
already used in another dataset is refused (400: ids are unique per project and cannot be
reused across datasets); ``status`` is ACTIVE (default) or ARCHIVED; ``sourceObservationId``
needs ``sourceTraceId``; ``input``, ``expectedOutput`` and ``metadata`` are any JSON. Lists are
oldest first, ``page`` >= 1, ``limit`` 1-100 (default 50). A missing dataset or item on GET is
404 ``{"message": ...}``.

Score config rules: name as above (names are NOT unique: creating twice makes two configs);
dataType NUMERIC, BOOLEAN, CATEGORICAL or TEXT; CATEGORICAL needs ``categories``
``[{label, value}]`` with non-empty unique labels and unique numeric values and no bounds;
BOOLEAN takes no categories (the server sets True=1, False=0) and ignores bounds; NUMERIC takes
no categories and needs maxValue > minValue when both are given; TEXT takes neither. The list
is newest first, ``page`` >= 1 and ``limit`` 1-100 (default 50), with
``meta {page, limit, totalItems, totalPages}``. Invalid requests answer 400
``{"message": "Invalid request data", "error": [{"path": [...], "message": ...}]}``.

Fault injection, thread-safe and settable while the server runs: ``fail_next`` (the next n
score POSTs, on the scores route or ingestion, answer an error status), ``set_down`` (every
request answers 503), ``set_delay`` (answers are slowed; the request is processed first, so
a client that times out may still have had its scores stored, as with a real server) and
``reject_ids`` (matching scores are rejected in a 207 answer even when valid, as error entries
on the ingestion route).

Example::

    with LangfuseStandIn() as standin:
        client = Langfuse(public_key=standin.public_key, secret_key=standin.secret_key,
                          host=standin.url, tracing_enabled=False)
        client.api.scores.create(request=[CreateScoreRequest(...)])
        assert standin.scores()[0]["name"] == ...

The SDK keeps one resource manager per public key for the life of the process, so the default
public key is unique per stand-in instance.

Caveats. The array body with 202/207 answers is what SDK 5.0.4 sends and parses; the server
sources read for this (langfuse/langfuse, newest snapshot available) still route
``POST /api/public/scores`` to a single-score handler answering 200 ``{"id"}``, so the batch
contract rests on the SDK's models and docstrings, not on server code; ``scores_route=
"single"`` plays that server, and the ingestion route is how a client sends it batches.
The SDK's HTTP client retries 408, 409, 429 and 5xx twice by default (about 1 s then 2 s,
or Retry-After whole seconds); pass ``request_options={"max_retries": 0}`` to see a fault at once.
"""

from __future__ import annotations

import base64
import binascii
import copy
import gzip
import hmac
import json
import math
import re
import threading
import time
import unicodedata
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any, Final, Literal, cast
from urllib.parse import parse_qs, unquote, urlsplit

from standins._loopback import LoopbackServer, LoopbackService

__all__ = [
    "CONFIG_DATA_TYPES",
    "SCORE_DATA_TYPES",
    "LangfuseStandIn",
    "RecordedRequest",
    "ScorePredicate",
    "ScoresRoute",
]

ScoresRoute = Literal["batch", "single"]
"""What ``POST /api/public/scores`` takes: arrays of scores (SDK 5.x), or one score only."""

ScorePredicate = Callable[[Mapping[str, Any]], bool]
"""Decides from a score as sent (a camelCase dict) whether ``reject_ids`` rejects it."""

SCORE_DATA_TYPES: Final = frozenset({"NUMERIC", "BOOLEAN", "CATEGORICAL", "TEXT", "CORRECTION"})
CONFIG_DATA_TYPES: Final = frozenset({"NUMERIC", "BOOLEAN", "CATEGORICAL", "TEXT"})

NAME_MAX_LENGTH: Final = 35
TEXT_MAX_LENGTH: Final = 500
MAX_BODY_BYTES: Final = 1_000_000
MAX_INGESTION_BYTES: Final = 3_500_000
CORRECTION_NAME: Final = "output"
DEFAULT_ENVIRONMENT: Final = "default"

_API: Final = "/api/public"
_HEALTH: Final = f"{_API}/health"
_PROJECTS: Final = f"{_API}/projects"
_SCORES: Final = f"{_API}/scores"
_INGESTION: Final = f"{_API}/ingestion"
_CONFIGS: Final = f"{_API}/score-configs"
_DATASETS: Final = f"{_API}/v2/datasets"
_ITEMS: Final = f"{_API}/dataset-items"
_OTEL_TRACES: Final = f"{_API}/otel/v1/traces"
ITEM_ID_MAX_LENGTH: Final = 255
DATASET_STATUSES: Final = frozenset({"ACTIVE", "ARCHIVED"})

_NAME_EXTRA_CHARS: Final = frozenset("_ .()-")
_ENV_PREFIX: Final = re.compile(r"^(?:langfuse[-_]?)+")
_ENV_ALLOWED: Final = re.compile(r"^[a-z0-9\-_]+$")
_TARGET_MESSAGE: Final = (
    "Provide exactly one of the following: traceId (with optional observationId), sessionId "
    "or datasetRunId. ObservationId requires traceId."
)
_ANNOTATION_MESSAGE: Final = (
    "configId is required when source is ANNOTATION (except for CORRECTION scores)."
)
_CONFIG_NOT_FOUND: Final = "The configId you provided does not match a valid config in this project"


class _Invalid(Exception):
    """A request or score that breaks a rule; ``message`` is what the answer reports."""

    def __init__(self, message: str, path: tuple[str, ...] = (), status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.status = status


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the stand-in answered: what came in and the status that went out."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    status: int


@dataclass(slots=True)
class _Answer:
    status: int
    payload: Any
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None  # sent as is (with its Content-Type header) instead of JSON


@dataclass(slots=True)
class _Faults:
    fail_count: int = 0
    fail_status: int = 503
    fail_retry_after: int | None = None
    down: bool = False
    delay: float = 0.0
    reject: ScorePredicate | None = None
    reject_reason: str = "Rejected by the stand-in"


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """A request header by its case-insensitive name."""
    wanted = name.lower()
    return next((v for k, v in headers.items() if k.lower() == wanted), None)


_OTLP_ID_BYTES: Final = {"traceId": 16, "spanId": 8, "parentSpanId": 8}


def _hex_ids_as_base64(value: Any) -> Any:
    """OTLP/JSON writes trace and span ids as hex, where protobuf's JSON mapping reads bytes
    as base64: the ids (in spans and links, at any depth) made base64 for ParseDict.
    ValueError for an id that is not hex of its length."""
    if isinstance(value, list):
        return [_hex_ids_as_base64(item) for item in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        size = _OTLP_ID_BYTES.get(key)
        if size is not None and isinstance(item, str) and item:
            raw = bytes.fromhex(item)
            if len(raw) != size:
                raise ValueError(f"{key} {item!r} is not {size} bytes of hex")
            out[key] = base64.b64encode(raw).decode()
        else:
            out[key] = _hex_ids_as_base64(item)
    return out


def _otlp_attributes(attributes: Any) -> dict[str, Any]:
    """OTLP KeyValues as a plain dict (scalar values; arrays and maps as their JSON form)."""
    from google.protobuf import json_format

    out: dict[str, Any] = {}
    for kv in attributes:
        kind = kv.value.WhichOneof("value")
        if kind in ("array_value", "kvlist_value"):
            out[kv.key] = json_format.MessageToDict(getattr(kv.value, kind))
        else:
            out[kv.key] = getattr(kv.value, kind) if kind else None
    return out


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_name(name: object, key: str = "name") -> str:
    """Apply Langfuse's score config name rule: 1-35 letters, digits, ``_ . ( ) -``, space."""
    if not isinstance(name, str):
        raise _Invalid(f"{key}: must be a string", (key,))
    if not 1 <= len(name) <= NAME_MAX_LENGTH:
        raise _Invalid(f"{key}: must be 1-{NAME_MAX_LENGTH} characters", (key,))
    for char in name:
        if char not in _NAME_EXTRA_CHARS and unicodedata.category(char)[0] not in "LN":
            raise _Invalid(f"{key}: Name contains invalid characters", (key,))
    return name


def _optional_string(raw: Mapping[str, Any], key: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _Invalid(f"{key}: must be a string", (key,))
    return value


def _optional_number(raw: Mapping[str, Any], key: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if not _is_number(value):
        raise _Invalid(f"{key}: must be a finite number", (key,))
    return cast(float, value)


def _normalise_environment(value: object) -> str:
    if not isinstance(value, str):
        return DEFAULT_ENVIRONMENT
    stripped = _ENV_PREFIX.sub("", value.lower())[:40]
    return stripped if stripped and _ENV_ALLOWED.match(stripped) else DEFAULT_ENVIRONMENT


def _parse_timestamp(value: object, now: datetime) -> datetime:
    if value is None:
        return now
    if not isinstance(value, str):
        raise _Invalid("timestamp: must be an ISO 8601 string", ("timestamp",))
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise _Invalid("timestamp: not an ISO 8601 datetime", ("timestamp",)) from None
    if parsed.tzinfo is None:
        raise _Invalid("timestamp: must carry a UTC offset (e.g. Z or +00:00)", ("timestamp",))
    return parsed.astimezone(UTC)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _check_value_for_type(data_type: str, value: object) -> None:
    """The value rule of each data type, as in the public API's request schema."""
    if data_type == "NUMERIC" and not _is_number(value):
        raise _Invalid("value: must be a number for data type NUMERIC", ("value",))
    if data_type == "BOOLEAN" and not (_is_number(value) and value in (0, 1)):
        raise _Invalid(
            "value: Value must be a number equal to either 0 or 1 for data type BOOLEAN",
            ("value",),
        )
    if data_type in ("CATEGORICAL", "CORRECTION") and not isinstance(value, str):
        raise _Invalid(f"value: must be a string for data type {data_type}", ("value",))
    if data_type == "TEXT" and not (isinstance(value, str) and 1 <= len(value) <= TEXT_MAX_LENGTH):
        raise _Invalid(
            f"value: must be a string of 1-{TEXT_MAX_LENGTH} characters for data type TEXT",
            ("value",),
        )


def _check_categories(categories: object) -> list[dict[str, Any]]:
    """Categories of a CATEGORICAL config: ``[{label, value}]``, labels and values unique."""
    message = (
        "Category must be an array of objects with label value pairs, where labels and "
        "values are unique."
    )
    if not isinstance(categories, list):
        raise _Invalid(f"categories: {message}", ("categories",))
    labels: set[str] = set()
    values: set[float] = set()
    checked: list[dict[str, Any]] = []
    for category in categories:
        if not isinstance(category, dict):
            raise _Invalid(f"categories: {message}", ("categories",))
        label, value = category.get("label"), category.get("value")
        if not isinstance(label, str) or not label or not _is_number(value):
            raise _Invalid(f"categories: {message}", ("categories",))
        if label in labels:
            raise _Invalid(
                f"categories: Duplicate category label: {label}, category labels must be unique",
                ("categories",),
            )
        if value in values:
            raise _Invalid(
                f"categories: Duplicate category value: {value}, category values must be unique",
                ("categories",),
            )
        labels.add(label)
        values.add(cast(float, value))
        checked.append({"label": label, "value": value})
    return checked


def _check_bounds(min_value: float | None, max_value: float | None) -> None:
    if min_value is not None and max_value is not None and max_value <= min_value:
        raise _Invalid("Maximum value must be greater than Minimum value", ("maxValue",))


def _check_config_shape(config: Mapping[str, Any]) -> None:
    """Whole-config rules, for a config after an update."""
    data_type = config["dataType"]
    has_bounds = config.get("minValue") is not None or config.get("maxValue") is not None
    categories = config.get("categories")
    if data_type == "NUMERIC":
        if categories is not None:
            raise _Invalid("categories: not allowed for data type NUMERIC", ("categories",))
        _check_bounds(config.get("minValue"), config.get("maxValue"))
    elif data_type == "CATEGORICAL":
        if has_bounds:
            raise _Invalid("minValue/maxValue: not allowed for data type CATEGORICAL")
        _check_categories(categories)
    elif data_type == "BOOLEAN":
        if categories != [{"label": "True", "value": 1}, {"label": "False", "value": 0}]:
            raise _Invalid(
                "categories: Boolean data type must have exactly 2 categories.", ("categories",)
            )
    elif data_type == "TEXT" and (categories is not None or has_bounds):
        raise _Invalid("TEXT configs take neither categories nor minValue/maxValue")


class _Handler(BaseHTTPRequestHandler):
    """Reads one request, lets the stand-in answer it, writes the answer (one per connection)."""

    protocol_version = "HTTP/1.0"
    server_version = "LangfuseStandIn/1.0"

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""

    def _dispatch(self) -> None:
        standin = cast(LangfuseStandIn, cast(LoopbackServer, self.server).standin)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        body = self.rfile.read(length) if length > 0 else b""
        answer, delay = standin._answer(self.command, self.path, dict(self.headers), body)
        if delay > 0:
            time.sleep(delay)
        data = answer.raw if answer.raw is not None else json.dumps(answer.payload).encode()
        try:
            self.send_response(answer.status)
            if "Content-Type" not in answer.headers:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (e.g. timed out during set_delay)


class LangfuseStandIn(LoopbackService):
    """A loopback HTTP server playing Langfuse's public score API for tests (not Langfuse).

    See the module docstring for the endpoints and the Langfuse rules it enforces. Use it as a
    context manager or call ``start()``/``stop()``; ``url``, ``public_key`` and ``secret_key``
    are what a ``Langfuse(...)`` client needs. After ``stop()``, ``start()`` binds the same
    port again, so ``url`` does not change.
    """

    handler = _Handler
    thread_name = "langfuse-standin"

    def __init__(
        self,
        *,
        public_key: str | None = None,
        secret_key: str = "sk-lf-standin",
        host: str = "127.0.0.1",
        port: int = 0,
        project_id: str = "standin-project",
        version: str = "3.0.0-standin",
        strict_score_names: bool = True,
        scores_route: ScoresRoute = "batch",
    ) -> None:
        """Configure the server; nothing listens until ``start()``.

        ``public_key`` defaults to a key unique to this instance, because the SDK keeps one
        resource manager per public key for the whole process. ``scores_route`` chooses what
        ``POST /api/public/scores`` takes: ``"batch"`` arrays (and single objects), as SDK 5.x
        expects, or ``"single"`` one score object only, as the public server code does (an
        array gets 400 "Invalid request data").
        """
        if scores_route not in ("batch", "single"):
            raise ValueError("scores_route must be 'batch' or 'single'")
        super().__init__(host, port, threading.RLock())
        self._public_key = public_key or f"pk-lf-standin-{uuid.uuid4().hex[:12]}"
        self._secret_key = secret_key
        self._project_id = project_id
        self._version = version
        self._strict_score_names = strict_score_names
        self._scores_route: ScoresRoute = scores_route
        self._scores: dict[tuple[str, str, date], dict[str, Any]] = {}
        self._configs: dict[str, dict[str, Any]] = {}
        self._config_seq: dict[str, int] = {}
        self._datasets: dict[str, dict[str, Any]] = {}
        self._items: dict[str, dict[str, Any]] = {}
        self._spans: list[dict[str, Any]] = []
        self._received_total = 0
        self._requests = 0
        self._log: list[RecordedRequest] = []
        self._faults = _Faults()

    # -- connection details ----------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL for ``Langfuse(host=...)``, e.g. ``http://127.0.0.1:53211``."""
        if self._port == 0:
            raise RuntimeError("the stand-in has not been started")
        return f"http://{self._host}:{self._port}"

    @property
    def public_key(self) -> str:
        """The public key (Basic auth user name) the stand-in accepts."""
        return self._public_key

    @property
    def secret_key(self) -> str:
        """The secret key (Basic auth password) the stand-in accepts."""
        return self._secret_key

    @property
    def project_id(self) -> str:
        """The project id reported in score configs and by ``/api/public/projects``."""
        return self._project_id

    # -- inspection ------------------------------------------------------------------------

    def scores(self) -> list[dict[str, Any]]:
        """Stored scores (copies), one per replacement key, in first-stored order."""
        with self._lock:
            return copy.deepcopy(list(self._scores.values()))

    def datasets(self) -> list[dict[str, Any]]:
        """The datasets, oldest first (copies)."""
        with self._lock:
            return copy.deepcopy(list(self._datasets.values()))

    def dataset_items(self, dataset_name: str | None = None) -> list[dict[str, Any]]:
        """The dataset items (of one dataset, when named), oldest first (copies)."""
        with self._lock:
            return copy.deepcopy([item for item in self._items.values()
                                  if dataset_name is None
                                  or item["datasetName"] == dataset_name])

    def traces(self) -> list[dict[str, Any]]:
        """Spans received on the OTLP route, in arrival order (copies): ``trace_id`` and
        ``span_id`` (hex), ``parent_span_id`` (hex, "" for a root), ``name``, ``attributes``
        and ``service`` (the resource's service.name)."""
        with self._lock:
            return copy.deepcopy(self._spans)

    def score_configs(self) -> list[dict[str, Any]]:
        """Stored score configs (copies), in creation order."""
        with self._lock:
            return copy.deepcopy(list(self._configs.values()))

    @property
    def received_total(self) -> int:
        """Every score accepted so far, replacements and resends included."""
        with self._lock:
            return self._received_total

    @property
    def requests(self) -> int:
        """Every HTTP request received so far, faulted and rejected ones included."""
        with self._lock:
            return self._requests

    def request_log(self) -> list[RecordedRequest]:
        """Every request received, in order, with its parsed JSON body and answer status."""
        with self._lock:
            return list(self._log)

    def reset(self) -> None:
        """Forget scores, configs, counters, the request log and all faults."""
        with self._lock:
            self._scores.clear()
            self._configs.clear()
            self._config_seq.clear()
            self._datasets.clear()
            self._items.clear()
            self._spans.clear()
            self._received_total = 0
            self._requests = 0
            self._log.clear()
            self._faults = _Faults()

    # -- fault injection -------------------------------------------------------------------

    def fail_next(self, n: int, status: int = 503, *, retry_after: int | None = None) -> None:
        """Answer the next ``n`` score POSTs with ``status`` (e.g. 503, 429, 500, 400).

        The failed POSTs store nothing. ``retry_after`` (whole seconds) adds a Retry-After
        header, which the SDK's HTTP client honours between its own retries.
        """
        if n < 0:
            raise ValueError("n must be >= 0")
        if not 400 <= status <= 599:
            raise ValueError("status must be an HTTP error status (400-599)")
        with self._lock:
            self._faults.fail_count = n
            self._faults.fail_status = status
            self._faults.fail_retry_after = retry_after

    def set_down(self, down: bool) -> None:
        """While down, every request (health included) answers 503."""
        with self._lock:
            self._faults.down = down

    def set_delay(self, seconds: float) -> None:
        """Hold every answer back by ``seconds`` (the request is processed first)."""
        if seconds < 0:
            raise ValueError("seconds must be >= 0")
        with self._lock:
            self._faults.delay = seconds

    def reject_ids(
        self,
        ids: Collection[str] | ScorePredicate | None,
        reason: str = "Rejected by the stand-in",
    ) -> None:
        """Reject matching scores in a 207 answer, with ``reason``, even when valid.

        ``ids`` is a collection of score ids or a predicate on the score as sent (a camelCase
        dict); it stays in force until replaced. ``None`` or an empty collection clears it.
        """
        predicate: ScorePredicate | None
        if ids is None:
            predicate = None
        elif callable(ids):
            predicate = ids
        else:
            wanted = frozenset([ids] if isinstance(ids, str) else ids)
            predicate = (lambda score: score.get("id") in wanted) if wanted else None
        with self._lock:
            self._faults.reject = predicate
            self._faults.reject_reason = reason

    def clear_faults(self) -> None:
        """Undo ``fail_next``, ``set_down``, ``set_delay`` and ``reject_ids``."""
        with self._lock:
            self._faults = _Faults()

    # -- request handling ------------------------------------------------------------------

    def _answer(
        self, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> tuple[_Answer, float]:
        """Answer one request; returns the answer and how long to hold it back."""
        parts = urlsplit(target)
        path = parts.path.rstrip("/") or "/"
        query = parse_qs(parts.query, keep_blank_values=True)
        parsed_body: Any = None
        try:
            if body:
                parsed_body = json.loads(body)
        except ValueError:
            parsed_body = body.decode("utf-8", "replace")
        with self._lock:
            self._requests += 1
            delay = self._faults.delay
            try:
                answer = self._route(method, path, query, headers, body, parsed_body)
            except Exception as error:  # a bug here, or in a reject_ids predicate
                answer = _Answer(500, {"message": f"Langfuse stand-in failed: {error!r}"})
            self._log.append(
                RecordedRequest(
                    method=method,
                    path=path,
                    query=query,
                    headers=headers,
                    body=parsed_body,
                    status=answer.status,
                )
            )
        return answer, delay

    def _route(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        headers: Mapping[str, str],
        raw_body: bytes,
        body: Any,
    ) -> _Answer:
        if self._faults.down:
            return _Answer(503, {"message": "Service Unavailable"})
        if path == _HEALTH:
            if method != "GET":
                return _Answer(405, {"message": "Method not allowed"})
            return _Answer(200, {"status": "OK", "version": self._version})

        config_id: str | None = None
        dataset_name: str | None = None
        item_id: str | None = None
        if path in (_PROJECTS, _SCORES, _INGESTION, _CONFIGS, _DATASETS, _ITEMS, _OTEL_TRACES):
            allowed = {_PROJECTS: ("GET",), _SCORES: ("POST",), _INGESTION: ("POST",),
                       _CONFIGS: ("GET", "POST"), _DATASETS: ("GET", "POST"),
                       _ITEMS: ("GET", "POST"), _OTEL_TRACES: ("POST",)}[path]
        elif path.startswith(f"{_CONFIGS}/") and path.count("/") == 4:
            config_id = path.rsplit("/", 1)[1]
            allowed = ("GET", "PATCH")
        elif path.startswith(f"{_DATASETS}/") and path.count("/") == 5:
            dataset_name = unquote(path.rsplit("/", 1)[1])
            allowed = ("GET",)
        elif path.startswith(f"{_ITEMS}/") and path.count("/") == 4:
            item_id = unquote(path.rsplit("/", 1)[1])
            allowed = ("GET",)
        else:
            return _Answer(404, {"message": f"Not found: {path} (Langfuse stand-in)"})
        if method not in allowed:
            return _Answer(405, {"message": "Method not allowed"})

        if path in (_SCORES, _INGESTION) and self._faults.fail_count > 0:
            self._faults.fail_count -= 1
            status = self._faults.fail_status
            extra = {}
            if self._faults.fail_retry_after is not None:
                extra["Retry-After"] = str(self._faults.fail_retry_after)
            return _Answer(status, {"message": HTTPStatus(status).phrase}, extra)

        # Header names are case-insensitive (OpenTelemetry's exporter sends them lower-case).
        if not self._authorized(_header(headers, "Authorization")):
            return _Answer(401, {"message": "Invalid credentials", "error": "Unauthorized"})

        try:
            if path == _PROJECTS:
                return _Answer(200, {"data": [self._project()]})
            if path == _SCORES:
                if len(raw_body) > MAX_BODY_BYTES:
                    return _Answer(413, {"message": "Request body exceeds 1,000,000 bytes"})
                return self._post_scores(body, raw_body)
            if path == _OTEL_TRACES:
                return self._post_traces(headers, raw_body)
            if path == _INGESTION:
                if len(raw_body) > MAX_INGESTION_BYTES:
                    return _Answer(413, {"message": "Request body exceeds 3,500,000 bytes"})
                return self._post_ingestion(body, raw_body)
            if path == _DATASETS:
                if method == "GET":
                    return _Answer(200, self._page(list(self._datasets.values()), query))
                return _Answer(200, self._create_dataset(body))
            if dataset_name is not None:
                return _Answer(200, copy.deepcopy(self._get_dataset(dataset_name)))
            if path == _ITEMS:
                if method == "GET":
                    return _Answer(200, self._list_items(query))
                return _Answer(200, self._create_item(body))
            if item_id is not None:
                item = self._items.get(item_id)
                if item is None:
                    return _Answer(404, {"message": f"Dataset item {item_id} not found"})
                return _Answer(200, copy.deepcopy(item))
            if config_id is not None:
                if method == "GET":
                    return _Answer(200, copy.deepcopy(self._get_config(config_id)))
                return _Answer(200, self._patch_config(config_id, body))
            if method == "GET":
                return _Answer(200, self._list_configs(query))
            return _Answer(200, self._create_config(body))
        except _Invalid as invalid:
            if invalid.status != 400:
                return _Answer(invalid.status, {"message": invalid.message})
            return _Answer(
                400,
                {
                    "message": "Invalid request data",
                    "error": [{"path": list(invalid.path), "message": invalid.message}],
                },
            )

    def _authorized(self, header: str | None) -> bool:
        if not header or not header.startswith("Basic "):
            return False
        try:
            decoded = base64.b64decode(header[len("Basic ") :].strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return False
        user, colon, password = decoded.partition(":")
        return bool(colon) and (
            hmac.compare_digest(user.encode(), self._public_key.encode())
            & hmac.compare_digest(password.encode(), self._secret_key.encode())
        )

    def _project(self) -> dict[str, Any]:
        return {
            "id": self._project_id,
            "name": "Langfuse stand-in",
            "organization": {"id": "standin-org", "name": "Langfuse stand-in"},
            "metadata": {},
        }

    # -- traces (OTLP/HTTP) ----------------------------------------------------------------

    def _post_traces(self, headers: Mapping[str, str], raw_body: bytes) -> _Answer:
        # The OTLP protobuf classes come with the OpenTelemetry exporter this project uses.
        from google.protobuf import json_format
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        content_type = (_header(headers, "Content-Type") or "").split(";")[0].strip()
        body = raw_body
        if (_header(headers, "Content-Encoding") or "").lower() == "gzip":
            try:
                body = gzip.decompress(body)
            except (OSError, EOFError) as error:
                return _Answer(400, {"message": f"Invalid gzip body: {error}"})
        request = ExportTraceServiceRequest()
        try:
            if content_type == "application/x-protobuf":
                request.ParseFromString(body)
            elif content_type == "application/json":
                json_format.ParseDict(_hex_ids_as_base64(json.loads(body)), request)
            else:
                return _Answer(415, {"message": f"Unsupported content type {content_type!r}: "
                                                "application/x-protobuf or application/json"})
        except (DecodeError, json_format.ParseError, ValueError) as error:
            return _Answer(400, {"message": f"Invalid OTLP request: {error}"})
        for resource_spans in request.resource_spans:
            resource = _otlp_attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self._spans.append({
                        "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(), "name": span.name,
                        "attributes": _otlp_attributes(span.attributes),
                        "service": resource.get("service.name"),
                    })
        response = ExportTraceServiceResponse()
        if content_type == "application/json":
            return _Answer(200, json_format.MessageToDict(response))
        return _Answer(200, None, {"Content-Type": "application/x-protobuf"},
                       raw=response.SerializeToString())

    # -- scores ----------------------------------------------------------------------------

    def _post_scores(self, body: Any, raw_body: bytes) -> _Answer:
        if raw_body and isinstance(body, str):
            return _Answer(400, {"message": "Invalid request data: body is not JSON"})
        now = datetime.now(UTC)
        if isinstance(body, dict):
            # The single-score shape of the current public server route.
            try:
                score = self._validate_score(body, now)
            except _Invalid as invalid:
                return _Answer(invalid.status, {"message": invalid.message})
            if self._faults.reject is not None and self._faults.reject(body):
                return _Answer(400, {"message": self._faults.reject_reason})
            self._store(score)
            return _Answer(200, {"id": score["id"]})
        if isinstance(body, list) and self._scores_route == "single":
            # The public server code validates the body as ONE score object.
            return _Answer(
                400,
                {
                    "message": "Invalid request data",
                    "error": [{"path": [], "message": "Expected object, received array"}],
                },
            )
        if not isinstance(body, list) or not body:
            return _Answer(
                400, {"message": "Invalid request data: expected a non-empty array of scores"}
            )

        accepted = 0
        errors: list[dict[str, Any]] = []
        for index, raw in enumerate(body):
            raw_id = raw.get("id") if isinstance(raw, dict) else None
            try:
                score = self._validate_score(raw, now)
            except _Invalid as invalid:
                errors.append({"index": index, "id": raw_id, "message": invalid.message})
                continue
            if self._faults.reject is not None and self._faults.reject(raw):
                errors.append({"index": index, "id": raw_id, "message": self._faults.reject_reason})
                continue
            self._store(score)
            accepted += 1
        if errors:
            return _Answer(207, {"accepted": accepted, "rejected": len(errors), "errors": errors})
        return _Answer(202, {"message": "Accepted"})

    def _post_ingestion(self, body: Any, raw_body: bytes) -> _Answer:
        """``{"batch": [events], "metadata": {...}}``: 207 with per-event successes and errors.

        Input errors of single events never fail the request: an event that is not an object,
        lacks an id, timestamp or body, has a type other than ``score-create``, or whose score
        breaks a rule, is an error entry; the others are stored.
        """
        if raw_body and isinstance(body, str):
            return _Answer(400, {"message": "Invalid request data: body is not JSON"})
        if not isinstance(body, dict) or not isinstance(body.get("batch"), list):
            return _Answer(
                400,
                {
                    "message": "Invalid request data",
                    "error": [{"path": ["batch"], "message": "Expected array"}],
                },
            )
        now = datetime.now(UTC)
        successes: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        for event in body["batch"]:
            event_id = event.get("id") if isinstance(event, dict) else None
            try:
                raw = self._check_event(event)
                score = self._validate_score(raw, now)
            except _Invalid as invalid:
                errors.append(
                    {
                        "id": event_id,
                        "status": invalid.status,
                        "message": "Invalid request data",
                        "error": invalid.message,
                    }
                )
                continue
            if self._faults.reject is not None and self._faults.reject(raw):
                errors.append(
                    {
                        "id": event_id,
                        "status": 400,
                        "message": "Invalid request data",
                        "error": self._faults.reject_reason,
                    }
                )
                continue
            self._store(score)
            successes.append({"id": event_id, "status": 201})
        return _Answer(207, {"successes": successes, "errors": errors})

    @staticmethod
    def _check_event(event: object) -> dict[str, Any]:
        """An ingestion event's envelope; returns the score body of a score-create event."""
        if not isinstance(event, dict):
            raise _Invalid("event: must be a JSON object")
        if not isinstance(event.get("id"), str) or not event["id"]:
            raise _Invalid("id: must be a non-empty string", ("id",))
        stamp = event.get("timestamp")
        if stamp is None:
            raise _Invalid("timestamp: Required", ("timestamp",))
        _parse_timestamp(stamp, datetime.now(UTC))
        if event.get("type") != "score-create":
            raise _Invalid(
                f"type: the stand-in takes only score-create events, got {event.get('type')!r}",
                ("type",),
            )
        body = event.get("body")
        if not isinstance(body, dict):
            raise _Invalid("body: must be a JSON object", ("body",))
        return body

    def _store(self, score: dict[str, Any]) -> None:
        timestamp = datetime.fromisoformat(score["timestamp"])
        key = (score["id"], score["name"], timestamp.date())
        previous = self._scores.get(key)
        if previous is not None:
            score["createdAt"] = previous["createdAt"]
        self._scores[key] = score
        self._received_total += 1

    def _validate_score(self, raw: object, now: datetime) -> dict[str, Any]:
        """Check one score against the server's rules; returns the score as stored."""
        if not isinstance(raw, dict):
            raise _Invalid("score must be a JSON object")
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise _Invalid("name: must be a non-empty string", ("name",))
        if self._strict_score_names:
            _check_name(name)
        value = raw.get("value")
        if not (_is_number(value) or isinstance(value, str)):
            raise _Invalid("value: must be a finite number or a string", ("value",))
        data_type = raw.get("dataType")
        if data_type is not None and data_type not in SCORE_DATA_TYPES:
            raise _Invalid(
                f"dataType: must be one of {', '.join(sorted(SCORE_DATA_TYPES))}", ("dataType",)
            )
        score_id = _optional_string(raw, "id") or str(uuid.uuid4())
        trace_id = _optional_string(raw, "traceId") or None
        session_id = _optional_string(raw, "sessionId") or None
        run_id = _optional_string(raw, "datasetRunId") or None
        observation_id = _optional_string(raw, "observationId") or None
        comment = _optional_string(raw, "comment")
        config_id = _optional_string(raw, "configId") or None
        queue_id = _optional_string(raw, "queueId")
        targets = [target for target in (trace_id, session_id, run_id) if target]
        if len(targets) != 1 or (observation_id and not trace_id):
            raise _Invalid(_TARGET_MESSAGE, ("traceId", "sessionId", "datasetRunId"))
        source = raw.get("source") or "API"
        if source not in ("API", "ANNOTATION"):
            raise _Invalid("source: must be API or ANNOTATION", ("source",))
        timestamp = _parse_timestamp(raw.get("timestamp"), now)
        if data_type is not None:
            _check_value_for_type(data_type, value)
        if data_type == "CORRECTION" and config_id:
            raise _Invalid("configId: CORRECTION scores cannot reference a config", ("configId",))
        if source == "ANNOTATION" and not config_id and data_type != "CORRECTION":
            raise _Invalid(_ANNOTATION_MESSAGE, ("configId",))

        config = self._config_for_score(config_id, data_type, value) if config_id else None
        if config is not None:
            name = config["name"]
            effective_type: str = config["dataType"]
        else:
            effective_type = data_type or ("NUMERIC" if _is_number(value) else "CATEGORICAL")
            _check_value_for_type(effective_type, value)

        numeric: float = 0
        string_value: str | None = None
        if effective_type in ("NUMERIC", "BOOLEAN"):
            numeric = cast(float, value)
            if effective_type == "BOOLEAN":
                string_value = "True" if numeric == 1 else "False"
        elif effective_type == "CORRECTION":
            if session_id or run_id:
                raise _Invalid("CORRECTION scores can only be associated with traces")
            name = CORRECTION_NAME
            string_value = cast(str, value)
        else:
            string_value = cast(str, value)
            if effective_type == "CATEGORICAL" and config is not None:
                numeric = next(
                    c["value"] for c in config["categories"] if c["label"] == string_value
                )
        return {
            "id": score_id,
            "projectId": self._project_id,
            "name": name,
            "value": numeric,
            "stringValue": string_value,
            "dataType": effective_type,
            "source": source,
            "traceId": trace_id,
            "observationId": observation_id,
            "sessionId": session_id,
            "datasetRunId": run_id,
            "comment": comment,
            "metadata": copy.deepcopy(raw.get("metadata")),
            "configId": config_id,
            "queueId": queue_id,
            "environment": _normalise_environment(raw.get("environment")),
            "timestamp": _iso(timestamp),
            "createdAt": _iso(now),
            "updatedAt": _iso(now),
        }

    def _config_for_score(
        self, config_id: str, data_type: str | None, value: object
    ) -> dict[str, Any]:
        config = self._configs.get(config_id)
        if config is None:
            raise _Invalid(_CONFIG_NOT_FOUND, ("configId",), status=404)
        config_type = config["dataType"]
        if data_type is not None and data_type != config_type:
            raise _Invalid(
                f"Data type mismatch based on config: expected {config_type}, got {data_type}",
                ("dataType",),
            )
        if config["isArchived"]:
            raise _Invalid(
                "Config is archived and cannot be used to create new scores. Please restore "
                "the config first.",
                ("configId",),
            )
        prefix = "Ingested score body not valid against provided config: value - "
        try:
            _check_value_for_type(config_type, value)
        except _Invalid as invalid:
            raise _Invalid(prefix + invalid.message.removeprefix("value: "), ("value",)) from None
        if config_type == "NUMERIC":
            number = cast(float, value)
            if config.get("maxValue") is not None and number > config["maxValue"]:
                raise _Invalid(
                    f"{prefix}Value exceeds maximum value of {config['maxValue']} defined in "
                    "config",
                    ("value",),
                )
            if config.get("minValue") is not None and number < config["minValue"]:
                raise _Invalid(
                    f"{prefix}Value is below minimum value of {config['minValue']} defined in "
                    "config",
                    ("value",),
                )
        if config_type == "CATEGORICAL" and not any(
            category["label"] == value for category in config["categories"] or []
        ):
            raise _Invalid(
                f"{prefix}Value {value} does not map to a valid category. Pass a valid "
                "category value.",
                ("value",),
            )
        return config

    # -- datasets --------------------------------------------------------------------------

    def _create_dataset(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise _Invalid("body: must be a JSON object")
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise _Invalid("name: must be a non-empty string", ("name",))
        description = _optional_string(body, "description")
        for key in ("inputSchema", "expectedOutputSchema"):
            if body.get(key) is not None and not isinstance(body[key], dict):
                raise _Invalid(f"{key}: must be a JSON schema object", (key,))
        now = _iso(datetime.now(UTC))
        dataset = self._datasets.get(name)
        if dataset is None:
            dataset = self._datasets[name] = {
                "id": str(uuid.uuid4()), "name": name, "description": None, "metadata": None,
                "inputSchema": None, "expectedOutputSchema": None,
                "projectId": self._project_id, "createdAt": now, "updatedAt": now}
        for key in ("metadata", "inputSchema", "expectedOutputSchema"):
            if body.get(key) is not None:
                dataset[key] = copy.deepcopy(body[key])
        if description is not None:
            dataset["description"] = description
        dataset["updatedAt"] = now
        return copy.deepcopy(dataset)

    def _get_dataset(self, name: str) -> dict[str, Any]:
        dataset = self._datasets.get(name)
        if dataset is None:
            raise _Invalid(f"Dataset {name} not found", status=404)
        return dataset

    def _create_item(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise _Invalid("body: must be a JSON object")
        name = body.get("datasetName")
        if not isinstance(name, str) or not name:
            raise _Invalid("datasetName: must be a non-empty string", ("datasetName",))
        dataset = self._datasets.get(name)
        if dataset is None:
            raise _Invalid("Dataset not found", status=404)
        item_id = _optional_string(body, "id") or str(uuid.uuid4())
        if len(item_id) > ITEM_ID_MAX_LENGTH:
            raise _Invalid(f"id: must be at most {ITEM_ID_MAX_LENGTH} characters", ("id",))
        status = body.get("status") or "ACTIVE"
        if status not in DATASET_STATUSES:
            raise _Invalid("status: must be ACTIVE or ARCHIVED", ("status",))
        trace_id = _optional_string(body, "sourceTraceId")
        observation_id = _optional_string(body, "sourceObservationId")
        if observation_id and not trace_id:
            raise _Invalid("sourceObservationId: needs sourceTraceId",
                           ("sourceObservationId",))
        existing = self._items.get(item_id)
        if existing is not None and existing["datasetId"] != dataset["id"]:
            raise _Invalid(f"id: dataset item {item_id} already exists in another dataset; "
                           "item ids are unique per project", ("id",))
        now = _iso(datetime.now(UTC))
        item = {
            "id": item_id, "status": status, "input": copy.deepcopy(body.get("input")),
            "expectedOutput": copy.deepcopy(body.get("expectedOutput")),
            "metadata": copy.deepcopy(body.get("metadata")), "sourceTraceId": trace_id,
            "sourceObservationId": observation_id, "datasetId": dataset["id"],
            "datasetName": name, "createdAt": existing["createdAt"] if existing else now,
            "updatedAt": now, "version": now, "mediaReferences": []}
        self._items.pop(item_id, None)  # an upsert moves it to the end, as a new version
        self._items[item_id] = item
        return copy.deepcopy(item)

    def _list_items(self, query: Mapping[str, list[str]]) -> dict[str, Any]:
        names = query.get("datasetName")
        name = names[-1] if names else None
        if name and name not in self._datasets:
            raise _Invalid(f"Dataset {name} not found", status=404)
        items = [item for item in self._items.values()
                 if not name or item["datasetName"] == name]
        return self._page(items, query)

    def _page(self, rows: list[dict[str, Any]], query: Mapping[str, list[str]],
              ) -> dict[str, Any]:
        page = self._query_int(query, "page", default=1, low=1, high=None)
        limit = self._query_int(query, "limit", default=50, low=1, high=100)
        return {
            "data": copy.deepcopy(rows[(page - 1) * limit : page * limit]),
            "meta": {"page": page, "limit": limit, "totalItems": len(rows),
                     "totalPages": math.ceil(len(rows) / limit)},
        }

    # -- score configs ---------------------------------------------------------------------

    def _create_config(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise _Invalid("body: must be a JSON object")
        name = _check_name(body.get("name"))
        data_type = body.get("dataType")
        if data_type not in CONFIG_DATA_TYPES:
            raise _Invalid(
                f"dataType: must be one of {', '.join(sorted(CONFIG_DATA_TYPES))}", ("dataType",)
            )
        description = _optional_string(body, "description")
        min_value = _optional_number(body, "minValue")
        max_value = _optional_number(body, "maxValue")
        categories: list[dict[str, Any]] | None = None
        if data_type == "NUMERIC":
            if body.get("categories") is not None:
                raise _Invalid("categories: not allowed for data type NUMERIC", ("categories",))
            _check_bounds(min_value, max_value)
        elif data_type == "CATEGORICAL":
            if min_value is not None or max_value is not None:
                raise _Invalid("minValue/maxValue: not allowed for data type CATEGORICAL")
            categories = _check_categories(body.get("categories"))
        elif data_type == "BOOLEAN":
            # The server's schema says `categories: z.undefined()`: even null is refused.
            if "categories" in body:
                raise _Invalid(
                    "categories: must not be passed for BOOLEAN; they are True=1, False=0",
                    ("categories",),
                )
            categories = [{"label": "True", "value": 1}, {"label": "False", "value": 0}]
            min_value = max_value = None  # not part of the BOOLEAN body: dropped
        else:  # TEXT
            if "categories" in body:
                raise _Invalid("categories: not allowed for data type TEXT", ("categories",))
            if min_value is not None or max_value is not None:
                raise _Invalid("minValue/maxValue: not allowed for data type TEXT")
        now = _iso(datetime.now(UTC))
        config = {
            "id": str(uuid.uuid4()),
            "name": name,
            "createdAt": now,
            "updatedAt": now,
            "projectId": self._project_id,
            "dataType": data_type,
            "isArchived": False,
            "minValue": min_value,
            "maxValue": max_value,
            "categories": categories,
            "description": description,
        }
        self._configs[config["id"]] = config
        self._config_seq[config["id"]] = len(self._config_seq)
        return copy.deepcopy(config)

    def _get_config(self, config_id: str) -> dict[str, Any]:
        config = self._configs.get(config_id)
        if config is None:
            raise _Invalid("Score config not found within authorized project", status=404)
        return config

    def _patch_config(self, config_id: str, body: Any) -> dict[str, Any]:
        config = self._get_config(config_id)
        if not isinstance(body, dict):
            raise _Invalid("body: must be a JSON object")
        update: dict[str, Any] = {}
        if "isArchived" in body:
            if not isinstance(body["isArchived"], bool):
                raise _Invalid("isArchived: must be a boolean", ("isArchived",))
            update["isArchived"] = body["isArchived"]
        if "name" in body:
            update["name"] = _check_name(body["name"])
        for key in ("minValue", "maxValue"):
            if key in body:
                if not _is_number(body[key]):
                    raise _Invalid(f"{key}: must be a finite number", (key,))
                update[key] = body[key]
        if "categories" in body:
            update["categories"] = _check_categories(body["categories"])
        if "description" in body:
            if not isinstance(body["description"], str):
                raise _Invalid("description: must be a string", ("description",))
            update["description"] = body["description"]
        if not update:
            raise _Invalid(
                "Request body cannot be empty. At least one field must be provided for update."
            )
        merged = {**config, **update}
        _check_config_shape(merged)
        merged["updatedAt"] = _iso(datetime.now(UTC))
        self._configs[config_id] = merged
        return copy.deepcopy(merged)

    def _list_configs(self, query: Mapping[str, list[str]]) -> dict[str, Any]:
        page = self._query_int(query, "page", default=1, low=1, high=None)
        limit = self._query_int(query, "limit", default=50, low=1, high=100)
        newest_first = sorted(self._configs, key=lambda cid: -self._config_seq[cid])
        chunk = newest_first[(page - 1) * limit : page * limit]
        total = len(newest_first)
        return {
            "data": [copy.deepcopy(self._configs[cid]) for cid in chunk],
            "meta": {
                "page": page,
                "limit": limit,
                "totalItems": total,
                "totalPages": math.ceil(total / limit),
            },
        }

    @staticmethod
    def _query_int(
        query: Mapping[str, list[str]], key: str, *, default: int, low: int, high: int | None
    ) -> int:
        values = query.get(key)
        if not values or values[-1] == "":
            return default
        try:
            number = float(values[-1])
        except ValueError:
            raise _Invalid(f"{key}: must be an integer", (key,)) from None
        if not number.is_integer() or number < low or (high is not None and number > high):
            bounds = f">= {low}" if high is None else f"between {low} and {high}"
            raise _Invalid(f"{key}: must be an integer {bounds}", (key,))
        return int(number)
