"""Actions: what a rule runs when it fires (`run("triage")`), and its retry policy."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

from streams.core.rules.checks import InvalidRule, check_count

__all__ = ["Action", "NamedAction", "RetryPolicy", "run"]


@dataclass(frozen=True)
class RetryPolicy:
    """How a failing action is tried again: up to `max_attempts` attempts in all, waiting
    `backoff * multiplier ** (attempt - 1)` after a failed attempt, capped at `max_backoff`.
    No jitter, so a replay waits what the live run waited.
    """

    max_attempts: int = 3
    backoff: timedelta = timedelta(seconds=1)
    multiplier: float = 2.0
    max_backoff: timedelta = timedelta(minutes=5)

    def __post_init__(self) -> None:
        check_count("RetryPolicy(max_attempts=)", self.max_attempts)
        if not isinstance(self.backoff, timedelta) or self.backoff < timedelta(0):
            raise InvalidRule(f"RetryPolicy(backoff=) must be a timedelta >= 0, got "
                              f"{self.backoff!r}")
        if (
            not isinstance(self.multiplier, int | float)
            or isinstance(self.multiplier, bool)
            or not self.multiplier >= 1
        ):
            raise InvalidRule(f"RetryPolicy(multiplier=) must be >= 1, got {self.multiplier!r}")
        if not isinstance(self.max_backoff, timedelta) or self.max_backoff < self.backoff:
            raise InvalidRule(f"RetryPolicy(max_backoff=) must be a timedelta >= backoff "
                              f"({self.backoff!r}), got {self.max_backoff!r}")

    def retries_after(self, attempt: int) -> bool:
        """Whether a failed attempt number `attempt` (from 1) is tried again."""
        return attempt < self.max_attempts

    def delay(self, attempt: int) -> timedelta:
        """How long to wait after failed attempt number `attempt` (from 1) before the next."""
        if attempt < 1:
            raise ValueError(f"attempts are numbered from 1, got {attempt}")
        wait = self.backoff
        for _ in range(attempt - 1):
            if wait >= self.max_backoff or not wait or self.multiplier == 1:
                break
            wait = min(wait * self.multiplier, self.max_backoff)
        return min(wait, self.max_backoff)


class NamedAction(Protocol):
    """Anything with a name can be run: an evaluator action, an action function's wrapper."""

    @property
    def name(self) -> str:
        """The name actions are registered under."""
        ...


@dataclass(frozen=True)
class Action:
    """What a rule runs when it fires: an action's name, and its retry policy."""

    name: str
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or self.name != self.name.strip():
            raise InvalidRule(f"an action name must be a non-empty string without surrounding "
                              f"spaces, got {self.name!r}")
        if not isinstance(self.retry, RetryPolicy):
            raise InvalidRule(f"retry= takes a RetryPolicy, got {self.retry!r}")


def run(action: str | NamedAction, *, retry: RetryPolicy | None = None) -> Action:
    """The action to run when a rule fires, by name or by an object with a `name`."""
    name = action if isinstance(action, str) else getattr(action, "name", None)
    if not isinstance(name, str):
        raise InvalidRule(f"run() takes an action name or an object with a name, got {action!r}")
    return Action(name, retry if retry is not None else RetryPolicy())
