"""deploy/stack-image's Kafka entry point, without a container: the KAFKA_* variables become
server.properties as apache/kafka's image makes them, and the health check's ApiVersions
request gets a yes only from a broker that answers one without an error."""

from __future__ import annotations

import importlib.util
import socket
import struct
import threading
from types import ModuleType

import pytest

from tests.deploy.manifests import REPO


def _entrypoint() -> ModuleType:
    path = REPO / "deploy" / "stack-image" / "kafka_entrypoint.py"
    spec = importlib.util.spec_from_file_location("kafka_entrypoint", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ENTRY = _entrypoint()


@pytest.mark.parametrize(("variable", "name"), [
    ("KAFKA_LOG_DIRS", "log.dirs"),
    ("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "transaction.state.log.min.isr"),
    ("KAFKA_LISTENER_NAME_SASL__PLAINTEXT_SCRAM-SHA-256_SASL_JAAS_CONFIG",
     "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config"),
    ("KAFKA_A___B", "a-b"),
])
def test_variables_become_properties_by_the_official_images_rules(variable: str,
                                                                  name: str) -> None:
    assert ENTRY.property_name(variable) == name


def test_jvm_variables_are_not_properties_and_log_dirs_has_a_default() -> None:
    found = ENTRY.properties({"KAFKA_HEAP_OPTS": "-Xmx1g", "KAFKA_OPTS": "-Dx=1",
                              "KAFKA_NODE_ID": "1", "PATH": "/bin"})
    assert found == {"node.id": "1", "log.dirs": ENTRY.DEFAULT_LOG_DIRS}


def _answering(error: int) -> tuple[int, threading.Thread]:
    """A one-shot server that answers an ApiVersions request with `error`."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn, server:
            size = struct.unpack(">i", conn.recv(4))[0]
            request = conn.recv(size)
            correlation = struct.unpack(">i", request[4:8])[0]
            body = struct.pack(">ih", correlation, error) + struct.pack(">i", 0)
            conn.sendall(struct.pack(">i", len(body)) + body)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server.getsockname()[1], thread


@pytest.mark.parametrize(("error", "healthy"), [(0, True), (35, False)])
def test_the_health_check_says_yes_only_to_an_answer_without_an_error(
        error: int, healthy: bool) -> None:
    port, thread = _answering(error)
    assert ENTRY.api_versions(f"127.0.0.1:{port}") is healthy
    thread.join(5)


def test_the_health_check_fails_when_nothing_listens() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert ENTRY.main(["--api-versions", "--bootstrap-server", f"127.0.0.1:{port}"]) == 1
