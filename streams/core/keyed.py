"""Per-key asyncio locks that exist only while held or awaited.

`KeyedLocks().hold(key)` is an async context manager: inside, no other holder of the same key
is; waiters of one key enter in the order they asked (asyncio.Lock's order). A key's lock is
dropped once nobody holds or waits for it, so the table holds the keys in use, not every key
ever seen (a run executor's scope keys, an evaluator's verdict keys). Pure apart from asyncio.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

__all__ = ["KeyedLocks"]


@dataclass
class _Held:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class KeyedLocks:
    """Locks by key, made on first use and dropped when unused."""

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}

    def __len__(self) -> int:
        """How many keys are held or awaited now."""
        return len(self._held)

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """Hold `key`'s lock inside (waiting for its holder first)."""
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = _Held()
        held.users += 1
        try:
            async with held.lock:
                yield
        finally:
            held.users -= 1
            if held.users == 0:
                del self._held[key]
