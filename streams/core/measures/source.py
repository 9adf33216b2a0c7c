"""What a measure reads: envelopes, or anything that can read its log (a workspace handle)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from streams.core.events import Envelope

__all__ = ["LogSource", "Readable", "envelopes_of"]


@runtime_checkable
class Readable(Protocol):
    """A log that can be read to its end (the workspace handle is one)."""

    async def read(self) -> list[Envelope]: ...


LogSource = Readable | Iterable[Envelope]
"""A measure's input: a workspace handle (read to its end) or envelopes already read."""


async def envelopes_of(source: LogSource) -> list[Envelope]:
    """The envelopes of a source, in log order."""
    if isinstance(source, Readable):
        return list(await source.read())
    return list(source)
