"""A newcomer's first hour, as a new user meets it: each failure is ONE line on stderr saying
what failed and what to do, with the exit code of its kind (docs/cli.md). Every case runs
`python -m streams` as a subprocess, pointed at closed loopback ports (127.0.0.1:9, the
discard port, where nothing listens) with short timeouts, so none needs a running stack.
The cases that need a broker (an unknown tenant) are in tests/integration/test_cli_tenants.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pytest

from streams.surfaces.cli.base import ExitCode

REPO = Path(__file__).resolve().parents[3]
CLOSED = "127.0.0.1:9"


def streams(*args: str, pythonpath: Path | None = None, **env: str,
            ) -> subprocess.CompletedProcess[str]:
    """`streams ARGS` in a child process whose services are all unreachable."""
    child = {k: v for k, v in os.environ.items()
             if not k.startswith(("KAFKA_", "SCHEMA_REGISTRY_", "LANGFUSE_", "STREAMS_"))}
    child.update({"KAFKA_BOOTSTRAP_SERVERS": CLOSED,
                  "SCHEMA_REGISTRY_URL": f"http://{CLOSED}",
                  "STREAMS_ADMIN_TIMEOUT": "2", "COLUMNS": "80", **env})
    paths = [str(REPO)] + ([str(pythonpath)] if pythonpath else [])
    child["PYTHONPATH"] = os.pathsep.join(paths)
    return subprocess.run([sys.executable, "-m", "streams", *args], env=child, cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The run's stderr, asserted to be one line (no traceback, no librdkafka flood)."""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    return lines[0]


def test_an_unreachable_langfuse_at_sink_start() -> None:
    started = time.monotonic()
    done = streams("sink", "langfuse", "--no-cursor", LANGFUSE_HOST=f"http://{CLOSED}",
                   LANGFUSE_PUBLIC_KEY="pk-lf-x", LANGFUSE_SECRET_KEY="sk-lf-x",
                   STREAMS_LANGFUSE_TIMEOUT="2")
    line = one_line(done)
    assert done.returncode == ExitCode.LANGFUSE_UNREACHABLE
    assert line.startswith(f"error: cannot reach Langfuse at http://{CLOSED}")
    assert "check LANGFUSE_HOST" in line
    assert time.monotonic() - started < 30


def test_a_registry_that_is_down_at_schemas_register() -> None:
    started = time.monotonic()
    done = streams("schemas", "register")
    line = one_line(done)
    assert done.returncode == ExitCode.REGISTRY_UNREACHABLE
    assert line.startswith(f"error: cannot reach the schema registry at http://{CLOSED}")
    assert "check SCHEMA_REGISTRY_URL" in line and "deploy/stack.sh start" in line
    assert time.monotonic() - started < 30


@pytest.mark.parametrize(("source", "said"), [
    ("RULES = [\n", "syntax error at {path}:1"),
    ("from streams.core.rules import Rule\nRULES = [Rlue()]\n",
     "NameError: name 'Rlue' is not defined at {path}:2"),
])
def test_a_broken_rules_module(tmp_path: Path, source: str, said: str) -> None:
    path = tmp_path / "my_rules.py"
    path.write_text(source)
    done = streams("worker", "--rules", "my_rules", pythonpath=tmp_path)
    line = one_line(done)
    assert done.returncode == ExitCode.MODULE_FAILED
    assert line.startswith("error: cannot import rules module 'my_rules': ")
    assert said.format(path=path) in line
    assert line.endswith("fix the module")


def test_a_misspelled_rules_module_name(tmp_path: Path) -> None:
    done = streams("worker", "--rules", "my_rulez", pythonpath=tmp_path)
    line = one_line(done)
    assert done.returncode == ExitCode.MODULE_FAILED
    assert "no module named 'my_rulez'" in line
    assert "check the name given to --rules" in line


def test_an_unreachable_broker() -> None:
    started = time.monotonic()
    done = streams("worker")
    line = one_line(done)
    assert done.returncode == ExitCode.BROKER_UNREACHABLE
    assert line.startswith(f"error: no Kafka broker answered at {CLOSED} within 2 s")
    assert f"check KAFKA_BOOTSTRAP_SERVERS ({CLOSED})" in line
    assert "start the stack (deploy/stack.sh start)" in line
    assert time.monotonic() - started < 20


def test_an_unreachable_broker_for_a_short_command() -> None:
    done = streams("tenant", "list")
    line = one_line(done)
    assert done.returncode == ExitCode.BROKER_UNREACHABLE
    assert "check KAFKA_BOOTSTRAP_SERVERS" in line and "deploy/stack.sh start" in line


def test_help_is_readable_at_80_columns() -> None:
    done = streams("worker", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for variable in ("$STREAMS_FEEDBACK_MODULES", "$STREAMS_MIRROR_BATCH_SIZE",
                     "$STREAMS_RULE_MODULES", "$STREAMS_PROPOSAL_OUTCOME"):
        assert variable in text, done.stdout
    assert "…" not in done.stdout
    assert "<bool>" not in done.stdout
    assert "--proposal-outcome / --no-proposal-outcome" in done.stdout
    assert max(len(line) for line in done.stdout.splitlines()) <= 80


def test_version_is_the_installed_packages() -> None:
    done = streams("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"streams (feedback-streams) {version('feedback-streams')}"
