"""The REST surface of `streams serve`: FastAPI routes over the CommandService.

    POST /v1/workspaces/{workspace_id}/commands      a command frame -> outcome or error frame
    GET  /v1/workspaces/{workspace_id}/runs           runs, newest first (rule=, limit=, offset=)
    GET  /v1/workspaces/{workspace_id}/runs/{run_id}  one run's record
    GET  /v1/workspaces/{workspace_id}/feedback       feedback (feedback_type=, participant=, ...)
    GET  /v1/workspaces/{workspace_id}/feedback-types the registered types, schemas, score configs
    GET  /v1/workspaces/{workspace_id}/me             who the key acts as, its capabilities
    GET  /ui/                                         the annotation page (docs/ui.md)
    GET  /healthz                                     alive (the event loop answers); no key
    GET  /readyz                                      ready: started, broker and registry answer

Every route but /healthz and /readyz needs `Authorization: Bearer fsk_...` (`streams keys create`).
Errors are error frames (streams.core.commands) with the code's HTTP status. The OpenAPI
document is committed as docs/openapi.json (tests/surfaces/test_http.py keeps it equal).
`create_app(service)` builds the app on a ready service; `app_from_settings(settings)` makes
the client and key store and starts the store in the app's lifespan (no I/O before).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from streams.core.commands import (
    MAX_BODY_BYTES,
    CommandFailed,
    CommandFrame,
    ErrorFrame,
    OutcomeFrame,
    error_frame_of,
)
from streams.core.errors import StreamsError
from streams.extras import needs
from streams.runtime.client.commands import CommandService
from streams.settings import Settings

with needs("serve", "streams serve"):
    from fastapi import FastAPI, Header, Query, Request
    from fastapi.openapi.utils import get_openapi
    from fastapi.responses import JSONResponse
    from fastapi.staticfiles import StaticFiles

    from streams.surfaces.http.realtime import install_realtime

__all__ = ["app_from_env", "app_from_settings", "create_app", "openapi_document"]

log = logging.getLogger(__name__)

API_VERSION = "1"

UI_DIR = Path(__file__).resolve().parent / "ui"
"""The annotation page's files (HTML, CSS, JavaScript modules), served at /ui/."""

WorkspaceId = Annotated[str, "a workspace id: <tenant>.<workspace>, e.g. acme.prod"]

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorFrame, "description": description}
    for status, description in [
        (401, "unauthorized: no, unknown, malformed or revoked API key"),
        (403, "forbidden: a key of another tenant, or without the capability"),
        (404, "not_found: the target, run or tenant does not exist"),
        (409, "conflict: the command id was used for a different command"),
        (413, "too_large: the body is over 1 MiB, or the record over the maximum size"),
        (422, "validation_failed: malformed JSON, unknown frame or command type, bad fields "
              "(with their paths)"),
        (503, "unavailable: the broker or registry did not answer in time; retry with the "
              "same command_id"),
    ]
}


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else authorization.strip()


def _answer(frame: OutcomeFrame | ErrorFrame) -> JSONResponse:
    status = 200 if isinstance(frame, OutcomeFrame) else frame.status
    return JSONResponse(frame.model_dump(mode="json"), status_code=status)


async def _read(service_call: Callable[[], Awaitable[dict[str, Any]]]) -> JSONResponse:
    # Errors of reads are error frames too (without a command id).
    try:
        return JSONResponse(await service_call())
    except Exception as exc:
        return _answer(error_frame_of(exc))


