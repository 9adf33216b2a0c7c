"""Tenant isolation enforced by the broker, on the stack's SASL listener (its authorizer
allows nothing without an ACL): `streams tenant create` makes each tenant a SCRAM user whose
ACLs cover its own topics and groups only; a worker runs as the service principal
(`streams tenant service-acls`); rotating a tenant's password needs no worker restart;
`streams tenant delete` removes topics, user and ACLs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from streams.adapters.kafka.access import TenantAccess, denied
from streams.adapters.kafka.admin import TenantAdmin
from streams.adapters.kafka.config import consumer_config, reader_config
from streams.adapters.kafka.log import TopicReader
from streams.core.actors import UserActor
from streams.core.errors import AccessDenied, StreamsError
from streams.core.events import AppEvent
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.root import Runtime
from streams.settings import Settings
from tests.conftest import WorkerProcess, read_topic, unique, wait_until
from tests.integration.principals import as_user, cli, first_feedback

pytestmark = pytest.mark.timeout(600)


def _join(settings: Settings, group: str, topic: str) -> Any:
    """Join `group` on `topic`: the first record, or the error the broker answered."""
    consumer = Consumer(consumer_config(settings, group))
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                return msg.error() or msg
        return None
    finally:
        consumer.close()


async def test_a_tenants_principal_uses_its_own_resources_and_nothing_of_another(
    admin: Settings, tenants: list[str],
) -> None:
    a, b = unique("a-"), unique("b-")
    tenants += [a, b]
    [made_a] = cli(admin, "tenant", "create", a)  # SASL settings: a principal by default
    [_made_b] = cli(admin, "tenant", "create", b)
    assert made_a["user"] == f"{admin.topic_prefix}.{a}" and len(made_a["password"]) >= 24
    alice = as_user(admin, made_a["user"], made_a["password"])
    topics_a, topics_b = (tenant_topics(t, admin.topic_prefix) for t in (a, b))

    # Its own: give feedback (appends, index look-ups), read it back, join its own group.
    await first_feedback(alice, a, "run_a")
    client = StreamsClient(Runtime(alice))
    try:
        envelopes = await client.workspace(a, "prod").read()
        assert len(envelopes) == 3
        # Another tenant's topic: write and read are refused with a clear message.
        with pytest.raises(AccessDenied, match=f"refused User:{made_a['user']} to describe "
                           f"topic {topics_b.events}"):
            await client.workspace(b, "prod").append(AppEvent(name="ops:error_spike"))
    finally:
        client.close()
    own = _join(alice, f"{admin.topic_prefix}.{a}.analytics", topics_a.events)
    assert own is not None and not own.error(), own

    reader = TopicReader(alice, topics_b.events)
    with pytest.raises(AccessDenied, match=f"describe topic {topics_b.events}.*"
                       "TOPIC_AUTHORIZATION_FAILED"):
        list(reader.read_to_end())

    # Describe: B's topics are not even listed, and asking for one is refused.
    assert TenantAdmin(alice).tenants() == [a]
    probe = Consumer(reader_config(alice, f"{admin.topic_prefix}.{a}.probe"))
    try:
        info = probe.list_topics(topics_b.events, timeout=10).topics[topics_b.events]
    finally:
        probe.close()
    refused = denied(info.error, alice, f"describe topic {topics_b.events}")
    assert isinstance(refused, AccessDenied) and "TOPIC_AUTHORIZATION_FAILED" in str(refused)

    # Join B's group (even on A's own topic): the group coordinator refuses.
    error = _join(alice, f"{admin.topic_prefix}.{b}.analytics", topics_a.events)
    refused = denied(error, alice, f"join group {admin.topic_prefix}.{b}.analytics")
    assert isinstance(refused, AccessDenied), error
    assert "GROUP_AUTHORIZATION_FAILED" in str(refused)

    # Nor may it create topics, even under its own prefix.
    with pytest.raises(StreamsError):
        TenantAdmin(alice).ensure_rules_topic(f"{a}x")


async def test_rotation_needs_no_worker_restart_and_delete_removes_everything(
    admin: Settings, tenants: list[str], tmp_path: Path,
) -> None:
    service = unique("svc-")
    service_pw = tmp_path / "service-password"
    service_pw.write_text("service-secret\n")
    cli(admin, "tenant", "service-acls", service, "--password-file", str(service_pw))
    try:
        a = unique("a-")
        tenants.append(a)
        [made] = cli(admin, "tenant", "create", a)
        # The worker runs as the service principal, its password read from a file.
        svc = admin.replace(sasl_username=service, sasl_password=None,
                            sasl_password_file=str(service_pw))
        worker = WorkerProcess([], svc.child_env(STREAMS_FEEDBACK_MODULES="streams.examples.ops"),
                               tmp_path / "worker.log").start()
        try:
            scores = tenant_topics(a, admin.topic_prefix).scores
            first = await first_feedback(as_user(admin, made["user"], made["password"]), a, "r1")
            read_topic(admin, scores, at_least=2, timeout=120)

            [rotated] = cli(admin, "tenant", "rotate-password", a)
            assert rotated["password"] != made["password"]
            old = as_user(admin, made["user"], made["password"])
            with pytest.raises(AccessDenied, match="did not authenticate"):
                await first_feedback(old, a, "r2")
            # The new password, from a file, as an application would be given it.
            secret = tmp_path / "tenant-password"
            secret.write_text(rotated["password"] + "\n")
            new = admin.replace(sasl_username=made["user"], sasl_password=None,
                                sasl_password_file=str(secret))
            second = await first_feedback(new, a, "r3")
            found = read_topic(admin, scores, at_least=4, timeout=120)
            assert {r["source"]["feedback_event_id"] for _m, r in found} == {first, second}
            assert worker.proc is not None and worker.proc.poll() is None, worker.log()[-3000:]
        finally:
            worker.stop()

        cli(admin, "tenant", "delete", a)
        access = TenantAccess(admin)
        assert not access.has_principal(a)
        assert access.acls(f"User:{made['user']}") == set()
        assert a not in TenantAdmin(admin).tenants()
        with pytest.raises(AccessDenied, match="did not authenticate"):
            await first_feedback(new, a, "r4")
    finally:
        access = TenantAccess(admin)
        access.revoke(f"User:{service}")
        access.delete_user(service)


async def test_the_service_acls_suffice_for_a_worker_with_rules_and_a_sink(
    admin: Settings, tenants: list[str], tmp_path: Path,
) -> None:
    from streams.core.events import RunSucceeded
    from tests.integration.test_duckdb_sink import DuckDBSinkProcess

    service = unique("svc-")
    cli(admin, "tenant", "service-acls", service, "--password-file",
        str(_write(tmp_path / "svc", "service-secret")))
    svc = admin.replace(sasl_username=service, sasl_password="service-secret")
    worker = WorkerProcess(["--rules", "streams.examples.ops_rules"], svc.child_env(
        STREAMS_FEEDBACK_MODULES="streams.examples.ops,streams.core.judges"),
        tmp_path / "worker.log").start()
    sink: DuckDBSinkProcess | None = None
    try:
        a = unique("a-")
        tenants.append(a)
        [made] = cli(admin, "tenant", "create", a)
        alice = as_user(admin, made["user"], made["password"])
        client = StreamsClient(Runtime(alice))
        try:
            ws = client.workspace(a, "prod", actor=UserActor(id="ada"))
            for _ in range(3):  # ops:error-spike fires on the third spike (a counting rule)
                await ws.append(AppEvent(name="ops:error_spike",
                                         data={"service": "api", "errors": 5}))
            deadline = time.monotonic() + 120
            runs: list[Any] = []
            while not runs and time.monotonic() < deadline:
                runs = [e for e in await ws.read() if isinstance(e.event, RunSucceeded)]
                await asyncio.sleep(0.5)
            assert runs, worker.log()[-4000:]
            run_id = runs[0].event.run_id
            await ws.give_feedback(TriageQuality(correct=True, severity="low"),
                                   on=RunTarget(run_id=run_id))
        finally:
            client.close()
        sink = DuckDBSinkProcess(svc, tmp_path / "sink.log", "--path",
                                 str(tmp_path / "w.duckdb"), "--cursor", "warehouse")
        running = sink
        wait_until(lambda: running.scores() >= 2 or running.proc.poll() is not None, 120,
                   "the sink as the service principal to hand on the scores")
        assert sink.scores() >= 2, sink.log.read_text(errors="replace")[-3000:]
        assert worker.proc is not None and worker.proc.poll() is None
        assert "AUTHORIZATION" not in worker.log().upper(), worker.log()[-4000:]
    finally:
        if sink is not None:
            sink.stop()
        worker.stop()
        access = TenantAccess(admin)
        access.revoke(f"User:{service}")
        access.delete_user(service)


def _write(path: Path, text: str) -> Path:
    path.write_text(text + "\n")
    return path
