"""The images the deployment tests run, built once per session with podman."""

from __future__ import annotations

import time

import pytest

from tests.deploy.podman import IMAGE, KAFKA_IMAGE, REGISTRY_IMAGE, image_sh


@pytest.fixture(scope="session")
def podman_runs() -> None:
    """Skipped, with podman's own words, only on a machine where podman cannot be installed
    or cannot run a container at all (`deploy/image.sh probe`); once it can, every failure
    counts."""
    probe = image_sh("probe", timeout=900.0)
    if probe.returncode != 0:
        pytest.skip(f"podman cannot run containers on this machine (deploy/image.sh probe "
                    f"exited {probe.returncode}): {probe.stderr.strip()[-1500:]}")


def _build(command: str, timeout: float) -> None:
    """`deploy/image.sh COMMAND`, failing the test with its output when it fails; prints how
    long it took."""
    began = time.monotonic()
    built = image_sh(command, timeout=timeout)
    if built.returncode != 0:
        pytest.fail(f"deploy/image.sh {command} failed ({built.returncode}):\n"
                    f"{built.stderr[-6000:]}\n{built.stdout[-2000:]}")
    print(f"deploy/image.sh {command}: {time.monotonic() - began:.0f} s: "
          f"{built.stderr.strip()}")


@pytest.fixture(scope="session")
def image(podman_runs: None) -> str:
    """The project's image from the Dockerfile."""
    _build("build", timeout=2100.0)
    return IMAGE


@pytest.fixture(scope="session")
def stack_images(podman_runs: None) -> tuple[str, str]:
    """Kafka and the registry as images (deploy/stack-image), for the compose file and the
    manifests: (kafka image, registry image)."""
    _build("stack", timeout=1200.0)
    return KAFKA_IMAGE, REGISTRY_IMAGE
