"""Fault and fuzz tests: the worker and give_feedback under failures and hostile input.

Every test here is an integration test on a real broker and registry. Tests that do not stop
servers use the session's shared stack (tests/conftest.py). Tests that stop or restart the
broker or the registry use `own_stack`: a stack of this session alone, started by
deploy/stack.sh on free loopback ports with its own data dir (jars from STACK_CACHE, default
the repository's .stack/cache), and stopped by the script (which signals its servers by pid)
at the end of the session, even when a test fails; a server still alive after that is killed
by the pid in its pid file, and only if that process is this stack's.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, WorkerProcess, _free_port

SCRIPT = REPO / "deploy" / "stack.sh"
START_TIMEOUT = 400.0  # two JVMs on a shared 2-core machine; stack.sh gives up after 120 s each


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/faults/" in str(item.path):
            item.add_marker(pytest.mark.integration)


@dataclass
class OwnStack:
    """A stack of this session: its environment, and deploy/stack.sh run against it."""

    env: dict[str, str]
    data: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.env['KAFKA_PORT']}"

    @property
    def registry_url(self) -> str:
        return f"http://127.0.0.1:{self.env['REGISTRY_PORT']}/apis/ccompat/v7"

    def run(self, *args: str, timeout: float = START_TIMEOUT) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(SCRIPT), *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout, check=False)

    def must(self, *args: str, timeout: float = START_TIMEOUT) -> None:
        done = self.run(*args, timeout=timeout)
        assert done.returncode == 0, (f"stack.sh {' '.join(args)} failed ({done.returncode}):\n"
                                      f"{done.stderr[-4000:]}")

    def kill_leftovers(self) -> None:
        """SIGKILL, by pid, a server of this stack still alive after `stop`."""
        for pidfile in self.data.glob("*.pid"):
            try:
                pid = int(pidfile.read_text().strip())
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except (OSError, ValueError):
                continue
            port_flag = f"-Dquarkus.http.port={self.env['REGISTRY_PORT']}\0"
            if str(self.data) in cmdline or port_flag in cmdline:
                os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="package")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnStack]:
    data = tmp_path_factory.mktemp("faults-stack") / "data"
    ports: set[int] = set()
    while len(ports) < 5:
        ports.add(_free_port())
    kafka, controller, sasl, registry, management = sorted(ports)
    env = {k: v for k, v in os.environ.items()
           if k not in {"REGISTRY_TOPIC", "REGISTRY_SNAPSHOTS_TOPIC"}}
    env.update({
        "STACK_CACHE": os.environ.get("STACK_CACHE") or str(REPO / ".stack" / "cache"),
        "STACK_DATA_DIR": str(data),
        "KAFKA_PORT": str(kafka),
        "KAFKA_CONTROLLER_PORT": str(controller),
        "KAFKA_SASL_PORT": str(sasl),
        "REGISTRY_PORT": str(registry),
        "REGISTRY_MANAGEMENT_PORT": str(management),
    })
    stack = OwnStack(env, data)
    try:
        stack.must("start")
        yield stack
    finally:
        try:
            stack.run("stop", timeout=180)
        finally:
            stack.kill_leftovers()


def assert_alive(*workers: WorkerProcess) -> None:
    """No worker exited (a crash, or exit 70 on an outage it gave up on)."""
    for worker in workers:
        assert worker.proc is not None
        code = worker.proc.poll()
        assert code is None, f"worker exited with {code}:\n{worker.log()[-4000:]}"


def check_scores(records: Iterable[tuple[Any, dict[str, Any]]],
                 expected: dict[str, set[str]]) -> int:
    """Every feedback event of `expected` (id -> its score names) has exactly those scores,
    one id per (feedback, name), and nothing else was scored; returns the repeats (records
    written again with the same id, at-least-once)."""
    records = list(records)
    names: dict[str, set[str]] = defaultdict(set)
    ids_by: dict[tuple[str, str], set[str]] = defaultdict(set)
    for _msg, record in records:
        fid = record["source"]["feedback_event_id"]
        names[fid].add(record["name"])
        ids_by[(fid, record["name"])].add(record["id"])
    unexpected = sorted(set(names) - set(expected))
    assert unexpected == [], f"{len(unexpected)} scored feedback events were never given"
    wrong = {fid: (sorted(names.get(fid, ())), sorted(want))
             for fid, want in expected.items() if names.get(fid, set()) != want}
    assert wrong == {}, f"{len(wrong)} feedback events lack or have extra scores: " \
                        f"{list(wrong.items())[:5]}"
    assert all(len(v) == 1 for v in ids_by.values()), "a (feedback, score) with two ids"
    per_id = Counter(r["id"] for _m, r in records)
    assert len(per_id) == sum(len(v) for v in expected.values())
    return sum(c - 1 for c in per_id.values())
