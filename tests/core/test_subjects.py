"""Subjects per tenant and the registry's rule: a subject is authorized as the topic of the
same name; shared subjects are readable by all."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.core.access import tenant_grants
from streams.core.subjects import Route, TopicAcl, may, route_of, subject_of
from streams.core.tenancy import TENANT_PATTERN, tenant_topics


def _acls_of_grants(tenant: str) -> list[TopicAcl]:
    """The topic ACLs `streams tenant create` gives a tenant, as the broker lists them."""
    return [TopicAcl("PREFIXED", g.prefix, op) for g in tenant_grants(tenant)
            if g.resource == "topic" for op in g.operations]


ACME, GLOBEX = _acls_of_grants("acme"), _acls_of_grants("globex")
SERVICE = [TopicAcl("PREFIXED", "fs.", op) for op in ("READ", "WRITE", "DESCRIBE")]


def test_a_record_on_a_tenants_topic_gets_the_tenants_subject() -> None:
    topics = tenant_topics("acme")
    assert subject_of(topics.events, "streams.events.AppEvent") == \
        "fs.acme.streams.events.AppEvent"
    assert subject_of(topics.scores, "streams.scores.Score", "fs") == \
        "fs.acme.streams.scores.Score"
    assert subject_of("elsewhere", "streams.scores.Score") == "fs._shared.streams.scores.Score"


@given(st.from_regex(TENANT_PATTERN, fullmatch=True))
def test_no_tenant_owns_the_shared_namespace(tenant: str) -> None:
    subject = subject_of("not-a-tenant-topic", "streams.x.Y")
    acls = [TopicAcl("PREFIXED", f"fs.{tenant}.", op) for op in ("READ", "WRITE")]
    assert not may("write", subject, acls)


def test_a_tenant_uses_its_own_subjects_and_reads_shared_ones_only() -> None:
    own, other = "fs.acme.streams.scores.Score", "fs.globex.streams.scores.Score"
    assert may("read", own, ACME) and may("write", own, ACME)
    assert not may("read", other, ACME) and not may("write", other, ACME)
    assert may("read", "streams.scores.Score", ACME)  # shared: registered by full name
    assert not may("write", "streams.scores.Score", ACME)
    assert may("read", "fs._shared.streams.deadletter.DeadLetter", ACME)  # the service's
    assert not may("write", "fs._shared.streams.deadletter.DeadLetter", ACME)
    # A tenant whose name starts like another's gets nothing of it.
    assert not may("read", "fs.acme-eu.streams.scores.Score", ACME)
    # Nor do other deployments' subjects, context aliases or padded names count as shared.
    for subject in ("fs-staging.globex.x", ":.:fs.globex.streams.scores.Score",
                    ":.ctx:streams.scores.Score", " streams.scores.Score", "other.x"):
        assert not may("read", subject, ACME), subject


def test_the_service_covers_every_tenant_and_operators_everything() -> None:
    for subject in ("fs.acme.streams.scores.Score", "fs._shared.streams.deadletter.DeadLetter"):
        assert may("write", subject, SERVICE)
    assert not may("write", "streams.scores.Score", SERVICE)
    assert may("write", "streams.scores.Score", [], operator=True)


def test_a_deny_wins_and_all_grants_both() -> None:
    subject = "fs.acme.streams.scores.Score"
    deny = [*ACME, TopicAcl("LITERAL", subject, "READ", allow=False)]
    assert not may("read", subject, deny) and may("write", subject, deny)
    assert may("read", subject, [TopicAcl("LITERAL", "*", "ALL")])
    assert not may("read", "streams.x", [TopicAcl("PREFIXED", "streams.", "ALL", False)])


@pytest.mark.parametrize(("method", "path", "route"), [
    ("GET", "/subjects", Route("list", filtered=True)),
    ("GET", "/subjects/fs.acme.x/versions", Route("subject", subject="fs.acme.x")),
    ("GET", "/subjects/fs.acme.x/versions/latest/schema", Route("subject", subject="fs.acme.x")),
    ("POST", "/subjects/fs.acme.x", Route("subject", subject="fs.acme.x")),
    ("POST", "/subjects/fs.acme.x/versions",
     Route("subject", subject="fs.acme.x", access="write")),
    ("DELETE", "/subjects/fs.acme.x", Route("subject", subject="fs.acme.x", access="write")),
    ("PUT", "/config/fs.acme.x", Route("subject", subject="fs.acme.x", access="write")),
    ("GET", "/config/fs.acme.x", Route("subject", subject="fs.acme.x")),
    ("POST", "/compatibility/subjects/fs.acme.x/versions/latest",
     Route("subject", subject="fs.acme.x")),
    ("GET", "/subjects/:.:fs.acme.x/versions", Route("operator")),
    ("GET", "/subjects/fs.acme.x%2F..%2Fy/versions", Route("operator")),
    ("POST", "/subjects/fs acme/versions", Route("operator")),
    ("GET", "/schemas/ids/42", Route("id", schema_id=42)),
    ("GET", "/schemas/ids/42/subjects", Route("id", schema_id=42, filtered=True)),
    ("GET", "/schemas/types", Route("open")),
    ("GET", "/config", Route("open")),
    ("PUT", "/config", Route("operator")),
    ("GET", "/schemas", Route("operator")),
    ("DELETE", "/subjects", Route("operator")),
    ("GET", "/mode/fs.acme.x", Route("operator")),
])
def test_each_registry_request_is_classified(method: str, path: str, route: Route) -> None:
    assert route_of(method, path) == route
