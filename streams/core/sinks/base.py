"""The sink and config-store protocols: small, async, any backend can implement them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from streams.core.scores import Score, ScoreConfig


@dataclass(frozen=True, slots=True)
class Rejected:
    """A score the backend refused for good, with the backend's reason."""

    score: Score
    reason: str


@runtime_checkable
class ScoreSink(Protocol):
    """Records scores somewhere.

    `record` returns once the batch is durably handed on (the caller may then advance its
    cursor), returning the scores the backend refused for good (to be dead-lettered), if any;
    returning None means every score was accepted, so the smallest sink is one coroutine:

        class PrintingSink:
            async def record(self, scores: Sequence[Score], /) -> None:
                for score in scores:
                    print(score.name, score.value, score.trace_id or score.session_id)

    It raises SinkError when the batch may not have been handed on (transport error, outage,
    rate limit): the caller must not advance, and sends the batch again. Recording a score
    again with the same id must replace it, not add another.

    A sink that buffers also has `async def flush(self) -> None`, handing on anything
    buffered; callers await it before shutdown when the sink has one (`flush_sink`).
    """

    async def record(self, scores: Sequence[Score], /) -> Sequence[Rejected] | None:
        """Hand a batch of scores on; see the class docstring for the contract."""
        ...


def rejected_of(result: Sequence[Rejected] | None) -> list[Rejected]:
    """What a sink's `record` refused: None means nothing."""
    return [] if result is None else list(result)


async def flush_sink(sink: Any) -> None:
    """Await the sink's `flush`, if it has one (a sink that buffers nothing needs none)."""
    flush = getattr(sink, "flush", None)
    if flush is not None:
        await flush()


@runtime_checkable
class ScoreConfigStore(Protocol):
    """Keeps score configs (names, types, ranges, categories) for a scores backend."""

    async def list(self) -> Sequence[ScoreConfig]:
        """Every config the store has."""
        ...

    async def create(self, config: ScoreConfig, /) -> None:
        """Create a config (the store need not refuse a duplicate name)."""
        ...
