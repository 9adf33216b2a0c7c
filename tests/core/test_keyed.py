"""Per-key asyncio locks (streams.core.keyed.KeyedLocks): one holder per key, waiters in the
order they asked, other keys free, and nothing kept for a key nobody holds or awaits."""

from __future__ import annotations

import asyncio

from streams.core.keyed import KeyedLocks


async def test_holders_of_one_key_take_turns_in_order_and_other_keys_do_not_wait() -> None:
    locks = KeyedLocks()
    entered: list[str] = []
    release = asyncio.Event()

    async def hold(key: str, name: str) -> None:
        async with locks.hold(key):
            entered.append(name)
            await release.wait()

    tasks = [asyncio.create_task(hold("a", f"a{i}")) for i in range(3)]
    tasks.append(asyncio.create_task(hold("b", "b0")))
    for _ in range(10):
        await asyncio.sleep(0)
    assert entered == ["a0", "b0"] and len(locks) == 2
    release.set()
    await asyncio.gather(*tasks)
    assert entered == ["a0", "b0", "a1", "a2"] and len(locks) == 0


async def test_a_cancelled_waiter_leaves_the_key_to_the_next() -> None:
    locks = KeyedLocks()
    release = asyncio.Event()
    order: list[str] = []

    async def hold(name: str) -> None:
        async with locks.hold("k"):
            order.append(name)
            await release.wait()

    first = asyncio.create_task(hold("first"))
    cancelled = asyncio.create_task(hold("cancelled"))
    last = asyncio.create_task(hold("last"))
    await asyncio.sleep(0)
    cancelled.cancel()
    release.set()
    await asyncio.gather(first, cancelled, last, return_exceptions=True)
    assert order == ["first", "last"] and len(locks) == 0
