"""Workspace.give_feedback_many on the real broker: each item recorded as give_feedback records
it, bad items refused alone, command ids once across batches, the single path and processes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from streams.core.actors import UserActor
from streams.core.errors import Conflict, NotFound, TooLarge, ValidationFailed
from streams.core.events import AppEvent, Envelope, FeedbackGiven, RunStarted
from streams.core.targets import ChainTarget, FiringTarget, RunTarget
from streams.examples.ops import Resolution, TriageQuality
from streams.runtime.client.many import FeedbackItem, Given
from streams.runtime.client.workspace import StreamsClient, Workspace

ADA = UserActor(id="ada")


async def start_run(ws: Workspace, run_id: str) -> tuple[str, str]:
    """A chain with a run; its (correlation id, run_started event id)."""
    spike = await ws.append(AppEvent(name="ops:error_spike", data={"service": run_id}))
    started = await ws.append(RunStarted(run_id=run_id, rule="ops:error-spike",
                                         action="triage", firing_id=f"fir_{run_id}"),
                              correlation_id=spike.id, causation_id=spike.id)
    return spike.id, started.id


async def feedback_events(client: StreamsClient, tenant: str) -> list[Envelope]:
    return [e for e in await client.workspace(tenant, "prod").read()
            if isinstance(e.event, FeedbackGiven)]


async def one_run(tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
                  ) -> tuple[StreamsClient, str, Workspace, RunTarget]:
    """A new tenant with one run, run_a, and a client and Ada's handle on it."""
    tenant = tenant_factory()
    client: StreamsClient = client_factory()
    ws = client.workspace(tenant, "prod", actor=ADA)
    await start_run(ws, "run_a")
    return client, tenant, ws, RunTarget(run_id="run_a")


def shown(answers: list[Any]) -> list[Any]:
    """Answers comparable: errors by type and message (exceptions are equal only to
    themselves)."""
    return [(type(a), str(a)) if isinstance(a, Exception) else a for a in answers]


def good(severity: str = "high") -> TriageQuality:
    return TriageQuality(correct=True, severity=severity)  # type: ignore[arg-type]


async def test_a_batch_records_each_item_as_give_feedback_does(
        tenant_factory: Callable[..., str], client_factory: Callable[..., Any]) -> None:
    tenant = tenant_factory()
    client: StreamsClient = client_factory()
    ws = client.workspace(tenant, "prod", actor=ADA)
    chains = {run: await start_run(ws, run) for run in ("run_a", "run_b")}
    single = await ws.give_feedback(good(), on=RunTarget(run_id="run_a"))

    items: list[FeedbackItem | tuple[Any, ...]] = [
        FeedbackItem(good(), RunTarget(run_id="run_a"), command_id="c1"),
        FeedbackItem({"correct": False, "severity": "low"}, RunTarget(run_id="run_b"),
                     feedback_type="triage_quality"),
        (good("critical"), RunTarget(run_id="run_b"), None, "c2"),
    ]
    answers = await ws.give_feedback_many(items, batch_size=2)  # two batches
    assert all(isinstance(a, Given) for a in answers), answers

    events = {e.event_id: e for e in await feedback_events(client, tenant)}
    assert len(events) == 4
    for item, answer in zip([FeedbackItem(*i) if isinstance(i, tuple) else i for i in items],
                            answers, strict=True):
        assert isinstance(answer, Given)
        event = events[answer.id]
        assert event.seq == answer.seq
        correlation, started = chains[item.on.id]
        assert (event.actor, event.workspace, event.correlation_id, event.causation_id) == (
            ADA, "prod", correlation, started)
        assert isinstance(event.event, FeedbackGiven)
        assert event.event.target == item.on
        assert (event.event.target_rule, event.event.target_action) == (
            "ops:error-spike", "triage")
        assert event.event.value == TriageQuality.model_validate(
            item.value if isinstance(item.value, dict) else item.value.model_dump()).model_dump()
    # Besides its id, time and value, a batch's event is the single path's event.
    first = events[answers[0].id]  # type: ignore[union-attr]
    same = events[single.id]
    keep = {"event_id", "time", "seq"}
    assert first.model_dump(exclude=keep) == same.model_dump(exclude=keep)


