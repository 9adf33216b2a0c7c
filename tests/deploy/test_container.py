"""The image, built from the Dockerfile with podman and run as containers against the test's
stack: a worker, a DuckDB sink and `serve`, each as the image's non-root user with a
read-only root file system (a tmpfs at /tmp, a host folder mounted at /data for the sink).
Feedback given over REST to the serve container is scored by the worker container, reaches
the scores topic, the DuckDB file on the mounted folder, and reads back over REST.

`deploy/image.sh build` installs podman when it is missing and builds the image (see its
header); the build is the slow part (minutes: pip installs every dependency in the build
stage) and is done once per session (tests/deploy/conftest.py). Containers are named by this
test and removed by name.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from streams.core.actors import UserActor
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
from tests.deploy.matrix import claims
from tests.deploy.podman import UID, image_sh

pytestmark = [pytest.mark.integration, pytest.mark.timeout(2400)]

@dataclass
class Containers:
    """Containers this test started, by name: run, inspect, log, stop; all removed at the
    end."""

    image: str
    env: dict[str, str]
    names: list[str] = field(default_factory=list)

    def run(self, role: str, *args: str, volumes: dict[Path, str] | None = None,
            **env: str) -> str:
        name = unique(f"fs-test-{role}-")
        flags = ["--detach", "--name", name, "--network=host", "--read-only",
                 "--tmpfs", "/tmp:rw,size=256m,mode=1777"]
        for key, value in {**self.env, **env}.items():
            flags += ["--env", f"{key}={value}"]
        for host, inside in (volumes or {}).items():
            flags += ["--volume", f"{host}:{inside}:rw"]
        started = image_sh("podman", "run", *flags, self.image, *args)
        assert started.returncode == 0, started.stderr
        self.names.append(name)
        return name

    inspect = staticmethod(podman.inspect)
    logs = staticmethod(podman.logs)
    running = staticmethod(podman.running)
    stop = staticmethod(podman.stop)

    def remove_all(self) -> None:
        for name in self.names:
            image_sh("podman", "rm", "--force", name, timeout=90.0)


@pytest.fixture
def containers(image: str, settings: Settings) -> Iterator[Containers]:
    env = {
        **settings.to_env(),
        # The host's state dir is not in the container: the worker keeps its state on the
        # tmpfs, as a pod keeps it in an emptyDir.
        "STREAMS_STATE_DIR": "/tmp/state",
        "STREAMS_FEEDBACK_MODULES": "streams.examples.ops",
    }
    made = Containers(image, env)
    yield made
    made.remove_all()


def _stats_scores(log: str) -> int:
    lines = [line for line in log.splitlines() if line.startswith('{"sink_stats"')]
    return int(json.loads(lines[-1])["sink_stats"]["scores"]) if lines else 0


@claims("`Dockerfile`", "run",
        "built with podman (`deploy/image.sh build`: podman with runc, a base image of Debian "
        "bookworm's Python 3.11 made with mmdebstrap, since no registry can be pulled from "
        "here) and run in CI: `worker`, `sink duckdb` and `serve` as containers on the host "
        "network against the test stack, as uid 10001 with a read-only root file system (a "
        "tmpfs at `/tmp`, a host folder at `/data`); feedback given over REST to the serve "
        "container becomes scores in the topic, rows in the DuckDB file on the mounted folder "
        "and reads back over REST; each container exits 0 on SIGTERM. Cost: the base image "
        "about 1-2 min and the build about 1.5 min on a fresh machine (podman's layer cache "
        "makes a rebuild 15 s), the test 35 s after that")
async def test_the_image_runs_worker_sink_and_serve_as_a_non_root_read_only_container(
    containers: Containers, settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], tmp_path: Path,
) -> None:
    tenant = tenant_factory()
    await append_runs(client_factory().workspace(tenant, "prod", actor=UserActor(id="ada")))
    data = tmp_path / "data"
    data.mkdir()
    shutil.chown(data, int(UID), int(UID))  # the volume starts out owned by the image's user
    port = _free_port()
    worker = containers.run("worker", "worker", "--stats-interval", "1")
    sink = containers.run("sink", "sink", "duckdb", "--path", "/data/scores.duckdb",
                          "--cursor", "warehouse", "--stats-interval", "0.5",
                          volumes={data: "/data"})
    serve = containers.run("serve", "serve", "--port", str(port))
    base = f"http://127.0.0.1:{port}"

    def alive() -> None:
        assert containers.running(serve), containers.logs(serve)

    wait_ready(base, alive, "the serve container to be ready")
    given = await feedback_over_rest(base, settings, tenant)
    scores_of_feedback(settings, tenant, given)

    wait_until(lambda: _stats_scores(containers.logs(sink)) >= SCORES, 180,
               f"{SCORES} scores through the DuckDB sink container")
    for name in (worker, sink, serve):
        assert containers.running(name), containers.logs(name)[-4000:]
        assert containers.inspect(name)["Config"]["User"] == f"{UID}:{UID}"
        podman.runs_as_the_image_user_read_only(name)
    assert containers.stop(sink) == 0, containers.logs(sink)[-4000:]
    import duckdb

    with duckdb.connect(str(data / "scores.duckdb"), read_only=True) as con:
        ids = {row[0] for row in con.execute(
            "select distinct feedback_event_id from scores").fetchall()}
        count = con.execute("select count(*) from scores").fetchone()
    assert ids == set(given) and count == (SCORES,)
    for name in (worker, serve):
        assert containers.stop(name) == 0, containers.logs(name)[-4000:]


@claims("`Dockerfile`", "run",
        "`sink langfuse` without its keys exits non-zero naming `LANGFUSE_PUBLIC_KEY`")
def test_a_container_missing_a_required_setting_exits_naming_it(
    containers: Containers,
) -> None:
    name = containers.run("langfuse", "sink", "langfuse")  # no LANGFUSE_* keys given
    wait_until(lambda: not containers.running(name), 120, "the sink container to exit")
    state = containers.inspect(name)["State"]
    assert state["ExitCode"] != 0
    assert "LANGFUSE_PUBLIC_KEY" in containers.logs(name)
