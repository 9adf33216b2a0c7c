"""Tenants' principals and ACLs through the Kafka admin API, and the broker's refusals as
`AccessDenied`.

`TenantAccess(settings)` runs as a super user (the operator's settings): it creates a tenant's
SCRAM user (both SCRAM-SHA-256 and SCRAM-SHA-512 credentials, so clients may use either) and
the prefixed ACLs of `streams.core.access.tenant_grants`, changes its password, removes both,
and grants the service principal `service_grants`. `denied(error, ...)` turns an
authorization or authentication error of any client into an `AccessDenied` saying which
principal was refused what, and what to check.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from streams.adapters.kafka.config import admin_config, authentication_failure, client_config
from streams.core.access import Grant, service_grants, tenant_grants, tenant_principal
from streams.core.errors import AccessDenied, KafkaUnavailable, ValidationFailed
from streams.core.subjects import TopicAcl
from streams.settings import Settings

__all__ = ["AUTHORIZATION_CODES", "PrincipalInfo", "TenantAccess", "authenticates", "bindings",
           "denied", "new_password"]

# Kafka's refusals: the principal may not do this (authorization), or is not who it claims
# (authentication). Neither goes away by retrying.
AUTHORIZATION_CODES = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "group",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "cluster",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "transactional id",
}
AUTHENTICATION_CODES = {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED}
TRANSPORT_CODES = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT}
# SCRAM iterations: Kafka's minimum is 4096; 8192 matches the broker tools' default.
ITERATIONS = 8192
MECHANISMS = (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
# A filter's "any name" / "any host" is None, which the library's stubs do not admit.
_ANY: Any = None


def new_password() -> str:
    """A fresh random password (32 URL-safe characters)."""
    return secrets.token_urlsafe(24)


def _who(settings: Settings) -> str:
    if settings.security_protocol.startswith("SASL_") and settings.sasl_username:
        return f"User:{settings.sasl_username}"
    return f"this client ({settings.security_protocol}, no SASL user)"


def denied(error: KafkaError | KafkaException | Any, settings: Settings,
           what: str) -> AccessDenied | None:
    """An AccessDenied for a broker's refusal of `what` (e.g. "write to topic fs.b.events"),
    or None when `error` is not a refusal."""
    if isinstance(error, KafkaException):
        error = error.args[0]
    if not isinstance(error, KafkaError):
        return None
    code = error.code()
    if code in AUTHORIZATION_CODES:
        return AccessDenied(
            f"the broker refused {_who(settings)} to {what} ({error.name()}): a tenant's "
            f"principal may use only topics and consumer groups named "
            f"'{settings.topic_prefix}.<its tenant>.'; check KAFKA_SASL_USERNAME, or have an "
            "operator grant the ACLs (`streams tenant create`, `streams tenant service-acls`)")
    refusal = error.str() if code in AUTHENTICATION_CODES else None
    if refusal is None and code in TRANSPORT_CODES:
        # The call saw only a failed connection; the client's error callback saw why.
        refusal = authentication_failure(settings)
    if refusal is not None:
        return AccessDenied(
            f"the broker did not authenticate {_who(settings)} to {what} ({refusal}): "
            "check KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD (or KAFKA_SASL_PASSWORD_FILE, e.g. "
            "after a rotation) and KAFKA_SASL_MECHANISM")
    return None


def authenticates(settings: Settings, user: str, password: str, timeout: float) -> bool:
    """Whether the broker accepts `user` and `password` on the settings' SASL listener (with
    their mechanism): a fresh admin client asks for metadata. False as soon as the broker
    refuses them; KafkaUnavailable when it neither accepts nor refuses within `timeout`."""
    if not settings.security_protocol.startswith("SASL_"):
        raise ValidationFailed(
            "credentials can only be checked on a SASL listener: set KAFKA_SECURITY_PROTOCOL "
            "to SASL_PLAINTEXT or SASL_SSL and KAFKA_SASL_MECHANISM to SCRAM-SHA-256/512")
    refused: list[str] = []

    def on_error(error: KafkaError) -> None:
        if error.code() in AUTHENTICATION_CODES:
            refused.append(error.str())

    trial = settings.replace(sasl_username=user, sasl_password=password,
                             sasl_password_file=None)
    client = AdminClient(client_config(trial, on_error=on_error))
    deadline = time.monotonic() + timeout
    while not refused:
        try:
            client.list_topics(timeout=0.25)
            return True
        except KafkaException as exc:
            client.poll(0)  # serves the error callback, where a refusal shows first
            if exc.args[0].code() in AUTHENTICATION_CODES:
                return False
            if time.monotonic() >= deadline:
                raise KafkaUnavailable(
                    f"the broker at {settings.bootstrap_servers} did not answer within "
                    f"{timeout:g} s while checking the credentials of {user}") from exc
    return False


@dataclass(frozen=True)
class PrincipalInfo:
    """A tenant's principal as created: the SCRAM user name and its ACLs."""

    tenant: str
    user: str
    grants: list[Grant]