async def test_bad_items_are_refused_alone_with_their_own_errors(
        tenant_factory: Callable[..., str], client_factory: Callable[..., Any]) -> None:
    tenant = tenant_factory()
    client: StreamsClient = client_factory(max_record_bytes=2000)
    ws = client.workspace(tenant, "prod", actor=ADA)
    correlation, _ = await start_run(ws, "run_a")
    on = RunTarget(run_id="run_a")
    answers = await ws.give_feedback_many([
        FeedbackItem({"correct": "maybe", "severity": "high"}, on,
                     feedback_type="triage_quality"),                          # invalid value
        FeedbackItem(good(), RunTarget(run_id="run_missing")),                  # no such run
        FeedbackItem(good(), FiringTarget(firing_id="fir_run_a")),              # wrong kind
        FeedbackItem(good(), on, command_id="not ok!"),                        # bad id
        FeedbackItem({"correct": True, "severity": "high", "note": "x" * 5000}, on,
                     feedback_type="triage_quality"),                          # too large
        FeedbackItem(good(), on, command_id="ok"),
        FeedbackItem(Resolution(resolved=True), ChainTarget(correlation_id=correlation)),
    ])
    kinds = [type(a) for a in answers]
    assert kinds[:3] == [ValidationFailed, NotFound, ValidationFailed]
    assert kinds[3] is ValidationFailed and "command id" in str(answers[3])
    assert isinstance(answers[4], TooLarge), answers[4]
    assert kinds[5:] == [Given, Given]
    assert {e.event_id for e in await feedback_events(client, tenant)} == {
        a.id for a in answers if isinstance(a, Given)}


async def test_command_ids_record_once_across_batches_and_the_single_path(
        tenant_factory: Callable[..., str], client_factory: Callable[..., Any]) -> None:
    client, tenant, ws, on = await one_run(tenant_factory, client_factory)
    earlier = await ws.give_feedback(good(), on=on, command_id="a")

    batch = [FeedbackItem(good(), on, command_id="a"),             # recorded before
             FeedbackItem(good(), on, command_id="b"),
             FeedbackItem(good(), on, command_id="b"),             # the same command again
             FeedbackItem(good(), on, command_id="c"),
             FeedbackItem(good("low"), on, command_id="c")]        # another under its id
    answers = await ws.give_feedback_many(batch)
    assert answers[0] == Given(earlier.seq, earlier.id)
    assert isinstance(answers[1], Given) and answers[2] == answers[1]
    assert isinstance(answers[3], Given) and isinstance(answers[4], Conflict)
    assert shown(await ws.give_feedback_many(batch)) == shown(answers)  # a retry: the same
    again = await ws.give_feedback(good(), on=on, command_id="b")  # and so does the single path
    assert Given(again.seq, again.id) == answers[1]
    [conflict] = await ws.give_feedback_many([FeedbackItem(good("low"), on, command_id="b")])
    assert isinstance(conflict, Conflict)
    ids = [e.event_id for e in await feedback_events(client, tenant)]
    assert sorted(ids) == sorted({earlier.id, answers[1].id, answers[3].id})  # type: ignore[union-attr]


async def test_two_processes_giving_the_same_batch_record_each_command_once(
        tenant_factory: Callable[..., str], client_factory: Callable[..., Any]) -> None:
    tenant = tenant_factory()
    first, second = client_factory(), client_factory()
    await start_run(first.workspace(tenant, "prod", actor=ADA), "run_a")
    on = RunTarget(run_id="run_a")
    batch = [FeedbackItem(good(), on, command_id=f"fb_{n}") for n in range(200)]
    one, other = await asyncio.gather(
        first.workspace(tenant, "prod", actor=ADA).give_feedback_many(batch),
        second.workspace(tenant, "prod", actor=ADA).give_feedback_many(batch))
    assert all(isinstance(a, Given) for a in one), [a for a in one if not isinstance(a, Given)]
    assert one == other
    events = await feedback_events(first, tenant)
    assert sorted(e.event_id for e in events) == sorted(
        a.id for a in one if isinstance(a, Given))


async def test_a_surfaces_concurrent_commands_go_together_each_answered_alone(
        tenant_factory: Callable[..., str], client_factory: Callable[..., Any]) -> None:
    client, tenant, ws, on = await one_run(tenant_factory, client_factory)

    async def command(n: int) -> Any:
        value = {"correct": True, "severity": "high" if n != 7 else "unknown"}
        try:
            return await client.workspace(tenant, "prod", actor=ADA).record_command(
                value, on=on, feedback_type="triage_quality", command_id=f"cmd_{n}")
        except ValidationFailed as exc:
            return exc

    answers = await asyncio.gather(*(command(n) for n in range(200)))
    assert isinstance(answers[7], ValidationFailed) and "severity" in str(answers[7])
    recorded = [a for n, a in enumerate(answers) if n != 7]
    assert len({event_id for _seq, event_id in recorded}) == 199
    batches = client.batcher(ws).batches
    assert 1 <= batches < 100, batches  # group commit: far fewer batches than commands
    again = await ws.record_command({"correct": True, "severity": "high"}, on=on,
                                    feedback_type="triage_quality", command_id="cmd_3")
    assert again == answers[3]
    assert sorted(e.event_id for e in await feedback_events(client, tenant)) == sorted(
        event_id for _seq, event_id in recorded)
