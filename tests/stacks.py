"""A test's own Kafka + registry, for tests that stop or restart servers: deploy/stack.sh on
free loopback ports with its own data dir, stopped by the script (which signals its servers by
pid) even when a test fails; a server still alive after that is killed by the pid in its pid
file, and only if that process is this stack's."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO, _free_port

__all__ = ["SCRIPT", "START_TIMEOUT", "OwnStack", "own_stack_in"]

SCRIPT = REPO / "deploy" / "stack.sh"
# Generous: two JVMs on a shared 2-core machine. stack.sh itself gives up after 120 s a server.
START_TIMEOUT = 400.0


@dataclass
class OwnStack:
    """A test's own stack: its environment, and deploy/stack.sh run against it."""

    env: dict[str, str]
    data: Path

    @property
    def registry_url(self) -> str:
        return f"http://127.0.0.1:{self.env['REGISTRY_PORT']}/apis/ccompat/v7"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.env['KAFKA_PORT']}"

    def run(self, *args: str, timeout: float = START_TIMEOUT) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(SCRIPT), *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False)

    def must(self, *args: str, timeout: float = START_TIMEOUT) -> subprocess.CompletedProcess[str]:
        done = self.run(*args, timeout=timeout)
        assert done.returncode == 0, (f"stack.sh {' '.join(args)} failed ({done.returncode}):\n"
                                      f"{done.stderr[-4000:]}")
        return done

    def pid(self, server: str) -> int:
        return int((self.data / f"{server}.pid").read_text().strip())

    def kill_leftovers(self) -> None:
        """SIGKILL, by pid, any server of this stack that is still alive."""
        for pidfile in self.data.glob("*.pid"):
            try:
                pid = int(pidfile.read_text().strip())
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except (OSError, ValueError):
                continue
            # Only our own server: its command line names this data dir or this registry port.
            port_flag = f"-Dquarkus.http.port={self.env['REGISTRY_PORT']}\0"
            if str(self.data) in cmdline or port_flag in cmdline:
                os.kill(pid, signal.SIGKILL)


@contextmanager
def own_stack_in(data: Path, *, start: bool) -> Iterator[OwnStack]:
    """A stack on five free ports with its data in `data` (jars from STACK_CACHE, default the
    repository's .stack/cache); started when `start`, always stopped on the way out."""
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
        if start:
            stack.must("start")
        yield stack
    finally:
        try:
            stack.run("stop", timeout=180)
        finally:
            stack.kill_leftovers()
