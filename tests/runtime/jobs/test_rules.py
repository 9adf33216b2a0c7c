"""Which history firings a backfill writes (streams.runtime.jobs.rules.BackfillScope)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from streams.core.errors import ValidationFailed
from streams.core.events import AppEvent, Envelope
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
