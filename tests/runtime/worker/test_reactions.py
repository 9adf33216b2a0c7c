"""A run's reaction in a worker: its firing and the events the firing matched come from the
envelopes the reactor decoded last (`RecentEvents`), else through the tenant's index
(`StreamsClient.events_by_id`, a stand-in here; on the real broker:
tests/integration/test_rules_as_data.py's backfills, whose matched events are history)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from streams import Rule, on, run
from streams.core.actors import UserActor
from streams.core.events import AppEvent, Envelope, RuleFired, RunStarted
from streams.core.rules import RuleSet
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.worker.executor import RunExecutor
from streams.runtime.worker.records import RecentEvents

RULE = Rule(name="r:answer", when=on("r:answer"), then=run("judge"))


class ByIndex:
    """A stand-in client: the events its index has, and the ids each call asked for."""

    def __init__(self, events: Sequence[Envelope]) -> None:
        self.events = {e.event_id: e for e in events}
        self.asked: list[list[str]] = []

    async def events_by_id(self, tenant: str, event_ids: Sequence[str]) -> dict[str, Envelope]:
        self.asked.append(list(event_ids))
        return {i: self.events[i] for i in event_ids if i in self.events}

    def workspace(self, tenant: str, workspace: str, *, actor: Any) -> Any:
        return (tenant, workspace, actor)


def chain(matched: int = 2) -> tuple[list[Envelope], Envelope, Envelope]:
    """`matched` answers, the firing that matched them, and its run_started."""
    answers = [Envelope.new(AppEvent(name="r:answer", data={"n": n}), tenant="acme",
                            workspace="prod", actor=UserActor(id="app"))
               for n in range(matched)]
    fired = answers[0].follow(RuleFired(rule=RULE.name, firing_id="fir_1",
                                        matched=[a.event_id for a in answers]))
    started = fired.follow(RunStarted(run_id="run_1", rule=RULE.name, action="judge",
                                      firing_id="fir_1"))
    return answers, fired, started


def executor(client: ByIndex, recent: RecentEvents) -> RunExecutor:
    async def judge(_reaction: Any) -> dict[str, Any]:
        return {}

    async def emit(_envelopes: Sequence[Envelope]) -> None:
        return None

    return RunExecutor(RuleSet([RULE]), {"judge": judge},
                       client=lambda: cast(StreamsClient, client), emit=emit, recent=recent)


async def test_a_live_runs_reaction_is_built_from_what_the_reactor_read_without_a_read() -> None:
    answers, fired, started = chain()
    recent = RecentEvents()
    for envelope in (*answers, fired, started):
        recent.add(envelope)
    client = ByIndex([])
    reaction = await executor(client, recent).reaction(started, 1)
    assert [e.event_id for e in reaction.events] == [a.event_id for a in answers]
    assert reaction.run.run_id == "run_1" and client.asked == []


async def test_events_the_reactor_did_not_read_are_found_through_the_index() -> None:
    # A backfill: the firing is new (read by the reactor), the answers it matched are old.
    answers, fired, started = chain(3)
    recent = RecentEvents()
    recent.add(answers[1])
    recent.add(fired)
    client = ByIndex(answers)
    reaction = await executor(client, recent).reaction(started, 1)
    assert [e.event_id for e in reaction.events] == [a.event_id for a in answers]
    assert client.asked == [[answers[0].event_id, answers[2].event_id]]  # one call, the missing


async def test_a_firing_the_reactor_did_not_read_is_found_through_the_index_too() -> None:
    answers, fired, started = chain(1)
    client = ByIndex([*answers, fired])
    reaction = await executor(client, RecentEvents()).reaction(started, 1)
    assert [e.event_id for e in reaction.events] == [answers[0].event_id]
    assert client.asked == [[fired.event_id], [answers[0].event_id]]


async def test_a_firing_found_nowhere_gives_a_reaction_with_no_events() -> None:
    _answers, _fired, started = chain(1)
    reaction = await executor(ByIndex([]), RecentEvents()).reaction(started, 1)
    assert reaction.events == []


def test_recent_events_keep_the_newest_up_to_their_capacity() -> None:
    answers, fired, _started = chain(4)
    recent = RecentEvents(capacity=3)
    for envelope in answers:
        recent.add(envelope)
    assert len(recent) == 3 and recent.get("acme", answers[0].event_id) is None
    recent.add(answers[1])  # seen again: the newest now
    recent.add(fired)
    assert recent.get("acme", answers[2].event_id) is None
    assert set(recent.found("acme", [a.event_id for a in answers] + [fired.event_id])) == {
        answers[1].event_id, answers[3].event_id, fired.event_id}


async def test_another_tenants_events_of_the_same_ids_are_never_a_reaction() -> None:
    # Ids derive from workspace names, which tenants share: the same firing and answer ids
    # in another tenant are not this run's.
    answers, fired, started = chain(1)
    elsewhere = [e.model_copy(update={"tenant": "globex"}) for e in (*answers, fired)]
    recent = RecentEvents()
    for envelope in elsewhere:
        recent.add(envelope)
    client = ByIndex([*answers, fired])
    reaction = await executor(client, recent).reaction(started, 1)
    assert [e.tenant for e in reaction.events] == ["acme"]
    assert client.asked == [[fired.event_id], [answers[0].event_id]]
