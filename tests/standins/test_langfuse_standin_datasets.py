"""The Langfuse stand-in's dataset routes, through SDK 5.0.4's own clients: what they send is
taken, what Langfuse refuses is refused, and the answers parse as the SDK's models."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from langfuse import Langfuse
from langfuse.api.commons.errors.error import Error as BadRequestError
from langfuse.api.commons.errors.not_found_error import NotFoundError
from langfuse.api.commons.errors.unauthorized_error import UnauthorizedError

from standins.langfuse_standin import LangfuseStandIn


@pytest.fixture
def standin() -> Iterator[LangfuseStandIn]:
    with LangfuseStandIn() as server:
        yield server


def _client(standin: LangfuseStandIn, public_key: str | None = None) -> Langfuse:
    # The SDK keeps one resource manager per public key: another key, another client.
    return Langfuse(public_key=public_key or standin.public_key,
                    secret_key=standin.secret_key, host=standin.url, tracing_enabled=False)


def test_a_dataset_is_created_updated_by_name_and_read_back(standin: LangfuseStandIn) -> None:
    api = _client(standin).api
    first = api.datasets.create(name="incidents", description="v1", metadata={"a": 1})
    again = api.datasets.create(name="incidents", description="v2")
    assert again.id == first.id and again.description == "v2" and again.metadata == {"a": 1}
    assert api.datasets.get("incidents").id == first.id
    api.datasets.create(name="other")
    listed = api.datasets.list(page=1, limit=1)
    assert [d.name for d in listed.data] == ["incidents"]
    assert (listed.meta.total_items, listed.meta.total_pages) == (2, 2)
    with pytest.raises(NotFoundError):
        api.datasets.get("missing")
    with pytest.raises(BadRequestError):
        api.datasets.create(name="")
    with pytest.raises(UnauthorizedError):
        _client(standin, public_key=f"pk-wrong-{uuid.uuid4().hex}").api.datasets.create(name="x")
    assert [d["name"] for d in standin.datasets()] == ["incidents", "other"]


def test_dataset_items_follow_langfuses_rules(standin: LangfuseStandIn) -> None:
    api = _client(standin).api
    dataset = api.datasets.create(name="incidents")
    item = api.dataset_items.create(dataset_name="incidents", id="item-1",
                                    input={"service": "api"}, expected_output={"right": True},
                                    metadata={"seq": "0:1"})
    assert (item.dataset_id, item.dataset_name, item.status) == (dataset.id, "incidents",
                                                                 "ACTIVE")
    replaced = api.dataset_items.create(dataset_name="incidents", id="item-1",
                                        input={"service": "web"})
    assert replaced.input == {"service": "web"} and replaced.created_at == item.created_at
    generated = api.dataset_items.create(dataset_name="incidents", input={"service": "db"})
    uuid.UUID(generated.id)
    assert api.dataset_items.get("item-1").input == {"service": "web"}
    page = api.dataset_items.list(dataset_name="incidents", limit=10)
    assert sorted(i.id for i in page.data) == sorted(["item-1", generated.id])
    assert page.meta.total_items == 2

    api.datasets.create(name="elsewhere")
    with pytest.raises(BadRequestError, match="already exists in another dataset"):
        api.dataset_items.create(dataset_name="elsewhere", id="item-1", input={})
    with pytest.raises(NotFoundError):
        api.dataset_items.create(dataset_name="missing", input={})
    with pytest.raises(BadRequestError, match="at most 255"):
        api.dataset_items.create(dataset_name="incidents", id="x" * 256, input={})
    with pytest.raises(BadRequestError, match="needs sourceTraceId"):
        api.dataset_items.create(dataset_name="incidents", input={},
                                 source_observation_id="obs")
    with pytest.raises(NotFoundError):
        api.dataset_items.get("nope")
    with pytest.raises(NotFoundError):
        api.dataset_items.list(dataset_name="missing")
    assert len(standin.dataset_items("incidents")) == 2
    assert standin.dataset_items("elsewhere") == []


def test_reset_forgets_datasets(standin: LangfuseStandIn) -> None:
    api = _client(standin).api
    api.datasets.create(name="incidents")
    api.dataset_items.create(dataset_name="incidents", input={})
    standin.reset()
    assert standin.datasets() == [] and standin.dataset_items() == []
