"""The tenants' and the service's ACLs as data: each tenant only its own prefix."""

from __future__ import annotations

import pytest

from streams.core.access import (
    parse_principal,
    service_grants,
    tenant_grants,
    tenant_principal,
)
from streams.core.errors import ValidationFailed
from streams.core.tenancy import reader_group, tenant_prefix, transactional_id, worker_group


def test_a_tenants_grants_cover_its_own_topics_and_groups_only() -> None:
    grants = tenant_grants("acme", "fs")
    assert {(g.principal, g.resource, g.prefix, g.operations) for g in grants} == {
        ("User:fs.acme", "topic", "fs.acme.", ("READ", "WRITE", "DESCRIBE")),
        ("User:fs.acme", "group", "fs.acme.", ("READ", "DESCRIBE")),
    }
    # No grant's prefix is a prefix of another tenant's names.
    assert not any("fs.acme-b.events".startswith(g.prefix) for g in grants)
    assert not any(op in g.operations for g in grants for op in ("CREATE", "DESCRIBE_CONFIGS"))


def test_principal_names_parse_back() -> None:
    assert tenant_principal("acme", "fs") == "fs.acme"
    assert parse_principal("fs.acme", "fs") == "acme"
    assert parse_principal("other.acme", "fs") is None
    assert parse_principal("admin", "fs") is None
    assert tenant_prefix("acme", "x") == "x.acme."


def test_a_tenant_that_would_own_the_sinks_groups_gets_no_principal() -> None:
    with pytest.raises(ValidationFailed, match="sinks' consumer-group prefix"):
        tenant_principal("sink", "fs")
    with pytest.raises(ValidationFailed, match="invalid tenant name"):
        tenant_grants("Bad.Name")


def test_the_service_grants_cover_every_tenant_and_the_workers_groups() -> None:
    grants = service_grants("streams-worker", "fs")
    assert {g.principal for g in grants} == {"User:streams-worker"}
    by_prefix = {(g.resource, g.prefix): g.operations for g in grants}
    assert "CREATE" in by_prefix[("topic", "fs.")]
    assert ("group", "fs-") in by_prefix and ("group", "fs.") in by_prefix
    # The exactly-once loops' transactional ids are named in their group's prefix.
    assert by_prefix[("transactional_id", "fs-")] == ("WRITE", "DESCRIBE")
    assert transactional_id(worker_group("feedback-mirror", "fs")).startswith("fs-")
    with pytest.raises(ValidationFailed, match="without 'User:'"):
        service_grants("User:x")


def test_readers_use_a_group_in_their_tenants_prefix() -> None:
    group = reader_group("fs.acme.events", "reader", "fs")
    assert group.startswith("fs.acme.reader-")
    assert group != reader_group("fs.acme.events", "reader", "fs")
    assert reader_group("fs.acme.index", "index", "fs").startswith("fs.acme.index-")
    assert reader_group("other.topic", "reader", "fs").startswith("streams-reader-")
