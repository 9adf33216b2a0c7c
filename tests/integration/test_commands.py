"""The CommandService, the command ledger and the key store on the real broker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from streams.core.actors import EvaluatorActor, UserActor
from streams.core.errors import Conflict, Unauthorized
from streams.core.events import AppEvent, FeedbackGiven, RunStarted
from streams.core.targets import RunTarget
from streams.examples.ops import TriageQuality
from streams.runtime.client.commands import CommandService
from streams.runtime.client.keys import KeyStore
from streams.runtime.client.workspace import StreamsClient, Workspace
from streams.runtime.root import Runtime
from streams.settings import Settings


@pytest.fixture
def keys_factory(settings: Settings) -> Iterator[Callable[[], KeyStore]]:
    made: list[KeyStore] = []

    def make() -> KeyStore:
        store = KeyStore(Runtime(settings))
        store.start()
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


async def start_run(ws: Workspace, run_id: str = "run_1") -> None:
    spike = await ws.append(AppEvent(name="ops:error_spike", data={}))
    await ws.append(RunStarted(run_id=run_id, rule="ops:error-spike", action="triage",
                               firing_id="fir_1"), correlation_id=spike.id,
                    causation_id=spike.id)


def command(command_id: str | None = "fb_1", **value: Any) -> dict[str, Any]:
    return {"type": "command", "command_id": command_id,
            "command": {"type": "give_feedback", "feedback_type": "triage_quality",
                        "target": {"kind": "run", "run_id": "run_1"},
                        "value": value or {"correct": True, "severity": "high"}}}


async def feedback_ids(client: StreamsClient, tenant: str) -> list[str]:
    return [e.event_id for e in await client.workspace(tenant, "prod").read()
            if isinstance(e.event, FeedbackGiven)]


async def test_a_command_records_once_and_answers_the_same_outcome(
        tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
        keys_factory: Callable[[], KeyStore]) -> None:
    tenant = tenant_factory()
    client: StreamsClient = client_factory()
    await start_run(client.workspace(tenant, "prod"))
    keys = keys_factory()
    _key, token = keys.create(tenant, UserActor(id="ada"), {"give_feedback", "read"})
    service = CommandService(client, keys)

    answers = await asyncio.gather(*(service.execute(token, f"{tenant}.prod", command())
                                     for _ in range(100)))
    assert {a.type for a in answers} == {"outcome"}
    assert len({a.model_dump_json() for a in answers}) == 1
    again = await service.execute(token, f"{tenant}.prod", command())
    assert again == answers[0]
    assert await feedback_ids(client, tenant) == [answers[0].outcome.id]  # type: ignore[union-attr]
    [given] = [e for e in await client.workspace(tenant, "prod").read()
               if isinstance(e.event, FeedbackGiven)]
    assert given.actor == UserActor(id="ada")  # the key's actor

    conflict = await service.execute(token, f"{tenant}.prod",
                                     command(correct=False, severity="low"))
    assert conflict.type == "error" and conflict.error.code == "conflict"  # type: ignore[union-attr]


async def test_two_processes_record_a_command_once(
        tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
        keys_factory: Callable[[], KeyStore]) -> None:
    tenant = tenant_factory()
    first, second = client_factory(), client_factory()
    await start_run(first.workspace(tenant, "prod"))
    keys = keys_factory()
    _key, token = keys.create(tenant, UserActor(id="ada"), {"give_feedback"})
    services = [CommandService(first, keys), CommandService(second, keys_factory())]
    for service in services:  # both followed the ledger before the race
        await service.client.ledger(tenant)
    answers = await asyncio.gather(*(services[i % 2].execute(token, f"{tenant}.prod",
                                                             command(f"race_{n}"))
                                     for n in range(20) for i in range(2)))
    assert {a.type for a in answers} == {"outcome"}
    by_id: dict[str, set[str]] = {}
    for n, answer in enumerate(answers):
        by_id.setdefault(f"race_{n // 2}", set()).add(answer.model_dump_json(
            exclude={"command_id"}))
    assert all(len(v) == 1 for v in by_id.values())
    assert len(await feedback_ids(first, tenant)) == 20


async def test_the_python_handle_takes_a_command_id(
        tenant_factory: Callable[..., str], client_factory: Callable[..., Any]) -> None:
    tenant = tenant_factory()
    client = client_factory()
    judge = client.workspace(tenant, "prod", actor=EvaluatorActor(name="judge", version="1"))
    await start_run(judge)
    value = TriageQuality(correct=True, severity="high")
    one = await judge.give_feedback(value, on=RunTarget(run_id="run_1"), command_id="j_1")
    # a new process (client) retrying gets the same seq and id, read back from the log
    again = await client_factory().workspace(
        tenant, "prod", actor=EvaluatorActor(name="judge", version="1")).give_feedback(
        value, on=RunTarget(run_id="run_1"), command_id="j_1")
    assert (again.seq, again.id) == (one.seq, one.id)
    assert again.envelope.event == one.envelope.event
    with pytest.raises(Conflict, match="new command id"):
        await judge.give_feedback(TriageQuality(correct=False, severity="low"),
                                  on=RunTarget(run_id="run_1"), command_id="j_1")
    assert await feedback_ids(client, tenant) == [one.id]


async def test_a_refused_command_can_be_retried_once_corrected(
        tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
        keys_factory: Callable[[], KeyStore]) -> None:
    tenant = tenant_factory()
    client = client_factory()
    keys = keys_factory()
    _key, token = keys.create(tenant, UserActor(id="ada"), {"give_feedback"})
    service = CommandService(client, keys)
    missing = await service.execute(token, f"{tenant}.prod", command())
    assert missing.type == "error" and missing.error.code == "not_found"  # type: ignore[union-attr]
    await start_run(client.workspace(tenant, "prod"))
    assert (await service.execute(token, f"{tenant}.prod", command())).type == "outcome"


async def test_keys_of_other_tenants_and_revoked_keys_are_refused_everywhere(
        tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
        keys_factory: Callable[[], KeyStore]) -> None:
    acme, globex = tenant_factory(), tenant_factory()
    client = client_factory()
    await start_run(client.workspace(acme, "prod"))
    here, elsewhere = keys_factory(), keys_factory()  # two server processes' stores
    key, token = here.create(acme, UserActor(id="ada"), {"give_feedback", "read"})
    service = CommandService(client, elsewhere)

    await asyncio.to_thread(elsewhere.sync)  # the other store has read the new key
    ok = await service.execute(token, f"{acme}.prod", command())
    assert ok.type == "outcome"
    other = await service.execute(token, f"{globex}.prod", command())
    assert other.type == "error" and other.error.code == "forbidden"  # type: ignore[union-attr]
    assert other.status == 403  # type: ignore[union-attr]

    here.revoke(key.key_id)
    started = time.monotonic()
    for _ in range(200):  # every 50 ms for 10 s
        if (elsewhere.get(key.key_id) or key).revoked:
            break
        await asyncio.sleep(0.05)
    assert time.monotonic() - started < 10, "revocation not seen within 10 s"
    refused = await service.execute(token, f"{acme}.prod", command("fb_2"))
    assert refused.type == "error" and refused.error.code == "unauthorized"  # type: ignore[union-attr]
    with pytest.raises(Unauthorized, match="revoked"):
        service.feedback_types(token, f"{acme}.prod")
    assert [k.key_id for k in elsewhere.list(acme)] == [key.key_id]
