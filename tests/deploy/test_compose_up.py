"""docker-compose.yml brought up with podman-compose, whole: Kafka and the registry from images
built on the project's base from the stack's jars (deploy/stack-image), the worker, the DuckDB
sink and `serve` from the project's image. The operator's steps of the file's header, then
feedback given over REST to the serve container becomes scores in the compose broker's
topic, rows in the DuckDB file on the compose volume, and reads back over REST.

Two things differ from `docker compose up` on a laptop, both said here and in
docs/operations.md: the images' names come from the file's variables (KAFKA_IMAGE,
REGISTRY_IMAGE, STREAMS_IMAGE: no registry can be pulled from here), and podman 4.3 runs no
health check on its own (podman-compose ignores `condition: service_healthy` below podman
4.6), so the test brings Kafka and the registry up first and runs the broker's health check
itself, as the header's first step does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import httpx
import pytest

from streams.adapters.kafka.admin import TenantAdmin
from streams.core.actors import UserActor
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.root import Runtime
from streams.runtime.sink.runner import cursor_group
from streams.settings import Settings
from tests.conftest import _free_port, unique, wait_until
from tests.deploy import podman
from tests.deploy.flow import (
    SCORES,
    append_runs,
    feedback_over_rest,
    scores_of_feedback,
    wait_ready,
)
from tests.deploy.manifests import COMPOSE
from tests.deploy.matrix import claims
from tests.integration.test_feedback_mirror import committed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

COMPOSE_BIN = Path(sys.executable).with_name("podman-compose")


@dataclass
class ComposeProject:
    """One `podman-compose -p NAME` project of docker-compose.yml, with its variables."""

    name: str
    env: dict[str, str]

    def __call__(self, *args: str, timeout: float = 300.0) -> str:
        done = subprocess.run([str(COMPOSE_BIN), "-p", self.name, "-f", str(COMPOSE), *args],
                              env={**os.environ, **self.env}, capture_output=True, text=True,
                              timeout=timeout, check=False)
        assert done.returncode == 0, f"podman-compose {' '.join(args)}:\n{done.stderr[-4000:]}"
        return done.stdout

    def container(self, service: str) -> str:
        """The container podman-compose names for a service's first replica."""
        return f"{self.name}_{service}_1"

    @property
    def settings(self) -> Settings:
        """Settings of a process on the host reaching the project's published ports."""
        return Settings(bootstrap_servers=f"127.0.0.1:{self.env['KAFKA_PORT']}",
                        schema_registry_url=f"http://127.0.0.1:{self.env['REGISTRY_PORT']}"
                                            "/apis/ccompat/v7",
                        topic_prefix=self.env["STREAMS_TOPIC_PREFIX"],
                        state_dir=self.env["HOST_STATE_DIR"])


@pytest.fixture
def project(image: str, stack_images: tuple[str, str], tmp_path: Path
            ) -> Iterator[ComposeProject]:
    """A compose project on free loopback ports; brought down with its volumes at the end."""
    kafka_image, registry_image = stack_images
    made = ComposeProject(unique("fscompose"), {
        "CONTAINERS_CONF": podman.containers_conf(),
        "KAFKA_IMAGE": kafka_image, "REGISTRY_IMAGE": registry_image, "STREAMS_IMAGE": image,
        "KAFKA_PORT": str(_free_port()), "KAFKA_SASL_PORT": str(_free_port()),
        "REGISTRY_PORT": str(_free_port()), "API_PORT": str(_free_port()),
        "STREAMS_TOPIC_PREFIX": unique("c"),
        "STREAMS_FEEDBACK_MODULES": "streams.examples.ops",
        "HOST_STATE_DIR": str(tmp_path / "state"),
    })
    yield made
    down = subprocess.run([str(COMPOSE_BIN), "-p", made.name, "-f", str(COMPOSE), "down", "-v",
                           "-t", "30"], env={**os.environ, **made.env}, capture_output=True,
                          text=True, timeout=300, check=False)
    assert down.returncode == 0, f"podman-compose down left the project behind: {down.stderr}"


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=3.0).status_code == 200
    except httpx.HTTPError:
        return False


