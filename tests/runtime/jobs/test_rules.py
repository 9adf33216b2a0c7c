"""Which history firings a backfill writes (streams.runtime.jobs.rules.BackfillScope), and how
it writes them (many firings at once, each firing's envelopes in order, the first failure
raised)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from streams.core.errors import KafkaUnavailable, ValidationFailed
from streams.core.events import AppEvent, Envelope
from streams.runtime.jobs import rules as rules_job
from streams.runtime.jobs.rules import BackfillScope

T0 = datetime(2026, 12, 1, 8, tzinfo=UTC)


def cause(minutes: int) -> Envelope:
    return Envelope.new(AppEvent(name="t:ping", data={}), tenant="acme", workspace="prod",
                        time=T0 + timedelta(minutes=minutes))


def test_the_window_holds_causes_from_since_up_to_but_not_at_until() -> None:
    scope = BackfillScope(since=T0 + timedelta(minutes=1), until=T0 + timedelta(minutes=3))
    assert [m for m in range(5) if scope.holds(cause(m))] == [1, 2]
    assert all(BackfillScope().holds(cause(m)) for m in range(5))
    assert [m for m in range(5) if BackfillScope(until=T0).holds(cause(m))] == []


@pytest.mark.parametrize(("scope", "says"), [
    ({"since": T0, "until": T0}, "window is empty"),
    ({"since": T0 + timedelta(seconds=1), "until": T0}, "is not before --until"),
    ({"limit": 0}, "at least 1 firing, got 0"),
])
def test_an_empty_window_or_a_limit_below_one_is_refused(scope: dict[str, object],
                                                          says: str) -> None:
    with pytest.raises(ValidationFailed, match=says):
        BackfillScope(**scope)  # type: ignore[arg-type]


class _Cause:
    workspace = "prod"


class _Written:
    """A stand-in client: its workspaces' appends yield, are recorded, and the `fail_at`-th
    one raises."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.appended: list[tuple[str, int]] = []
        self.in_flight = self.most = 0
        self.fail_at = fail_at

    def workspace(self, tenant: str, workspace: str) -> _Written:
        return self

    async def append_envelope(self, envelope: tuple[str, int]) -> None:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(0)
        self.in_flight -= 1
        if self.fail_at is not None and len(self.appended) + 1 == self.fail_at:
            raise KafkaUnavailable("the broker is away")
        self.appended.append(envelope)


def _firings(n: int, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any]]:
    monkeypatch.setattr(rules_job, "fire_envelopes",
                        lambda fire, _cause: [("rule_fired", fire), ("run_started", fire)])
    return [(i, _Cause()) for i in range(n)]


async def test_a_backfill_writes_firings_side_by_side_each_in_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    client = _Written()
    seen: list[tuple[int, int]] = []
    await rules_job._write_firings(client, "acme", _firings(200, monkeypatch),  # type: ignore[arg-type]
                                   lambda n, total: seen.append((n, total)))
    assert sorted(client.appended) == sorted(
        (kind, i) for i in range(200) for kind in ("rule_fired", "run_started"))
    for i in range(200):  # a firing's run never lands before its rule_fired
        assert client.appended.index(("rule_fired", i)) < client.appended.index(("run_started", i))
    assert 1 < client.most <= rules_job.BACKFILL_IN_FLIGHT
    assert seen[-1] == (200, 200) and [n for n, _ in seen] == list(range(1, 201))


async def test_a_backfill_write_that_fails_stops_the_others_and_is_raised(
        monkeypatch: pytest.MonkeyPatch) -> None:
    client = _Written(fail_at=50)
    with pytest.raises(KafkaUnavailable):
        await rules_job._write_firings(client, "acme", _firings(1000, monkeypatch),  # type: ignore[arg-type]
                                       None)
    assert len(client.appended) < 2 * rules_job.BACKFILL_IN_FLIGHT + 50  # not all 2,000
