"""Workspace.event in a process that keeps the tenant's log (a worker running actions): an
event it has read is answered from memory, with no read; an event of another workspace, or
one it has not read, is asked of the index. On the real broker:
tests/integration/test_rules_as_data.py (verdicts reused by a backfill)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from streams.core.actors import UserActor
from streams.core.events import AppEvent, Envelope
from streams.runtime.client.workspace import Workspace
from tests.runtime.client.factories import offline_client


class AskedTheIndex(Exception):
    """Raised by the stand-in index: the call reached for it."""


def kept_event(workspace: str) -> Envelope:
    return Envelope.new(AppEvent(name="streams:verdict", data={"key": "k"}), tenant="acme",
                        workspace=workspace, actor=UserActor(id="ada"))


@pytest.fixture
def no_index(monkeypatch: pytest.MonkeyPatch) -> None:
    async def index(_self: Workspace) -> None:
        raise AskedTheIndex

    monkeypatch.setattr(Workspace, "_index", index)


@pytest.mark.usefixtures("no_index")
async def test_an_event_the_process_has_read_is_answered_from_memory() -> None:
    client = offline_client()
    event = kept_event("prod")
    client._tenants["acme"] = SimpleNamespace(by_id={event.event_id: event})  # type: ignore[assignment]
    assert await client.workspace("acme", "prod").event(event.event_id) is event


@pytest.mark.usefixtures("no_index")
async def test_another_workspaces_event_or_an_unread_one_is_asked_of_the_index() -> None:
    client = offline_client()
    event = kept_event("staging")
    client._tenants["acme"] = SimpleNamespace(by_id={event.event_id: event})  # type: ignore[assignment]
    with pytest.raises(AskedTheIndex):
        await client.workspace("acme", "prod").event(event.event_id)
    with pytest.raises(AskedTheIndex):
        await client.workspace("acme", "staging").event("evt_not_read")
