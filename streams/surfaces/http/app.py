"""The REST surface of `streams serve`: FastAPI routes over the CommandService.

    POST /v1/workspaces/{workspace_id}/commands      a command frame -> outcome or error frame
    GET  /v1/workspaces/{workspace_id}/runs           runs, newest first (rule=, limit=, cursor=)
    GET  /v1/workspaces/{workspace_id}/runs/{run_id}  one run's record
    GET  /v1/workspaces/{workspace_id}/firings/{firing_id}    one firing's record
    GET  /v1/workspaces/{workspace_id}/chains/{correlation_id}  one chain's events
    GET  /v1/workspaces/{workspace_id}/feedback       feedback (feedback_type=, participant=, ...)
    GET  /v1/workspaces/{workspace_id}/feedback-types the registered types, schemas, score configs
    GET  /v1/workspaces/{workspace_id}/calibration    each judge's agreement with people lately
    GET  /v1/workspaces/{workspace_id}/me             who the key acts as, its capabilities
    GET  /v1/workspaces/{workspace_id}/queues         the annotation queues (archived=true too)
    POST /v1/workspaces/{workspace_id}/queues         install a queue from its JSON form
    POST /v1/workspaces/{workspace_id}/queues/{name}/archive   archive a live queue
    GET  /v1/workspaces/{workspace_id}/queues/{name}/progress  where the queue stands
    GET  /v1/workspaces/{workspace_id}/queues/{name}/pair/{item}  a queue of pairs' two verdicts
    GET  /v1/workspaces/{workspace_id}/queues/{name}/agreement    agreement on a queue's items
    POST /v1/workspaces/{workspace_id}/queues/{name}/next      lease the next item
    POST /v1/workspaces/{workspace_id}/queues/{name}/submit    a verdict under a lease
    POST /v1/workspaces/{workspace_id}/queues/{name}/skip      give a leased item back
    GET  /ui/                                         the annotation page (docs/ui.md)
    GET  /healthz                                     alive (the event loop answers); no key
    GET  /readyz                                      ready: started, broker and registry answer

Every route but /healthz and /readyz needs `Authorization: Bearer fsk_...` (`streams keys create`).
Errors are error frames (streams.core.commands) with the code's HTTP status. The OpenAPI
document is committed as docs/openapi.json (tests/surfaces/test_http.py keeps it equal).

`create_app(runtime)` builds the app on a Runtime (streams.runtime.root, the only place
clients are made): its lifespan makes the workspace handle and the key store on the runtime
and starts the store (no I/O before). One router per resource (commands, runs, feedback, the
key's identity, queues, health) shares two dependencies: the service, once started, and the
request's bearer key.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from streams.core.commands import (
    MAX_BODY_BYTES,
    CommandFailed,
    ErrorFrame,
    FieldProblem,
    OutcomeFrame,
    error_frame_of,
)
from streams.core.errors import StreamsError
from streams.core.feedback import Feedback
from streams.core.leases import ITEM_PATTERN
from streams.core.queues import QUEUE_NAME_PATTERN
from streams.core.tenancy import TENANT_PATTERN, WORKSPACE_PATTERN
from streams.core.viewrows import PAGE_CURSOR_PATTERN
from streams.extras import needs
from streams.runtime.client.commands import CommandService
from streams.runtime.client.keys import KeyStore
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.jobs.queues import QueueBook, QueueService
from streams.runtime.jobs.rules import RuleFinder
from streams.runtime.root import Runtime
from streams.settings import Settings
from streams.surfaces.http.admission import (
    COMMAND_PREFIX,
    COMMAND_SUFFIX,
    Admission,
    ShedCommands,
    is_command,
)
from streams.surfaces.modules import import_user_module, module_rules

with needs("serve", "streams serve"):
    from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
    from fastapi import Path as Path_
    from fastapi.exception_handlers import http_exception_handler
    from fastapi.exceptions import RequestValidationError
    from fastapi.openapi.utils import get_openapi
    from fastapi.responses import JSONResponse, Response
    from fastapi.staticfiles import StaticFiles
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from streams.surfaces.http.document import (
        CalibrationOut,
        ChainOut,
        FeedbackPage,
        FeedbackTypes,
        FiringOut,
        Identity,
        NextItem,
        PairOut,
        QueueAgreementOut,
        QueueInstalledOut,
        QueueOutcome,
        QueueProgressOut,
        Queues,
        RunOut,
        RunsPage,
        SkipIn,
        SkipOut,
        WhyOut,
        contract_document,
    )
    from streams.surfaces.http.realtime import install_realtime

__all__ = ["app_from_env", "create_app", "openapi_document"]

log = logging.getLogger(__name__)

API_VERSION = "1"

UI_DIR = Path(__file__).resolve().parent / "ui"
"""The annotation page's files (HTML, CSS, JavaScript modules), served at /ui/."""

