"""configure_telemetry's choices that need no exporter installed: bad arguments and settings
are ConfigErrors naming what to set, a tenant without a project gets no Langfuse client and a
warning. (Exporting spans to each tenant's project: tests/integration/test_end_to_end.py, in
processes of their own, since a tracer provider is installed once per process.)"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from streams.core.errors import ConfigError
from streams.runtime.client.telemetry import configure_telemetry
from streams.settings import Settings


def settings(**fields: Any) -> Settings:
    return Settings(bootstrap_servers="127.0.0.1:1", **fields)


def test_an_unknown_use_is_refused_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match=r'"traces".*"scores".*None'):
        configure_telemetry("app", langfuse="spans", settings=settings())  # type: ignore[arg-type]


def test_langfuse_without_keys_names_the_settings() -> None:
    with pytest.raises(ConfigError, match="LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY"):
        configure_telemetry("app", langfuse="scores", settings=settings())


def test_a_projects_file_needs_a_tenant(tmp_path: Path) -> None:
    path = tmp_path / "projects.json"
    path.write_text(json.dumps({"acme": {"public_key": "pk", "secret_key": "sk"}}))
    with pytest.raises(ConfigError, match="name the tenant"):
        configure_telemetry("app", langfuse="scores",
                            settings=settings(langfuse_projects=str(path)))


def test_a_tenant_without_a_project_gets_no_client_and_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "projects.json"
    path.write_text(json.dumps({"acme": {"public_key": "pk", "secret_key": "sk"}}))
    with caplog.at_level(logging.WARNING, logger="streams.runtime.client.telemetry"):
        made = configure_telemetry("app", tenant="beta", langfuse="traces",
                                   settings=settings(langfuse_projects=str(path)))
    assert made.langfuse is None and made.destinations == () and made.provider is None
    assert "tenant 'beta' has no Langfuse project in STREAMS_LANGFUSE_PROJECTS" in caplog.text


def test_scores_only_installs_no_exporter_and_gives_the_projects_client(tmp_path: Path) -> None:
    path = tmp_path / "projects.json"
    path.write_text(json.dumps({"acme": {"public_key": "pk-acme", "secret_key": "sk",
                                         "host": "http://127.0.0.1:9"}}))
    made = configure_telemetry("app", tenant="acme", langfuse="scores",
                               settings=settings(langfuse_projects=str(path)))
    try:
        assert made.provider is None and made.destinations == ()
        assert made.langfuse is not None
    finally:
        made.shutdown()