async def _body(request: Request) -> bytes:
    """The body, refused as too_large as soon as it passes MAX_BODY_BYTES."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise CommandFailed("too_large", f"the body is {declared} bytes, over the limit of "
                            f"{MAX_BODY_BYTES} bytes (1 MiB): send a smaller value")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise CommandFailed("too_large", f"the body is over the limit of {MAX_BODY_BYTES} "
                                "bytes (1 MiB): send a smaller value")
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(service: CommandService | None = None, *,
               lifespan: Callable[[FastAPI], Any] | None = None) -> FastAPI:
    """The REST app over `service` (set later as `app.state.service` when None)."""
    app = FastAPI(title="feedback-streams", version=API_VERSION, lifespan=lifespan,
                  description="Give and read feedback: command frames over REST. "
                  "See docs/api.md.")
    app.state.service = service
    app.state.starting = "reading the key store"
    # Readiness checks beyond "started" (the broker and registry answer): set by the lifespan.
    app.state.checks = {}

    def svc() -> CommandService:
        found: CommandService | None = app.state.service
        if found is None:
            raise CommandFailed("unavailable", f"the service is starting: "
                                f"{app.state.starting}; retry")
        return found

    install_realtime(app, svc)  # the WebSocket stream and the MCP tools
    # The annotation page: static files shipped in the package, no build step (docs/ui.md).
    app.mount("/ui", StaticFiles(directory=UI_DIR, html=True), name="ui")

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> JSONResponse:
        # Liveness: answering at all is the proof (no broker call: an outage is not death).
        return JSONResponse({"status": "alive"})

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        # Readiness: started (the key store read) and the broker and registry answer.
        if app.state.service is None:
            return JSONResponse({"status": "starting", "detail": app.state.starting}, 503)
        checks = dict(app.state.checks)
        answers = await asyncio.to_thread(lambda: {n: c() for n, c in checks.items()})
        failing = {name: why for name, why in answers.items() if why is not None}
        if failing:
            return JSONResponse({"status": "not ready", "failing": failing}, 503)
        return JSONResponse({"status": "ready"})

    @app.post(
        "/v1/workspaces/{workspace_id}/commands",
        response_model=OutcomeFrame, responses=_ERRORS,
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/CommandFrame"}}}}},
        summary="Run a command (give_feedback); the answer is an outcome or error frame",
    )
    async def command(request: Request, workspace_id: str,
                      authorization: Annotated[str | None, Header()] = None) -> JSONResponse:
        try:
            body = await _body(request)
            service = svc()
        except CommandFailed as exc:
            return _answer(exc.frame())
        return _answer(await service.execute(_bearer(authorization), workspace_id, body))

    @app.get("/v1/workspaces/{workspace_id}/runs", responses=_ERRORS,
             summary="The workspace's runs, newest first, paged")
    async def runs(workspace_id: str,
                   authorization: Annotated[str | None, Header()] = None,
                   rule: str | None = None,
                   limit: Annotated[int, Query(ge=1, le=500)] = 50,
                   offset: Annotated[int, Query(ge=0)] = 0) -> JSONResponse:
        return await _read(lambda: svc().runs(_bearer(authorization), workspace_id, rule=rule,
                                              limit=limit, offset=offset))

    @app.get("/v1/workspaces/{workspace_id}/runs/{run_id}", responses=_ERRORS,
             summary="One run's record: its start, matched events and emitted events")
    async def run(workspace_id: str, run_id: str,
                  authorization: Annotated[str | None, Header()] = None) -> JSONResponse:
        return await _read(lambda: svc().run(_bearer(authorization), workspace_id, run_id))

    @app.get("/v1/workspaces/{workspace_id}/feedback", responses=_ERRORS,
             summary="Feedback given in the workspace, by type and participant, paged")
    async def feedback(workspace_id: str,
                       authorization: Annotated[str | None, Header()] = None,
                       feedback_type: str | None = None, participant: str | None = None,
                       limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                       offset: Annotated[int, Query(ge=0)] = 0) -> JSONResponse:
        return await _read(lambda: svc().feedback(
            _bearer(authorization), workspace_id, feedback_type=feedback_type,
            participant=participant, limit=limit, offset=offset))

    @app.get("/v1/workspaces/{workspace_id}/me", responses=_ERRORS,
             summary="Who the API key acts as here, and its capabilities")
    async def me(workspace_id: str,
                 authorization: Annotated[str | None, Header()] = None) -> JSONResponse:
        async def call() -> dict[str, Any]:
            return svc().whoami(_bearer(authorization), workspace_id)
        return await _read(call)

    @app.get("/v1/workspaces/{workspace_id}/feedback-types", responses=_ERRORS,
             summary="The registered feedback types: JSON schemas and score configs")
    async def feedback_types(workspace_id: str,
                             authorization: Annotated[str | None, Header()] = None,
                             ) -> JSONResponse:
        async def call() -> dict[str, Any]:
            return svc().feedback_types(_bearer(authorization), workspace_id)
        return await _read(call)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version,
                                   description=app.description, routes=app.routes)
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            frame = CommandFrame.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(frame.pop("$defs", {}))
            schemas["CommandFrame"] = frame
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of the REST surface (committed as docs/openapi.json)."""
    return create_app().openapi()


def app_from_settings(settings: Settings) -> FastAPI:
    """The app with its own StreamsClient and KeyStore, started in its lifespan."""
    from streams.runtime.client.keys import KeyStore
    from streams.runtime.client.workspace import StreamsClient
    from streams.runtime.observe.health import server_checks
    from streams.runtime.root import Runtime

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = StreamsClient(settings)
        keys = KeyStore(settings, client.log.producer)
        producer = client.log.producer
        app.state.checks = server_checks(lambda t: producer.list_topics(timeout=t),
                                         Runtime(settings).probe_registry().get_subjects)

        async def start() -> None:
            # The server answers (503, unavailable) while the broker cannot be reached, and
            # starts serving once the key store is read; it does not exit.
            backoff = 0.5
            while True:
                try:
                    await asyncio.to_thread(keys.start)
                    break
                except StreamsError as exc:
                    app.state.starting = f"cannot reach the broker yet ({exc})"
                    log.warning("key store not started: %s; retrying in %.1f s", exc, backoff)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 10.0)
            app.state.service = CommandService(client, keys)

        starting = asyncio.create_task(start())
        try:
            yield
        finally:
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
            keys.close()
            client.close()

    return create_app(lifespan=lifespan)


def app_from_env() -> FastAPI:
    """The app from the environment (settings, and the feedback types of
    STREAMS_FEEDBACK_MODULES): the factory each of `streams serve --workers N`'s processes
    calls."""
    import importlib

    settings = Settings.from_env()
    for module in settings.feedback_modules:
        importlib.import_module(module)
    return app_from_settings(settings)