WORKSPACE_ID_PATTERN = f"^{TENANT_PATTERN.pattern}\\.{WORKSPACE_PATTERN.pattern}$"
"""A workspace id, `<tenant>.<workspace>` (what `parse_workspace_id` takes), in the document."""

CURSOR_QUERY = "the next_cursor of the page before, unchanged; none for the first page"

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorFrame, "description": description}
    for status, description in [
        (401, "unauthorized: no, unknown, malformed or revoked API key"),
        (403, "forbidden: a key of another tenant, or without the capability"),
        (404, "not_found: the target, run or tenant does not exist"),
        (409, "conflict: the command id was used for a different command, or a live queue "
              "of that name has another definition"),
        (413, "too_large: the body is over 1 MiB, or the record over the maximum size"),
        (422, "validation_failed: malformed JSON, unknown frame or command type, bad fields "
              "(with their paths)"),
        (503, "unavailable: the broker or registry did not answer in time, the server is "
              "starting or full, or a read took over STREAMS_SERVE_READ_TIMEOUT; retry (a "
              "command with the same command_id)"),
    ]
}


def _answers(model: type[Any]) -> dict[int | str, dict[str, Any]]:
    # A read's 200 body, declared, and the error frames.
    return {200: {"model": model, "description": "the answer"}, **_ERRORS}


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else authorization.strip()


# -- the shared dependencies ---------------------------------------------------------------


# The dependencies are coroutines although they do not wait: FastAPI runs a plain `def`
# dependency in its thread pool, a thread hop per dependency per request, which cost a REST
# command about a third of its CPU (bench.surfaces).


async def bearer_key(authorization: Annotated[str | None, Header()] = None) -> str | None:
    """The request's API key (`Authorization: Bearer fsk_...`), None without one: the service
    answers unauthorized."""
    return _bearer(authorization)


def started_service(app: FastAPI) -> CommandService:
    """The app's service; CommandFailed (unavailable) while it is starting."""
    found: CommandService | None = app.state.service
    if found is None:
        raise CommandFailed("unavailable", f"the service is starting: "
                            f"{app.state.starting}; retry")
    return found


async def service_of(request: Request) -> CommandService:
    """The service of the request's app, once started."""
    return started_service(request.app)


def started_queues(app: FastAPI) -> QueueService:
    """The app's queue service, over its started service (made once, following each
    tenant's queues topic until shutdown); unavailable while the service is starting."""
    service = started_service(app)
    made: QueueService | None = app.state.queues
    if made is None or made.service is not service:
        if made is not None:
            made.close()
        made = app.state.queues = QueueService(
            service, QueueBook(service.client.runtime, follow=True))
    return made


async def queues_of(request: Request) -> QueueService:
    """The queue service of the request's app (made on the first call: no I/O)."""
    return started_queues(request.app)


Key = Annotated[str | None, Depends(bearer_key)]
Service = Annotated[CommandService, Depends(service_of)]
QueuesService = Annotated[QueueService, Depends(queues_of)]


_HINTS = {"query.cursor": "invalid cursor: pass the next_cursor of an earlier page unchanged, "
                          "or no cursor for the first page"}
"""What to fix, for a parameter whose parser's own message would not say it."""


def request_problems(errors: Sequence[Any]) -> CommandFailed:
    """validation_failed for a request FastAPI could not parse, one field problem per
    parameter (`query.limit`, `path.run_id`) with what was wrong."""
    problems = []
    for error in errors:
        path = ".".join(str(part) for part in error.get("loc", ())) or "$"
        problems.append(FieldProblem(path=path, message=_HINTS.get(
            path, str(error.get("msg", "invalid")))))
    return CommandFailed("validation_failed", "invalid request: " + "; ".join(
        f"{p.path}: {p.message}" for p in problems), problems)


