"""deploy/stack.sh: servers detached from the caller, schema ids durable across restarts.

The stack here is the test's own (free loopback ports, a data dir under tmp_path), started and
stopped by this module through the script, which stops its servers by pid; whatever is still
alive at the end (a failed stop) is killed by the pid in its pid file.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.stacks import SCRIPT, START_TIMEOUT, OwnStack, own_stack_in

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnStack]:
    with own_stack_in(tmp_path_factory.mktemp("stack") / "data", start=False) as stack:
        yield stack


def test_start_returns_and_leaves_the_callers_pipes_and_fds(own_stack: OwnStack) -> None:
    # A pipe on stdout/stderr (as in `deploy/stack.sh start | cat`), and one more pipe whose
    # write end the script inherits as fd 3+: a server that kept either open would keep the
    # reader from ever seeing EOF (and would keep a caller's lock held the same way).
    extra_read, extra_write = os.pipe()
    started = time.monotonic()
    proc = subprocess.Popen([str(SCRIPT), "start"], env=own_stack.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, pass_fds=(extra_write,))
    os.close(extra_write)
    try:
        out, err = proc.communicate(timeout=START_TIMEOUT)
    except subprocess.TimeoutExpired:
        returned = proc.poll() is not None
        proc.kill()
        proc.communicate()
        os.close(extra_read)
        pytest.fail("stack.sh start returned but its stdout/stderr pipe stayed open: a server "
                    "inherited it" if returned else
                    f"stack.sh start did not return within {START_TIMEOUT:.0f}s")
    took = time.monotonic() - started
    try:
        assert proc.returncode == 0, f"start failed:\n{err.decode(errors='replace')[-4000:]}"
        os.set_blocking(extra_read, False)
        try:
            leftover = os.read(extra_read, 1)
        except BlockingIOError:
            pytest.fail("a server holds the caller's extra pipe (fd > 2) open")
        assert leftover == b"", "nothing writes to the extra pipe, so it must be at EOF"
    finally:
        os.close(extra_read)
    assert b"registry" in out and b"running" in out, out.decode(errors="replace")
    for server in ("kafka", "registry"):
        pid = own_stack.pid(server)
        assert os.getsid(pid) == pid, f"{server} does not run in a session of its own"
        fds = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in ("0", "1", "2")}
        assert fds <= {"/dev/null", str(own_stack.data / f"{server}.out"),
                       str(own_stack.data / f"{server}.log")}, f"{server} std fds: {fds}"
    print(f"stack.sh start with the caller's pipes returned in {took:.1f}s")


def _schema(name: str) -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "tests.deploy",
                       "fields": [{"name": "id", "type": "string"},
                                  {"name": "n", "type": ["null", "long"], "default": None}]})


def test_schema_ids_survive_a_registry_restart(own_stack: OwnStack) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    own_stack.must("start")
    name = f"R{uuid.uuid4().hex[:8]}"
    subject = f"stack-test-{name}-value"
    before = SchemaRegistryClient({"url": own_stack.registry_url})
    schema_id = before.register_schema(subject, Schema(_schema(name), "AVRO"))
    other_id = before.register_schema(f"{subject}-other",
                                      Schema(_schema(name + "Other"), "AVRO"))
    registry_pid = own_stack.pid("registry")

    own_stack.must("restart-registry")
    assert own_stack.pid("registry") != registry_pid, "the registry was not restarted"

    # A fresh client: nothing comes from a cache, everything from the restarted registry.
    after = SchemaRegistryClient({"url": own_stack.registry_url})
    assert json.loads(after.get_schema(schema_id).schema_str) == json.loads(_schema(name))
    assert json.loads(after.get_schema(other_id).schema_str) == json.loads(_schema(name + "Other"))
    assert after.register_schema(subject, Schema(_schema(name), "AVRO")) == schema_id
    assert after.lookup_schema(subject, Schema(_schema(name), "AVRO")).schema_id == schema_id
    newer = after.register_schema(f"{subject}-new", Schema(_schema(name + "New"), "AVRO"))
    assert newer not in {schema_id, other_id}, "a new schema must not reuse an old id"


def test_kafka_restarts_with_its_data_and_the_registry_needs_it(own_stack: OwnStack) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    own_stack.must("start")
    name = f"K{uuid.uuid4().hex[:8]}"
    subject = f"stack-test-{name}-value"
    schema_id = SchemaRegistryClient({"url": own_stack.registry_url}).register_schema(
        subject, Schema(_schema(name), "AVRO"))

    own_stack.must("stop-registry")
    own_stack.must("restart-kafka")
    own_stack.must("stop-kafka")
    refused = own_stack.run("start-registry")
    assert refused.returncode != 0
    assert "kafka is not running" in refused.stderr, refused.stderr[-2000:]
    assert not (own_stack.data / "registry.pid").exists()

    own_stack.must("start-kafka")
    own_stack.must("start-registry")
    status = own_stack.run("status", timeout=30)
    assert status.returncode == 0, status.stdout + status.stderr
    after = SchemaRegistryClient({"url": own_stack.registry_url})
    assert json.loads(after.get_schema(schema_id).schema_str) == json.loads(_schema(name))
    assert after.register_schema(subject, Schema(_schema(name), "AVRO")) == schema_id


def test_the_tls_listener_serves_scram_with_the_stacks_ca_across_restarts(
    own_stack: OwnStack,
) -> None:
    import socket
    import ssl

    from streams.adapters.kafka.admin import TenantAdmin
    from streams.settings import Settings

    own_stack.must("start")
    printed = own_stack.must("env", timeout=30).stdout
    assert f"export KAFKA_SSL_PORT={own_stack.env['KAFKA_SSL_PORT']}" in printed
    assert f"export STACK_CA_LOCATION={own_stack.ca_location}" in printed
    ca = own_stack.ca_location.read_bytes()

    def handshake(host: str) -> dict[str, object]:
        context = ssl.create_default_context(cafile=str(own_stack.ca_location))
        port = int(own_stack.env["KAFKA_SSL_PORT"])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                context.wrap_socket(raw, server_hostname=host) as tls:
            return tls.getpeercert()  # type: ignore[return-value]

    def scram_over_tls() -> TenantAdmin:
        return TenantAdmin(Settings(
            bootstrap_servers=own_stack.ssl_bootstrap, security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512", sasl_username="admin",
            sasl_password="admin-secret", ssl_ca_location=str(own_stack.ca_location),
            topic_prefix="tlsstack", admin_timeout=30.0))

    # Verified against the stack's CA, under both names a client may use.
    for host in ("127.0.0.1", "localhost"):
        cert = handshake(host)
        assert cert["issuer"] == ((("commonName", "feedback-streams stack CA"),),)
    scram_over_tls().create_tenant("acme", 1)
    own_stack.must("restart-kafka")
    # The certificates are made once: a restart keeps the CA clients already trust.
    assert own_stack.ca_location.read_bytes() == ca
    assert scram_over_tls().tenants() == ["acme"]


PORT_VARIABLES = ("KAFKA_PORT", "KAFKA_CONTROLLER_PORT", "KAFKA_SASL_PORT", "KAFKA_SSL_PORT",
                  "REGISTRY_PORT", "REGISTRY_MANAGEMENT_PORT")


@pytest.mark.parametrize("busy", PORT_VARIABLES)
def test_start_refuses_any_busy_port_first_in_one_line(busy: str, tmp_path: Path) -> None:
    # All six ports are checked before any download or java start: a busy one is one line
    # naming it and its variable, and exit code 3, within a second or two.
    import socket

    def free() -> int:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            return int(probe.getsockname()[1])

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        env = {**os.environ, "STACK_DATA_DIR": str(tmp_path / "data"),
               **{name: str(taken if name == busy else free()) for name in PORT_VARIABLES}}
        started = time.monotonic()
        done = subprocess.run([str(SCRIPT), "start"], env=env, capture_output=True, text=True,
                              timeout=60, check=False)
    assert done.returncode == 3, done.stderr
    assert done.stderr.splitlines() == [
        f"[stack] error: port {taken} ({busy}) is taken by another process: stop it, or set "
        f"{busy} to a free port"]
    assert time.monotonic() - started < 10
