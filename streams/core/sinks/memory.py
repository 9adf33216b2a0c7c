"""In-memory sink and config store, for tests and for trying things out."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from streams.core.scores import Score, ScoreConfig
from streams.core.sinks.base import Rejected


def replacement_key(score: Score) -> tuple[str, str, str]:
    """Langfuse's key: a score with the same id, name and UTC date replaces the stored one."""
    return (score.id, score.name, score.timestamp.date().isoformat())


class InMemoryScoreSink:
    """Keeps scores by replacement key; counts every score it was given."""

    def __init__(self) -> None:
        self.scores: dict[tuple[str, str, str], Score] = {}
        self.received = 0
        self.flushes = 0
        self._lock = asyncio.Lock()

    async def record(self, scores: Sequence[Score], /) -> Sequence[Rejected]:
        """Store every score, replacing any with the same key."""
        async with self._lock:
            for score in scores:
                if not isinstance(score, Score):
                    raise TypeError(f"not a Score: {score!r}")
                self.scores[replacement_key(score)] = score
                self.received += 1
        return []

    async def flush(self) -> None:
        """Nothing is buffered; counts the call."""
        self.flushes += 1


class InMemoryScoreConfigStore:
    """Keeps configs in a list; like Langfuse, creating a name twice keeps both."""

    def __init__(self) -> None:
        self.configs: list[ScoreConfig] = []

    async def list(self) -> Sequence[ScoreConfig]:
        """Every config, oldest first."""
        return list(self.configs)

    async def create(self, config: ScoreConfig, /) -> None:
        """Append the config."""
        self.configs.append(config)
