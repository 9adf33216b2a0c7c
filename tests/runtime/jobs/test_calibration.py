"""The calibration keeper's loop (streams.runtime.jobs.calibration.CalibrationKeeper) on
stand-in views: one workspace whose data no measure can take does not stop the others, a
pass that fails is tried again, and `run` hands each change written to `on_change`. The
keeper on the real broker: tests/integration/test_calibration.py."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from streams.core.errors import KafkaUnavailable
from streams.core.feedback import Feedback, FeedbackRegistry
from streams.core.measures.calibration import (
    AlarmBook,
    Calibration,
    CalibrationPolicy,
    alarm_book,
    calibrate,
)
from streams.core.queues import QueueEntry
from streams.runtime.client.views import CatchUp
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.jobs.calibration import Announced, CalibrationKeeper
from streams.runtime.jobs.queues import QueueBook
from tests.core.measures.test_calibration import disagreeing, pair_factory

POLICY = CalibrationPolicy(thresholds={"triage-judge": 0.5}, window=20, min_pairs=10)
TYPES = FeedbackRegistry()


class JudgedVerdict(Feedback, name="verdict", targets={"run", "chain"}, registry=TYPES):
    """The type the judge's pairs are on (the keeper reads queues against its types)."""

    ok: bool


@dataclass
class FakeStore:
    workspaces: list[str]

    def verdict_workspaces(self) -> list[str]:
        return self.workspaces


@dataclass
class FakeView:
    """A tenant's view: `bad` workspaces fail to measure as a value no measure takes would."""

    store: FakeStore
    bad: set[str]
    failures: list[Exception] = field(default_factory=list)
    catch_ups: int = 0
    applied: int = 1
    fail_for: set[str] = field(default_factory=set)
    tenant: str = "acme"

    def catch_up(self) -> CatchUp:
        self.catch_ups += 1
        if self.failures:
            raise self.failures.pop(0)
        if self.tenant in self.fail_for:
            raise KafkaUnavailable(f"{self.tenant}'s topic does not answer")
        return CatchUp(applied=self.applied)

    def alarms(self, workspace: str) -> AlarmBook:
        return alarm_book([])

    def calibration(self, workspace: str, policy: CalibrationPolicy, **_kw: Any,
                    ) -> list[Calibration]:
        if workspace in self.bad:
            raise TypeError("unhashable type: 'list'")
        return calibrate(disagreeing(pair_factory(), 20), policy, types=FeedbackRegistry())


@dataclass
class FakeWorkspace:
    client: FakeClient

    async def append(self, event: Any, *, event_id: str) -> None:
        if self.client.fail_writes:
            self.client.fail_writes -= 1
            raise KafkaUnavailable("the broker is away")
        self.client.written.append((event.name, event_id))


class FakeClient:
    def __init__(self, view: FakeView) -> None:
        self.view = view
        self.types = TYPES
        self.written: list[tuple[str, str]] = []
        self.fail_writes = 0

    def tenant_view(self, tenant: str) -> FakeView:
        self.view.tenant = tenant
        return self.view

    def workspace(self, tenant: str, workspace: str) -> FakeWorkspace:
        return FakeWorkspace(self)


@dataclass
class FakeQueues:
    live: list[QueueEntry]
    installed: list[object] = field(default_factory=list)

    def queues(self, tenant: str, workspace: str) -> list[QueueEntry]:
        return self.live

    async def install(self, tenant: str, workspace: str, definition: object,
                      **_kw: object) -> None:
        self.installed.append(definition)


def keeper_of(view: FakeView) -> tuple[CalibrationKeeper, FakeClient]:
    client = FakeClient(view)
    keeper = CalibrationKeeper(cast(StreamsClient, client), cast(QueueBook, None), POLICY,
                               tenants=["acme"], enqueue=False)
    return keeper, client


async def test_one_workspace_that_fails_to_measure_does_not_stop_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    view = FakeView(FakeStore(["bad", "prod"]), bad={"bad"})
    keeper, client = keeper_of(view)
    with caplog.at_level(logging.ERROR, logger="streams.runtime.jobs.calibration"):
        [change] = await keeper.step()
    assert (change.workspace, change.row.state) == ("prod", "alarm")
    assert list(keeper.rows) == [("acme", "prod")]
    assert len(client.written) == 1 and client.written[0][0] == "calibration:alarm"
    assert "calibration of acme/bad failed" in caplog.text


async def test_run_hands_each_change_over_and_outlives_a_failed_pass() -> None:
    view = FakeView(FakeStore(["prod"]), bad=set(),
                    failures=[KafkaUnavailable("the broker is away"), RuntimeError("bug")])
    keeper, _client = keeper_of(view)
    stop = asyncio.Event()
    seen: list[Announced] = []

    def on_change(change: Announced) -> None:
        seen.append(change)
        stop.set()

    readiness: list[str | None] = []
    original = view.catch_up

    def catch_up() -> CatchUp:
        readiness.append(keeper.ready())
        return original()

    view.catch_up = catch_up  # type: ignore[method-assign]
    await asyncio.wait_for(keeper.run(stop, interval=0.01, on_change=on_change), timeout=10)
    # Two failed passes (the broker's, then anything else), then the change, then stopped.
    assert view.catch_ups == 3 and keeper.passes == 1
    assert [(c.workspace, c.row.state) for c in seen] == [("prod", "alarm")]
    # Not ready while passes fail, ready again after one that did not.
    assert readiness[0] is None and readiness[1] is not None and "the broker is away" in \
        readiness[1] and readiness[2] is not None and "RuntimeError: bug" in readiness[2]
    assert keeper.ready() is None


async def test_a_change_that_could_not_be_written_is_tried_at_the_next_pass() -> None:
    view = FakeView(FakeStore(["prod"]), bad=set())
    keeper, client = keeper_of(view)
    await keeper.step()  # measured once (the stand-in's alarm book stays empty: it raises)
    client.written.clear()
    client.fail_writes = 1  # new events, then the alarm's write fails: the broker away
    with pytest.raises(KafkaUnavailable):
        await keeper.step()
    assert client.written == []
    # The log brings nothing new, yet the tenant is measured again and the change written.
    view.applied = 0
    [change] = await keeper.step()
    assert change.row.state == "alarm" and len(client.written) == 1


async def test_each_tenants_changes_are_handed_over_before_a_later_tenant_fails() -> None:
    view = FakeView(FakeStore(["prod"]), bad=set())
    keeper, _client = keeper_of(view)
    keeper.tenants = ["acme", "globex"]
    seen: list[str] = []
    view.fail_for = {"globex"}
    with pytest.raises(KafkaUnavailable):
        await keeper.step(lambda change: seen.append(change.tenant))
    assert seen == ["acme"]


async def test_a_raise_reuses_the_live_queue_of_an_earlier_raise() -> None:
    view = FakeView(FakeStore(["prod"]), bad=set())
    client = FakeClient(view)
    queue = "calibration.triage-judge-2.verdict"
    # Installed by an earlier raise on chains; the version judges runs lately.
    book = FakeQueues([QueueEntry("prod", queue, "installed", {
        "name": queue, "enters": {"disagreements": {
            "evaluator": "triage-judge@2", "feedback_type": "verdict", "on": "chain"}},
        "feedback_types": ["verdict"]}, 0, "system:calibration")])
    keeper = CalibrationKeeper(cast(StreamsClient, client), cast(QueueBook, book), POLICY,
                               tenants=["acme"])
    [change] = await keeper.step()
    assert change.queue == queue and book.installed == []
