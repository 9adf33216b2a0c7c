"""The ports tests pick for their own servers: a slice per test group (deploy/test.sh)."""

from __future__ import annotations

import pytest

from tests.conftest import _ephemeral_low, _free_port, _port_range


def test_a_groups_slice_bounds_every_port_it_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    # A part of this process's own slice: probing another group's could take a port one of
    # its tests has let go of for a moment, the collision the slices prevent.
    first, last = _port_range()
    top = min(last, first + 300)
    monkeypatch.setenv("STREAMS_TEST_PORTS", f"{first}-{top}")
    assert _port_range() == (first, top)
    assert all(first <= _free_port() <= top for _ in range(50))


def test_without_a_slice_ports_come_from_below_the_ephemeral_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("STREAMS_TEST_PORTS", raising=False)
    assert _port_range() == (27000, _ephemeral_low() - 1)


@pytest.mark.parametrize("told", ["28400", "29799-28400", "a-b", f"27000-{65535}",
                                  "28400-28450"])
def test_a_slice_that_is_not_a_range_below_the_ephemeral_ports_is_refused(
    monkeypatch: pytest.MonkeyPatch, told: str,
) -> None:
    monkeypatch.setenv("STREAMS_TEST_PORTS", told)
    with pytest.raises(RuntimeError, match="STREAMS_TEST_PORTS"):
        _port_range()
