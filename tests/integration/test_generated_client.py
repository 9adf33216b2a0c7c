"""A client nobody here wrote: openapi-python-client generates a Python package from the
committed docs/openapi.json, and that package, unmodified, gives feedback, reads runs and
pages through feedback by cursor against a real `streams serve` on the real broker.

openapi-python-client pins a typer the project's own does not satisfy, so it lives in a
venv of its own under .stack/cache/tools (made and pip-installed at the first run, reused
after); the generated client runs with that venv's Python (httpx and attrs are its
dependencies there), so nothing is installed into the project's environment.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streams.core.actors import UserActor
from streams.runtime.client.keys import KeyStore
from streams.runtime.client.workspace import StreamsClient
from tests.integration.conftest import REPO, Server
from tests.integration.served import start_run

GENERATOR = "openapi-python-client>=0.29,<0.30"
TOOLS = Path(os.environ.get("STREAMS_TOOLS_DIR", REPO / ".stack" / "cache" / "tools"))
DRIVER = Path(__file__).with_name("generated_client_driver.py")


def _generator_venv() -> Path:
    """The tool venv with openapi-python-client in it (made once; a lock keeps concurrent
    test sessions from making it twice)."""
    venv = TOOLS / "openapi-python-client"
    TOOLS.mkdir(parents=True, exist_ok=True)
    with (TOOLS / "openapi-python-client.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ready = venv / "ready"
        if not ready.exists():
            base = getattr(sys, "_base_executable", sys.executable)
            subprocess.run([base, "-m", "venv", "--clear", str(venv)], check=True)
            subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                            GENERATOR], check=True, timeout=600)
            ready.write_text(GENERATOR)
    return venv


async def test_a_client_generated_from_the_document_works_unmodified(
        tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
        serve_factory: Callable[..., Server], keys: KeyStore, tmp_path: Path) -> None:
    venv = await asyncio.to_thread(_generator_venv)
    config = tmp_path / "generator.yaml"
    config.write_text("post_hooks: []\npackage_name_override: feedback_streams_client\n"
                      "project_name_override: feedback-streams-client\n")
    generated = tmp_path / "generated"
    made = await asyncio.to_thread(
        subprocess.run,
        [str(venv / "bin" / "openapi-python-client"), "generate",
         "--path", str(REPO / "docs" / "openapi.json"), "--output-path",
         str(generated / "feedback_streams_client"), "--meta", "none", "--config", str(config)],
        capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    assert "Warning" not in made.stdout + made.stderr, made.stdout + made.stderr

    tenant = tenant_factory()
    client: StreamsClient = client_factory()
    ws = client.workspace(tenant, "prod")
    run_ids = [f"run_{n}" for n in range(5)]
    for run_id in run_ids:
        await start_run(ws, run_id)
    _k, token = keys.create(tenant, UserActor(id="ada"), {"give_feedback", "read"})
    server = serve_factory()

    drove = await asyncio.to_thread(
        subprocess.run,
        [str(venv / "bin" / "python"), str(DRIVER), server.url, token, f"{tenant}.prod",
         *run_ids],
        capture_output=True, text=True, timeout=300,
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(generated)})
    assert drove.returncode == 0, drove.stdout + drove.stderr
    seen = json.loads(drove.stdout.strip().splitlines()[-1])

    assert len(set(seen["recorded"])) == 5
    assert seen["runs"] == list(reversed(run_ids))  # newest first, over three pages
    assert [len(page) for page in seen["feedback_pages"]] == [2, 2, 1]
    paged = [event_id for page in seen["feedback_pages"] for event_id in page]
    assert paged == seen["recorded"]  # oldest first: no gaps, no repeats
    assert [e.event_id for e in await ws.feedback()] == seen["recorded"]
