"""take(): what is fetched at once, else the first record within the wait with what came
with it, never a wait for a full batch (a stand-in consumer records the calls)."""

from __future__ import annotations

from typing import Any

from streams.adapters.kafka.log import take


class Fetched:
    """A consumer whose local queue holds `queued` now and gets `arriving` during a poll."""

    def __init__(self, queued: list[str], arriving: list[str]) -> None:
        self.queued, self.arriving = queued, arriving
        self.calls: list[tuple[str, int | float]] = []

    def consume(self, most: int, timeout: float) -> list[str]:
        self.calls.append(("consume", timeout))
        taken, self.queued = self.queued[:most], self.queued[most:]
        return taken

    def poll(self, timeout: float) -> str | None:
        self.calls.append(("poll", timeout))
        self.queued += self.arriving
        self.arriving = []
        return self.queued.pop(0) if self.queued else None


def _take(consumer: Fetched, most: int = 3) -> list[Any]:
    return take(consumer, most, 0.2)  # type: ignore[arg-type]


def test_what_is_fetched_comes_without_waiting() -> None:
    consumer = Fetched(["a", "b", "c", "d"], [])
    assert _take(consumer) == ["a", "b", "c"]
    assert consumer.calls == [("consume", 0)]


def test_an_empty_queue_waits_for_the_first_record_only() -> None:
    consumer = Fetched([], ["a", "b"])
    assert _take(consumer) == ["a", "b"]
    assert consumer.calls == [("consume", 0), ("poll", 0.2), ("consume", 0)]
    assert _take(Fetched([], [])) == []
