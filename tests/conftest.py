"""Fixtures: a real broker and registry for integration tests, and factories for the rest.

The broker and registry come from KAFKA_BOOTSTRAP_SERVERS / SCHEMA_REGISTRY_URL when both are
set, else from testcontainers when a Docker daemon answers, else from deploy/stack.sh started
on free loopback ports with a fresh data dir (and stopped at the end of the session).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from streams.settings import Settings

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Stack:
    """Where the broker and registry of this test session are."""

    bootstrap_servers: str
    schema_registry_url: str
    origin: str
    # The SASL/SCRAM listener of deploy/stack.sh (user admin), when this stack has one.
    sasl_bootstrap_servers: str | None = None
    # Its SASL_SSL listener (SCRAM over TLS) and the CA that signs the broker's certificate.
    ssl_bootstrap_servers: str | None = None
    ca_location: str | None = None


# Ports handed out below the kernel's ephemeral range, above the fixed ports of
# deploy/test.sh's groups (18081-22095) and of a developer's stack.
_PORTS_FROM = 27000
_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _port_range() -> tuple[int, int]:
    """Where this pytest process picks ports: STREAMS_TEST_PORTS ("FROM-TO", inclusive), or
    from 27000 to below the ephemeral range.

    Why a range per process: deploy/test.sh runs its groups at the same time, and a port one
    group picked is free again while its test has a server stopped (a registry restart), so
    another group could pick it and bind it there (CI of stop 47: the registry could not
    start again on its own port). Each group gets a slice of its own."""
    low = _ephemeral_low()
    told = os.environ.get("STREAMS_TEST_PORTS", "")
    if not told:
        return _PORTS_FROM, low - 1
    first, sep, last = told.partition("-")
    if not (sep and first.isdigit() and last.isdigit()
            and int(first) + 100 <= int(last) < low):
        raise RuntimeError(f"STREAMS_TEST_PORTS={told!r}: give FROM-TO, two ports below the "
                           f"kernel's ephemeral range ({low}), at least 100 apart")
    return int(first), int(last)


def _free_port() -> int:
    """A loopback port nothing listens on, in this process's range (`_port_range`), outside
    the kernel's ephemeral range.

    Why not bind to port 0: that hands out an ephemeral port, and once a test stops the
    server on it (a broker restart), any outbound connection on the machine (the other test
    groups' clients) may take it as its source port, so the server cannot bind it again."""
    first, last = _port_range()
    if last - first < 100:  # no slice given, and the machine's ephemeral range starts low
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    pick = random.SystemRandom()
    for _ in range(1000):
        port = pick.randrange(first, last + 1)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free loopback port in {first}-{last}")


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    """The session's Kafka broker and schema registry."""
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    registry = os.environ.get("SCHEMA_REGISTRY_URL")
    if bootstrap and registry:
        # deploy/test.sh exports the stack's ports; KAFKA_SASL_BOOTSTRAP_SERVERS names another.
        sasl = os.environ.get("KAFKA_SASL_BOOTSTRAP_SERVERS") or (
            f"127.0.0.1:{os.environ['KAFKA_SASL_PORT']}" if os.environ.get("KAFKA_SASL_PORT")
            else None)
        # `deploy/stack.sh env` exports KAFKA_SSL_PORT and STACK_CA_LOCATION.
        tls = f"127.0.0.1:{os.environ['KAFKA_SSL_PORT']}" \
            if os.environ.get("KAFKA_SSL_PORT") and os.environ.get("STACK_CA_LOCATION") else None
        yield Stack(bootstrap, registry, "environment", sasl, tls,
                    os.environ.get("STACK_CA_LOCATION") if tls else None)
        return
    if _docker_answers():
        yield from _containers()
        return
    yield from _local_stack()


def _containers() -> Iterator[Stack]:
    from testcontainers.core.container import DockerContainer  # type: ignore[import-untyped]
    from testcontainers.core.waiting_utils import wait_for_logs  # type: ignore[import-untyped]
    from testcontainers.kafka import KafkaContainer  # type: ignore[import-untyped]

    with KafkaContainer("confluentinc/cp-kafka:7.7.1").with_kraft() as kafka:
        registry = DockerContainer("apicurio/apicurio-registry:3.0.9").with_exposed_ports(8080)
        with registry:
            wait_for_logs(registry, "Installed features", timeout=120)
            url = (f"http://{registry.get_container_host_ip()}:"
                   f"{registry.get_exposed_port(8080)}/apis/ccompat/v7")
            yield Stack(kafka.get_bootstrap_server(), url, "testcontainers")


def _local_stack() -> Iterator[Stack]:
    data = Path(tempfile.mkdtemp(prefix="streams-stack-"))
    env = {
        **os.environ,
        "STACK_DATA_DIR": str(data),
        "KAFKA_PORT": str(_free_port()),
        "KAFKA_CONTROLLER_PORT": str(_free_port()),
        "KAFKA_SASL_PORT": str(_free_port()),
        "KAFKA_SSL_PORT": str(_free_port()),
        "REGISTRY_PORT": str(_free_port()),
        "REGISTRY_MANAGEMENT_PORT": str(_free_port()),
    }
    script = REPO / "deploy" / "stack.sh"
    started = subprocess.run([str(script), "start"], env=env, capture_output=True, text=True,
                             check=False)
    if started.returncode != 0:
        subprocess.run([str(script), "stop"], env=env, check=False)
        pytest.fail(f"local stack did not start:\n{started.stderr[-4000:]}")
    try:
        yield Stack(f"127.0.0.1:{env['KAFKA_PORT']}",
                    f"http://127.0.0.1:{env['REGISTRY_PORT']}/apis/ccompat/v7", "local",
                    f"127.0.0.1:{env['KAFKA_SASL_PORT']}",
                    f"127.0.0.1:{env['KAFKA_SSL_PORT']}", str(data / "tls" / "ca.pem"))
    finally:
        subprocess.run([str(script), "stop"], env=env, check=False)
        shutil.rmtree(data, ignore_errors=True)


def unique(prefix: str) -> str:
    """A unique lower-case name for topics, tenants and cursors."""
    return f"{prefix}{uuid.uuid4().hex[:10]}"


@pytest.fixture
def settings(stack: Stack, tmp_path: Path) -> Settings:
    """Settings for one test: the session's stack, a topic prefix no other test uses and a
    local state directory of its own (views, rule state, the index's store)."""
    return Settings(bootstrap_servers=stack.bootstrap_servers,
                    schema_registry_url=stack.schema_registry_url,
                    topic_prefix=unique("t"), partitions=3, discovery_interval=0.5,
                    # Workers and sinks a test starts serve no health port unless the test
                    # asks (STREAMS_HEALTH_PORT): many run at once on this machine.
                    health_port=0,
                    # A broker holds an open file per partition: a session makes hundreds of
                    # tenants, and 32 index partitions each ran a shared broker out of file
                    # descriptors (ulimit 20000). Four keep every index path exercised.
                    index_partitions=4, state_dir=str(tmp_path / "state"))


@pytest.fixture
def tenant_factory(settings: Settings) -> Iterator[Callable[..., str]]:
    """Creates tenants with unique names under the test's prefix."""
    from streams.adapters.kafka.admin import TenantAdmin

    admin = TenantAdmin(settings)
    made: list[str] = []

    def make(name: str | None = None, partitions: int | None = None) -> str:
        tenant = name or unique("tenant-")
        admin.create_tenant(tenant, partitions)
        made.append(tenant)
        return tenant

    yield make
    # Their topics go when the test is done, so a session's broker does not run out of file
    # descriptors (one per partition); best effort, a failure here is no test's failure.
    for tenant in made:
        with contextlib.suppress(Exception):
            admin.delete_tenant(tenant)


@pytest.fixture
def client_factory(settings: Settings) -> Iterator[Callable[..., Any]]:
    """StreamsClients on the test's settings, closed at the end."""
    from streams.runtime.client.workspace import StreamsClient
    from streams.runtime.root import Runtime

    made: list[StreamsClient] = []

    def make(**overrides: Any) -> StreamsClient:
        client = StreamsClient(Runtime(settings.replace(**overrides)))
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@dataclass
class WorkerProcess:
    """A worker running as a child process (`python -m streams worker`)."""

    args: list[str]
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = field(default=0)  # starts after the first
    started_at: int = field(default=0)  # the log's length when the process last started

    def start(self) -> WorkerProcess:
        """Start (or restart) the process."""
        if self.proc is not None:
            self.restarts += 1
        log = self.log_path.open("ab")
        self.started_at = log.tell()
        self.proc = subprocess.Popen([sys.executable, "-m", "streams", "worker", *self.args],
                                     env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                     cwd=str(REPO))
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send a signal and wait for the process to end."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(timeout=60)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stacks(self, wait: float = 5.0) -> str:
        """Every thread's stack, for a failure's report: SIGUSR1 makes the worker (mode's
        Worker) print them to its log from its event loop; what it printed within `wait`
        seconds, without the local variables it adds (or a line saying it printed none: an
        event loop that is blocked cannot answer)."""
        if self.proc is None or self.proc.poll() is not None:
            return "(not running)"
        with self.log_path.open("rb") as log:
            start = log.seek(0, 2)
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + wait
        text = ""
        while time.monotonic() < deadline:  # until the dump has begun and stopped growing
            time.sleep(0.5)
            with self.log_path.open("rb") as log:
                log.seek(start)
                now = log.read().decode(errors="replace")
            if "THREAD " in now and now == text:
                break
            text = now
        kept: list[str] = []
        skipping = False
        for line in text.splitlines():
            if line.startswith("LOCAL VARIABLES"):
                skipping = True
            elif line.startswith("THREAD "):
                skipping = False
            if not skipping and '{"stats"' not in line:
                kept.append(line)
        return "\n".join(kept) if kept else f"(no stacks printed within {wait:.0f} s)"

    def log(self, since_start: bool = False) -> str:
        """What the worker printed (`since_start`: since the process last started)."""
        with self.log_path.open("rb") as log:
            log.seek(self.started_at if since_start else 0)
            return log.read().decode(errors="replace")


@pytest.fixture
def worker_factory(settings: Settings, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Starts workers on the test's settings; every one is stopped at the end."""
    made: list[WorkerProcess] = []

    def make(*args: str, types: str = "streams.examples.ops", **env: str) -> WorkerProcess:
        worker_env = settings.child_env(STREAMS_FEEDBACK_MODULES=types, **env)
        worker = WorkerProcess(list(args), worker_env, tmp_path / f"worker{len(made)}.log")
        made.append(worker)
        return worker.start()

    yield make
    for worker in made:
        worker.stop()


def wait_until(check: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> Any:
    """Poll `check` until it returns something truthy; fail with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def read_topic(settings: Settings, topic: str, *, at_least: int = 0, timeout: float = 60.0,
               settle: float = 1.0) -> list[tuple[Any, dict[str, Any]]]:
    """Every record of a topic, decoded with the registry: (message, record) pairs.

    Reads until at least `at_least` records arrived and then `settle` seconds pass without
    a new one (so duplicates that follow are seen too), or fails after `timeout`.
    """
    from confluent_kafka import Consumer

    from streams.adapters.avro.serde import AvroSerde
    from streams.adapters.kafka.config import reader_config

    serde = AvroSerde(settings)
    consumer = Consumer(reader_config(settings, unique("reader-"),
                                      **{"auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    out: list[tuple[Any, dict[str, Any]]] = []
    deadline = time.monotonic() + timeout
    last_new = time.monotonic()
    try:
        while True:
            msg = consumer.poll(0.2)
            now = time.monotonic()
            if msg is not None and not msg.error():
                out.append((msg, serde.decode(msg.value(), msg.topic())))
                last_new = now
            elif len(out) >= at_least and now - last_new >= settle:
                return out
            if now > deadline:
                pytest.fail(f"read {len(out)} of at least {at_least} records from {topic} "
                            f"within {timeout:.0f}s")
    finally:
        consumer.close()


def decided_matches(settings: Settings, tenant: str) -> int:
    """How many forwarded matches (records of the tenant's rules topic) the decider group has
    committed past. Counted by record, not by offset: with exactly_once each committed
    transaction leaves a marker that takes an offset of its own, so an offset sum runs ahead
    of the records decided."""
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient

    from streams.adapters.kafka.config import admin_config, reader_config
    from streams.core.tenancy import decider_group, tenant_topics

    group = decider_group(settings.topic_prefix)
    rules = tenant_topics(tenant, settings.topic_prefix).rules
    admin = AdminClient(admin_config(settings))  # held: a dropped client never answers
    try:
        listed = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)])[group].result(timeout=30)
    except Exception:  # no such group yet
        return 0
    committed = {tp.partition: tp.offset for tp in listed.topic_partitions
                 if tp.topic == rules and tp.offset > 0}
    if not committed:
        return 0
    consumer = Consumer(reader_config(settings, unique("decided-"),
                                      **{"enable.partition.eof": True}))
    try:
        consumer.assign([TopicPartition(rules, p, 0) for p in committed])
        counted, reading = 0, set(committed)
        deadline = time.monotonic() + 30
        # To each partition's end (a position past a trailing marker is never reported).
        while reading and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                p, error = msg.partition() or 0, msg.error()
                if error is None:
                    counted += (msg.offset() or 0) < committed[p]
                elif error.code() == KafkaError._PARTITION_EOF:
                    reading.discard(p)
        return counted
    finally:
        consumer.close()
