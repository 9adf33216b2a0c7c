"""Schema registry subjects per tenant, and who may read or register them, as data.

A record written on a tenant's topic is registered under the tenant's subject
`<prefix>.<tenant>.<record full name>` (e.g. `fs.acme.streams.scores.Score`), so each tenant's
feedback types evolve on their own (two tenants may both define `triage` with other fields)
and the registry can keep tenants apart with the rule the broker already applies to topics:

    a subject is authorized as the topic of the same name.

acme's principal holds `topic PREFIXED fs.acme. READ, WRITE` (streams.core.access), so it may
read and register `fs.acme.*` subjects and no other tenant's; the service principal's
`topic PREFIXED fs.` covers every tenant's subjects. Subjects outside `<prefix>.` (the shipped
`streams.*` schemas registered under their full names before subjects were per tenant, or
by an operator) are **shared**: every authenticated principal may read them, and registering
one needs a WRITE ACL on that name (or an operator). Records of a topic that belongs to no
tenant get `<prefix>._shared.<record>` (tenant names cannot start with `_`).

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
from urllib.parse import unquote

from streams.core.tenancy import parse_topic

__all__ = [
    "SHARED",
    "Access",
    "Route",
    "TopicAcl",
    "may",
    "route_of",
    "subject_of",
]

Access = Literal["read", "write"]
SHARED = "_shared"


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


def may(access: Access, subject: str, acls: Iterable[TopicAcl], *, prefix: str = "fs",
        operator: bool = False) -> bool:
    """Whether a principal with these topic ACLs may `access` the subject: an operator may
    do anything; a shared subject (outside `<prefix>.`) may be read by anyone; otherwise the
    ACLs decide as for a topic of that name (a matching DENY wins over any ALLOW)."""
    if operator:
        return True
    matching = [acl for acl in acls if acl.covers(subject) and acl.grants(access)]
    if any(not acl.allow for acl in matching):
        return False
    if access == "read" and not subject.startswith(f"{prefix}."):
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


_SUBJECT = r"(?P<subject>[^/]+)"
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
    """Classify a Confluent-compatible registry request (its path below the API's base)."""
    for methods, pattern, kind in _ROUTES:
        found = pattern.fullmatch(path) if method.upper() in methods else None
        if found is None:
            continue
        if kind in ("read", "write"):
            return Route("subject", subject=unquote(found["subject"]),
                         access="read" if kind == "read" else "write")
        if kind in ("id", "id-list"):
            return Route("id", schema_id=int(found["id"]), filtered=kind == "id-list")
        if kind == "list":
            return Route("list", filtered=True)
        return Route("open")
    return Route("operator")