def _answer(frame: OutcomeFrame | ErrorFrame) -> JSONResponse:
    status = 200 if isinstance(frame, OutcomeFrame) else frame.status
    return JSONResponse(frame.model_dump(mode="json"), status_code=status)


def _hold_reads(settings: Settings) -> None:
    """The `hold_reads` fault: say the read is held, then wait (blocking this thread, never
    the event loop) until the test releases reads, at most 120 s."""
    held = settings.state_path("reads-held")
    held.parent.mkdir(parents=True, exist_ok=True)
    held.touch()
    released = settings.state_path("reads-released")
    deadline = time.monotonic() + 120
    while not released.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def _render(data: dict[str, Any], settings: Settings) -> bytes:
    # JSON of a page (up to 1,000 envelopes): built off the event loop, in a thread.
    if settings.serve_fault == "hold_reads":
        _hold_reads(settings)
    return json.dumps(data, ensure_ascii=False, allow_nan=False,
                      separators=(",", ":")).encode()


async def _read(request: Request,
                service_call: Callable[[], Awaitable[dict[str, Any]]]) -> Response:
    # A read: its blocking work (view queries, decoding, JSON) runs in threads, so the event
    # loop keeps answering (/healthz, commands); past STREAMS_SERVE_READ_TIMEOUT it is
    # answered unavailable (the thread's work is abandoned, not interrupted). Errors of
    # reads are error frames too (without a command id).
    settings: Settings = request.app.state.settings

    async def work() -> bytes:
        data = await service_call()
        return await asyncio.to_thread(_render, data, settings)

    try:
        body = await asyncio.wait_for(work(), settings.serve_read_timeout)
    except TimeoutError:
        return _answer(CommandFailed(
            "unavailable", f"the read took over {settings.serve_read_timeout:g} s "
            "(STREAMS_SERVE_READ_TIMEOUT): retry, or ask for a smaller page (limit=)").frame())
    except Exception as exc:
        return _answer(error_frame_of(exc))
    return Response(body, media_type="application/json")


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


# -- one router per resource ----------------------------------------------------------------

WORKSPACE = "/v1/workspaces/{workspace_id}"

health = APIRouter()
"""Liveness and readiness (no key, not in the OpenAPI document)."""


@health.get("/healthz", include_in_schema=False)
async def _healthz() -> JSONResponse:
    # Liveness: answering at all is the proof (no broker call: an outage is not death).
    return JSONResponse({"status": "alive"})


@health.get("/readyz", include_in_schema=False)
async def _readyz(request: Request) -> JSONResponse:
    # Readiness: started (the key store read) and the broker and registry answer.
    state = request.app.state
    if state.service is None:
        return JSONResponse({"status": "starting", "detail": state.starting}, 503)
    checks = dict(state.checks)
    answers = await asyncio.to_thread(lambda: {n: c() for n, c in checks.items()})
    failing = {name: why for name, why in answers.items() if why is not None}
    if failing:
        return JSONResponse({"status": "not ready", "failing": failing}, 503)
    return JSONResponse({"status": "ready"})


commands = APIRouter(prefix=WORKSPACE)
"""Commands: one route that takes every command frame."""


@commands.post(
    "/commands",
    response_model=OutcomeFrame, responses=_ERRORS,
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/CommandFrame"}}}}},
    summary="Run a command (give_feedback); the answer is an outcome or error frame",
    name="command",
)
async def _command(request: Request, workspace_id: str) -> JSONResponse:
    # Run one command frame. It was admitted before routing (ShedCommands, the outermost
    # layer): a command past the limit never gets here. Most commands are run by
    # CommandsFirst before the router; this route answers the rest (a service still
    # starting) and declares the route in the document.
    return await _run_command(request, started_service(request.app), workspace_id)


async def _run_command(request: Request, service: CommandService,
                       workspace_id: str) -> JSONResponse:
    # The key is read here, not through the dependencies the other routes use: solving them
    # was about a sixth of a command's CPU in a sampling profile. (The document declares the
    # bearer key on every route either way.)
    key = _bearer(request.headers.get("authorization"))
    try:
        body = await _body(request)
    except CommandFailed as exc:
        return _answer(exc.frame())
    return _answer(await service.execute(key, workspace_id, body))


