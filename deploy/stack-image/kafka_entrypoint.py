"""The Kafka image's entry point: one KRaft node configured the way apache/kafka's image is.

Every `KAFKA_*` variable (but the JVM's: KAFKA_HEAP_OPTS, KAFKA_OPTS, ...) becomes a line of
server.properties: the prefix dropped, `___` read as `-`, `__` as `_`, `_` as `.`, lower case
(KAFKA_LISTENER_NAME_SASL__PLAINTEXT_X -> listener.name.sasl_plaintext.x). The storage is
formatted on first start with $CLUSTER_ID (the official image's default when unset), then the
broker replaces this process.

`--api-versions --bootstrap-server HOST:PORT` is the health check instead: it sends one
ApiVersions request and exits 0 when the broker answers it without an error.
"""

from __future__ import annotations

import os
import re
import socket
import struct
import subprocess
import sys
from pathlib import Path

HOME = Path("/opt/kafka")
PROPERTIES = Path("/tmp/server.properties")  # the root file system may be read-only
DEFAULT_CLUSTER_ID = "5L6g3nShT-eMCtK--X86sw"  # apache/kafka's, so a compose file behaves alike
DEFAULT_LOG_DIRS = "/var/lib/kafka/data"
JVM_VARIABLES = {"KAFKA_HEAP_OPTS", "KAFKA_OPTS", "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_GC_LOG_OPTS",
                 "KAFKA_JMX_OPTS", "KAFKA_LOG4J_OPTS", "KAFKA_VERSION"}
SEPARATORS = {"___": "-", "__": "_", "_": "."}


def property_name(variable: str) -> str:
    """KAFKA_LOG_DIRS -> log.dirs (apache/kafka's rules)."""
    name = variable.removeprefix("KAFKA_")
    return re.sub("___|__|_", lambda m: SEPARATORS[m.group()], name).lower()


def properties(environ: dict[str, str]) -> dict[str, str]:
    found = {property_name(k): v for k, v in sorted(environ.items())
             if k.startswith("KAFKA_") and k not in JVM_VARIABLES}
    found.setdefault("log.dirs", DEFAULT_LOG_DIRS)
    return found


def java(*args: str) -> list[str]:
    return ["java", f"-Dlog4j2.configurationFile={HOME / 'log4j2.properties'}",
            "-cp", f"{HOME / 'libs'}/*", *args]


def serve(environ: dict[str, str]) -> None:
    config = properties(environ)
    PROPERTIES.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
    log_dir = Path(config["log.dirs"].split(",")[0])
    if not (log_dir / "meta.properties").exists():
        cluster = environ.get("CLUSTER_ID", DEFAULT_CLUSTER_ID)
        subprocess.run(java("kafka.tools.StorageTool", "format", "--ignore-formatted",
                            "-t", cluster, "-c", str(PROPERTIES)), check=True)
    heap = environ.get("KAFKA_HEAP_OPTS", "-Xms256m -Xmx768m").split()
    extra = environ.get("KAFKA_OPTS", "").split()
    command = java(*extra, "kafka.Kafka", str(PROPERTIES))
    os.execvp("java", [command[0], *heap, "-XX:+UseG1GC", "-Djava.awt.headless=true",
                       *command[1:]])


def api_versions(bootstrap: str, timeout: float = 5.0) -> bool:
    """One ApiVersions v0 request (header v1: key 18, version 0, correlation 1, client id)."""
    host, _, port = bootstrap.rpartition(":")
    client = b"health"
    request = struct.pack(">hhih", 18, 0, 1, len(client)) + client
    with socket.create_connection((host, int(port)), timeout=timeout) as conn:
        conn.sendall(struct.pack(">i", len(request)) + request)
        head = b""
        while len(head) < 10:  # size, correlation id, error code
            chunk = conn.recv(10 - len(head))
            if not chunk:
                return False
            head += chunk
    _size, correlation, error = struct.unpack(">iih", head)
    return correlation == 1 and error == 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--api-versions"]:
        args = dict(zip(argv[1::2], argv[2::2], strict=False))
        try:
            return 0 if api_versions(args.get("--bootstrap-server", "localhost:9092")) else 1
        except OSError as exc:
            print(f"no answer: {exc}", file=sys.stderr)
            return 1
    serve(dict(os.environ))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
