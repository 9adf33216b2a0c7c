"""What the benchmarks that start a server share: waiting until it answers `/readyz`."""

from __future__ import annotations

import asyncio

import httpx

__all__ = ["until_ready"]


async def until_ready(base: str, seconds: float = 60.0) -> None:
    """Poll `{base}/readyz` every 0.1 s until it answers 200; exit the benchmark with a line
    that says which server did not come up when `seconds` pass."""
    async with httpx.AsyncClient(timeout=1) as probe:
        for _ in range(int(seconds * 10)):
            try:
                if (await probe.get(f"{base}/readyz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit(f"{base} did not become ready in {seconds:.0f} s")
