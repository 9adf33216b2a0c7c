"""A stand-in OpenAI-compatible chat completions server for tests. It is NOT a language model.

Tests of the LLM judges talk to this small loopback server instead of a real model. It answers
``POST /v1/chat/completions`` with a ``chat.completion`` object whose assistant message is
whatever the test scripted; it never looks at the prompt unless a responder does.

Standard library only: ``http.server.ThreadingHTTPServer`` on a background thread, bound to
127.0.0.1, port 0 (chosen by the OS). ``url`` is the base URL a client is given, ending in
``/v1``.

What it answers, in order:

1. A queued reply (``enqueue``), first in first out. A queued item is a string (the
   assistant's content) or a ``ChatReply``: content, a refusal, a finish reason, an HTTP error
   status, a raw body, extra headers, and a delay before answering.
2. Else the responder, a callable taking the request's JSON body and returning a string or a
   ChatReply (a responder that raises gets a 500 answer).
3. Else a 500 ``{"error": {"message": "chat stand-in: no reply scripted", ...}}``.

Requests that are not JSON objects with ``model`` and a ``messages`` list get 400; with
``api_key`` set, a missing or wrong ``Authorization: Bearer`` gets 401; other paths 404. Error
bodies follow OpenAI's shape ``{"error": {"message", "type", "code"}}``.

With ``max_in_flight``, a chat completion request that arrives while that many are being
answered (their delays included) gets 429 ``rate_limit_error`` with ``Retry-After: 1``, as a
provider that limits requests in flight answers; ``peak_in_flight`` is the most answered at
once and ``refused_in_flight`` how many were refused that way.

Every chat completion request is recorded before it is answered (``requests``, ``calls``), so a
client that timed out during a delay still counts as a call, as it would with a real server.
``usage`` counts are rough (whitespace-separated words), not a tokenizer.

Example::

    with ChatStandIn() as chat:
        chat.enqueue('{"has_answer": true, "confidence": 0.9, "reason": "stated"}')
        chat.enqueue(ChatReply.error(503), ChatReply.refuse("I can't help with that."))
        model = ChatModel(base_url=chat.url, model="judge", api_key="k")
        ...
        assert chat.requests[0]["temperature"] == 0
"""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, cast

from standins._loopback import LoopbackServer, LoopbackService

__all__ = ["ChatReply", "ChatStandIn", "RecordedRequest", "Responder"]

CHAT_PATH = "/v1/chat/completions"


@dataclass(frozen=True, slots=True)
class ChatReply:
    """One scripted answer of the stand-in.

    ``status`` 200 answers a chat.completion whose message has ``content`` and ``refusal`` and
    whose choice has ``finish_reason`` (default ``"stop"``); any other status answers an
    OpenAI-style error with ``error_message`` as its message. ``raw_body`` replaces the whole body
    (e.g. a body that is not JSON). ``delay`` seconds pass before the answer is written.
    ``usage`` replaces the computed token counts; ``model`` the echoed model name.
    """

    content: str | None = None
    refusal: str | None = None
    finish_reason: str = "stop"
    status: int = 200
    error_message: str | None = None
    delay: float = 0.0
    headers: Mapping[str, str] = field(default_factory=dict)
    raw_body: str | None = None
    usage: Mapping[str, int] | None = None
    model: str | None = None

    @classmethod
    def text(cls, content: str, *, delay: float = 0.0) -> ChatReply:
        """The assistant answers ``content``."""
        return cls(content=content, delay=delay)

    @classmethod
    def refuse(cls, message: str = "I'm sorry, I can't help with that.") -> ChatReply:
        """The assistant refuses: ``content`` null, ``refusal`` set (OpenAI's refusal field)."""
        return cls(content=None, refusal=message)

    @classmethod
    def filtered(cls) -> ChatReply:
        """The answer was cut by a content filter: ``finish_reason`` ``content_filter``."""
        return cls(content=None, finish_reason="content_filter")

    @classmethod
    def error(
        cls, status: int, message: str | None = None, *, retry_after: float | None = None
    ) -> ChatReply:
        """An HTTP error status with an OpenAI-style body (and ``Retry-After`` if given)."""
        headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
        text = message or f"stand-in error {status}"
        return cls(status=status, error_message=text, headers=headers)

    @classmethod
    def slow(cls, seconds: float, content: str = "{}") -> ChatReply:
        """``content`` after ``seconds`` (for client timeouts)."""
        return cls(content=content, delay=seconds)

    @classmethod
    def raw(cls, body: str, *, status: int = 200) -> ChatReply:
        """``body`` as it is, e.g. something that is not a chat.completion."""
        return cls(status=status, raw_body=body)


