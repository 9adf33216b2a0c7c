"""Who may do what on the broker: the tenants' principals and the service principal, as data.

Tenant isolation is enforced by the broker's authorizer, not by the clients: each tenant gets
a SCRAM user, `<prefix>.<tenant>` (tenant names have no dots, so the name parses back), whose
ACLs allow only its own topics and consumer groups, both named with the prefix
`<prefix>.<tenant>.`:

    topic  PREFIXED  fs.acme.   READ, WRITE, DESCRIBE    produce and consume its topics
    group  PREFIXED  fs.acme.   READ, DESCRIBE           join, commit, describe its groups

and nothing else (the broker runs with `allow.everyone.if.no.acl.found=false`), so acme's
principal cannot read, write, describe or join anything of globex. Workers, sinks and the
demo run as one service principal across tenants:

    topic  PREFIXED  fs.        READ, WRITE, DESCRIBE, CREATE, DESCRIBE_CONFIGS
                                 every tenant's topics, the control topic, rules and index
                                 topics created on demand
    topic  PREFIXED  fs-        READ, WRITE, DESCRIBE, CREATE
                                 Faust's own topics (named after its app id, fs-<cursor>-app)
    group  PREFIXED  fs-        READ, DESCRIBE           the worker's groups (fs-feedback-mirror,
                                 fs-feedback-mirror-rules, fs-feedback-mirror-app,
                                 fs-rule-decider)
    group  PREFIXED  fs.        READ, DESCRIBE           sink cursors (fs.sink.<cursor>) and
                                 the decider's replay readers (fs.<tenant>.rules.rebuild)
    transactional_id  PREFIXED  fs-  WRITE, DESCRIBE     the exactly-once loops' producers
                                 (fs-feedback-mirror.txn.<random>, tenancy.transactional_id)

Creating tenants (topics, users, ACLs) is the operator's job, as a super user (the stack's
`admin`). A tenant named `sink` would own the group prefix `fs.sink.` of the sinks' cursors,
so it gets no principal.

Pure: the Kafka adapter (`streams.adapters.kafka.access`) turns these into ACL bindings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from streams.core.errors import ValidationFailed
from streams.core.tenancy import check_tenant, tenant_prefix

__all__ = [
    "RESERVED_TENANTS",
    "Grant",
    "parse_principal",
    "service_grants",
    "tenant_grants",
    "tenant_principal",
]

# Tenant names whose `<prefix>.<name>.` would cover a service group (sinks' cursors).
RESERVED_TENANTS = ("sink",)

Resource = Literal["topic", "group", "transactional_id"]
Operation = Literal["READ", "WRITE", "DESCRIBE", "CREATE", "DESCRIBE_CONFIGS"]


@dataclass(frozen=True)
class Grant:
    """Allow `principal` the `operations` on every resource of a kind whose name starts
    with `prefix` (a PREFIXED ACL), from any host."""

    principal: str
    resource: Resource
    prefix: str
    operations: tuple[Operation, ...]


def tenant_principal(tenant: str, prefix: str = "fs") -> str:
    """The SCRAM user name of a tenant: `<prefix>.<tenant>`. ValidationFailed for an invalid
    tenant name, or one that would own a service group prefix."""
    check_tenant(tenant)
    if tenant in RESERVED_TENANTS:
        raise ValidationFailed(
            f"tenant {tenant!r} cannot have a principal: its prefix {prefix}.{tenant}. is the "
            "sinks' consumer-group prefix; pick another tenant name")
    return f"{prefix}.{tenant}"


def parse_principal(user: str, prefix: str = "fs") -> str | None:
    """The tenant whose principal `user` is, or None."""
    head, _, tenant = user.partition(".")
    if head != prefix or not tenant:
        return None
    try:
        tenant_principal(tenant, prefix)
    except ValidationFailed:
        return None
    return tenant


def tenant_grants(tenant: str, prefix: str = "fs") -> list[Grant]:
    """Everything a tenant's principal may do: its own topics and groups, nothing else."""
    principal = f"User:{tenant_principal(tenant, prefix)}"
    own = tenant_prefix(tenant, prefix)
    return [Grant(principal, "topic", own, ("READ", "WRITE", "DESCRIBE")),
            Grant(principal, "group", own, ("READ", "DESCRIBE"))]


def service_grants(user: str, prefix: str = "fs") -> list[Grant]:
    """What the service principal (workers, sinks) needs across every tenant of `prefix`."""
    if not user or ":" in user:
        raise ValidationFailed(f"invalid service user {user!r}: give the SCRAM user name, "
                               "without 'User:'")
    principal = f"User:{user}"
    return [
        Grant(principal, "topic", f"{prefix}.",
              ("READ", "WRITE", "DESCRIBE", "CREATE", "DESCRIBE_CONFIGS")),
        Grant(principal, "topic", f"{prefix}-", ("READ", "WRITE", "DESCRIBE", "CREATE")),
        Grant(principal, "group", f"{prefix}-", ("READ", "DESCRIBE")),
        Grant(principal, "group", f"{prefix}.", ("READ", "DESCRIBE")),
        Grant(principal, "transactional_id", f"{prefix}-", ("WRITE", "DESCRIBE")),
    ]

