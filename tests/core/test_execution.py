"""The pure run executor (streams.core.execution.RunExecutor): a scoped rule's runs of one
scope key one at a time and in order, other keys' and an unscoped rule's runs side by side,
at most `max_concurrent_runs` actions at once, and a scope key's lock forgotten once its
runs are done. The worker's executor on the real broker: tests/integration (rules)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from streams.core.actors import AgentActor
from streams.core.events import Envelope, RunStarted
from streams.core.execution import RunExecutor
from streams.core.rules import RuleSet
from streams.core.runs import Reaction

RULE = "t:judge"


class Tracker:
    """An action that waits for `release`, noting which runs were inside it together."""

    def __init__(self) -> None:
        self.inside: set[str] = set()
        self.most = 0
        self.order: list[str] = []
        self.together: list[frozenset[str]] = []
        self.release = asyncio.Event()

    async def __call__(self, reaction: Reaction) -> Mapping[str, Any]:
        run_id = reaction.run.run_id
        self.inside.add(run_id)
        self.order.append(run_id)
        self.most = max(self.most, len(self.inside))
        self.together.append(frozenset(self.inside))
        await self.release.wait()
        self.inside.discard(run_id)
        return {"ok": True}


def executor_of(action: Tracker, *, limit: int = 32) -> tuple[RunExecutor, list[Envelope]]:
    emitted: list[Envelope] = []

    async def emit(envelopes: Sequence[Envelope]) -> None:
        emitted.extend(envelopes)

    async def reaction(started: Envelope, attempt: int, deps: Mapping[str, Any]) -> Reaction:
        assert isinstance(started.event, RunStarted)
        return Reaction(run=started.event, started=started, events=[],
                        workspace=None,  # type: ignore[arg-type]  # the action reads none
                        attempt=attempt)

    return RunExecutor(RuleSet([]), {"judge": action}, reaction=reaction, emit=emit,
                       max_concurrent_runs=limit), emitted


def started_factory() -> Callable[..., Envelope]:
    """run_started envelopes of RULE: run_<n>, with the scope given (none by default)."""
    count = [0]

    def make(scope: dict[str, str] | None = None) -> Envelope:
        count[0] += 1
        return Envelope.new(
            RunStarted(run_id=f"run_{count[0]}", rule=RULE, action="judge",
                       firing_id=f"fir_{count[0]}", scope=scope or {}),
            tenant="acme", workspace="prod", actor=AgentActor(id=f"rule:{RULE}"))
    return make


async def settle() -> None:
    """Let every runnable task take its steps."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_an_unscoped_rules_runs_run_side_by_side() -> None:
    action = Tracker()
    executor, emitted = executor_of(action)
    make = started_factory()
    tasks = [asyncio.create_task(executor.execute(make())) for _ in range(5)]
    await settle()
    assert action.most == 5  # all five inside the action at once
    action.release.set()
    await asyncio.gather(*tasks)
    assert executor.stats.succeeded == 5 and len(emitted) == 5


async def test_one_scope_keys_runs_run_one_at_a_time_in_order_and_others_beside_them() -> None:
    action = Tracker()
    executor, _emitted = executor_of(action)
    make = started_factory()
    api = [make({"service": "api"}) for _ in range(3)]
    db = make({"service": "db"})
    tasks = [asyncio.create_task(executor.execute(s)) for s in [*api, db]]
    await settle()
    assert action.inside == {"run_1", "run_4"}  # the first of api, and db beside it
    assert executor.scopes_held == 2
    action.release.set()
    await asyncio.gather(*tasks)
    assert [r for r in action.order if r != "run_4"] == ["run_1", "run_2", "run_3"]
    assert all(len(t & {"run_1", "run_2", "run_3"}) <= 1 for t in action.together)
    assert executor.scopes_held == 0  # no lock kept for keys without runs


async def test_at_most_the_limit_of_actions_run_at_once() -> None:
    action = Tracker()
    executor, _emitted = executor_of(action, limit=3)
    make = started_factory()
    tasks = [asyncio.create_task(executor.execute(make())) for _ in range(7)]
    await settle()
    assert len(action.inside) == 3
    action.release.set()
    await asyncio.gather(*tasks)
    assert action.most == 3 and executor.stats.succeeded == 7


async def test_a_run_waiting_for_its_scope_key_leaves_its_place_to_another_key() -> None:
    # Two places; three runs of one key and then one of another: the waiting runs of the
    # first key must not hold the second place.
    action = Tracker()
    executor, _emitted = executor_of(action, limit=2)
    make = started_factory()
    same = [make({"service": "api"}) for _ in range(3)]
    other = make({"service": "db"})
    tasks = [asyncio.create_task(executor.execute(s)) for s in [*same, other]]
    await settle()
    assert action.inside == {"run_1", "run_4"}
    action.release.set()
    await asyncio.gather(*tasks)
    assert executor.stats.succeeded == 4


async def test_one_run_read_twice_never_runs_twice_at_once() -> None:
    # A batch redone after a crash, or two overlapping backfills, hand the executor the same
    # run_started again: the copies take turns (each still runs: runs are at least once).
    action = Tracker()
    executor, _emitted = executor_of(action)
    started = started_factory()()
    tasks = [asyncio.create_task(executor.execute(started)) for _ in range(2)]
    await settle()
    assert action.inside == {"run_1"} and action.most == 1
    action.release.set()
    await asyncio.gather(*tasks)
    assert action.order == ["run_1", "run_1"] and executor.scopes_held == 0


async def test_cancelled_runs_leave_no_scope_key_held() -> None:
    action = Tracker()
    executor, _emitted = executor_of(action)
    make = started_factory()
    running, waiting = make({"service": "api"}), make({"service": "api"})
    tasks = [asyncio.create_task(executor.execute(s)) for s in (running, waiting)]
    await settle()
    assert action.inside == {"run_1"}
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert executor.scopes_held == 0
    later = asyncio.create_task(executor.execute(make({"service": "api"})))
    await settle()
    assert "run_3" in action.inside  # the key is free again
    action.release.set()
    await later
