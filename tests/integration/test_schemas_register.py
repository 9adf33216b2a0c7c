"""`streams schemas register --types MODULE` registers an application's own feedback types in
the real schema registry, which refuses an incompatible change."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import RegisteredSchema, SchemaRegistryClient
from typer.testing import CliRunner

from streams.settings import Settings
from streams.surfaces.cli.app import app
from tests.surfaces.cli.test_schemas import V1, V2, V3
from tests.user_modules import UserModules, user_modules

runner = CliRunner()


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[UserModules]:
    yield from user_modules(tmp_path, monkeypatch)


def test_register_the_users_types(modules: UserModules, settings: Settings,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCHEMA_REGISTRY_URL", settings.schema_registry_url)
    name = f"helpfulness_{uuid.uuid4().hex[:8]}"
    subject = f"streams.feedback.{name}.FeedbackGiven"

    def latest() -> RegisteredSchema:
        # A new client each time: the client caches a subject's latest version.
        return SchemaRegistryClient({"url": settings.schema_registry_url}) \
            .get_latest_version(subject)

    first = modules.write(V1.format(name=name))
    result = runner.invoke(app, ["schemas", "register", "--types", first])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [subject]  # the user's type, not the project's
    v1 = latest()
    assert [f["name"] for f in json.loads(v1.schema.schema_str)["fields"][-1]["type"]
            ["fields"]] == ["helpful", "tone"]

    modules.unload(first)
    compatible = modules.write(V2.format(name=name))
    result = runner.invoke(app, ["schemas", "register", "--types", compatible])
    assert result.exit_code == 0, result.output
    assert latest().version > v1.version

    modules.unload(compatible)
    breaking = modules.write(V3.format(name=name))
    result = runner.invoke(app, ["schemas", "register", "--types", breaking])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert f"the schema registry refused {subject}" in result.output
    assert "not BACKWARD compatible" in result.output
    assert "stars" not in latest().schema.schema_str
