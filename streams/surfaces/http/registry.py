"""`streams registry-proxy`: the schema registry closed per tenant, in front of any
Confluent-compatible registry (SCHEMA_REGISTRY_URL; the stack's Apicurio).

Each request carries HTTP Basic credentials: a broker user and its password. The proxy
checks them **with the broker** (a fresh client authenticates with SCRAM on the proxy's SASL
listener, `Runtime.authenticates`), so a tenant has one identity for topics and schemas and
`streams tenant rotate-password` or `delete` reaches the registry too. It then authorizes the
request with the principal's topic ACLs, as the broker holds them, applied to subjects
(streams.core.subjects: a subject is authorized as the topic of the same name, shared
subjects are readable by all): acme's principal may read and register `fs.acme.*` and read
`streams.*`, and nothing of globex. A schema id is readable when one of its subjects is;
the subject lists are filtered to what the principal may read; whatever else the API offers
is left to operators (STREAMS_REGISTRY_OPERATORS and the proxy's own broker user).

Refusals are Confluent-style error bodies: 401 (`error_code` 40101) for missing or refused
credentials, 403 (40301) for a principal the rules refuse, 503 (50301) when the broker
cannot check credentials, 502 (50201) when the registry does not answer. Checked
passwords and principals' ACLs are trusted for STREAMS_REGISTRY_AUTH_TTL seconds.

Why a proxy the project runs, not the registry's own auth: Apicurio's authentication needs an
OpenID Connect server (Keycloak) and its authorization knows owners and roles, not prefixes;
the proxy keeps one identity (the broker's SCRAM users) and one rule (the topic ACLs).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import json
import logging
import secrets
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route as HttpRoute

from streams.core.errors import AccessDenied, StreamsError
from streams.core.subjects import Access, Route, TopicAcl, may, route_of
from streams.runtime.observe.health import Check, cached
from streams.runtime.root import Runtime

if TYPE_CHECKING:
    import httpx

__all__ = ["RegistryGate", "registry_proxy_app"]

log = logging.getLogger("streams.registry_proxy")

CHECKS_AT_ONCE = 4  # broker logins the proxy runs at once
REFUSAL_PAUSE = 1.0  # seconds a refused password is answered without asking again

# Answer headers worth handing back from the registry (the body is handed back decoded, so
# not its content-encoding; hop-by-hop headers never).
_PASSED_HEADERS = ("content-type",)


class _RegistryDown(Exception):
    """The registry behind the proxy did not answer."""


def _error(status: int, code: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error_code": code, "message": message}, status_code=status,
                        headers=headers or None)


def _unauthorized(message: str) -> JSONResponse:
    return _error(401, 40101, message, **{"WWW-Authenticate": 'Basic realm="schema-registry"'})


class RegistryGate:
    """Who is asking and what they may do: checked logins and principals' topic ACLs, each
    trusted for `ttl` seconds. Pure of I/O itself: `authenticate(user, password)` and
    `acls_of(principal)` (blocking calls, run in threads) ask the broker."""

    def __init__(self, authenticate: Callable[[str, str], bool],
                 acls_of: Callable[[str], list[TopicAcl]], *, prefix: str,
                 operators: tuple[str, ...], ttl: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._authenticate = authenticate
        self._acls_of = acls_of
        self.prefix = prefix
        self.operators = frozenset(operators)
        self.ttl = ttl
        self._clock = clock
        # A keyed digest, never the password, is what the cache holds.
        self._key = secrets.token_bytes(32)
        self._logins: dict[tuple[str, bytes], float] = {}
        self._acls: dict[str, tuple[float, list[TopicAcl]]] = {}
        # A refused password is answered from here for REFUSAL_PAUSE (a client retrying it
        # costs no broker login), and at most CHECKS_AT_ONCE logins run at a time. Not a
        # lock-out per user: anyone could then keep a user out by sending wrong passwords.
        self._refused: dict[tuple[str, bytes], float] = {}
        self._checks = asyncio.Semaphore(CHECKS_AT_ONCE)

    def _digest(self, password: str) -> bytes:
        return hmac.new(self._key, password.encode(), hashlib.sha256).digest()

    async def login(self, user: str, password: str) -> bool:
        """Whether the broker accepts these credentials (asked at most once per `ttl`)."""
        key = (user, self._digest(password))
        now = self._clock()
        if self._logins.get(key, 0.0) > now:
            return True
        if self._refused.get(key, 0.0) > now:
            return False  # this very password was refused a moment ago
        async with self._checks:
            accepted = await asyncio.to_thread(self._authenticate, user, password)
        now = self._clock()
        for stale in [k for k, until in self._refused.items() if until <= now]:
            del self._refused[stale]
        if not accepted:
            self._logins.pop(key, None)
            self._refused[key] = now + REFUSAL_PAUSE
            return False
        self._logins[key] = now + self.ttl
        return True

    async def acls(self, user: str) -> list[TopicAcl]:
        """The topic ACLs of `User:<user>` (asked at most once per `ttl`)."""
        now = self._clock()
        found = self._acls.get(user)
        if found is not None and found[0] > now:
            return found[1]
        acls = await asyncio.to_thread(self._acls_of, f"User:{user}")
        self._acls[user] = (now + self.ttl, acls)
        return acls

    async def may(self, user: str, access: Access, subject: str) -> bool:
        """Whether `user` may read or register `subject` (streams.core.subjects.may)."""
        if user in self.operators:
            return True
        return may(access, subject, await self.acls(user), prefix=self.prefix)


def _credentials(request: Request) -> tuple[str, str] | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic" or not value:
        return None
    try:
        user, sep, password = base64.b64decode(value, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep and user else None


class _Proxy:
    """The request handler: authenticate, authorize, forward, filter."""

    def __init__(self, gate: RegistryGate, upstream: Callable[[], httpx.AsyncClient]) -> None:
        self.gate = gate
        self._make_upstream = upstream
        self.upstream: httpx.AsyncClient | None = None
        # Which subjects hold an id, kept for the gate's TTL: an id's subjects can grow (a
        # registry that shares ids between equal schemas) or shrink (deletions).
        self._id_subjects: dict[int, tuple[float, list[str]]] = {}

    @asynccontextmanager
    async def lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        async with self._make_upstream() as client:
            self.upstream = client
            yield
        self.upstream = None

    async def _send(self, method: str, path: str, request: Request | None = None,
                    params: dict[str, str] | None = None) -> Any:
        import httpx

        assert self.upstream is not None, "the proxy's lifespan has not started"
        headers = {name: request.headers[name] for name in ("content-type", "accept")
                   if request is not None and name in request.headers}
        try:
            return await self.upstream.request(
                method, path.lstrip("/"),
                params=request.query_params if request is not None else params,
                content=await request.body() if request is not None else None, headers=headers)
        except httpx.HTTPError as exc:
            raise _RegistryDown(f"the schema registry did not answer: {exc!r}") from exc

    async def _subjects_of(self, schema_id: int) -> list[str] | None:
        """The subjects holding `schema_id` (deleted versions too), or None when the
        registry does not know the id; _RegistryDown when it cannot say."""
        now = time.monotonic()
        found = self._id_subjects.get(schema_id)
        if found is not None and found[0] > now:
            return found[1]
        answer = await self._send("GET", f"/schemas/ids/{schema_id}/versions",
                                  params={"deleted": "true"})
        if answer.status_code == 404:
            return None
        if answer.status_code != 200:
            raise _RegistryDown(f"the schema registry answered {answer.status_code} for the "
                                f"subjects of schema id {schema_id}")
        subjects = [str(item["subject"]) for item in answer.json()]
        self._id_subjects[schema_id] = (now + self.gate.ttl, subjects)
        return subjects

    async def _allowed(self, user: str, route: Route) -> str | None:
        """None when `user` may make the request; else why not."""
        gate = self.gate
        if route.kind in ("open", "list"):
            return None
        if route.kind == "subject":
            if await gate.may(user, route.access, route.subject):
                return None
            return (f"User:{user} may not {route.access} subject {route.subject}: a tenant's "
                    f"principal may use only subjects its topic ACLs cover "
                    f"('{gate.prefix}.<its tenant>.'), and read shared ones")
        if route.kind == "id":
            subjects = await self._subjects_of(route.schema_id)
            if subjects is None:
                return None  # unknown to the registry: let it say so (404)
            for subject in subjects:  # none at all: closed, as for a subject of another
                if await gate.may(user, "read", subject):
                    return None
            return (f"User:{user} may not read schema id {route.schema_id}: none of its "
                    "subjects is the principal's own or shared")
        if user in gate.operators:
            return None
        return f"User:{user} may not make this request: it is for registry operators"

    async def _filtered(self, user: str, answer: Any) -> Response:
        items = answer.json()
        kept = []
        for item in items:
            subject = item["subject"] if isinstance(item, dict) else item
            if await self.gate.may(user, "read", str(subject)):
                kept.append(item)
        return Response(json.dumps(kept), status_code=200,
                        media_type=answer.headers.get("content-type", "application/json"))

    async def handle(self, request: Request) -> Response:
        given = _credentials(request)
        if given is None:
            return _unauthorized("no credentials: send HTTP Basic auth with a broker user and "
                                 "its password (SCHEMA_REGISTRY_USERNAME, "
                                 "SCHEMA_REGISTRY_PASSWORD)")
        user, password = given
        path = "/" + request.path_params.get("path", "")
        try:
            if not await self.gate.login(user, password):
                log.info("registry proxy: refused the credentials of %s", user)
                return _unauthorized(f"the broker did not accept the password of {user}")
            route = route_of(request.method, path)
            why = await self._allowed(user, route)
            if why is None and route.kind == "subject" and user not in self.gate.operators:
                why = await _references(request, user)
            if why is not None:
                log.info("registry proxy: %s %s refused: %s", request.method, path, why)
                return _error(403, 40301, why)
            answer = await self._send(request.method, path, request)
        except _RegistryDown as exc:
            return _error(502, 50201, str(exc))
        except AccessDenied as exc:  # the proxy's own user: a misconfiguration, not an outage
            log.error("registry proxy: cannot read ACLs: %s", exc)
            return _error(500, 50001, f"the registry proxy cannot check access: {exc}; give "
                          "its KAFKA_SASL_USERNAME DESCRIBE on the cluster (or make it a "
                          "super user)")
        except StreamsError as exc:  # the broker could not be asked (credentials, ACLs)
            return _error(503, 50301, f"cannot check access now: {exc}")
        if route.filtered and answer.status_code == 200:
            return await self._filtered(user, answer)
        headers = {name: answer.headers[name] for name in _PASSED_HEADERS
                   if name in answer.headers}
        return Response(answer.content, status_code=answer.status_code, headers=headers)


async def _references(request: Request, user: str) -> str | None:
    """Why a tenant's body may not be forwarded: schema references name other subjects the
    registry would resolve for it (the pipeline's schemas have none)."""
    body = await request.body()
    if not body:
        return None
    try:
        references = json.loads(body).get("references")
    except (ValueError, AttributeError):
        return None  # not a JSON object: the registry refuses it itself
    if references:
        return (f"User:{user} may not send schema references: they name other subjects, so "
                "they are for registry operators")
    return None


def registry_proxy_app(runtime: Runtime, *, gate: RegistryGate | None = None,
                       upstream: Callable[[], httpx.AsyncClient] | None = None,
                       checks: Mapping[str, Check] | None = None) -> Starlette:
    """The proxy as an ASGI app on a Runtime: it checks logins and reads ACLs through the
    runtime's broker settings (a SASL listener; its user needs DESCRIBE on the cluster to
    read ACLs) and forwards to its SCHEMA_REGISTRY_URL (with its registry credentials, if
    any). `GET /healthz` (alive: no call) and `GET /readyz` (the broker and the registry
    behind it answer: `checks`, by default `Runtime.server_checks`) need no credentials,
    for probes. `gate` and `upstream` (a factory of the registry's HTTP client) replace the
    broker-backed gate and the runtime's client (tests)."""
    settings = runtime.settings
    if gate is None:
        operators = settings.registry_operators + \
            ((settings.sasl_username,) if settings.sasl_username else ())
        gate = RegistryGate(runtime.authenticates,
                            lambda principal: runtime.access.topic_acls(principal),
                            prefix=settings.topic_prefix, operators=operators,
                            ttl=settings.registry_auth_ttl)
    auth = (settings.schema_registry_username, settings.schema_registry_password or "") \
        if settings.schema_registry_username else None
    base = settings.schema_registry_url.rstrip("/") + "/"

    def registry() -> httpx.AsyncClient:
        ca = settings.schema_registry_ca_location
        return runtime.http(base_url=base, auth=auth, timeout=settings.admin_timeout,
                            verify=ssl.create_default_context(cafile=ca) if ca else True)

    proxy = _Proxy(gate, upstream or registry)
    ready = {name: cached(check) for name, check in
             (runtime.server_checks() if checks is None else checks).items()}

    async def healthz(_request: Request) -> Response:
        return JSONResponse({"status": "alive"})

    async def readyz(_request: Request) -> Response:
        answers = await asyncio.to_thread(lambda: {n: c() for n, c in ready.items()})
        failing = {name: why for name, why in answers.items() if why is not None}
        if failing:
            # Anyone may ask (no credentials): the names only; the details (hosts, the
            # broker's errors) go to the log.
            log.warning("registry proxy not ready: %s", failing)
            return JSONResponse({"status": "not ready", "failing": sorted(failing)}, 503)
        return JSONResponse({"status": "ready"})

    methods = ["GET", "POST", "PUT", "DELETE"]
    return Starlette(routes=[HttpRoute("/healthz", healthz, methods=["GET"]),
                             HttpRoute("/readyz", readyz, methods=["GET"]),
                             HttpRoute("/{path:path}", proxy.handle, methods=methods)],
                     lifespan=proxy.lifespan)
