"""The whole path over deploy/stack.sh's SASL_SSL listener (SCRAM over TLS, the broker's
certificate signed by the stack's CA): give_feedback, the worker's mirror and a sink, each
built from the same settings; and the listener refuses clients that do not trust its CA or
bring no credentials."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from streams.adapters.kafka.admin import TenantAdmin
from streams.core.actors import UserActor
from streams.core.errors import KafkaUnavailable
from streams.core.events import AppEvent, RunStarted
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.root import Runtime
from streams.settings import Settings
from tests.conftest import Stack, WorkerProcess, read_topic, unique, wait_until
from tests.integration.test_duckdb_sink import DuckDBSinkProcess
from tests.tls import make_ca

pytestmark = pytest.mark.timeout(900)


@pytest.fixture
def tls_settings(tls_stack: Stack) -> Settings:
    assert tls_stack.ssl_bootstrap_servers and tls_stack.ca_location
    return Settings(
        bootstrap_servers=tls_stack.ssl_bootstrap_servers,
        schema_registry_url=tls_stack.schema_registry_url, topic_prefix=unique("t"),
        partitions=2, discovery_interval=0.5, security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256", sasl_username="admin",
        sasl_password=os.environ.get("STACK_ADMIN_PASSWORD", "admin-secret"),
        ssl_ca_location=tls_stack.ca_location)


@pytest.fixture
def tls_workers(tls_settings: Settings, tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    made: list[WorkerProcess] = []
    yield made
    for worker in made:
        worker.stop()


async def test_feedback_is_mirrored_and_sunk_over_sasl_ssl(
    tls_settings: Settings, tls_workers: list[WorkerProcess], tmp_path: Path,
) -> None:
    tenant = unique("tls-")
    TenantAdmin(tls_settings).create_tenant(tenant)
    # The worker's Faust app, batch loops and producer speak SASL_SSL: its whole environment
    # is these settings (child_env), no PLAINTEXT listener named anywhere.
    env = tls_settings.child_env(STREAMS_FEEDBACK_MODULES="streams.examples.ops")
    tls_workers.append(WorkerProcess([], env, tmp_path / "worker.log").start())
    client = StreamsClient(Runtime(tls_settings))
    try:
        ws = client.workspace(tenant, "prod", actor=UserActor(id="ada"))
        spike = await ws.append(AppEvent(name="ops:error_spike"))
        await ws.append(RunStarted(run_id="run_t", rule="r", action="a", firing_id="f"),
                        correlation_id=spike.id, causation_id=spike.id)
        given = await ws.give_feedback(TriageQuality(correct=True, severity="low"),
                                       on=RunTarget(run_id="run_t"))
        scores = read_topic(tls_settings, tenant_topics(tenant, tls_settings.topic_prefix)
                            .scores, at_least=2, timeout=180)
    finally:
        client.close()
    assert {record["name"] for _m, record in scores} == {"triage_quality.correct",
                                                         "triage_quality.severity"}
    assert {record["source"]["feedback_event_id"] for _m, record in scores} == {given.id}
    worker = tls_workers[0]
    assert worker.proc is not None and worker.proc.poll() is None, worker.log()[-3000:]

    path = tmp_path / "warehouse.duckdb"
    sink = DuckDBSinkProcess(tls_settings, tmp_path / "sink.log", "--path", str(path),
                             "--cursor", "warehouse")
    try:
        wait_until(lambda: sink.scores() >= 2 or sink.proc.poll() is not None, 180,
                   "the sink over SASL_SSL to hand on both scores")
    finally:
        code = sink.stop()
    assert sink.scores() == 2, sink.log.read_text(errors="replace")[-3000:]
    assert code == 0
    with duckdb.connect(str(path), read_only=True) as con:
        names = {row[0] for row in con.execute("select name from scores").fetchall()}
    assert names == {"triage_quality.correct", "triage_quality.severity"}


def test_a_client_that_does_not_trust_the_ca_is_refused(
    tls_settings: Settings, tmp_path: Path,
) -> None:
    stranger = tls_settings.replace(ssl_ca_location=str(make_ca(tmp_path, "not the stack's")),
                                    admin_timeout=5.0)
    with pytest.raises(KafkaUnavailable):
        TenantAdmin(stranger).tenants()


def test_wrong_credentials_over_tls_are_refused(tls_settings: Settings) -> None:
    wrong = tls_settings.replace(sasl_password="not-the-password", admin_timeout=5.0)
    with pytest.raises(KafkaUnavailable):
        TenantAdmin(wrong).tenants()


def test_mutual_tls_with_the_stacks_client_certificate(tls_settings: Settings) -> None:
    ca = Path(tls_settings.ssl_ca_location or "")
    cert, key = ca.parent / "client.pem", ca.parent / "client.key"
    mutual = tls_settings.replace(ssl_certificate_location=str(cert),
                                  ssl_key_location=str(key))
    tenant = unique("mtls-")
    admin = TenantAdmin(mutual)
    admin.create_tenant(tenant, 1)
    assert tenant in admin.tenants()
    admin.delete_tenant(tenant)