Responder = Callable[[dict[str, Any]], "str | ChatReply"]
"""Makes an answer from a request's JSON body when nothing is queued."""


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the stand-in received: method, path, headers and parsed JSON body."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


def _error_body(message: str, kind: str, code: str | int | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()


def _words(text: object) -> int:
    if isinstance(text, str):
        return len(text.split())
    if isinstance(text, list):  # content parts: [{"type": "text", "text": ...}]
        return sum(_words(part.get("text")) for part in text if isinstance(part, dict))
    return 0


class _Handler(BaseHTTPRequestHandler):
    server: LoopbackServer
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self._dispatch()

    def do_GET(self) -> None:
        self._dispatch()

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: tests read the recorded requests instead

    def _dispatch(self) -> None:
        standin = cast(ChatStandIn, self.server.standin)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        status, headers, body, delay, entered = standin._handle(
            self.command, self.path, dict(self.headers.items()), raw
        )
        try:
            self._answer(standin, status, headers, body, delay)
        finally:
            if entered:
                standin._leave()

    def _answer(self, standin: ChatStandIn, status: int, headers: dict[str, str], body: bytes,
                delay: float) -> None:
        if delay > 0 and standin.stopping.wait(delay):
            self.close_connection = True
            return  # stopping: drop the answer
        try:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. it timed out)


