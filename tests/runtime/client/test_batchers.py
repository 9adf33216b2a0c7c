"""StreamsClient.batcher: one group-commit batcher per event loop, actor and workspace, shared
by their handles, and bounded: past BATCHERS_KEPT the idle ones are dropped, a busy one
never is. No broker: batchers do no I/O until they are given something."""

import pytest

from streams.core.actors import UserActor
from streams.runtime.client import workspace as workspace_module
from tests.runtime.client.factories import offline_client


async def test_handles_of_one_actor_and_workspace_share_a_batcher() -> None:
    client = offline_client()
    ada = client.workspace("acme", "prod", actor=UserActor(id="ada"))
    again = client.workspace("acme", "prod", actor=UserActor(id="ada"))
    assert client.batcher(ada) is client.batcher(again)
    assert client.batcher(ada) is not client.batcher(
        client.workspace("acme", "prod", actor=UserActor(id="bo")))
    assert client.batcher(ada) is not client.batcher(
        client.workspace("acme", "dev", actor=UserActor(id="ada")))


async def test_past_the_limit_idle_batchers_are_dropped_and_busy_ones_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(workspace_module, "BATCHERS_KEPT", 3)
    client = offline_client()
    handles = [client.workspace("acme", f"w{n}", actor=UserActor(id="ada")) for n in range(8)]
    busy = client.batcher(handles[0])
    busy._pending.append(object())  # type: ignore[arg-type]  # a call waiting: not idle
    for ws in handles[1:]:
        client.batcher(ws)
        assert len(client._batchers) <= 3
    assert client.batcher(handles[0]) is busy  # kept through every pruning
    assert client.batcher(handles[-1]) is client.batcher(handles[-1])