class CommandsFirst:
    """ASGI middleware: a command request (POST /v1/workspaces/{id}/commands) to a started
    service is run at once, as the `command` route runs it, without the router, its route
    matching and its exception layers (the server's CPU per command fell from about 950 to
    about 600 µs in bench.rest_commands); any other request, and a command while the
    service is starting, goes on to the app. Inside ShedCommands: admission applies first."""

    def __init__(self, app: Any, fastapi: FastAPI) -> None:
        self.app = app
        self.fastapi = fastapi

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        service: CommandService | None = self.fastapi.state.service
        if service is None or not is_command(scope):
            await self.app(scope, receive, send)
            return
        workspace_id = scope["path"][len(COMMAND_PREFIX):-len(COMMAND_SUFFIX)]
        if not workspace_id or "/" in workspace_id:
            await self.app(scope, receive, send)  # the router's answer: no such route
            return
        answer = await _run_command(Request(scope, receive), service, workspace_id)
        await answer(scope, receive, send)


runs = APIRouter(prefix=WORKSPACE)
"""Runs: the workspace's runs and one run's record."""


Cursor = Annotated[str | None, Query(description=CURSOR_QUERY, pattern=PAGE_CURSOR_PATTERN,
                                     max_length=64)]


@runs.get("/runs", responses=_answers(RunsPage), name="runs",
          summary="The workspace's runs, newest first, paged")
async def _runs_of(request: Request, workspace_id: str, key: Key, service: Service,
                   rule: str | None = None,
                   limit: Annotated[int, Query(ge=1, le=500)] = 50,
                   cursor: Cursor = None) -> Response:
    # The workspace's runs, a page after the cursor.
    return await _read(request, lambda: service.runs(key, workspace_id, rule=rule,
                                                     limit=limit, cursor=cursor))


@runs.get("/runs/{run_id}", responses=_answers(RunOut),
          summary="One run's record: its start, matched events and emitted events",
          name="run")
async def _run(request: Request, workspace_id: str, run_id: str, key: Key,
               service: Service) -> Response:
    # One run's record.
    return await _read(request, lambda: service.run(key, workspace_id, run_id))


@runs.get("/firings/{firing_id}", responses=_answers(FiringOut),
          summary="One firing: its rule_fired event, what it matched and the runs it started",
          name="firing")
async def _firing(request: Request, workspace_id: str, firing_id: str, key: Key,
                  service: Service) -> Response:
    # One firing's record.
    return await _read(request, lambda: service.firing(key, workspace_id, firing_id))


@runs.get("/chains/{correlation_id}", responses=_answers(ChainOut),
          summary="One causal chain's events in log order (at most 500; count is all)",
          name="chain")
async def _chain(request: Request, workspace_id: str, correlation_id: str, key: Key,
                 service: Service) -> Response:
    # One chain's events.
    return await _read(request, lambda: service.chain(key, workspace_id, correlation_id))


@runs.get("/rules/{rule}/why/{event_id}", responses=_answers(WhyOut),
          summary="What a rule did with an event, and why", name="why")
async def _why(request: Request, workspace_id: str, rule: str, event_id: str, key: Key,
               service: Service) -> Response:
    # The rule's decision on the event: left out and why, throttled, or its run's state.
    return await _read(request, lambda: service.why(key, workspace_id, rule, event_id))


feedback = APIRouter(prefix=WORKSPACE)
"""Feedback: what was given, and the types that can be."""


@feedback.get("/feedback", responses=_answers(FeedbackPage),
              summary="Feedback given in the workspace, by type and participant, paged",
              name="feedback")
async def _feedback_given(request: Request, workspace_id: str, key: Key, service: Service,
                          feedback_type: str | None = None, participant: str | None = None,
                          limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                          cursor: Cursor = None) -> Response:
    # Feedback given in the workspace, a page after the cursor.
    return await _read(request, lambda: service.feedback(
        key, workspace_id, feedback_type=feedback_type, participant=participant,
        limit=limit, cursor=cursor))


@feedback.get("/feedback-types", responses=_answers(FeedbackTypes),
              summary="The registered feedback types: JSON schemas and score configs",
              name="feedback_types")
async def _feedback_types(request: Request, workspace_id: str, key: Key,
                          service: Service) -> Response:
    # The registered feedback types.
    async def call() -> dict[str, Any]:
        return service.feedback_types(key, workspace_id)
    return await _read(request, call)


@feedback.get("/calibration", responses=_answers(CalibrationOut),
              summary="How far each evaluator version agrees with people lately, with its "
                      "alarm state (read)",
              name="calibration")
