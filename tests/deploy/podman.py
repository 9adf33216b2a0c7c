"""Podman as the deployment tests drive it: `deploy/image.sh` for builds and single
containers, the engine's configuration file for tools that call podman themselves
(podman-compose, `podman kube play`), and a container's state by name."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from tests.deploy.manifests import REPO

IMAGE = os.environ.get("STREAMS_TEST_IMAGE", "localhost/feedback-streams:test")
KAFKA_IMAGE = "localhost/feedback-streams-kafka:test"
REGISTRY_IMAGE = "localhost/feedback-streams-registry:test"
UID = "10001"  # the Dockerfile's user


def image_sh(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """`deploy/image.sh ARGS` (podman with the script's configuration)."""
    return subprocess.run(["bash", str(REPO / "deploy" / "image.sh"), *args],
                          env={**os.environ, "IMAGE_TAG": IMAGE, "KAFKA_IMAGE": KAFKA_IMAGE,
                               "REGISTRY_IMAGE": REGISTRY_IMAGE},
                          capture_output=True, text=True, timeout=timeout, check=False)


def containers_conf() -> str:
    """The file CONTAINERS_CONF names so a plain `podman` runs here (`deploy/image.sh conf`)."""
    made = image_sh("conf")
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def inspect(name: str) -> dict[str, Any]:
    """`podman inspect NAME`: the container's configuration and state."""
    found = image_sh("podman", "inspect", name)
    assert found.returncode == 0, found.stderr
    return json.loads(found.stdout)[0]  # type: ignore[no-any-return]


def logs(name: str) -> str:
    """A container's output (stdout, then stderr)."""
    found = image_sh("podman", "logs", name)
    return found.stdout + found.stderr


def running(name: str) -> bool:
    return bool(inspect(name)["State"]["Running"])


def stop(name: str) -> int:
    """SIGTERM (then SIGKILL after 30 s); the process's exit code."""
    image_sh("podman", "stop", "--time", "30", name, timeout=90.0)
    return int(inspect(name)["State"]["ExitCode"])


def runs_as_the_image_user_read_only(name: str) -> None:
    """The container runs as the image's user (uid 10001) on a read-only root."""
    config = inspect(name)
    assert config["HostConfig"]["ReadonlyRootfs"] is True, name
    uid = image_sh("podman", "exec", name, "id", "-u")
    assert uid.stdout.strip() == UID, (name, uid.stderr)
