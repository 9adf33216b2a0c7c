"""Readiness and liveness logic, and the health server's answers, without a broker."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter

from streams.runtime.observe.health import (
    HealthServer,
    broker_answers,
    cached,
    judge,
    loop_alive,
    loop_ready,
    registry_answers,
)


@dataclass
class FakeLoop:
    name: str = "feedback-mirror"
    running: bool = True
    turned_at: float = 100.0
    outage: bool = False
    assigned: bool = True

    @property
    def in_outage(self) -> bool:
        return self.outage

    def wait_assigned(self, timeout: float) -> bool:
        return self.assigned


def test_ready_needs_running_assigned_and_no_outage() -> None:
    loop = FakeLoop()
    check = loop_ready(loop)
    assert check() is None
    loop.outage = True
    assert "outage" in (check() or "")
    loop.outage, loop.assigned = False, False
    assert "not assigned" in (check() or "")
    loop.assigned, loop.running = True, False
    assert "not running" in (check() or "")


def test_alive_while_it_turns_even_in_an_outage() -> None:
    now = [100.0]
    loop = FakeLoop(outage=True)
    check = loop_alive(loop, stale_after=60.0, clock=lambda: now[0])
    assert check() is None  # waiting out an outage is alive
    now[0] = 161.0
    assert "has not turned for 61 s" in (check() or "")
    loop.running = False
    assert "not running" in (check() or "")


def test_judge_fails_on_any_problem_and_on_a_check_that_raises() -> None:
    def boom() -> str | None:
        raise ValueError("nope")

    assert judge({"a": lambda: None}).ok
    verdict = judge({"a": lambda: None, "b": lambda: "broken", "c": boom})
    assert not verdict.ok
    assert verdict.checks == {"a": "ok", "b": "broken", "c": "check failed: ValueError: nope"}
    assert json.loads(verdict.body())["status"] == "failing"


def test_server_checks_say_what_to_fix_and_are_cached() -> None:
    calls = []

    def down(timeout: float) -> None:
        calls.append(timeout)
        raise RuntimeError("connection refused")

    broker = broker_answers(down)
    problem = broker()
    assert problem is not None and "KAFKA_BOOTSTRAP_SERVERS" in problem
    broker()
    assert len(calls) == 1  # the second probe within a second is answered from the cache
    assert "SCHEMA_REGISTRY_URL" in (registry_answers(lambda: 1 / 0)() or "")
    assert registry_answers(lambda: ["a"])() is None


def test_cached_asks_again_after_its_ttl() -> None:
    now = [0.0]
    answers = iter(["down", None])
    check = cached(lambda: next(answers), ttl=1.0, clock=lambda: now[0])
    assert check() == "down"
    now[0] = 0.5
    assert check() == "down"
    now[0] = 1.5
    assert check() is None


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_server_answers_health_readiness_and_metrics_on_loopback() -> None:
    registry = CollectorRegistry()
    Counter("probe_things", "things", registry=registry).inc(3)
    loop = FakeLoop(assigned=False)
    server = HealthServer(0, live={"loop": lambda: None}, ready={"loop": loop_ready(loop)},
                          registry=registry)
    assert server.start()
    try:
        port = server.port
        assert port is not None
        assert server._server is not None and server._server.server_address[0] == "127.0.0.1"
        status, body = _get(port, "/healthz")
        assert status == 200 and json.loads(body)["status"] == "ok"
        status, body = _get(port, "/readyz")
        assert status == 503 and "not assigned" in json.loads(body)["checks"]["loop"]
        loop.assigned = True
        assert _get(port, "/readyz")[0] == 200
        status, body = _get(port, "/metrics")
        assert status == 200 and b"probe_things_total 3.0" in body
        assert _get(port, "/nothing")[0] == 404
    finally:
        server.stop()


def test_metrics_absent_without_prometheus_and_taken_port_is_not_fatal() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = HealthServer(port, live={}, ready={})
        assert not server.start()
        assert server.port is None
    assert HealthServer(0, live={}, ready={}).answer("/metrics")[0] == 404
