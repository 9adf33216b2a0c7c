"""The schema registry closed per tenant, on the stack's registry and SASL listener:
`streams registry-proxy` checks each request's broker credentials with the broker and
authorizes subjects by the principal's topic ACLs (streams.core.subjects). Tested like the
broker's ACLs (test_tenant_access.py): a tenant's principal uses its own subjects, reads the
shared ones, and gets nothing of another tenant's; bad credentials are one typed error."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from streams.adapters.avro.schemas import event_schemas, score_schema
from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.access import TenantAccess
from streams.core.errors import AccessDenied
from streams.core.events import AppEvent, Envelope
from streams.core.subjects import subject_of
from streams.core.tenancy import tenant_topics
from streams.runtime.root import Runtime
from streams.settings import Settings
from tests.conftest import REPO, WorkerProcess, read_topic, unique, wait_until
from tests.deploy.matrix import claims
from tests.integration.conftest import free_port
from tests.integration.principals import as_user, cli, first_feedback

pytestmark = pytest.mark.timeout(600)

TTL = 2.0  # seconds the proxy trusts a checked password: short, to see a rotation land


@pytest.fixture
def proxy(admin: Settings, tmp_path: Path) -> Iterator[str]:
    """`streams registry-proxy` as the operator, in front of the stack's registry."""
    port = free_port()
    log = tmp_path / "proxy.log"
    env = admin.replace(registry_proxy_port=port, registry_auth_ttl=TTL).child_env()
    proc = subprocess.Popen([sys.executable, "-m", "streams", "registry-proxy"], env=env,
                            stdout=log.open("ab"), stderr=subprocess.STDOUT, cwd=REPO)
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        assert proc.poll() is None, log.read_text(errors="replace")
        try:
            return httpx.get(f"{url}/subjects", timeout=1.0).status_code == 401
        except httpx.HTTPError:
            return False

    try:
        wait_until(answers, 60, "the registry proxy to answer")
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def through(settings: Settings, proxy: str, user: str | None, password: str | None) -> Settings:
    """`settings` with the registry reached through the proxy with these credentials."""
    return settings.replace(schema_registry_url=proxy, schema_registry_username=user,
                            schema_registry_password=password)


def _envelope(tenant: str) -> Envelope:
    return Envelope.new(AppEvent(name="ops:error_spike", data={"errors": 3}),
                        tenant=tenant, workspace="prod")


@claims("`streams registry-proxy`", "run",
        "in front of the stack's registry, broker SCRAM logins: a tenant's principal uses its "
        "own subjects and reads shared ones, and nothing of another tenant's")
def test_a_tenants_principal_uses_its_own_subjects_reads_shared_ones_and_nothing_else(
    admin: Settings, tenants: list[str], proxy: str,
) -> None:
    a, b = unique("a-"), unique("b-")
    tenants += [a, b]
    [made_a] = cli(admin, "tenant", "create", a)
    [made_b] = cli(admin, "tenant", "create", b)
    alice = through(as_user(admin, made_a["user"], made_a["password"]), proxy,
                    made_a["user"], made_a["password"])
    bob = through(as_user(admin, made_b["user"], made_b["password"]), proxy,
                  made_b["user"], made_b["password"])
    operator = through(admin, proxy, "admin", admin.sasl_password)
    events_a, events_b = tenant_topics(a, admin.topic_prefix).events, \
        tenant_topics(b, admin.topic_prefix).events

    # Its own: a record on A's topic registers A's subject and decodes back.
    as_a = AvroSerde(alice, prefix=admin.topic_prefix)
    data_a = as_a.encode_envelope(_envelope(a), events_a)
    assert as_a.decode(data_a, events_a)["name"] == "ops:error_spike"
    own = subject_of(events_a, "streams.events.AppEvent", admin.topic_prefix)
    assert own == f"{admin.topic_prefix}.{a}.streams.events.AppEvent"
    assert own in as_a.client.get_subjects()

    # Shared: what an operator registered under a full name, every tenant may read.
    [shared] = AvroSerde(operator).register_schemas({"streams.scores.Score": score_schema()})
    as_b = AvroSerde(bob, prefix=admin.topic_prefix)
    assert as_b.client.get_latest_version(shared).subject == shared

    # Another tenant's: not listed, not readable by subject or by id, not registrable.
    listed = as_b.client.get_subjects()
    assert shared in listed and not any(s.startswith(f"{admin.topic_prefix}.{a}.")
                                        for s in listed)
    with pytest.raises(AccessDenied, match=r"may not read schema id .*SCHEMA_REGISTRY_USER"):
        as_b.decode(data_a, events_a)
    with pytest.raises(AccessDenied, match=f"may not write subject {own}"):
        as_b.register_schemas({"streams.events.AppEvent": event_schemas()["app_event"]},
                              tenant=a)
    with httpx.Client(base_url=proxy, auth=(made_b["user"], made_b["password"])) as http:
        assert http.get(f"/subjects/{own}/versions/latest").status_code == 403
        assert http.post(f"/subjects/{own}", json={"schema": "{}"}).status_code == 403
        assert http.get("/schemas").status_code == 403  # operators only
        assert http.get("/schemas/types").status_code == 200
    data_b = as_b.encode_envelope(_envelope(b), events_b)
    with pytest.raises(AccessDenied):
        AvroSerde(alice, prefix=admin.topic_prefix).decode(data_b, events_b)


