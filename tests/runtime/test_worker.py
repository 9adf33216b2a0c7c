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
