"""What every part of a rule checks its arguments with, and the error it raises.

A rule is checked when it is defined, so a mistake fails where it was written, with a message
saying what to change, not later in a worker.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from streams.core.errors import ValidationFailed

__all__ = ["InvalidRule", "check_count", "check_positive", "from_micros", "micros", "utc"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


class InvalidRule(ValidationFailed, ValueError):
    """A rule, trigger, predicate or action was defined wrongly; raised at definition."""


def utc(time: datetime) -> datetime:
    """`time` as an aware UTC time."""
    # Naive times are taken as UTC, so they can be compared with the aware ones the wire keeps.
    return time if time.tzinfo is not None else time.replace(tzinfo=UTC)


def micros(time: datetime) -> int:
    """`time` as microseconds since the epoch (how rule state records and ticks keep it)."""
    return (utc(time) - _EPOCH) // _US


def from_micros(value: int) -> datetime:
    """The aware UTC time `micros` gave."""
    return _EPOCH + int(value) * _US


def check_positive(what: str, value: timedelta) -> None:
    """Refuse anything but a positive timedelta for the argument `what`."""
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise InvalidRule(f"{what} must be a positive timedelta, got {value!r}")


def check_count(what: str, n: object) -> None:
    """Refuse anything but a whole number of at least 1 (not a bool) for the argument `what`."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise InvalidRule(f"{what} must be a whole number of at least 1, got {n!r}")
