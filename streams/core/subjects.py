"""Schema registry subjects per tenant, and who may read or register them, as data.

A record written on a tenant's topic is registered under the tenant's subject
`<prefix>.<tenant>.<record full name>` (e.g. `fs.acme.streams.scores.Score`), so each tenant's
feedback types evolve on their own (two tenants may both define `triage` with other fields)
and the registry can keep tenants apart with the rule the broker already applies to topics:

    a subject is authorized as the topic of the same name.

acme's principal holds `topic PREFIXED fs.acme. READ, WRITE` (streams.core.access), so it may
read and register `fs.acme.*` subjects and no other tenant's; the service principal's
`topic PREFIXED fs.` covers every tenant's subjects. Two kinds of subject are **shared**,
readable by every authenticated principal: the project's records under their full names
(`streams.*`, as registered before subjects were per tenant, or by an operator) and
`<prefix>._shared.<record>`, where the service registers records of a topic that belongs to
no tenant, and a tenant's dead letters when its own subject refuses them (tenant names
cannot start with `_`, so no tenant's ACLs cover it). Registering a shared subject needs a
WRITE ACL on that name (the service's `fs.` covers `_shared`) or an operator.

A schema id carries no subject: reading one is allowed when any subject that holds it may be
read. Operations this module does not classify are left to operators.

Pure: the registry proxy (streams.surfaces.http.registry) asks the broker for a principal's
ACLs and the registry for an id's subjects, and applies these rules.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from streams.core.tenancy import parse_topic

__all__ = [
    "SHARED",
    "Access",
    "Route",
    "TopicAcl",
    "may",
    "route_of",
    "shared",
    "subject_of",
]

Access = Literal["read", "write"]
SHARED = "_shared"
SHIPPED = "streams."  # the namespace of every record the project defines


def subject_of(topic: str, record: str, prefix: str = "fs") -> str:
    """The subject a record named `record` (its Avro full name) is registered under when it
    is written on `topic`: `<prefix>.<tenant>.<record>` on a tenant's topic, else
    `<prefix>._shared.<record>`."""
    parsed = parse_topic(topic, prefix)
    owner = parsed[0] if parsed else SHARED
    return f"{prefix}.{owner}.{record}"


@dataclass(frozen=True)
class TopicAcl:
    """One topic ACL of a principal, as the broker holds it."""

    pattern: Literal["LITERAL", "PREFIXED"]
    name: str
    operation: str  # Kafka's operation name: READ, WRITE, ALL, ...
    allow: bool = True

    def covers(self, subject: str) -> bool:
        """Whether the ACL's resource pattern matches a topic named `subject`."""
        if self.pattern == "PREFIXED":
            return subject.startswith(self.name)
        return self.name in ("*", subject)

    def grants(self, access: Access) -> bool:
        """Whether the ACL's operation is the one `access` needs (or ALL)."""
        return self.operation in ("ALL", "READ" if access == "read" else "WRITE")


def shared(subject: str, prefix: str = "fs") -> bool:
    """Whether every principal may read `subject`: the project's records under their full
    names (`streams.*`, as registered before subjects were per tenant) and the service's
    `<prefix>._shared.*`."""
    return subject.startswith((SHIPPED, f"{prefix}.{SHARED}."))


def may(access: Access, subject: str, acls: Iterable[TopicAcl], *, prefix: str = "fs",
        operator: bool = False) -> bool:
    """Whether a principal with these topic ACLs may `access` the subject: an operator may
    do anything; a shared subject may be read by anyone; otherwise the ACLs decide as for a
    topic of that name (a matching DENY wins over any ALLOW). A subject naming a registry
    context (`:.ctx:name`) or with surrounding spaces is an operator's only: it can alias
    another subject."""
    if operator:
        return True
    if ":" in subject or subject != subject.strip():
        return False
    matching = [acl for acl in acls if acl.covers(subject) and acl.grants(access)]
    if any(not acl.allow for acl in matching):
        return False
    if access == "read" and shared(subject, prefix):
        return True
    return any(acl.allow for acl in matching)


@dataclass(frozen=True)
class Route:
    """What a registry request touches: a subject (read or written), a schema id (read), the
    subject list (filtered), something anyone may read, or something for operators only."""

    kind: Literal["subject", "id", "list", "open", "operator"]
    subject: str = ""
    access: Access = "read"
    schema_id: int = 0
    filtered: bool = False  # the answer lists subjects: keep the readable ones


# Subjects the pipeline makes are record names under a prefix: anything else in a subject's
# place (a context, an encoded slash, a space) is for operators, so what is authorized is
# exactly what the registry is asked.
_SUBJECT = r"(?P<subject>[A-Za-z0-9._-]+)"
_ROUTES: tuple[tuple[frozenset[str], re.Pattern[str], str], ...] = tuple(
    (frozenset(methods.split()), re.compile(pattern), kind) for methods, pattern, kind in (
        ("GET", r"/subjects/?", "list"),
        ("GET", rf"/subjects/{_SUBJECT}/versions(/[^/]+(/schema|/referencedby)?)?/?", "read"),
        ("POST", rf"/subjects/{_SUBJECT}/?", "read"),  # is this schema registered under it?
        ("POST", rf"/subjects/{_SUBJECT}/versions/?", "write"),
        ("DELETE", rf"/subjects/{_SUBJECT}(/versions/[^/]+)?/?", "write"),
        ("GET", rf"/config/{_SUBJECT}/?", "read"),
        ("PUT DELETE", rf"/config/{_SUBJECT}/?", "write"),
        ("POST", rf"/compatibility/subjects/{_SUBJECT}/versions(/[^/]+)?/?", "read"),
        ("GET", r"/schemas/ids/(?P<id>\d+)(/schema)?/?", "id"),
        ("GET", r"/schemas/ids/(?P<id>\d+)/(subjects|versions)/?", "id-list"),
        ("GET", r"/(schemas/types|config)?/?", "open"),
    ))


def route_of(method: str, path: str) -> Route:
    """Classify a Confluent-compatible registry request (its path below the API's base,
    already percent-decoded)."""
    for methods, pattern, kind in _ROUTES:
        found = pattern.fullmatch(path) if method.upper() in methods else None
        if found is None:
            continue
        if kind in ("read", "write"):
            return Route("subject", subject=found["subject"],
                         access="read" if kind == "read" else "write")
        if kind in ("id", "id-list"):
            return Route("id", schema_id=int(found["id"]), filtered=kind == "id-list")
        if kind == "list":
            return Route("list", filtered=True)
        return Route("open")
    return Route("operator")
