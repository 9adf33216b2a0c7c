"""A run's reaction in a worker: its firing and the events the firing matched come from the
envelopes the reactor decoded last (`RecentEvents`), else through the tenant's index
(`StreamsClient.events_by_id`, a stand-in here; on the real broker:
tests/integration/test_rules_as_data.py's backfills, whose matched events are history)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

from streams import Rule, on, run
from streams.core.actors import UserActor
from streams.core.events import AppEvent, Envelope, RuleFired, RunStarted, Seq
from streams.core.rulebook import RulebookEntry
from streams.core.rules import RuleSet
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.worker.executor import RunExecutor
from streams.runtime.worker.records import RecentEvents

RULE = Rule(name="r:answer", when=on("r:answer"), then=run("judge"))
T0 = datetime(2026, 12, 7, tzinfo=UTC)


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


def installed_entry(rule: str, start: dict[int, int], tokens: int | None) -> RulebookEntry:
    return RulebookEntry(rule=rule, state="installed", definition={}, start=start,
                         workspace="prod", installed_event_id="ev", installed_at=T0,
                         installed_by="system", backfill_tokens=tokens)


def installed_chain(offset: int) -> tuple[list[Envelope], Envelope, Envelope]:
    """A run of the installed rule `r:installed`, caused by an answer at `offset` of
    partition 0."""
    answers, fired, started = chain(1)
    answer = answers[0].model_copy(update={"seq": Seq(partition=0, offset=offset)})
    fired = fired.model_copy(update={"event": RuleFired(rule="r:installed", firing_id="fir_1",
                                                         matched=[answer.event_id])})
    started = started.model_copy(update={"event": RunStarted(
        run_id="run_1", rule="r:installed", action="judge", firing_id="fir_1")})
    return [answer], fired, started


async def test_a_backfill_run_of_a_rule_installed_with_a_budget_gets_that_budget() -> None:
    entry = installed_entry("r:installed", {0: 10}, 500)
    asked: list[str] = []

    def read_now(_tenant: str, name: str) -> RulebookEntry | None:
        asked.append(name)
        return entry

    for offset, want in ((9, entry.backfill_budget), (10, None)):  # history, then live
        answers, fired, started = installed_chain(offset)
        recent = RecentEvents()
        for envelope in (*answers, fired):
            recent.add(envelope)
        run_executor = executor(ByIndex([]), recent)
        run_executor.installed = lambda _t, _n: None  # the follower has not read it yet
        run_executor.installed_now = read_now
        assert (await run_executor.reaction(started, 1)).budget == want
    assert asked == ["r:installed", "r:installed"]  # read from the rulebook on the miss


async def test_runs_of_module_rules_budgets_and_rules_without_one_get_no_budget() -> None:
    looked: list[str] = []

    def entry_of(_tenant: str, name: str) -> RulebookEntry | None:
        looked.append(name)
        return installed_entry(name, {0: 10}, None)

    answers, fired, started = installed_chain(3)
    recent = RecentEvents()
    for envelope in (*answers, fired):
        recent.add(envelope)
    run_executor = executor(ByIndex([]), recent)
    run_executor.installed = run_executor.installed_now = entry_of
    assert (await run_executor.reaction(started, 1)).budget is None  # no backfill budget
    _answers, _fired, module_run = chain(1)  # r:answer is the executor's module rule
    assert (await run_executor.reaction(module_run, 1)).budget is None
    grant = module_run.model_copy(update={"event": RunStarted(
        run_id="run_2", rule="streams:budget.backfill.r", action="streams:budget-grant",
        firing_id="fir_2")})
    assert (await run_executor.reaction(grant, 1)).budget is None
    assert looked == ["r:installed"]  # neither a module rule nor a budget's is looked up


async def test_a_backfill_run_whose_followed_entry_has_no_budget_asks_the_rulebook_now() -> None:
    # A repeat install gave the rule a budget just before writing the run's firing; the
    # follower still has the entry without one.
    stale = installed_entry("r:installed", {0: 10}, None)
    current = installed_entry("r:installed", {0: 10}, 500)
    asked: list[str] = []

    def now(_tenant: str, name: str) -> RulebookEntry | None:
        asked.append(name)
        return current

    for offset, want, asks in ((9, current.backfill_budget, 1), (10, None, 1)):
        answers, fired, started = installed_chain(offset)
        recent = RecentEvents()
        for envelope in (*answers, fired):
            recent.add(envelope)
        run_executor = executor(ByIndex([]), recent)
        run_executor.installed = lambda _t, _n: stale
        run_executor.installed_current = now
        assert (await run_executor.reaction(started, 1)).budget == want
        assert len(asked) == asks  # a live run (offset 10) never asks
