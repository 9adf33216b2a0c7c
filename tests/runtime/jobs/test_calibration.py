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
from streams.core.feedback import FeedbackRegistry
from streams.core.measures.calibration import (
    AlarmBook,
    Calibration,
    CalibrationPolicy,
    alarm_book,
    calibrate,
)
from streams.runtime.client.views import CatchUp
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.jobs.calibration import Announced, CalibrationKeeper
from streams.runtime.jobs.queues import QueueBook
from tests.core.measures.test_calibration import disagreeing, pair_factory

POLICY = CalibrationPolicy(thresholds={"triage-judge": 0.5}, window=20, min_pairs=10)


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

    def catch_up(self) -> CatchUp:
        self.catch_ups += 1
        if self.failures:
            raise self.failures.pop(0)
        return CatchUp(applied=1)

    def alarms(self, workspace: str) -> AlarmBook:
        return alarm_book([])

    def calibration(self, workspace: str, policy: CalibrationPolicy, **_kw: Any,
                    ) -> list[Calibration]:
        if workspace in self.bad:
            raise TypeError("unhashable type: 'list'")
        return calibrate(disagreeing(pair_factory(), 20), policy, types=FeedbackRegistry())


@dataclass
class FakeWorkspace:
    written: list[tuple[str, str]]

    async def append(self, event: Any, *, event_id: str) -> None:
        self.written.append((event.name, event_id))


class FakeClient:
    def __init__(self, view: FakeView) -> None:
        self.view = view
        self.types = FeedbackRegistry()
        self.written: list[tuple[str, str]] = []

    def tenant_view(self, tenant: str) -> FakeView:
        return self.view

    def workspace(self, tenant: str, workspace: str) -> FakeWorkspace:
        return FakeWorkspace(self.written)


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

    await asyncio.wait_for(keeper.run(stop, interval=0.01, on_change=on_change), timeout=10)
    # Two failed passes (the broker's, then anything else), then the change, then stopped.
    assert view.catch_ups == 3 and keeper.passes == 1
    assert [(c.workspace, c.row.state) for c in seen] == [("prod", "alarm")]
