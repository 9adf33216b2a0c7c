"""The broker's refusals as AccessDenied, and grants as ACL bindings (no broker)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AclOperation, AclPermissionType, ResourcePatternType

from streams.adapters.kafka.access import bindings, denied
from streams.core.access import tenant_grants
from streams.core.errors import AccessDenied
from streams.settings import Settings

SETTINGS = Settings(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                    sasl_username="fs.acme", sasl_password="pw")


def test_authorization_errors_name_the_principal_the_resource_and_the_fix() -> None:
    for code in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED):
        refused = denied(KafkaError(code), SETTINGS, "write to topic fs.globex.events")
        assert isinstance(refused, AccessDenied)
        message = str(refused)
        assert "User:fs.acme" in message and "write to topic fs.globex.events" in message
        assert "'fs.<its tenant>.'" in message and "KAFKA_SASL_USERNAME" in message
    wrapped = denied(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)),
                     SETTINGS, "read topic t")
    assert isinstance(wrapped, AccessDenied)


def test_authentication_errors_point_at_the_credentials() -> None:
    refused = denied(KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED), SETTINGS, "look up t")
    assert isinstance(refused, AccessDenied)
    assert "KAFKA_SASL_PASSWORD_FILE" in str(refused)


def test_other_errors_are_not_refusals() -> None:
    assert denied(KafkaError(KafkaError._TRANSPORT), SETTINGS, "x") is None
    assert denied(None, SETTINGS, "x") is None


def test_a_grant_is_one_prefixed_allow_binding_per_operation() -> None:
    topic, _group = tenant_grants("acme", "fs")
    made = bindings(topic)
    assert {b.operation for b in made} == {AclOperation.READ, AclOperation.WRITE,
                                           AclOperation.DESCRIBE}
    assert {(b.name, b.resource_pattern_type, b.permission_type, b.principal, b.host)
            for b in made} == {("fs.acme.", ResourcePatternType.PREFIXED,
                                AclPermissionType.ALLOW, "User:fs.acme", "*")}


def test_a_transport_failure_after_a_refused_login_is_an_authentication_refusal() -> None:
    from streams.adapters.kafka.config import producer_config

    settings = SETTINGS.replace(sasl_password="wrong-one", bootstrap_servers="127.0.0.1:9")
    transport = KafkaError(KafkaError._TRANSPORT)
    assert denied(transport, settings, "look up t") is None  # no login refused yet
    # What librdkafka hands a client's error callback when the broker refuses the login.
    producer_config(settings)["error_cb"](
        KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: bad credentials"))
    refused = denied(transport, settings, "look up t")
    assert isinstance(refused, AccessDenied)
    assert "did not authenticate User:fs.acme" in str(refused)
    assert "bad credentials" in str(refused)
    # Other credentials (a rotated password) are not tarred with it.
    assert denied(transport, settings.replace(sasl_password="new-one"), "look up t") is None
