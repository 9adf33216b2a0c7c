"""The worker's guard against going on without a loop, and its refusals (no broker needed)."""

import threading
from pathlib import Path

import pytest

from streams.runtime.worker import app as worker


def test_a_loop_that_stops_on_an_error_ends_the_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exits: list[int] = []

    def fake_exit(code: int) -> None:
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(worker.os, "_exit", fake_exit)

    def broken(stop: threading.Event) -> None:
        raise RuntimeError("outage too long")

    with pytest.raises(SystemExit):
        worker.run_or_exit("test-loop", broken, threading.Event())
    assert exits == [70]


def test_a_loop_that_returns_does_not_end_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker.os, "_exit", lambda code: pytest.fail(f"exited {code}"))
    seen: list[bool] = []
    stop = threading.Event()
    stop.set()
    worker.run_or_exit("test-loop", lambda s: seen.append(s.is_set()), stop)
    assert seen == [True]


def test_a_worker_refuses_rules_watching_an_undeclared_event_type() -> None:
    from streams.core.rules import InvalidRule, Rule, on, run
    from streams.runtime.root import Runtime
    from streams.settings import Settings

    rule = Rule(name="r:typo", when=on("ns:run_succeeded"), then=run("a"))
    # Refused before the worker builds any client: no broker is needed to see it.
    settings = Settings(bootstrap_servers="127.0.0.1:9", schema_registry_url="http://127.0.0.1:9")
    with pytest.raises(InvalidRule) as info:
        worker.Worker(Runtime(settings), rules=[rule], actions={})
    assert "'r:typo' watches 'ns:run_succeeded'" in str(info.value)
    assert "Known event types: ['artifact_archived', 'artifact_created'" in str(info.value)


def test_a_workers_look_ups_read_the_index_and_a_mirror_only_worker_has_no_reactor(
        tmp_path: Path) -> None:
    from streams.runtime.root import Runtime
    from streams.settings import Settings

    settings = Settings(bootstrap_servers="127.0.0.1:9", schema_registry_url="http://127.0.0.1:9",
                        state_dir=str(tmp_path))
    mirror_only = worker.Worker(Runtime(settings))
    # Its actions' look-ups never catch up a read view the machine keeps for its server.
    assert mirror_only.client.read_views is False
    # The grants' action every worker has (budgets) does not make it run a rules loop.
    assert mirror_only.reactor is None and mirror_only.rulebook is None