@claims("`docker-compose.yml`", "run",
        "brought up with podman-compose (PyPI), whole but the `langfuse` profile: Kafka and "
        "the registry from images built on the project's base from the stack's jars and a "
        "Java 21+ runtime (`deploy/image.sh stack`: the official images cannot be pulled "
        "here, so `KAFKA_IMAGE` and `REGISTRY_IMAGE` name these), the worker, DuckDB sink, "
        "calibration keeper and API from the project's image; the file header's steps, then "
        "feedback given over REST to the API container becomes scores in the compose broker's"
        " topic and rows in the DuckDB file on the compose volume, and reads back; each app "
        "container runs as uid 10001 on a read-only root and exits 0 on SIGTERM (45 s alone "
        "once the images are built, about 5 min in a full CI run). podman 4.3 runs no health "
        "check by itself and podman-compose ignores `condition: service_healthy` below podman"
        " 4.6, so the test starts Kafka and the registry first and runs the broker's health "
        "check itself")
async def test_compose_up_runs_the_stack_and_the_pipeline(project: ComposeProject) -> None:
    # The header's first step: the broker and the registry, the broker's own health check.
    project("up", "-d", "kafka", "registry")
    kafka = project.container("kafka")

    def kafka_healthy() -> bool:
        assert podman.running(kafka), podman.logs(kafka)[-4000:]
        return podman.image_sh("podman", "healthcheck", "run", kafka).returncode == 0

    wait_until(kafka_healthy, 180, "the compose broker's health check to pass", every=1.0)
    registry = f"http://127.0.0.1:{project.env['REGISTRY_PORT']}/apis/ccompat/v7/subjects"
    wait_until(lambda: _answers(registry), 180, "the compose registry to answer", every=1.0)

    settings = project.settings
    tenant = unique("tenant-")
    TenantAdmin(settings).create_tenant(tenant)
    client = StreamsClient(Runtime(settings))
    try:
        await append_runs(client.workspace(tenant, "prod", actor=UserActor(id="ada")))
    finally:
        client.close()

    # The second step: the project's processes from its image.
    project("up", "-d")
    serve = project.container("serve")
    base = f"http://127.0.0.1:{project.env['API_PORT']}"

    def alive() -> None:
        assert podman.running(serve), podman.logs(serve)[-4000:]

    wait_ready(base, alive, "the compose API to be ready")
    given = await feedback_over_rest(base, settings, tenant)
    scores_of_feedback(settings, tenant, given)

    services = ("worker", "sink-duckdb", "serve", "calibration")
    for service in services:
        name = project.container(service)
        assert podman.running(name), podman.logs(name)[-4000:]
        podman.runs_as_the_image_user_read_only(name)

    # The sink's rows, read from the compose volume once its cursor has passed every score
    # and it has stopped (DuckDB lets one process hold the file).
    sink = project.container("sink-duckdb")
    group = cursor_group(settings, "warehouse")
    wait_until(lambda: sum(committed(settings, group).values()) >= SCORES, 180,
               "the compose DuckDB sink's cursor to pass every score")
    assert podman.stop(sink) == 0, podman.logs(sink)[-4000:]
    found = podman.image_sh("podman", "volume", "inspect", f"{project.name}_duckdb-data")
    assert found.returncode == 0, found.stderr
    path = Path(json.loads(found.stdout)[0]["Mountpoint"]) / "scores.duckdb"
    with duckdb.connect(str(path), read_only=True) as con:
        ids = {row[0] for row in con.execute(
            "select distinct feedback_event_id from scores").fetchall()}
        count = con.execute("select count(*) from scores").fetchone()
    assert ids == set(given) and count == (SCORES,)
    for service in ("worker", "serve", "calibration"):
        name = project.container(service)
        assert podman.stop(name) == 0, podman.logs(name)[-4000:]
