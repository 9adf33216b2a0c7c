"""`pip install .` without extras, into a fresh virtualenv, resolving the real lean dependency
set from PyPI (pip's own cache makes a second run quick): `streams` imports, a feedback type
is declared, a StreamsClient handle gives feedback on the session's broker, none of the extras'
libraries is installed, and a command that needs one says which extra to install.

One test (it takes a minute or more the first time: the wheels come from PyPI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from streams.settings import Settings
from tests.deploy.manifests import REPO

# The install itself may take up to its own 1,200 s limit (below) on a loaded machine: the
# test's limit covers it, not pytest's default 300 s (ci68 was cut off there mid-install).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]

EXTRAS_LIBRARIES = ("fastapi", "uvicorn", "mcp", "duckdb", "langfuse", "orjson", "httptools",
                    "websockets")
"""Import names of libraries only the extras install (streams.extras.EXTRAS)."""

SCRIPT = textwrap.dedent('''
    import asyncio, importlib.util, json, sys

    import streams
    from streams import ChainTarget, Feedback, StreamsClient, UserActor, AppEvent

    class LeanCheck(Feedback, name="lean_check", targets={"chain"}):
        ok: bool

    async def main() -> dict:
        client = StreamsClient.from_env()
        try:
            ada = client.workspace(sys.argv[1], "prod", actor=UserActor(id="ada"))
            spike = await ada.append(AppEvent(name="lean:installed"))
            recorded = await ada.give_feedback(LeanCheck(ok=True),
                                               on=ChainTarget(correlation_id=spike.id))
            return {"seq": str(recorded.seq), "id": recorded.id}
        finally:
            client.close()

    given = asyncio.run(main())
    print(json.dumps({
        "file": streams.__file__,
        "given": given,
        "installed": sorted(n for n in sys.argv[2:] if importlib.util.find_spec(n)),
        # The stand-ins are the repository's, not the package's.
        "standins": [n for n in ("standins", "streams.testing") if importlib.util.find_spec(n)],
    }))
''')


def test_pip_install_without_extras_imports_streams_and_gives_feedback(
        tmp_path: Path, settings: Settings, tenant_factory: Callable[..., str]) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # The child must import the installed package, not the checkout: no PYTHONPATH, and it
    # runs outside the repository.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_NO_CACHE_DIR")}
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         str(REPO)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert install.returncode == 0, install.stdout + install.stderr

    tenant = tenant_factory()
    done = subprocess.run([str(python), "-c", SCRIPT, tenant, *EXTRAS_LIBRARIES],
                          cwd=tmp_path, env=settings.child_env(base=env), capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["file"].startswith(str(venv)), said["file"]
    assert said["given"]["id"].startswith("evt_"), said
    assert said["installed"] == [], f"the lean install has extras' libraries: {said}"
    assert said["standins"] == [], said

    # A command that needs an extra says which, in one line.
    streams_cli = venv / "bin" / "streams"
    sink = subprocess.run([str(streams_cli), "sink", "duckdb", "--path", "x.duckdb"],
                          cwd=tmp_path, env=settings.child_env(base=env),
                          capture_output=True, text=True, timeout=120)
    assert sink.returncode == 69, sink.stderr
    assert [line for line in sink.stderr.splitlines() if line.strip()] == [
        "error: the DuckDB sink needs the 'duckdb' extra: pip install "
        "'feedback-streams[duckdb]' (module 'duckdb' is not installed)"]
