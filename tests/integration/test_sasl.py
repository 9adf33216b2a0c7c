"""The whole path over the stack's SASL/SCRAM listener: every client (admin, the workspace
handle's producer and readers, the worker's Faust app and producer, the registry) is built
from the same settings, and the SASL port speaks nothing else."""

from collections.abc import Callable
from typing import Any

import pytest

from streams.adapters.kafka.admin import TenantAdmin
from streams.core.actors import UserActor
from streams.core.events import AppEvent, RunStarted
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.root import Runtime
from streams.settings import Settings
from tests.conftest import WorkerProcess, read_topic, unique

SECURITY = ("KAFKA_BOOTSTRAP_SERVERS", "KAFKA_SECURITY_PROTOCOL", "KAFKA_SASL_MECHANISM",
            "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD")


@pytest.fixture
def sasl_settings(admin: Settings, settings: Settings) -> Settings:
    """The operator on the SASL listener, with the session's own timeouts."""
    return admin.replace(feedback_timeout=settings.feedback_timeout,
                         admin_timeout=settings.admin_timeout)


async def test_feedback_is_mirrored_over_sasl(
    sasl_settings: Settings, worker_factory: Callable[..., WorkerProcess],
) -> None:
    tenant = unique("sasl-")
    TenantAdmin(sasl_settings).create_tenant(tenant)
    env = sasl_settings.to_env()
    worker = worker_factory(**{name: env[name] for name in SECURITY})
    client = StreamsClient(Runtime(sasl_settings))
    try:
        ws = client.workspace(tenant, "prod", actor=UserActor(id="ada"))
        spike = await ws.append(AppEvent(name="ops:error_spike"))
        await ws.append(RunStarted(run_id="run_s", rule="r", action="a", firing_id="f"),
                        correlation_id=spike.id, causation_id=spike.id)
        given = await ws.give_feedback(TriageQuality(correct=True, severity="low"),
                                       on=RunTarget(run_id="run_s"))
        scores = read_topic(sasl_settings, tenant_topics(tenant, sasl_settings.topic_prefix)
                            .scores, at_least=2, timeout=120)
    finally:
        client.close()
    records: list[dict[str, Any]] = [record for _msg, record in scores]
    assert {r["name"] for r in records} == {"triage_quality.correct",
                                            "triage_quality.severity"}
    assert {r["source"]["feedback_event_id"] for r in records} == {given.id}
    assert worker.proc is not None and worker.proc.poll() is None


def test_the_sasl_port_refuses_a_client_without_credentials(
    sasl_settings: Settings,
) -> None:
    from streams.core.errors import KafkaUnavailable

    plain = Settings(bootstrap_servers=sasl_settings.bootstrap_servers, admin_timeout=3.0)
    with pytest.raises(KafkaUnavailable):
        TenantAdmin(plain).tenants()
