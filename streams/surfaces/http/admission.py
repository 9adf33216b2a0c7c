"""Load shedding for `streams serve`: which commands run now, and the answer to those that do not.

`Admission` counts commands in and says why one is shed; `ShedCommands` applies it as the
app's outermost layer, so a command is counted from the moment the server starts on its
request (before routing, the body, the key) and a shed one costs only its HTTP parsing and a
short answer: 503 with `Retry-After` and an `unavailable` error frame.

Why outermost: counted in the route's handler, the limit bounded only the commands that had
reached it. When the event loop itself was the bottleneck, requests queued between the
connection and the handler, and admitted commands took p50 28.3 s, p99 34.9 s at three
times the capacity (`bench.rest_commands --overload 3 --loadgen vegeta`, before this module;
377-413 ms p99 with it, docs/api.md). Counting from the first thing the app does bounds every
request the loop is working on, so an admitted command waits behind at most `limit` others.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.responses import JSONResponse

from streams.core.commands import CommandFailed

__all__ = ["COMMAND_PREFIX", "COMMAND_SUFFIX", "Admission", "ShedCommands", "is_command"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

COMMAND_PREFIX = "/v1/workspaces/"
"""What a command request's path starts with (then the workspace id)."""
COMMAND_SUFFIX = "/commands"
"""What a command request's path ends with."""


def is_command(scope: Scope) -> bool:
    """Whether a request is a command (POST /v1/workspaces/{id}/commands)."""
    path = scope.get("path", "")
    return (scope["type"] == "http" and scope.get("method") == "POST"
            and path.startswith(COMMAND_PREFIX) and path.endswith(COMMAND_SUFFIX))


class Admission:
    """Whether a command may run now: not when `limit` commands run already, nor (with a
    `max_lag`; 0 turns it off) while the event loop runs more than `max_lag` seconds late.
    `enter` says why not then (the caller sheds the command), else counts it in until
    `leave`. One event loop: no lock needed.

    The lag rule is for a loop held up by work that is not commands (reads, the page); a
    ticker (`watch`, started by the first `enter`) measures how late the loop wakes it."""

    TICK = 0.05
    """Seconds between the lag ticker's wake-ups."""

    def __init__(self, limit: int, max_lag: float = 0.0) -> None:
        self.limit = limit
        self.max_lag = max_lag
        self.running = 0
        self.shed = 0
        self.shed_for_lag = 0
        self.lag = 0.0
        self._watching: asyncio.Task[None] | None = None

    def enter(self) -> str | None:
        """Count a command in (None), or say why it is shed (counted): `limit` commands run
        already, or the loop is late by more than `max_lag`."""
        if self._watching is None and self.max_lag:
            self._watching = asyncio.get_running_loop().create_task(self.watch())
        if self.running >= self.limit:
            self.shed += 1
            return f"the server is running {self.limit} commands already " \
                "(STREAMS_SERVE_MAX_IN_FLIGHT)"
        if self.max_lag and self.lag > self.max_lag:
            self.shed += 1
            self.shed_for_lag += 1
            return f"the server is {self.lag:.2f} s behind its work (over " \
                "STREAMS_SERVE_MAX_LAG)"
        self.running += 1
        return None

    async def watch(self) -> None:
        """Measure the event loop's lag until cancelled (`close`)."""
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            await asyncio.sleep(self.TICK)
            self.lag = max(0.0, loop.time() - began - self.TICK)

    async def close(self) -> None:
        """Stop the lag ticker."""
        task, self._watching = self._watching, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def leave(self) -> None:
        """A command admitted by `enter` is done."""
        self.running -= 1


class ShedCommands:
    """ASGI middleware: each command request passes `admission` first; a shed one is
    answered at once (503, `Retry-After: 1`, an `unavailable` error frame saying why and to
    retry with the same command_id), its body never read. Other requests pass untouched."""

    def __init__(self, app: App, admission: Admission) -> None:
        self.app = app
        self.admission = admission

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_command(scope):
            await self.app(scope, receive, send)
            return
        why = self.admission.enter()
        if why is not None:
            frame = CommandFailed("unavailable", f"{why}: retry after the Retry-After seconds, "
                                  "with the same command_id").frame()
            # The same rendering as every other error frame the app answers.
            shed = JSONResponse(frame.model_dump(mode="json"), status_code=frame.status,
                                headers={"Retry-After": "1"})
            await shed(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.admission.leave()