async def _calibration(request: Request, workspace_id: str, key: Key,
                       service: Service) -> Response:
    # Each version's newest pairs with people, per feedback type and field.
    return await _read(request, lambda: service.calibration(key, workspace_id))


keys = APIRouter(prefix=WORKSPACE)
"""Keys: who the request's key acts as."""


@keys.get("/me", responses=_answers(Identity),
          summary="Who the API key acts as here, and its capabilities", name="me")
async def _me(request: Request, workspace_id: str, key: Key, service: Service) -> Response:
    # The key's actor and capabilities in the workspace.
    async def call() -> dict[str, Any]:
        return service.whoami(key, workspace_id)
    return await _read(request, call)


queues = APIRouter(prefix=WORKSPACE)
"""Annotation queues: list, install and archive them (streams.core.queues)."""

QUEUE_NAME = Path_(description="a live queue's name", pattern=QUEUE_NAME_PATTERN,
                   max_length=128)


@queues.get("/queues", responses=_answers(Queues), name="queues",
            summary="The workspace's annotation queues, by name")
async def _queues(request: Request, workspace_id: str, key: Key, service: QueuesService,
                  archived: Annotated[bool, Query(
                      description="archived queues too")] = False) -> Response:
    # The workspace's queues (the key needs `read`).
    return await _read(request, lambda: service.list(key, workspace_id, archived=archived))


@queues.post(
    "/queues", name="install_queue",
    responses={**_answers(QueueInstalledOut),
               201: {"model": QueueInstalledOut, "description": "installed"},
               200: {"model": QueueInstalledOut, "description": "live already with this "
                     "definition: nothing written (repeat: true)"}},
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/QueueDefinition"}}}}},
    summary="Install an annotation queue from its JSON form (the key needs manage_queues)",
)
async def _install_queue(request: Request, workspace_id: str, key: Key,
                         service: QueuesService) -> JSONResponse:
    # 201 with the installed entry; 200 for a repeat of a live queue's definition.
    try:
        body = await _body(request)
        answer, created = await service.install(key, workspace_id, body)
    except Exception as exc:
        return _answer(error_frame_of(exc))
    return JSONResponse(answer, status_code=201 if created else 200)


@queues.post("/queues/{name}/archive", responses=_answers(QueueOutcome), name="archive_queue",
             summary="Archive a live queue (the key needs manage_queues); its items stay")
async def _archive_queue(request: Request, workspace_id: str,
                         name: Annotated[str, QUEUE_NAME], key: Key,
                         service: QueuesService) -> JSONResponse:
    # The archived entry; not_found naming the live queues when there is none of that name.
    try:
        answer = await service.archive(key, workspace_id, name)
    except Exception as exc:
        return _answer(error_frame_of(exc))
    return JSONResponse(answer)


@queues.get("/queues/{name}/progress", responses=_answers(QueueProgressOut),
            name="queue_progress",
            summary="Where a live queue stands: items done, in review and left (read)")
async def _queue_progress(request: Request, workspace_id: str,
                          name: Annotated[str, QUEUE_NAME], key: Key,
                          service: QueuesService) -> Response:
    # The counts; not_found naming the live queues when there is none of that name.
    return await _read(request, lambda: service.progress(key, workspace_id, name))


@queues.get("/queues/{name}/agreement", responses=_answers(QueueAgreementOut),
            name="queue_agreement",
            summary="Agreement on a queue's items: between people, and of each judge with "
                    "people (read)")
async def _queue_agreement(request: Request, workspace_id: str,
                           name: Annotated[str, QUEUE_NAME], key: Key,
                           service: QueuesService) -> Response:
    # Alpha between people and each version's kappa or rho; not_found for a queue not live.
    return await _read(request, lambda: service.agreement(key, workspace_id, name))


@queues.get("/queues/{name}/pair/{item}", responses=_answers(PairOut), name="queue_pair",
            summary="The two versions' verdicts a queue of pairs shows for an item (read)")
async def _queue_pair(request: Request, workspace_id: str, name: Annotated[str, QUEUE_NAME],
                      item: Annotated[str, Path_(description="a queue item, kind:id",
                                                 pattern=ITEM_PATTERN)],
                      key: Key, service: QueuesService) -> Response:
    # The pair in the order a page shows it; not_found for a queue not live.
    return await _read(request, lambda: service.pair(key, workspace_id, name, item))


