"""The composition root: every client kind gets the settings' security, and building one
does no network I/O (no broker runs for these tests)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from faust.auth import SASLCredentials, SSLCredentials

from streams.core.events import RunSucceeded
from streams.core.rules import Rule, on, run
from streams.core.tenancy import rulestate_reader_group
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.root import Runtime
from streams.runtime.worker.app import Worker
from streams.settings import Settings
from tests.tls import make_ca

# Rules on a fixed event type: a worker refuses rules on app event types nobody declared.
# Port 9 (discard) on loopback: nothing answers, so any attempt to connect would fail fast.
NOWHERE = "127.0.0.1:9"
SASL = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "ada", "sasl_password": "s3cret"}
LIBRDKAFKA_SASL = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                   "sasl.username": "ada", "sasl.password": "s3cret"}


def sasl_settings(**more: Any) -> Settings:
    return Settings(bootstrap_servers=NOWHERE, schema_registry_url="http://127.0.0.1:9/ccompat",
                    schema_registry_username="reg", schema_registry_password="reg-pw",
                    kafka_extra={"client.id": "probe"}, **SASL, **more)


def carries_sasl(config: dict[str, Any]) -> bool:
    return all(config.get(k) == v for k, v in LIBRDKAFKA_SASL.items()) \
        and config["bootstrap.servers"] == NOWHERE and config["client.id"] == "probe"


def test_every_client_kind_carries_the_sasl_settings() -> None:
    runtime = Runtime(sasl_settings())
    assert carries_sasl(runtime.producer_config())
    assert runtime.producer_config()["enable.idempotence"] is True
    assert carries_sasl(runtime.consumer_config("g"))
    assert runtime.consumer_config("g")["session.timeout.ms"] == 10_000
    assert carries_sasl(runtime.reader_config("r"))
    assert carries_sasl(runtime.admin_config())
    assert carries_sasl(runtime.replay_reader_config("fs.acme.rules"))
    assert runtime.registry_config()["basic.auth.user.info"] == "reg:reg-pw"
    # The real registry client (the serde's) sends the basic auth.
    assert runtime.serde.client is runtime.registry
    assert runtime.registry._rest_client.auth == ("reg", "reg-pw")


def test_the_faust_app_gets_sasl_credentials() -> None:
    worker = Worker(Runtime(sasl_settings()), rules=[Rule(
        name="r", when=on(RunSucceeded).at_most(1, per=timedelta(hours=1)), then=run("a"))],
        actions={"a": _action})
    credentials = worker.app.conf.broker_credentials
    assert isinstance(credentials, SASLCredentials)
    assert (credentials.username, credentials.password) == ("ada", "s3cret")
    assert credentials.mechanism.value == "SCRAM-SHA-512"
    assert credentials.protocol.value == "SASL_PLAINTEXT"
    assert [str(u) for u in worker.app.conf.broker] == [f"kafka://{NOWHERE}"]
    assert worker.app.conf.broker_session_timeout == 10.0


def test_the_deciders_consumers_carry_the_sasl_settings() -> None:
    worker = Worker(Runtime(sasl_settings()), rules=[Rule(
        name="r", when=on(RunSucceeded).at_most(1, per=timedelta(hours=1)), then=run("a"))],
        actions={"a": _action})
    assert worker.decider is not None and worker.decider_loop is not None
    assert worker.decider_loop.group == "fs-rule-decider"
    runtime = worker.runtime
    member = runtime.consumer_config(worker.decider_loop.group)
    replay = runtime.replay_reader_config("fs.acme.rules")
    restore = runtime.reader_config(rulestate_reader_group("fs.acme.rulestate"))
    assert carries_sasl(member) and member["group.id"] == "fs-rule-decider"
    assert carries_sasl(replay) and replay["group.id"] == "fs.acme.rules.rebuild"
    assert carries_sasl(restore) and restore["group.id"] == "fs.acme.rulestate.restore"


def test_tls_reaches_faust_as_an_ssl_context() -> None:
    import ssl

    ca = Path(ssl.get_default_verify_paths().cafile or "")
    if not ca.is_file():
        pytest.skip("no system CA bundle to stand in for a CA file")
    settings = Settings(bootstrap_servers=NOWHERE, security_protocol="SSL",
                        ssl_ca_location=str(ca))
    credentials = Runtime(settings).faust_settings()["broker_credentials"]
    assert isinstance(credentials, SSLCredentials)
    assert Runtime(settings).producer_config()["ssl.ca.location"] == str(ca)
    sasl_ssl = Settings(bootstrap_servers=NOWHERE, ssl_ca_location=str(ca),
                        **{**SASL, "security_protocol": "SASL_SSL"})
    both = Runtime(sasl_ssl).faust_settings()["broker_credentials"]
    assert isinstance(both, SASLCredentials) and both.protocol.value == "SASL_SSL"


def test_building_a_worker_makes_no_client() -> None:
    runtime = Runtime(sasl_settings())
    Worker(runtime, rules=[Rule(name="r", when=on(RunSucceeded), then=run("a"))],
           actions={"a": _action})
    # Only the serde and the codec (no I/O: the registry is asked on first encode or decode)
    # exist; the producer, admin client and the workspace handle's clients wait for `run`.
    assert set(runtime._made) <= {"serde", "registry", "codec"}


def test_one_producer_and_one_serde_are_shared() -> None:
    runtime = Runtime(sasl_settings())
    client = StreamsClient(runtime)
    assert runtime.delivery._producer is runtime.producer
    assert client.log._producer is runtime.producer
    assert client.serde is runtime.serde
    assert runtime.index("acme")._producer is runtime.producer
    runtime.close()
    assert client._closed  # the runtime closes what was built on it


def test_building_a_runtime_and_its_wrappers_makes_no_client() -> None:
    runtime = Runtime(sasl_settings())
    reader = runtime.topic_reader("fs.acme.events")
    runtime.tail("fs._keys", lambda *_a: None)
    StreamsClient(runtime).workspace("acme", "prod")
    assert runtime.admin._client is None and reader._made is None
    assert set(runtime._made) <= {"admin"}
    reader.close()
    runtime.close()


def test_a_client_takes_a_runtime_and_says_so() -> None:
    with pytest.raises(TypeError, match=r"StreamsClient\(Runtime\(settings\)\)"):
        StreamsClient(sasl_settings())  # type: ignore[arg-type]


async def _action(_reaction: Any) -> dict[str, Any]:
    return {}


def test_a_worker_with_rules_shares_one_serde_and_one_producer() -> None:
    runtime = Runtime(sasl_settings())
    worker = Worker(runtime, rules=[Rule(name="r", when=on(RunSucceeded), then=run("a"))],
                    actions={"a": _action})
    assert worker.reactor is not None
    assert worker.step.codec.client is runtime.registry
    assert worker.reactor.records.serde is runtime.serde
    assert worker.reactor.executor.client is worker.client
    assert worker.client.runtime is runtime
    assert worker.reactor.executor.client.serde is runtime.serde
    assert worker.client.log._producer is runtime.delivery._producer
    runtime.close()


def _every_librdkafka_config(runtime: Runtime) -> list[dict[str, Any]]:
    return [runtime.producer_config(), runtime.consumer_config("g"), runtime.reader_config("r"),
            runtime.admin_config(), runtime.replay_reader_config("fs.acme.rules")]


def test_every_tls_setting_reaches_every_client_kind(tmp_path: Path) -> None:
    ca = make_ca(tmp_path, "registry test CA")
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    cert.write_text("cert")
    key.write_text("key")
    settings = Settings(bootstrap_servers=NOWHERE, ssl_ca_location=str(ca),
                        ssl_certificate_location=str(cert), ssl_key_location=str(key),
                        ssl_key_password="kp", ssl_check_hostname=False,
                        schema_registry_url="https://127.0.0.1:9/ccompat",
                        schema_registry_username="reg", schema_registry_password="reg-pw",
                        schema_registry_ca_location=str(ca),
                        **{**SASL, "security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"})
    runtime = Runtime(settings)
    for config in _every_librdkafka_config(runtime):
        assert config["security.protocol"] == "SASL_SSL"
        assert config["sasl.mechanism"] == "PLAIN"
        assert (config["sasl.username"], config["sasl.password"]) == ("ada", "s3cret")
        assert config["ssl.ca.location"] == str(ca)
        assert config["ssl.certificate.location"] == str(cert)
        assert config["ssl.key.location"] == str(key)
        assert config["ssl.key.password"] == "kp"
        assert config["ssl.endpoint.identification.algorithm"] == "none"
    registry = runtime.registry_config()
    assert registry["ssl.ca.location"] == str(ca)
    assert registry["basic.auth.user.info"] == "reg:reg-pw"
    # The real registry client verifies with that CA and sends the basic auth.
    assert runtime.registry._rest_client.auth == ("reg", "reg-pw")
    import ssl
    verify = runtime.registry._rest_client.verify
    assert isinstance(verify, ssl.SSLContext)
    assert {"registry test CA"} == {value for cert in verify.get_ca_certs()
                                    for rdn in cert["subject"] for key, value in rdn
                                    if key == "commonName"}
    without = Runtime(settings.replace(schema_registry_ca_location=None))
    assert "ssl.ca.location" not in without.registry_config()
    with_hostnames = Runtime(settings.replace(ssl_check_hostname=True,
                                              ssl_certificate_location=None,
                                              ssl_key_location=None, ssl_key_password=None))
    for config in _every_librdkafka_config(with_hostnames):
        assert config["ssl.endpoint.identification.algorithm"] == "https"


def test_faust_gets_the_hostname_check_and_the_sasl_mechanism_over_tls(tmp_path: Path) -> None:
    ca = make_ca(tmp_path)
    base = {**SASL, "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256"}
    for check in (True, False):
        settings = Settings(bootstrap_servers=NOWHERE, ssl_ca_location=str(ca),
                            ssl_check_hostname=check, **base)
        credentials = Runtime(settings).faust_settings()["broker_credentials"]
        assert isinstance(credentials, SASLCredentials)
        assert credentials.protocol.value == "SASL_SSL"
        assert credentials.mechanism.value == "SCRAM-SHA-256"
        assert credentials.ssl_context is not None
        assert credentials.ssl_context.check_hostname is check
        # The certificate itself is verified either way.
        import ssl
        assert credentials.ssl_context.verify_mode == ssl.CERT_REQUIRED


def test_a_password_file_reaches_every_client_and_is_read_again(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("first\n")
    settings = Settings(bootstrap_servers=NOWHERE, sasl_password_file=str(secret),
                        **{k: v for k, v in SASL.items() if k != "sasl_password"})
    runtime = Runtime(settings)
    for config in _every_librdkafka_config(runtime):
        assert config["sasl.password"] == "first"
    assert runtime.faust_settings()["broker_credentials"].password == "first"
    # A rotated password reaches the next client built, without a new Settings.
    secret.write_text("second\n")
    assert runtime.producer_config()["sasl.password"] == "second"
    assert runtime.faust_settings()["broker_credentials"].password == "second"


def test_the_broker_probe_is_a_fresh_client_that_says_no_when_nothing_answers() -> None:
    runtime = Runtime(Settings(bootstrap_servers="127.0.0.1:1"))  # nothing listens there
    assert runtime.broker_answers(timeout=0.5) is False
    assert runtime.broker_answers(timeout=0.5) is False  # a new client each time, no state
    assert "admin" not in runtime._made  # the shared admin client is not made for it


@pytest.mark.parametrize("freeze", [True, False])
def test_a_started_process_freezes_its_start_up_heap_unless_told_not_to(
    freeze: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    monkeypatch.setattr("streams.runtime.root.gc.collect", lambda: calls.append("collect"))
    monkeypatch.setattr("streams.runtime.root.gc.freeze", lambda: calls.append("freeze"))
    Runtime(Settings(gc_freeze=freeze)).started()
    assert calls == (["collect", "freeze"] if freeze else [])


class _Admin:
    """An admin client whose metadata call answers, or fails as a wedged client does."""

    made: list[_Admin] = []

    def __init__(self, config: dict[str, Any] | None = None, *, answers: bool = True) -> None:
        self.answers = answers
        self.asked = 0
        _Admin.made.append(self)

    def list_topics(self, timeout: float) -> str:
        self.asked += 1
        if not self.answers:
            raise KafkaException("Failed to get metadata: Local: Broker transport failure")
        return "metadata"


@pytest.mark.parametrize("fresh_answers", [True, False])
def test_readiness_asks_a_fresh_client_before_saying_the_broker_is_down(
    fresh_answers: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    runtime = Runtime(Settings())
    wedged = _Admin(answers=False)
    runtime.admin._client = wedged  # type: ignore[assignment]
    _Admin.made = []
    monkeypatch.setattr("streams.runtime.root.AdminClient",
                        lambda config: _Admin(config, answers=fresh_answers))
    said = runtime.server_checks()["broker"]()
    assert wedged.asked == 1 and len(_Admin.made) == 1 and _Admin.made[0].asked == 1
    if fresh_answers:
        assert said is None  # the broker answers; only the shared client cannot reach it
    else:
        assert said is not None and "does not answer" in said
