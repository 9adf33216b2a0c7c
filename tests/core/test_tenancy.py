import pytest

from streams.core.errors import ValidationFailed
from streams.core.tenancy import check_tenant, check_workspace, parse_topic, tenant_topics


def test_topic_names() -> None:
    topics = tenant_topics("acme", "fs")
    assert topics.all() == ("fs.acme.events", "fs.acme.scores", "fs.acme.deadletter",
                            "fs.acme.rules")


@pytest.mark.parametrize("name", ["", "Acme", "a.b", "1abc", "a" * 49, "has space", "ü"])
def test_invalid_tenant_names_refused(name: str) -> None:
    with pytest.raises(ValidationFailed, match="invalid tenant name"):
        check_tenant(name)


def test_valid_names() -> None:
    assert check_tenant("acme-eu-1") == "acme-eu-1"


def test_parse_topic() -> None:
    assert parse_topic("fs.acme.events", "fs") == ("acme", "events")
    assert parse_topic("fs.acme.scores", "fs") == ("acme", "scores")
    assert parse_topic("fs.acme.rules", "fs") == ("acme", "rules")
    assert parse_topic("other.acme.events", "fs") is None
    assert parse_topic("fs._control", "fs") is None
    assert parse_topic("fs.acme.unknown", "fs") is None


@pytest.mark.parametrize("bad", ["acme\n", "acme\r\n", "\nacme", "acme ", ""])
def test_tenant_names_are_matched_whole(bad: str) -> None:
    with pytest.raises(ValidationFailed, match="invalid tenant name"):
        check_tenant(bad)


@pytest.mark.parametrize("good", ["prod", "Prod-2", "team_a.eu", "0"])
def test_workspace_names(good: str) -> None:
    assert check_workspace(good) == good


@pytest.mark.parametrize("bad", ["", "prod\n", "-prod", "a b", "x" * 65, "ws/1"])
def test_bad_workspace_names_are_refused_with_the_pattern(bad: str) -> None:
    with pytest.raises(ValidationFailed, match="invalid workspace name"):
        check_workspace(bad)