@queues.post("/queues/{name}/next", responses=_answers(NextItem), name="next_item",
             summary="Lease the queue's next item to the key's actor (give_feedback)")
async def _next_item(request: Request, workspace_id: str, name: Annotated[str, QUEUE_NAME],
                     key: Key, service: QueuesService,
                     besides: Annotated[str | None, Query(
                         description="an item not to hand back (the one the client shows, "
                         "to lease the next one ahead of time)",
                         pattern=ITEM_PATTERN)] = None) -> JSONResponse:
    # The item the actor holds, else a new lease; lease null when none is left for them.
    try:
        return JSONResponse(await service.next(key, workspace_id, name, besides))
    except Exception as exc:
        return _answer(error_frame_of(exc))


@queues.post(
    "/queues/{name}/submit", response_model=OutcomeFrame, responses=_ERRORS,
    name="submit_item",
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/QueueSubmit"}}}}},
    summary="Give feedback on a leased item under its lease: recorded once, or 409 when the "
            "lease is not running")
async def _submit_item(request: Request, workspace_id: str, name: Annotated[str, QUEUE_NAME],
                       key: Key, service: QueuesService) -> JSONResponse:
    # The outcome frame of the feedback; a retry answers the same outcome.
    try:
        body = await _body(request)
    except CommandFailed as exc:
        return _answer(exc.frame())
    return _answer(await service.submit(key, workspace_id, name, body))


@queues.post("/queues/{name}/skip", responses=_answers(SkipOut), name="skip_item",
             summary="Give a leased item back (the reviewer never gets it again)")
async def _skip_item(request: Request, workspace_id: str, name: Annotated[str, QUEUE_NAME],
                     skip: SkipIn, key: Key, service: QueuesService) -> JSONResponse:
    # 200 skipped; 409 when the lease is not running.
    try:
        return JSONResponse(await service.skip(key, workspace_id, name, skip.item,
                                               skip.request_id))
    except Exception as exc:
        return _answer(error_frame_of(exc))