@claims("`streams registry-proxy`", "run",
        "missing or wrong credentials are one `AccessDenied` naming the settings; a rotated "
        "password is refused after the TTL")
def test_missing_or_wrong_registry_credentials_are_one_typed_error_naming_the_settings(
    admin: Settings, tenants: list[str], proxy: str,
) -> None:
    a = unique("a-")
    tenants.append(a)
    [made] = cli(admin, "tenant", "create", a)
    events = tenant_topics(a, admin.topic_prefix).events
    base = as_user(admin, made["user"], made["password"])
    for user, password in ((None, None), (made["user"], "not-the-password")):
        serde = AvroSerde(through(base, proxy, user, password), prefix=admin.topic_prefix)
        with pytest.raises(AccessDenied, match=r"did not accept the credentials.*"
                           r"SCHEMA_REGISTRY_USERNAME and SCHEMA_REGISTRY_PASSWORD"):
            serde.encode_envelope(_envelope(a), events)

    # A rotated password stops opening the registry once the proxy's trust expires.
    good = AvroSerde(through(base, proxy, made["user"], made["password"]),
                     prefix=admin.topic_prefix)
    good.encode_envelope(_envelope(a), events)
    [rotated] = cli(admin, "tenant", "rotate-password", a)
    time.sleep(TTL + 0.5)
    stale = AvroSerde(through(base, proxy, made["user"], made["password"]),
                      prefix=admin.topic_prefix)
    with pytest.raises(AccessDenied, match="did not accept the credentials"):
        stale.encode_envelope(_envelope(a), events)
    fresh = AvroSerde(through(base, proxy, made["user"], rotated["password"]),
                      prefix=admin.topic_prefix)
    fresh.encode_envelope(_envelope(a), events)


@claims("`streams registry-proxy`", "run",
        "a worker as the service principal and a tenant's client through it: feedback becomes "
        "scores")
async def test_a_tenant_and_the_service_run_the_pipeline_through_the_proxy(
    admin: Settings, tenants: list[str], proxy: str, tmp_path: Path,
) -> None:
    service = unique("svc-")
    access = TenantAccess(admin)
    cli(admin, "tenant", "service-acls", service, "--password-file",
        str(_write(tmp_path / "svc", "service-secret")))
    try:
        svc = through(admin.replace(sasl_username=service, sasl_password="service-secret"),
                      proxy, service, "service-secret")
        worker = WorkerProcess([], svc.child_env(STREAMS_FEEDBACK_MODULES="streams.examples.ops"),
                               tmp_path / "worker.log").start()
        try:
            a = unique("a-")
            tenants.append(a)
            [made] = cli(admin, "tenant", "create", a)
            alice = through(as_user(admin, made["user"], made["password"]), proxy,
                            made["user"], made["password"])
            given = await first_feedback(alice, a, "r1")
            scores = tenant_topics(a, admin.topic_prefix).scores
            found = read_topic(admin, scores, at_least=2, timeout=120)
            assert {r["source"]["feedback_event_id"] for _m, r in found} == {given}
            assert worker.proc is not None and worker.proc.poll() is None, worker.log()[-3000:]
            # The service registered the scores under A's subject, which A may read back.
            subjects = Runtime(alice).registry.get_subjects()
            assert f"{admin.topic_prefix}.{a}.streams.scores.Score" in subjects
            assert any(s.startswith(f"{admin.topic_prefix}.{a}.streams.feedback.")
                       for s in subjects), subjects
            assert "AccessDenied" not in worker.log(), worker.log()[-3000:]
        finally:
            worker.stop()
    finally:
        access.revoke(f"User:{service}")
        access.delete_user(service)


def _write(path: Path, text: str) -> Path:
    path.write_text(text + "\n")
    return path

