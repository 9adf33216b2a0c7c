"""Integration fixtures: the Langfuse stand-in, sink and `streams serve` processes, an API key
store (the broker, tenants, clients and workers come from tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from standins.langfuse_standin import LangfuseStandIn
from streams.runtime.client.keys import KeyStore
from streams.runtime.root import Runtime
from streams.settings import Settings
from tests.conftest import REPO, Stack
from tests.conftest import _free_port as free_port
from tests.integration.principals import admin, tenants

__all__ = ["admin", "tenants"]  # fixtures of every integration test


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/integration/" in str(item.path):
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def standin_factory() -> Iterator[Callable[[], LangfuseStandIn]]:
    made: list[LangfuseStandIn] = []

    def make() -> LangfuseStandIn:
        server = LangfuseStandIn().start()
        made.append(server)
        return server

    yield make
    for server in made:
        server.stop()


class SinkProcess:
    def __init__(self, settings: Settings, standin: LangfuseStandIn, log: Path,
                 *args: str, **env: str) -> None:
        self.env = settings.replace(
            langfuse_host=standin.url, langfuse_public_key=standin.public_key,
            langfuse_secret_key=standin.secret_key,
            feedback_modules=("streams.examples.ops",)).child_env(**env)
        self.args = args
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> SinkProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streams", "sink", "langfuse", *self.args],
            env=self.env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT, cwd=REPO)
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def sink_factory(settings: Settings, tmp_path: Path) -> Iterator[Callable[..., SinkProcess]]:
    made: list[SinkProcess] = []

    def make(standin: LangfuseStandIn, *args: str, **env: str) -> SinkProcess:
        proc = SinkProcess(settings, standin, tmp_path / f"sink{len(made)}.log", *args, **env)
        made.append(proc)
        return proc.start()

    yield make
    for proc in made:
        proc.stop()




@pytest.fixture(scope="session")
def tls_stack(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack with deploy/stack.sh's SASL_SSL listener: the session's when it has one
    (deploy/test.sh exports KAFKA_SSL_PORT and STACK_CA_LOCATION), else a stack of this
    session's own on free ports (the shared one is never reconfigured), stopped at the end."""
    if stack.ssl_bootstrap_servers and stack.ca_location:
        yield stack
        return
    from tests.stacks import own_stack_in

    with own_stack_in(tmp_path_factory.mktemp("tls-stack") / "data", start=True) as own:
        yield Stack(own.bootstrap, own.registry_url, "own", own.sasl_bootstrap,
                    own.ssl_bootstrap, str(own.ca_location))


@dataclass
class Server:
    """One `python -m streams serve` process."""

    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 60.0, status: int = 200) -> Server:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"serve exited: {self.log.read_text(errors='replace')}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == status:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        pytest.fail(f"serve not ready: {self.log.read_text(errors='replace')}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


@pytest.fixture
def serve_factory(settings: Settings, tmp_path: Path) -> Iterator[Callable[..., Server]]:
    made: list[Server] = []

    def make(ready: int = 200, *args: str, **env: str) -> Server:
        port = free_port()
        log = tmp_path / f"serve{len(made)}.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "streams", "serve", "--port", str(port), *args],
            env=settings.child_env(**{"STREAMS_FEEDBACK_MODULES": "streams.examples.ops", **env}),
            stdout=log.open("ab"), stderr=subprocess.STDOUT, cwd=str(REPO))
        server = Server(port, proc, log)
        made.append(server)
        return server.wait_ready(status=ready)

    yield make
    for server in made:
        server.stop()


@pytest.fixture
def keys(settings: Settings) -> Iterator[KeyStore]:
    store = KeyStore(Runtime(settings))
    store.start()
    yield store
    store.close()