class ChatStandIn(LoopbackService):
    """A loopback OpenAI-compatible chat completions server for tests (not a model).

    See the module docstring for what it answers. Use it as a context manager or call
    ``start()``/``stop()``. Scripting and inspection are thread-safe and work while it runs.
    """

    handler = _Handler
    thread_name = "chat-standin"

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        api_key: str | None = None,
        max_in_flight: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        """Configure the server; nothing listens until ``start()``.

        ``responder`` answers when the queue is empty. With ``api_key``, requests must carry
        ``Authorization: Bearer <api_key>``. With ``max_in_flight``, requests past that many
        at once get 429.
        """
        super().__init__(host, port, threading.Lock())
        self._responder = responder
        self._api_key = api_key
        self._queue: deque[ChatReply] = deque()
        self._log: list[RecordedRequest] = []
        self._max_in_flight = max_in_flight
        self._in_flight = 0
        self._peak = 0
        self._refused = 0

    @property
    def url(self) -> str:
        """The base URL for a client, ``http://127.0.0.1:PORT/v1`` (after ``start()``)."""
        if self._server is None and self._port == 0:
            raise RuntimeError("the chat stand-in is not started")
        return f"http://{self._host}:{self._port}/v1"

    # -- scripting ---------------------------------------------------------------------------

    def enqueue(self, *replies: str | ChatReply) -> None:
        """Queue answers, used first in first out; a string is the assistant's content."""
        with self._lock:
            for reply in replies:
                self._queue.append(ChatReply.text(reply) if isinstance(reply, str) else reply)

    def set_responder(self, responder: Responder | None) -> None:
        """Set (or clear) the callable that answers when the queue is empty."""
        with self._lock:
            self._responder = responder

    @property
    def pending(self) -> int:
        """How many queued answers are left."""
        with self._lock:
            return len(self._queue)

    def reset(self) -> None:
        """Forget queued answers, recorded requests and the in-flight counts (the responder
        stays)."""
        with self._lock:
            self._queue.clear()
            self._log.clear()
            self._peak = self._in_flight
            self._refused = 0

    # -- inspection --------------------------------------------------------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat completion requests received, oldest first (copies)."""
        with self._lock:
            return [
                copy.deepcopy(r.body)
                for r in self._log
                if r.path == CHAT_PATH and isinstance(r.body, dict)
            ]

    @property
    def calls(self) -> int:
        """How many chat completion requests were received (valid or not)."""
        with self._lock:
            return sum(1 for r in self._log if r.path == CHAT_PATH)

    @property
    def peak_in_flight(self) -> int:
        """The most requests answered at once so far."""
        with self._lock:
            return self._peak

    @property
    def refused_in_flight(self) -> int:
        """How many requests got 429 for arriving past ``max_in_flight``."""
        with self._lock:
            return self._refused

    @property
    def request_log(self) -> list[RecordedRequest]:
        """Every request received, with headers (copies)."""
        with self._lock:
            return [copy.deepcopy(r) for r in self._log]

    # -- serving -----------------------------------------------------------------------------

    def _enter(self) -> bool:
        """Take a place among the requests answered at once; False past max_in_flight."""
        with self._lock:
            if self._max_in_flight is not None and self._in_flight >= self._max_in_flight:
                self._refused += 1
                return False
            self._in_flight += 1
            self._peak = max(self._peak, self._in_flight)
            return True

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _handle(
        self, method: str, path: str, headers: dict[str, str], raw: bytes,
    ) -> tuple[int, dict[str, str], bytes, float, bool]:
        """(status, headers, body, delay, whether a place in flight was taken: the caller
        gives it back once the answer is written)."""
        json_type = {"Content-Type": "application/json"}
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        route = path.split("?", 1)[0]
        with self._lock:
            self._log.append(RecordedRequest(method, route, headers, body))
        if route != CHAT_PATH:
            return (404, json_type, _error_body(f"no route {route}", "invalid_request_error"),
                    0.0, False)
        if method != "POST":
            return (405, json_type, _error_body("use POST", "invalid_request_error"), 0.0,
                    False)
        if self._api_key is not None:
            given = {k.lower(): v for k, v in headers.items()}.get("authorization")
            if given != f"Bearer {self._api_key}":
                return 401, json_type, _error_body(
                    "Incorrect API key provided", "invalid_request_error", "invalid_api_key"
                ), 0.0, False
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("model"), str)
            or not isinstance(body.get("messages"), list)
            or not body["messages"]
        ):
            return 400, json_type, _error_body(
                "the body must be a JSON object with 'model' and a non-empty 'messages' list",
                "invalid_request_error",
            ), 0.0, False
        if not self._enter():  # a valid chat request past max_in_flight
            return 429, {**json_type, "Retry-After": "1"}, _error_body(
                f"too many requests in flight (at most {self._max_in_flight} at once)",
                "rate_limit_error", "rate_limit_exceeded"), 0.0, False
        reply = self._next_reply(body)
        return (*self._render(reply, body), reply.delay, True)

    def _next_reply(self, body: dict[str, Any]) -> ChatReply:
        with self._lock:
            queued = self._queue.popleft() if self._queue else None
            responder = self._responder
        if queued is not None:
            return queued
        if responder is None:
            return ChatReply.error(500, "chat stand-in: no reply scripted")
        try:
            answer = responder(copy.deepcopy(body))
        except Exception as exc:  # a broken responder is the test's bug: say so in the answer
            return ChatReply.error(500, f"chat stand-in: responder raised {exc!r}")
        return ChatReply.text(answer) if isinstance(answer, str) else answer

    def _render(
        self, reply: ChatReply, request: dict[str, Any]
    ) -> tuple[int, dict[str, str], bytes]:
        headers = {"Content-Type": "application/json", **dict(reply.headers)}
        if reply.raw_body is not None:
            return reply.status, headers, reply.raw_body.encode()
        if reply.status != 200:
            kind = "rate_limit_error" if reply.status == 429 else (
                "server_error" if reply.status >= 500 else "invalid_request_error"
            )
            message = reply.error_message or f"stand-in error {reply.status}"
            return reply.status, headers, _error_body(message, kind, reply.status)
        prompt = sum(
            _words(m.get("content")) for m in request["messages"] if isinstance(m, dict)
        )
        completion = _words(reply.content) + _words(reply.refusal)
        usage = dict(reply.usage) if reply.usage is not None else {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        completion_object = {
            "id": f"chatcmpl-standin-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": reply.model or request["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": reply.content,
                        "refusal": reply.refusal,
                    },
                    "logprobs": None,
                    "finish_reason": reply.finish_reason,
                }
            ],
            "usage": usage,
        }
        return 200, headers, json.dumps(completion_object).encode()
