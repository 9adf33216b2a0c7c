"""The registry proxy's gate (checked logins and ACLs kept for a TTL) and its request
handling, with a fake broker check and a fake registry behind it (the real ones:
tests/integration/test_registry_access.py)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator

import httpx
import pytest
from starlette.testclient import TestClient

from streams.core.errors import AccessDenied, KafkaUnavailable
from streams.core.subjects import TopicAcl
from streams.runtime.root import Runtime
from streams.settings import Settings
from streams.surfaces.http.registry import REFUSAL_PAUSE, RegistryGate, registry_proxy_app

PASSWORDS = {"fs.acme": "acme-pw", "fs.globex": "globex-pw", "admin": "admin-pw"}
ACLS = {f"User:fs.{t}": [TopicAcl("PREFIXED", f"fs.{t}.", op) for op in ("READ", "WRITE")]
        for t in ("acme", "globex")}
# The registry behind the proxy: id 1 is acme's, id 2 globex's, id 3 shared.
SUBJECTS = {1: "fs.acme.streams.scores.Score", 2: "fs.globex.streams.scores.Score",
            3: "streams.scores.Score"}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Broker:
    """What the gate asks the broker, counted."""

    def __init__(self) -> None:
        self.logins = 0
        self.acl_reads = 0
        self.down = False

    def authenticate(self, user: str, password: str) -> bool:
        self.logins += 1
        if self.down:
            raise KafkaUnavailable("the broker did not answer")
        return PASSWORDS.get(user) == password

    def acls_of(self, principal: str) -> list[TopicAcl]:
        self.acl_reads += 1
        return ACLS.get(principal, [])


def _gate(broker: Broker, clock: Clock | None = None) -> RegistryGate:
    return RegistryGate(broker.authenticate, broker.acls_of, prefix="fs",
                        operators=("admin",), ttl=60.0, clock=clock or Clock())


def _registry(request: httpx.Request) -> httpx.Response:
    path = request.url.path.removeprefix("/apis/ccompat/v7")
    if path == "/subjects":
        return httpx.Response(200, json=list(SUBJECTS.values()))
    if path.startswith("/schemas/ids/"):
        schema_id = int(path.split("/")[3])
        if schema_id == 4:  # known, but in no version the proxy is told of
            return httpx.Response(200, json=[] if path.endswith("/versions") else
                                  {"schema": '"string"'})
        if schema_id == 5:
            return httpx.Response(500, json={"error_code": 50001, "message": "broken"})
        if schema_id not in SUBJECTS:
            return httpx.Response(404, json={"error_code": 40403, "message": "not found"})
        if path.endswith("/versions"):
            return httpx.Response(200, json=[{"subject": SUBJECTS[schema_id], "version": 1}])
        return httpx.Response(200, json={"schema": '"string"'})
    return httpx.Response(200, json={"path": path, "method": request.method,
                                     "body": request.content.decode()})


@pytest.fixture
def proxy() -> Iterator[Callable[..., TestClient]]:
    made: list[TestClient] = []

    def make(broker: Broker, handler: Callable[[httpx.Request], httpx.Response] = _registry,
             ) -> TestClient:
        runtime = Runtime(Settings(schema_registry_url="http://registry/apis/ccompat/v7"))
        app = registry_proxy_app(runtime, gate=_gate(broker), upstream=lambda: httpx.AsyncClient(
            base_url="http://registry/apis/ccompat/v7/", transport=httpx.MockTransport(handler)))
        client = TestClient(app).__enter__()
        made.append(client)
        return client

    yield make
    for client in made:
        client.__exit__(None, None, None)


def _auth(user: str, password: str | None = None) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password or PASSWORDS[user]}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


async def test_a_checked_login_and_acls_are_kept_for_the_ttl_and_a_refusal_never() -> None:
    broker, clock = Broker(), Clock()
    gate = _gate(broker, clock)
    assert await gate.login("fs.acme", "acme-pw") and await gate.login("fs.acme", "acme-pw")
    assert broker.logins == 1
    assert not await gate.login("fs.acme", "wrong")
    # The same refused password again, within the pause: answered without a broker login.
    assert not await gate.login("fs.acme", "wrong") and broker.logins == 2
    # No lock-out: another password is checked, and a good one opens at once.
    assert not await gate.login("fs.acme", "guess") and broker.logins == 3
    assert await gate.login("fs.globex", "globex-pw") and broker.logins == 4
    clock.now = REFUSAL_PAUSE + 0.1  # the pause is over: the broker is asked again
    assert not await gate.login("fs.acme", "wrong") and broker.logins == 5
    assert await gate.login("fs.acme", "acme-pw") and broker.logins == 5  # still trusted
    clock.now = 61.0  # expired: the broker is asked again (a rotation lands within the TTL)
    assert await gate.login("fs.acme", "acme-pw") and broker.logins == 6
    assert await gate.may("fs.acme", "write", "fs.acme.x")
    assert not await gate.may("fs.acme", "read", "fs.globex.x")
    assert broker.acl_reads == 1
    clock.now = 200.0
    assert await gate.may("fs.acme", "read", "streams.x") and broker.acl_reads == 2
    assert await gate.may("admin", "write", "anything") and broker.acl_reads == 2


def test_requests_without_good_credentials_are_401_with_the_settings_to_fix(
    proxy: Callable[..., TestClient],
) -> None:
    client = proxy(Broker())
    missing = client.get("/subjects")
    assert missing.status_code == 401 and missing.json()["error_code"] == 40101
    assert "SCHEMA_REGISTRY_USERNAME" in missing.json()["message"]
    assert missing.headers["www-authenticate"].startswith("Basic")
    wrong = client.get("/subjects", headers=_auth("fs.acme", "nope"))
    assert wrong.status_code == 401 and "fs.acme" in wrong.json()["message"]
    garbled = client.get("/subjects", headers={"Authorization": "Basic !!!"})
    assert garbled.status_code == 401


def test_a_tenant_sees_its_own_and_shared_subjects_and_ids_only(
    proxy: Callable[..., TestClient],
) -> None:
    client = proxy(Broker())
    acme = _auth("fs.acme")
    assert client.get("/subjects", headers=acme).json() == [
        "fs.acme.streams.scores.Score", "streams.scores.Score"]
    assert client.get("/schemas/ids/1", headers=acme).status_code == 200
    assert client.get("/schemas/ids/3", headers=acme).status_code == 200
    refused = client.get("/schemas/ids/2", headers=acme)
    assert refused.status_code == 403 and refused.json()["error_code"] == 40301
    assert client.get("/schemas/ids/9", headers=acme).status_code == 404  # the registry's
    written = client.post("/subjects/fs.acme.x/versions?normalize=true", headers=acme,
                          json={"schema": "{}"})
    assert written.status_code == 200
    assert written.json() == {"path": "/subjects/fs.acme.x/versions", "method": "POST",
                              "body": json.dumps({"schema": "{}"}, separators=(",", ":"))}
    assert client.post("/subjects/fs.globex.x/versions", headers=acme,
                       json={"schema": "{}"}).status_code == 403
    assert client.get("/schemas", headers=acme).status_code == 403
    assert client.get("/schemas", headers=_auth("admin")).status_code == 200
    assert client.get("/schemas/ids/4", headers=acme).status_code == 403  # closed, not open
    assert client.get("/schemas/ids/5", headers=acme).status_code == 502
    # References name other subjects, which the registry would resolve: operators only.
    referencing = {"schema": "{}", "references": [
        {"name": "x", "subject": "fs.globex.streams.scores.Score", "version": 1}]}
    assert client.post("/subjects/fs.acme.x/versions", headers=acme,
                       json=referencing).status_code == 403
    assert client.post("/subjects/fs.acme.x/versions", headers=_auth("admin"),
                       json=referencing).status_code == 200


def test_a_proxy_user_that_may_not_read_acls_is_a_500_naming_the_fix(
    proxy: Callable[..., TestClient],
) -> None:
    broker = Broker()

    def refused(principal: str) -> list[TopicAcl]:
        raise AccessDenied("the broker refused User:proxy to describe the ACLs")

    broker.acls_of = refused  # type: ignore[method-assign]
    answer = proxy(broker).get("/subjects/fs.acme.x/versions", headers=_auth("fs.acme"))
    assert answer.status_code == 500 and "DESCRIBE on the cluster" in answer.json()["message"]


def test_a_broker_or_registry_that_does_not_answer_is_503_or_502(
    proxy: Callable[..., TestClient],
) -> None:
    broker = Broker()
    broker.down = True
    assert proxy(broker).get("/subjects", headers=_auth("fs.acme")).status_code == 503

    def down(_request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    answer = proxy(Broker(), down).get("/subjects", headers=_auth("fs.acme"))
    assert answer.status_code == 502 and answer.json()["error_code"] == 50201


def test_probes_need_no_credentials_and_readiness_names_what_does_not_answer() -> None:
    # Anyone may ask: the names of the failing checks, never their details (hosts, errors).
    registry_down = {"broker": lambda: None, "registry": lambda: "no answer in 5 s"}
    for checks, status, body in (
            ({"broker": lambda: None, "registry": lambda: None}, 200, {"status": "ready"}),
            (registry_down, 503, {"status": "not ready", "failing": ["registry"]})):
        runtime = Runtime(Settings(schema_registry_url="http://registry/apis/ccompat/v7"))
        app = registry_proxy_app(runtime, gate=_gate(Broker()), checks=checks,
                                 upstream=lambda: httpx.AsyncClient(
                                     base_url="http://registry/apis/ccompat/v7/",
                                     transport=httpx.MockTransport(_registry)))
        with TestClient(app) as client:
            assert client.get("/healthz").json() == {"status": "alive"}
            answer = client.get("/readyz")
            assert (answer.status_code, answer.json()) == (status, body)
            # Everything else still needs credentials.
            assert client.get("/apis/ccompat/v7/subjects").status_code == 401
