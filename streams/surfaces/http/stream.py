"""The WebSocket stream: `/v1/workspaces/{workspace_id}/stream`.

One connection carries the REST surface's command frames (answered by the same outcome and
error frames, through the same command service) and a subscription to the workspace's events
(see docs/api.md, "WebSocket"):

- auth: `Authorization: Bearer <key>` on the upgrade request, or, for clients that cannot set
  headers (browsers), a first frame `{"type": "auth", "token": "<key>"}` within
  AUTH_TIMEOUT seconds. A key of another tenant is `forbidden`; the connection then closes.
- `{"type": "command", ...}`: executed concurrently with the connection's other commands (at
  most MAX_IN_FLIGHT at once; past that the server stops reading), each answered with its own
  outcome or error frame, carrying its command_id, as soon as it is recorded.
- `{"type": "subscribe", "from": ...}` answers `{"type": "subscribed", "from": cursor}` and
  then one `{"type": "event", "seq": ..., "envelope": ...}` per event of the workspace;
  `{"type": "ack", "seq": ...}` acknowledges them (see streams.core.stream).
- a malformed frame (not JSON, not an object, an unknown type, a bad field, too large) gets
  an error frame and the connection stays open.
- a client that leaves STREAMS_STREAM_BUFFER events unacknowledged, or does not read what
  the server sends, for STREAMS_STREAM_SLOW_TIMEOUT seconds is closed with code 1008 and a
  reason saying to resume from its last acknowledged seq: the server never buffers more.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from streams.core.commands import (
    MAX_BODY_BYTES,
    CommandFailed,
    ErrorFrame,
    FieldProblem,
    OutcomeFrame,
    error_frame_of,
    parse_workspace_id,
)
from streams.core.errors import SlowConsumer, StreamsError, Unauthorized
from streams.core.events import Envelope
from streams.core.stream import AckFrame, SubscribeFrame, parse_cursor, parse_stream_frame
from streams.extras import needs
from streams.runtime.client.commands import CommandService, envelope_json
from streams.runtime.client.subscription import Subscription

with needs("serve", "the WebSocket stream"):
    from fastapi import FastAPI
    from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

__all__ = ["AUTH_TIMEOUT", "CLOSE_POLICY", "MAX_IN_FLIGHT", "STREAM_PATH", "add_stream_route",
           "event_frame", "serve_stream"]

log = logging.getLogger(__name__)

AUTH_TIMEOUT = 10.0
"""Seconds a connection without an Authorization header has to send its auth frame."""

MAX_IN_FLIGHT = 2000
"""Commands of one connection executing at once; the server reads no more frames until one
is answered (so a client pipelining commands is held back, never buffered without bound)."""

STREAM_PATH = "/v1/workspaces/{workspace_id}/stream"

CLOSE_POLICY = 1008
"""The close code of a connection closed by the server: unauthorized, forbidden, too slow."""


def event_frame(envelope: Envelope) -> dict[str, Any]:
    """The frame of one event: its seq and its envelope as JSON, the event's own fields under
    `event` (as the REST routes give them)."""
    data = envelope_json(envelope)
    seq = data.pop("seq")
    return {"type": "event", "seq": seq, "envelope": data}


class _Connection:
    def __init__(self, socket: WebSocket, service: CommandService, workspace_id: str,
                 tenant: str, workspace: str) -> None:
        self.socket = socket
        self.service = service
        self.workspace_id = workspace_id
        self.tenant = tenant
        self.workspace = workspace
        self.settings = service.client.settings
        self.token = ""
        self._send_lock = asyncio.Lock()
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._tasks: set[asyncio.Task[None]] = set()
        self.subscription: Subscription | None = None
        self._pump: asyncio.Task[None] | None = None
        self.closing: tuple[int, str] | None = None
        self._receiving: asyncio.Future[str | bool | None] | None = None
        self._stopping = False

    # -- sending ------------------------------------------------------------------------------

    async def send(self, frame: Mapping[str, Any] | OutcomeFrame | ErrorFrame) -> None:
        """Send one frame; a client that does not take it within the slow timeout is closed
        as too slow (SlowConsumer)."""
        text = (frame.model_dump_json() if isinstance(frame, OutcomeFrame | ErrorFrame)
                else json.dumps(frame, separators=(",", ":")))
        if self._stopping:
            return  # the connection is ending: answers have nowhere to go
        try:
            # The wait for the lock counts too: frames queued behind a blocked one are as
            # stuck as it is.
            async with asyncio.timeout(self.settings.stream_slow_timeout), self._send_lock:
                await self.socket.send_text(text)
        except TimeoutError:
            raise SlowConsumer(
                f"too slow: a frame stayed unsent for {self.settings.stream_slow_timeout:g} s; "
                "resume from your last acknowledged seq") from None

    def close_soon(self, code: int, reason: str) -> None:
        """Ask the receive loop to close the connection (from a task that is not it)."""
        if self.closing is None:
            self.closing = (code, reason[:120])
        if self._receiving is not None:  # the receive loop wakes and closes with the reason
            self._receiving.cancel()

    # -- the frames ---------------------------------------------------------------------------

    def authorize(self, capability: str) -> None:
        # Checked per frame, so a key revoked while connected stops working at once.
        self.service.authorize(self.token, self.workspace_id, capability)

    async def command(self, frame: Mapping[str, Any]) -> None:
        try:
            # The service checks the key (tenant, capability, revocation) for each command.
            await self.send(await self.service.execute(self.token, self.workspace_id, frame))
        except SlowConsumer as exc:
            self.close_soon(CLOSE_POLICY, str(exc))
        except Exception:  # never let one command end the connection
            log.exception("command on %s failed", self.workspace_id)
        finally:
            self._in_flight.release()

    async def subscribe(self, frame: SubscribeFrame) -> None:
        self.authorize("read")
        if self.subscription is not None:
            raise CommandFailed("validation_failed", "this connection is subscribed already; "
                                "open another connection for another subscription",
                                [FieldProblem(path="type", message="subscribed already")])
        start = parse_cursor(frame.from_) if isinstance(frame.from_, dict) else frame.from_
        subscription = Subscription(self.service.client.runtime, self.tenant, self.workspace)
        try:
            cursor = await subscription.start(start)
        except BaseException:
            await subscription.close()
            raise
        self.subscription = subscription
        await self.send({"type": "subscribed",
                         "from": {str(p): o for p, o in sorted(cursor.items())}})
        self._pump = asyncio.create_task(self.pump(subscription))

    async def pump(self, subscription: Subscription) -> None:
        try:
            while True:
                envelope = await subscription.next()
                try:
                    # The key may have been revoked since: checked per event (in memory).
                    self.authorize("read")
                except StreamsError as exc:
                    error = error_frame_of(exc)
                    await self.send(error)
                    self.close_soon(CLOSE_POLICY, error.error.code)
                    return
                await self.send(event_frame(envelope))
        except SlowConsumer as exc:
            self.close_soon(CLOSE_POLICY, str(exc))
        except StreamsError as exc:
            with contextlib.suppress(Exception):
                await self.send(error_frame_of(exc))
            self.close_soon(1011, f"the subscription failed: {exc}")
        except (WebSocketDisconnect, RuntimeError):
            pass  # the client left

    async def handle(self, text: str | None) -> None:
        """Answer one received frame; every problem with it becomes an error frame."""
        if text is None:
            raise CommandFailed("validation_failed", "frames are JSON text, not binary",
                                [FieldProblem(path="$", message="binary frame")])
        if len(text) > MAX_BODY_BYTES:
            raise CommandFailed("too_large", f"the frame is {len(text)} bytes, over the limit "
                                f"of {MAX_BODY_BYTES} bytes (1 MiB): send a smaller value")
        try:
            frame = json.loads(text)
        except ValueError as exc:
            raise CommandFailed("validation_failed", f"the frame is not valid JSON: {exc}",
                                [FieldProblem(path="$", message=str(exc))]) from exc
        if not isinstance(frame, dict):
            raise CommandFailed("validation_failed", "a frame is a JSON object with a type",
                                [FieldProblem(path="$", message="expected an object")])
        kind = frame.get("type")
        if kind == "command":
            await self._in_flight.acquire()
            task = asyncio.create_task(self.command(frame))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif kind == "subscribe":
            parsed = parse_stream_frame(frame)
            assert isinstance(parsed, SubscribeFrame)
            await self.subscribe(parsed)
        elif kind == "ack":
            parsed = parse_stream_frame(frame)
            assert isinstance(parsed, AckFrame)
            if self.subscription is None:
                raise CommandFailed("validation_failed", "nothing to ack: subscribe first",
                                    [FieldProblem(path="type", message="not subscribed")])
            self.subscription.ack(parsed.seq)
        else:
            raise CommandFailed(
                "validation_failed", f"unknown frame type {kind!r}: the frames are 'command', "
                "'subscribe' and 'ack'", [FieldProblem(path="type", message="unknown type")])

    # -- the connection -----------------------------------------------------------------------

    async def _receive(self) -> str | bool | None:
        """The next frame's text (None for a binary frame), or False when the client left."""
        message = await self.socket.receive()
        if message["type"] == "websocket.disconnect":
            return False
        if message.get("text") is not None:
            return str(message["text"])
        return None

    async def authenticate(self) -> bool:
        header = self.socket.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if header and scheme.lower() == "bearer":
            self.token = token.strip()
        elif not header:
            try:
                async with asyncio.timeout(AUTH_TIMEOUT):
                    text = await self._receive()
            except TimeoutError:
                text = None
            if text is False:
                return False
            try:
                frame = json.loads(text) if isinstance(text, str) else None
            except ValueError:
                frame = None
            if isinstance(frame, dict) and frame.get("type") == "auth" and isinstance(
                    frame.get("token"), str):
                self.token = frame["token"]
        try:
            if not self.token:
                raise Unauthorized("no API key: send `Authorization: Bearer <key>` with the "
                                   'upgrade request, or first a frame {"type": "auth", '
                                   f'"token": "<key>"}} within {AUTH_TIMEOUT:g} s')
            # Any capability will do to connect; each frame checks its own.
            try:
                self.authorize("read")
            except StreamsError:
                self.authorize("give_feedback")
        except StreamsError as exc:
            error = error_frame_of(exc)
            with contextlib.suppress(Exception):
                await self.send(error)
                await self.socket.close(CLOSE_POLICY, error.error.code)
            return False
        return True

    async def run(self) -> None:
        if not await self.authenticate():
            return
        try:
            while self.closing is None:
                # One future per frame, which close_soon cancels. (A second future to wake
                # on and asyncio.wait over both, per frame, were about 5% of the server's CPU
                # in a sampling profile.)
                self._receiving = asyncio.ensure_future(self._receive())
                try:
                    text = await self._receiving
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if self.closing is not None and (task is None or not task.cancelling()):
                        break  # close_soon's: close with its reason
                    raise
                finally:
                    self._receiving = None
                if text is False:
                    return
                try:
                    await self.handle(text)  # type: ignore[arg-type]
                except SlowConsumer as exc:
                    self.close_soon(CLOSE_POLICY, str(exc))
                except Exception as exc:
                    await self.send(error_frame_of(exc))
        except SlowConsumer as exc:
            self.close_soon(CLOSE_POLICY, str(exc))
        except (WebSocketDisconnect, RuntimeError):
            return
        finally:
            await self.stop()
        if self.closing is not None and self.socket.client_state != WebSocketState.DISCONNECTED:
            # A client that reads nothing may not take the close frame either.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.settings.stream_slow_timeout):
                    await self.socket.close(*self.closing)

    async def stop(self) -> None:
        self._stopping = True
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(BaseException):
                await self._pump
        if self.subscription is not None:
            await self.subscription.close()
        # Commands in flight are finished, not cancelled: an attempt cut off between its
        # ledger claim and its outcome would hold its command id until the claim's lease
        # ends, so the client's retry would wait. Their answers have nowhere to go.
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


async def serve_stream(socket: WebSocket, workspace_id: str, service: CommandService) -> None:
    """Serve one WebSocket connection on a workspace until either side closes it."""
    await socket.accept()
    try:
        tenant, workspace = parse_workspace_id(workspace_id)
    except StreamsError as exc:
        with contextlib.suppress(Exception):
            await socket.send_text(error_frame_of(exc).model_dump_json())
            await socket.close(CLOSE_POLICY, "invalid workspace id")
        return
    await _Connection(socket, service, workspace_id, tenant, workspace).run()


def add_stream_route(app: FastAPI, service: Callable[[], CommandService]) -> None:
    """Serve the stream at STREAM_PATH on `app`, with the service `service()` returns (the
    app builds it at startup)."""

    @app.websocket(STREAM_PATH)
    async def stream(websocket: WebSocket, workspace_id: str) -> None:
        try:
            ready = service()
        except StreamsError as exc:  # still starting: say so, and "try again later"
            await websocket.accept()
            with contextlib.suppress(Exception):
                await websocket.send_text(error_frame_of(exc).model_dump_json())
                await websocket.close(1013, "unavailable")
            return
        await serve_stream(websocket, workspace_id, ready)