def bindings(grant: Grant) -> list[AclBinding]:
    """The ACL bindings of a grant: one per operation, allowed from any host."""
    restype = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP,
               "transactional_id": ResourceType.TRANSACTIONAL_ID}[grant.resource]
    return [AclBinding(restype, grant.prefix, ResourcePatternType.PREFIXED, grant.principal,
                       "*", AclOperation[operation], AclPermissionType.ALLOW)
            for operation in grant.operations]


class TenantAccess:
    """Creates, rotates and removes tenants' SCRAM users and their ACLs (needs a super user or
    ALTER on the cluster)."""

    def __init__(self, settings: Settings, timeout: float | None = None) -> None:
        self.settings = settings
        self.timeout = settings.admin_timeout if timeout is None else timeout
        self.client = AdminClient(admin_config(settings))

    def _fail(self, exc: Exception, what: str) -> Exception:
        refused = denied(exc, self.settings, what)
        if refused is not None:
            return refused
        if isinstance(exc, KafkaException) and \
                exc.args[0].code() == KafkaError.SECURITY_DISABLED:
            return KafkaUnavailable(
                f"could not {what}: the cluster has no authorizer or SCRAM support "
                f"({exc.args[0].str()}); run it with one (deploy/stack.sh does), or create the "
                "tenant without a principal (--no-principal)")
        return KafkaUnavailable(f"could not {what}: {exc}")

    def create_principal(self, tenant: str, password: str) -> PrincipalInfo:
        """Create (or reset) the tenant's SCRAM user with `password` and its ACLs.
        Idempotent: ACLs that exist are kept."""
        user = tenant_principal(tenant, self.settings.topic_prefix)
        self.set_password(tenant, password)
        grants = tenant_grants(tenant, self.settings.topic_prefix)
        self._create_acls(grants, f"grant {user} its ACLs")
        return PrincipalInfo(tenant, user, grants)

    def set_password(self, tenant: str, password: str) -> str:
        """Set (or rotate) the tenant's SCRAM password; returns the user name. Connections
        already authenticated stay up; new ones need the new password."""
        user = tenant_principal(tenant, self.settings.topic_prefix)
        self.set_user_password(user, password)
        return user

    def set_user_password(self, user: str, password: str) -> None:
        """Create or reset any SCRAM user (e.g. the service's) with both mechanisms."""
        if not password:
            raise ValidationFailed("an empty password: give one, or let one be generated")
        try:
            # One request per mechanism: the broker refuses two changes of a user in one.
            for mechanism in MECHANISMS:
                upsert: Any = UserScramCredentialUpsertion(
                    user, ScramCredentialInfo(mechanism, ITERATIONS), password.encode())
                for future in self.client.alter_user_scram_credentials(
                        [upsert], request_timeout=self.timeout).values():
                    future.result()
        except KafkaException as exc:
            raise self._fail(exc, f"set the password of {user}") from exc

    def has_principal(self, tenant: str) -> bool:
        """Whether the tenant's SCRAM user exists."""
        user = tenant_principal(tenant, self.settings.topic_prefix)
        try:
            found = self.client.describe_user_scram_credentials(
                [user], request_timeout=self.timeout)
            futures = found.values() if isinstance(found, dict) else [found]
            for future in futures:
                future.result()
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.RESOURCE_NOT_FOUND:
                return False
            raise self._fail(exc, f"describe {user}") from exc
        return True

    def delete_principal(self, tenant: str) -> None:
        """Remove the tenant's SCRAM user and every ACL of its principal. Idempotent."""
        user = tenant_principal(tenant, self.settings.topic_prefix)
        self.delete_user(user)
        self.revoke(f"User:{user}")

    def delete_user(self, user: str) -> None:
        """Remove a SCRAM user's credentials (both mechanisms). Idempotent."""
        try:
            for mechanism in MECHANISMS:
                deletion: Any = UserScramCredentialDeletion(user, mechanism)
                for future in self.client.alter_user_scram_credentials(
                        [deletion], request_timeout=self.timeout).values():
                    try:
                        future.result()
                    except KafkaException as exc:
                        if exc.args[0].code() != KafkaError.RESOURCE_NOT_FOUND:
                            raise
        except KafkaException as exc:
            raise self._fail(exc, f"delete the user {user}") from exc

    def grant_service(self, user: str) -> list[Grant]:
        """Give the service principal `User:<user>` the ACLs workers and sinks need."""
        grants = service_grants(user, self.settings.topic_prefix)
        self._create_acls(grants, f"grant User:{user} the service ACLs")
        return grants

    def revoke(self, principal: str) -> None:
        """Delete every ACL of `principal` (e.g. `User:fs.acme`)."""
        everything = AclBindingFilter(ResourceType.ANY, _ANY, ResourcePatternType.ANY,
                                      principal, _ANY, AclOperation.ANY, AclPermissionType.ANY)
        try:
            for future in self.client.delete_acls(
                    [everything], request_timeout=self.timeout).values():
                future.result()
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.SECURITY_DISABLED:
                return  # no authorizer: no ACLs to remove
            raise self._fail(exc, f"delete the ACLs of {principal}") from exc

    def _describe(self, principal: str, resource: ResourceType) -> list[Any]:
        # Any: the library's stubs type a binding's fields as unions with str and int.
        query = AclBindingFilter(resource, _ANY, ResourcePatternType.ANY, principal,
                                 _ANY, AclOperation.ANY, AclPermissionType.ANY)
        try:
            found: list[Any] = self.client.describe_acls(
                query, request_timeout=self.timeout).result()
        except KafkaException as exc:
            raise self._fail(exc, f"describe the ACLs of {principal}") from exc
        return found

    def acls(self, principal: str) -> set[tuple[str, str, str, str]]:
        """(resource type, prefix, pattern type, operation) of each ACL of `principal`."""
        return {(b.restype.name, b.name, b.resource_pattern_type.name, b.operation.name)
                for b in self._describe(principal, ResourceType.ANY)}

    def topic_acls(self, principal: str) -> list[TopicAcl]:
        """Every topic ACL that applies to `principal` (e.g. `User:fs.acme`), its own and
        those of every user (`User:*`), allowing or denying."""
        found = self._describe(principal, ResourceType.TOPIC)
        if principal != "User:*":
            found += self._describe("User:*", ResourceType.TOPIC)
        return [TopicAcl("PREFIXED" if b.resource_pattern_type == ResourcePatternType.PREFIXED
                         else "LITERAL", b.name, b.operation.name,
                         b.permission_type == AclPermissionType.ALLOW)
                for b in found]

    def _create_acls(self, grants: list[Grant], what: str) -> None:
        wanted = [binding for grant in grants for binding in bindings(grant)]
        try:
            for future in self.client.create_acls(
                    wanted, request_timeout=self.timeout).values():
                future.result()
        except KafkaException as exc:
            raise self._fail(exc, what) from exc