def _serving(runtime: Runtime) -> Callable[[FastAPI], Any]:
    """The lifespan that makes the service on the runtime: the workspace handle and the key
    store, started in the background (the app answers unavailable until then)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = StreamsClient(runtime)
        store = KeyStore(runtime)
        app.state.checks = runtime.server_checks()

        async def start() -> None:
            # The server answers (503, unavailable) while the broker cannot be reached, and
            # starts serving once the key store is read; it does not exit.
            backoff = 0.5
            while True:
                try:
                    await asyncio.to_thread(store.start)
                    break
                except StreamsError as exc:
                    app.state.starting = f"cannot reach the broker yet ({exc})"
                    log.warning("key store not started: %s; retrying in %.1f s", exc, backoff)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 10.0)
            service = CommandService(client, store, rules=RuleFinder(
                runtime, module_rules(runtime.settings.rule_modules, "STREAMS_RULE_MODULES")))
            runtime.started()  # before /readyz answers 200: its collection blocks the loop
            app.state.service = service

        starting = asyncio.create_task(start())
        try:
            yield
        finally:
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
            if app.state.queues is not None:
                app.state.queues.close()
            store.close()
            client.close()
            await app.state.admission.close()

    return lifespan


def create_app(runtime: Runtime | None = None, *,
               service: CommandService | None = None,
               max_in_flight: int | None = None,
               types: Sequence[type[Feedback]] | None = None,
               settings: Settings | None = None) -> FastAPI:
    """The REST app (with the WebSocket stream and the MCP tools) on `runtime`: its lifespan
    makes and starts the service on the runtime's clients, and readiness asks the runtime's
    broker and registry. With `service` instead, the app serves that ready service (its
    owner closes it); with neither, it stays starting (the OpenAPI document, tests). Past
    `max_in_flight` commands at once (STREAMS_SERVE_MAX_IN_FLIGHT) it sheds with 503.

    Its OpenAPI document describes the feedback types it validates with: `types`, else the
    service's or runtime's registry, else none. `settings` (else the runtime's, else the
    defaults) gives the read time limit."""
    app = FastAPI(title="feedback-streams", version=API_VERSION,
                  # Operation ids are the routes' names (runs, feedback, command, ...): what a
                  # generated client names its functions.
                  generate_unique_id_function=lambda route: route.name,
                  lifespan=_serving(runtime) if runtime is not None and service is None
                  else None,
                  description="Give and read feedback: command frames over REST. "
                  "See docs/api.md.")
    app.state.service = service
    app.state.queues = None
    app.state.starting = "reading the key store"
    app.state.settings = settings or (runtime.settings if runtime is not None else Settings())
    app.state.admission = admission = Admission(
        max_in_flight or app.state.settings.serve_max_in_flight,
        app.state.settings.serve_max_lag)
    app.router.on_shutdown.append(admission.close)

    async def close_queues() -> None:
        if app.state.queues is not None:
            await asyncio.to_thread(app.state.queues.close)
    app.router.on_shutdown.append(close_queues)
    # The last added runs first: admission, then commands before the router.
    app.add_middleware(CommandsFirst, fastapi=app)
    app.add_middleware(ShedCommands, admission=admission)
    validating: Sequence[type[Feedback]] = list(
        types if types is not None
        else runtime.types if runtime is not None
        else getattr(getattr(service, "client", None), "types", None) or ())
    # Readiness checks beyond "started" (the broker and registry answer): set by the lifespan.
    app.state.checks = runtime.server_checks() if runtime is not None and service is not None \
        else {}

    @app.exception_handler(CommandFailed)
    async def refused(_request: Request, exc: CommandFailed) -> JSONResponse:
        # The service dependency refuses while starting: the same error frame as the routes'.
        return _answer(exc.frame())

    @app.exception_handler(RequestValidationError)
    async def unparsed(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # A query or path value FastAPI cannot parse (limit=abc): an error frame with the
        # parameter's path, as the document declares for 422, not FastAPI's {"detail": ...}.
        return _answer(request_problems(exc.errors()).frame())

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 400:
            # A body FastAPI could not parse as JSON (a route taking a model): the same
            # validation_failed frame the other routes answer.
            return _answer(CommandFailed("validation_failed", "the body is not valid JSON: "
                                         f"{exc.detail}", [FieldProblem(
                                             path="body", message=str(exc.detail))]).frame())
        if exc.status_code == 404:
            return _answer(CommandFailed("not_found", f"no route {request.url.path}; the "
                                         "routes are in docs/api.md").frame())
        if exc.status_code == 405:
            # An error frame too, with the status and Allow header HTTP gives a method the
            # path does not take.
            allowed = (exc.headers or {}).get("Allow", "")
            frame = CommandFailed("not_found", f"no route {request.method} "
                                  f"{request.url.path}; it takes {allowed}").frame()
            return JSONResponse(frame.model_dump(mode="json"), status_code=405,
                                headers={"Allow": allowed})
        return await http_exception_handler(request, exc)

    # The WebSocket stream and the MCP tools.
    install_realtime(app, lambda: started_service(app), lambda: started_queues(app))
    # The annotation page: static files shipped in the package, no build step (docs/ui.md).
    app.mount("/ui", StaticFiles(directory=UI_DIR, html=True), name="ui")
    for router in (health, commands, runs, feedback, keys, queues):
        app.include_router(router)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version,
                                   description=app.description, routes=app.routes)
            contract_document(document, validating)
            for item in document["paths"].values():
                for operation in item.values():
                    for parameter in operation.get("parameters", []):
                        if parameter["in"] == "path" and parameter["name"] == "workspace_id":
                            parameter["schema"]["pattern"] = WORKSPACE_ID_PATTERN
                            parameter["description"] = ("a workspace id, <tenant>.<workspace>"
                                                        ", e.g. acme.prod")
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def openapi_document(types: Sequence[type[Feedback]] | None = None) -> dict[str, Any]:
    """The OpenAPI document of a server validating with `types`; by default the project's
    shipped feedback types (`PROJECT_FEEDBACK_MODULES`, what `streams serve --types` of those
    modules serves), committed as docs/openapi.json."""
    if types is None:
        from streams.adapters.avro.files import project_types

        types = project_types()
    return create_app(types=types).openapi()


def app_from_env() -> FastAPI:
    """The app on a Runtime from the environment (settings, and the feedback types of
    STREAMS_FEEDBACK_MODULES): the factory each of `streams serve --workers N`'s processes
    calls. The modules are imported as the command line imports them (one-line errors)."""
    settings = Settings.from_env()
    for module in settings.feedback_modules:
        import_user_module("feedback", module, "STREAMS_FEEDBACK_MODULES")
    return create_app(Runtime(settings))
