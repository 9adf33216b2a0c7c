"""Liveness, readiness and /metrics of a worker or a sink runner, on one small HTTP server.

`GET /healthz` answers 200 while the process's loops turn (alive), 503 otherwise; `GET /readyz`
answers 200 when the process can do its work now: the broker answers a metadata request, the
schema registry answers, and each loop is subscribed, has been assigned its partitions (a
member with none assigned is ready too) and is not waiting out an outage; 503 otherwise. Both
answer JSON: `{"status": "ok" | "failing", "checks": {name: "ok" | what is wrong}}`.
`GET /metrics` is the Prometheus exposition of the process's metrics when
`STREAMS_METRICS=prometheus` (streams.runtime.observe.metrics).

So a broker outage makes a worker not ready but still alive (its loops wait and turn), and it
becomes ready again by itself once the broker answers. The server is a stdlib
`ThreadingHTTPServer` in a daemon thread bound to `STREAMS_HEALTH_HOST`:`STREAMS_HEALTH_PORT`
(127.0.0.1 by default; port 0: none).
The broker and registry checks make one request each, at most once a second (cached), with a
2-second timeout, so probing never loads the servers; the checks are functions, so the
readiness logic is tested without a broker (tests/runtime/observe/test_health.py).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from streams.runtime.observe.metrics import install

if TYPE_CHECKING:
    from streams.settings import Settings

__all__ = [
    "CHECK_TIMEOUT",
    "Check",
    "HealthServer",
    "Verdict",
    "broker_answers",
    "cached",
    "judge",
    "loop_alive",
    "loop_ready",
    "registry_answers",
    "serve_health",
    "server_checks",
]

log = logging.getLogger(__name__)

Check = Callable[[], str | None]
"""A health check: None when fine, else what is wrong (said so an operator knows what to
look at)."""

CHECK_TIMEOUT = 2.0


@dataclass(frozen=True)
class Verdict:
    """The outcome of a set of checks: ok when every one passed."""

    ok: bool
    checks: dict[str, str]

    def body(self) -> bytes:
        """The JSON an endpoint answers."""
        return json.dumps({"status": "ok" if self.ok else "failing",
                           "checks": self.checks}).encode()


def judge(checks: Mapping[str, Check]) -> Verdict:
    """Run every check (a check that raises fails, with its error); ok when none failed."""
    results: dict[str, str] = {}
    for name, check in checks.items():
        try:
            problem = check()
        except Exception as exc:
            problem = f"check failed: {type(exc).__name__}: {exc}"
        results[name] = "ok" if problem is None else problem
    return Verdict(all(r == "ok" for r in results.values()), results)


def cached(check: Check, ttl: float = 1.0,
           clock: Callable[[], float] = time.monotonic) -> Check:
    """`check`, run at most once per `ttl` seconds (its last answer in between), so frequent
    probes make at most one request a second to the broker or registry."""
    last: list[tuple[float, str | None]] = []
    lock = threading.Lock()

    def run() -> str | None:
        with lock:
            now = clock()
            if last and now - last[0][0] < ttl:
                return last[0][1]
            try:
                answer = check()
            except Exception as exc:
                answer = f"check failed: {type(exc).__name__}: {exc}"
            last[:] = [(now, answer)]
            return answer

    return run


class _Loop(Protocol):
    name: str
    running: bool
    turned_at: float

    @property
    def in_outage(self) -> bool: ...

    def wait_assigned(self, timeout: float) -> bool: ...


def loop_alive(loop: _Loop, stale_after: float,
               clock: Callable[[], float] = time.monotonic) -> Check:
    """Alive: the loop has not ended and turned within `stale_after` seconds (a loop waiting
    out an outage turns too; a flush or a read of committed offsets may hold it up to the
    flush timeout, so `stale_after` must exceed that)."""

    def check() -> str | None:
        if not loop.running:
            return f"{loop.name} is not running"
        idle = clock() - loop.turned_at
        if idle > stale_after:
            return f"{loop.name} has not turned for {idle:.0f} s (stuck?)"
        return None

    return check


def loop_ready(loop: _Loop) -> Check:
    """Ready: running, subscribed and assigned (possibly no partitions), not in an outage."""

    def check() -> str | None:
        if not loop.running:
            return f"{loop.name} is not running"
        if not loop.wait_assigned(0):
            return f"{loop.name} is not assigned partitions yet (joining its consumer group)"
        if loop.in_outage:
            return f"{loop.name} is waiting out a broker or registry outage"
        return None

    return check


def broker_answers(list_topics: Callable[[float], Any]) -> Check:
    """The broker answers a metadata request within the timeout."""

    def check() -> str | None:
        try:
            list_topics(CHECK_TIMEOUT)
        except Exception as exc:
            return (f"the Kafka broker does not answer ({exc}); check KAFKA_BOOTSTRAP_SERVERS "
                    "and that the broker is up")
        return None

    return cached(check)


def registry_answers(get_subjects: Callable[[], Any]) -> Check:
    """The schema registry answers a request (its subjects)."""

    def check() -> str | None:
        try:
            get_subjects()
        except Exception as exc:
            return (f"the schema registry does not answer ({exc}); check SCHEMA_REGISTRY_URL "
                    "and that the registry is up")
        return None

    return cached(check)


class HealthServer:
    """/healthz, /readyz and /metrics on 127.0.0.1:`port` in a daemon thread.

    Construction does no I/O; `start` binds. A port already taken is logged as an error and
    the process goes on without the endpoints (its work matters more than its probes, and a
    probe that cannot connect says so)."""

    def __init__(self, port: int, *, live: Mapping[str, Check], ready: Mapping[str, Check],
                 registry: CollectorRegistry | None = None, host: str = "127.0.0.1") -> None:
        self.host = host
        self.requested_port = port
        self.live = dict(live)
        self.ready = dict(ready)
        self.registry = registry
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int | None:
        """The bound port (None when not serving)."""
        return int(self._server.server_address[1]) if self._server is not None else None

    def start(self) -> bool:
        """Bind and serve; False when the port could not be bound (logged)."""
        try:
            self._server = ThreadingHTTPServer((self.host, self.requested_port),
                                               self._handler())
        except OSError as exc:
            log.error("health and metrics endpoints not served: cannot bind %s:%d (%s); set "
                      "STREAMS_HEALTH_PORT to a free port, or 0 for none", self.host,
                      self.requested_port, exc)
            return False
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="health",
                                        daemon=True)
        self._thread.start()
        log.info("health on http://%s:%d/healthz, /readyz, /metrics", self.host, self.port)
        return True

    def stop(self) -> None:
        """Stop serving and release the port."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None

    def answer(self, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) of a GET of `path`."""
        path = path.split("?", 1)[0]
        if path in ("/healthz", "/readyz"):
            verdict = judge(self.live if path == "/healthz" else self.ready)
            return (200 if verdict.ok else 503), "application/json", verdict.body()
        if path == "/metrics":
            if self.registry is None:
                return 404, "text/plain", (b"metrics are not served here: STREAMS_METRICS is "
                                           b"not prometheus\n")
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
        return 404, "text/plain", b"not found: /healthz, /readyz, /metrics\n"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, ctype, body = server.answer(self.path)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return  # probes every few seconds would flood the log

        return Handler


def server_checks(list_topics: Callable[[float], Any],
                  get_subjects: Callable[[], Any]) -> dict[str, Check]:
    """The readiness checks every process shares: the broker answers (`list_topics`, a
    client's metadata call) and the registry answers (`get_subjects` on a registry client
    that fails fast: the composition root's `probe_registry`)."""
    return {"broker": broker_answers(list_topics), "registry": registry_answers(get_subjects)}


def serve_health(settings: Settings, loops: Sequence[_Loop],
                 servers: Mapping[str, Check]) -> HealthServer | None:
    """Install the process's metrics exporter and serve /healthz (each loop turns), /readyz
    (`servers` answer and each loop is ready) and /metrics; None when STREAMS_HEALTH_PORT is
    0 or the port is taken. Call before the loops start."""
    installed = install(settings)
    if not settings.health_port:
        return None
    stale = 3 * settings.flush_timeout + 30.0
    server = HealthServer(
        settings.health_port,
        live={loop.name: loop_alive(loop, stale) for loop in loops},
        ready={**servers, **{loop.name: loop_ready(loop) for loop in loops}},
        registry=installed.registry, host=settings.health_host)
    return server if server.start() else None
