"""The operator and tenants' principals on the stack's SASL listener, shared by the broker's
and the registry's access tests: the `admin` and `tenants` fixtures (conftest imports them),
`streams ...` run as a settings' principal, and a tenant's first feedback."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from streams.adapters.kafka.access import TenantAccess
from streams.adapters.kafka.admin import TenantAdmin
from streams.core.actors import UserActor
from streams.core.events import AppEvent, RunStarted
from streams.core.targets import RunTarget
from streams.examples.ops import TriageQuality
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.root import Runtime
from streams.settings import Settings
from streams.surfaces.cli.app import app
from tests.conftest import Stack

__all__ = ["admin", "as_user", "cli", "first_feedback", "tenants"]

runner = CliRunner()


@pytest.fixture
def admin(stack: Stack, settings: Settings) -> Settings:
    """The operator: the stack's super user `admin` on the SASL listener."""
    if stack.sasl_bootstrap_servers is None:
        pytest.skip("this stack has no SASL listener (set KAFKA_SASL_PORT)")
    return settings.replace(
        bootstrap_servers=stack.sasl_bootstrap_servers, security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512", sasl_username="admin",
        sasl_password=os.environ.get("STACK_ADMIN_PASSWORD", "admin-secret"),
        feedback_timeout=15.0, admin_timeout=10.0)


@pytest.fixture
def tenants(admin: Settings) -> Iterator[list[str]]:
    """Names a test appends its tenants to: their topics and principals are removed after
    it, also when it failed half-way."""
    made: list[str] = []
    yield made
    for name in made:
        TenantAdmin(admin).delete_tenant(name)
        TenantAccess(admin).delete_principal(name)


def cli(settings: Settings, *args: str) -> list[dict[str, Any]]:
    """Run `streams ...` with these settings; its JSON lines."""
    result = runner.invoke(app, list(args), env=settings.to_env())
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def as_user(admin: Settings, user: str, password: str) -> Settings:
    """The operator's settings with another SCRAM user."""
    return admin.replace(sasl_username=user, sasl_password=password,
                         sasl_mechanism="SCRAM-SHA-256")


async def first_feedback(settings: Settings, tenant: str, run_id: str) -> str:
    """As `settings`' principal: an app event, a run of it, and feedback on the run; the
    feedback's event id."""
    client = StreamsClient(Runtime(settings))
    try:
        ws = client.workspace(tenant, "prod", actor=UserActor(id="ada"))
        spike = await ws.append(AppEvent(name="ops:error_spike"))
        await ws.append(RunStarted(run_id=run_id, rule="r", action="a", firing_id="f"),
                        correlation_id=spike.id, causation_id=spike.id)
        given = await ws.give_feedback(TriageQuality(correct=True, severity="low"),
                                       on=RunTarget(run_id=run_id))
        return given.id
    finally:
        client.close()
