"""The worker's guard against acking what it did not handle (no broker needed)."""

from typing import Any

import pytest

from streams.runtime import worker


async def test_a_failing_batch_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(worker.asyncio, "sleep", _no_sleep)

    async def flaky(batch: Any) -> None:
        calls.append(batch)
        if len(calls) < 3:
            raise RuntimeError("transient")

    await worker._never_ack_unhandled(flaky, ["event"])
    assert calls == [["event"]] * 3


async def test_a_batch_that_keeps_failing_ends_the_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exits: list[int] = []
    monkeypatch.setattr(worker.asyncio, "sleep", _no_sleep)

    def fake_exit(code: int) -> None:
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(worker.os, "_exit", fake_exit)

    async def broken(batch: Any) -> None:
        raise RuntimeError("bug")

    with pytest.raises(SystemExit):
        await worker._never_ack_unhandled(broken, ["event"])
    assert exits == [70]


async def _no_sleep(_seconds: float) -> None:
    return None


def test_a_worker_refuses_rules_watching_an_undeclared_event_type() -> None:
    from streams.core.rules import InvalidRule, Rule, on, run
    from streams.settings import Settings

    rule = Rule(name="r:typo", when=on("ns:run_succeeded"), then=run("a"))
    # Refused before the worker builds any client: no broker is needed to see it.
    settings = Settings(bootstrap_servers="127.0.0.1:9", schema_registry_url="http://127.0.0.1:9")
    with pytest.raises(InvalidRule) as info:
        worker.Worker(settings, rules=[rule], actions={})
    assert "'r:typo' watches 'ns:run_succeeded'" in str(info.value)
    assert "Known event types: ['feedback_given'" in str(info.value)
