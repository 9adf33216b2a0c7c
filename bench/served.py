"""What the benchmarks that start a server share: starting `streams serve` and waiting until
it answers `/readyz`."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable
from pathlib import Path

import httpx

from streams.settings import Settings

__all__ = ["REPO", "start_serve", "until_ready"]

REPO = Path(__file__).resolve().parents[1]


async def start_serve(settings: Settings, port: int,
                      modules: str = "streams.examples.ops") -> asyncio.subprocess.Process:
    """`python -m streams serve` on 127.0.0.1:`port` with `settings` and the feedback types
    of `modules`; the caller stops it (by its handle)."""
    env = settings.child_env(STREAMS_FEEDBACK_MODULES=modules,
                             PYTHONPATH=os.pathsep.join([str(REPO),
                                                         os.environ.get("PYTHONPATH", "")]))
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streams", "serve", "--port", str(port), env=env, cwd=REPO)


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


def cpu_seconds(pid: int | None = None) -> float:
    """CPU seconds (user and system) used so far by process `pid` (default: this one)."""
    if pid is None:
        return time.process_time()
    with open(f"/proc/{pid}/stat") as stat:
        # The fields after the command name, which is in parentheses and may hold spaces.
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def costed(pid: int | None, commands: int, measure: Awaitable[dict[str, float]],
                 key: str = "cpu_us") -> dict[str, float]:
    """`measure`'s result with `key`: the CPU µs per command of process `pid` (default: this
    one) while it ran. Rates move with the machine's load, CPU per command much less."""
    before = cpu_seconds(pid)
    result = await measure
    return {**result, key: round((cpu_seconds(pid) - before) / commands * 1e6, 1)}
