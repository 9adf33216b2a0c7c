"""docker-compose.yml's services from the project's image, checked without Docker (the
project's machine has none, so `docker compose config` cannot run): the worker, the sinks and
the API are there, run from the image with commands the CLI has (tests/deploy/test_image.py
runs each with --help), reach the broker and registry at the addresses those services give
containers, make valid Settings, and publish on 127.0.0.1 only."""

from __future__ import annotations

import re
from typing import Any

import pytest

from streams.settings import Settings
from tests.deploy.manifests import compose, compose_image_services, image_commands
from tests.deploy.matrix import claims

INTERPOLATION = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def interpolate(value: Any) -> str:
    """A value as `docker compose` sees it with no variable set: `${X:-d}` is `d`."""
    return INTERPOLATION.sub(lambda m: m.group(2) or "", str(value))


def env(service: dict[str, Any]) -> dict[str, str]:
    return {k: interpolate(v) for k, v in service["environment"].items()}


SERVICES = compose_image_services()


@claims("`docker-compose.yml`", "validated",
        "parsed: worker, sinks and API run from the image with their commands")
def test_worker_sinks_and_api_run_from_the_image() -> None:
    assert set(SERVICES) == {"worker", "sink-duckdb", "sink-langfuse", "serve", "calibration"}
    commands = image_commands()
    assert commands["compose:worker"][0] == "worker"
    assert commands["compose:sink-duckdb"][:2] == ["sink", "duckdb"]
    assert commands["compose:sink-langfuse"][:2] == ["sink", "langfuse"]
    assert commands["compose:serve"] == ["serve"]
    assert commands["compose:calibration"][:2] == ["calibration", "follow"]
    for name, svc in SERVICES.items():
        assert svc["build"] == ".", name
        assert interpolate(svc["image"]) == "feedback-streams:dev", name
        assert svc["read_only"] is True and "/tmp" in svc["tmpfs"], name
        assert svc["cap_drop"] == ["ALL"], name
        assert svc["depends_on"]["kafka"]["condition"] == "service_healthy", name
    # The Langfuse sink needs credentials, so it starts only when asked for.
    assert SERVICES["sink-langfuse"]["profiles"] == ["langfuse"]


@claims("`docker-compose.yml`", "validated",
        "each service's settings are valid and reach the `kafka` and `registry` services")
@pytest.mark.parametrize("name", sorted(SERVICES))
def test_each_service_reaches_the_broker_and_registry_containers(name: str) -> None:
    services = compose()["services"]
    kafka = services["kafka"]["environment"]
    advertised = dict(listener.split("://", 1)
                      for listener in kafka["KAFKA_ADVERTISED_LISTENERS"].split(","))
    settings = Settings.from_env(env(SERVICES[name]))
    # The listener advertised to other containers, in plain text as the protocol map says.
    assert settings.bootstrap_servers == advertised["INTERNAL"]
    assert "INTERNAL:PLAINTEXT" in kafka["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]
    assert settings.security_protocol == "PLAINTEXT"
    registry_port = services["registry"]["ports"][0].rsplit(":", 1)[1]
    assert settings.schema_registry_url == f"http://registry:{registry_port}/apis/ccompat/v7"


@claims("`docker-compose.yml`", "validated",
        "loopback-only published ports")
def test_only_loopback_ports_are_published_and_the_api_port_is_its_setting() -> None:
    for name, svc in compose()["services"].items():
        for port in svc.get("ports", []):
            assert interpolate(port).startswith("127.0.0.1:"), (name, port)
    serve = SERVICES["serve"]
    (published,) = serve["ports"]
    assert interpolate(published).rsplit(":", 1)[1] == env(serve)["STREAMS_SERVE_PORT"]
    check = " ".join(serve["healthcheck"]["test"])
    assert f"http://127.0.0.1:{env(serve)['STREAMS_SERVE_PORT']}/readyz" in check


@claims("`docker-compose.yml`", "validated",
        "the DuckDB file on a volume")
def test_the_duckdb_file_is_on_a_volume() -> None:
    svc = SERVICES["sink-duckdb"]
    args = svc["command"]
    path = args[args.index("--path") + 1]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in svc["volumes"]}
    assert any(path.startswith(target + "/") for target in mounts), (path, mounts)
    assert set(mounts.values()) <= set(compose()["volumes"])
