"""Running rules' actions: a scoped rule's runs one at a time per scope key, an unscoped
rule's side by side (up to the executor's limit), each attempt under a timeout, with the
rule's retry policy, every attempt's outcome recorded, and a dead letter when the attempts
are spent.

An exception from an action is a failed attempt (`run_failed`, then `run_retried` or
`run_dead_lettered`), never a lost event. Every id is derived from the run, so a run repeated
after a crash writes the same ids again. The executor writes through an `emit` function and
builds each attempt's `Reaction` through a `reaction` function, so it knows nothing of Kafka:
the worker (streams.runtime.worker.executor) gives it the broker's, the in-memory replay
(streams.core.replay) an isolated log's. Pure apart from asyncio.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from streams.core.events import Envelope, RunStarted
from streams.core.ids import scope_key
from streams.core.keyed import KeyedLocks
from streams.core.matching import ReactorStats
from streams.core.rules import Rule, RuleSet
from streams.core.runs import ActionFn, Reaction, attempt_outcomes

__all__ = ["Emit", "ReactionOf", "RunExecutor", "Sleep", "scope_lock_key"]

Emit = Callable[[Sequence[Envelope]], Awaitable[None]]
"""Writes envelopes and returns once the log has them."""

ReactionOf = Callable[[Envelope, int, Mapping[str, Any]], Awaitable[Reaction]]
"""Builds the reaction of one attempt: from the `run_started`, the attempt number, the deps."""

Sleep = Callable[[float], Awaitable[None]]
"""Waits a retry's delay (asyncio.sleep; a replay may pass its own)."""


def scope_lock_key(started: Envelope) -> str:
    """The key a scoped rule's runs are serialised by: one run at a time per tenant, rule
    and scope key."""
    run = started.event
    assert isinstance(run, RunStarted)
    return f"{started.tenant}|{run.rule}|{scope_key(run.scope)}"


class RunExecutor:
    """Runs the actions this process has, to success or to their dead letter.

    A scoped rule's runs of one scope key run one at a time, in the order they arrive (the
    scope's promise: `.scope(F.data.service)`); an unscoped rule promises no order, so its
    runs run side by side (two copies of one run id, never). At most `max_concurrent_runs`
    actions run at once; a run waiting for its scope key does not hold one of those places.
    """

    def __init__(
        self,
        rules: RuleSet,
        actions: Mapping[str, ActionFn],
        *,
        reaction: ReactionOf,
        emit: Emit,
        deps: Mapping[str, Any] | None = None,
        action_timeout: float = 300.0,
        max_concurrent_runs: int = 128,
        stats: ReactorStats | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.rules = rules
        self.actions = dict(actions)
        self._reaction = reaction
        self.emit = emit
        self.deps = dict(deps or {})
        self.action_timeout = action_timeout
        self.stats = stats or ReactorStats()
        self.sleep = sleep
        self._runs = asyncio.Semaphore(max_concurrent_runs)
        self._scopes = KeyedLocks()
        self.lookup: Callable[[str, str], Rule | None] | None = None

    def rule_of(self, started: Envelope) -> Rule | None:
        """The rule of a run: one of this process's rules, or, for a rule installed as data,
        what `lookup` (set by the worker: tenant, name -> rule) finds."""
        run = started.event
        assert isinstance(run, RunStarted)
        found = self.rules.get(run.rule)
        if found is None and self.lookup is not None:
            found = self.lookup(started.tenant, run.rule)
        return found

    def runs_here(self, envelope: Envelope) -> bool:
        """Whether an event starts a run this process executes: a first attempt of an
        action it has (retries are attempts of the same run, driven by `execute`)."""
        event = envelope.event
        return isinstance(event, RunStarted) and event.attempt == 1 \
            and event.action in self.actions

    @contextlib.asynccontextmanager
    async def _in_scope(self, started: Envelope) -> AsyncIterator[None]:
        """Inside, no other run of the same tenant, rule and scope key runs (for an unscoped
        rule's run, no other copy of the same run)."""
        run = started.event
        assert isinstance(run, RunStarted)
        # An unscoped rule's runs share no key; but one run read twice (a batch redone after
        # a crash, two overlapping backfills) must not run twice at once: keyed by its id.
        key = scope_lock_key(started) if run.scope else \
            f"{started.tenant}|{run.rule}|run:{run.run_id}"
        async with self._scopes.hold(key):
            yield

    @property
    def scopes_held(self) -> int:
        """How many keys (scope keys, and unscoped runs' ids) have a run in flight or
        waiting."""
        return len(self._scopes)

    async def reaction(self, started: Envelope, attempt: int) -> Reaction:
        """The reaction an action gets: its run, the matched events, its workspace."""
        return await self._reaction(started, attempt, self.deps)

    async def execute(self, started: Envelope) -> None:
        """Run one run's action to success or to its dead letter, recording every attempt."""
        run = started.event
        assert isinstance(run, RunStarted)
        rule = self.rule_of(started)
        retry = rule.then.retry if rule is not None else None
        async with self._in_scope(started), self._runs:
            self.stats.runs += 1
            attempt = 1
            while True:
                error: str | None = None
                output: Mapping[str, Any] | None = None
                try:
                    reaction = await self.reaction(started, attempt)
                    output = await asyncio.wait_for(self.actions[run.action](reaction),
                                                    self.action_timeout)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # an action's failure is an attempt's outcome
                    error = f"{type(exc).__name__}: {exc}"
                will_retry = error is not None and retry is not None and \
                    retry.retries_after(attempt)
                delay = retry.delay(attempt).total_seconds() if will_retry and retry else 0.0
                outcomes = attempt_outcomes(started, attempt=attempt, error=error,
                                            output=output, will_retry=will_retry,
                                            delay_ms=int(delay * 1000))
                await self.emit(outcomes)
                if error is None:
                    self.stats.succeeded += 1
                    _count_refusals(self.stats, output)
                    return
                self.stats.failed_attempts += 1
                if not will_retry:
                    self.stats.dead_lettered += 1
                    return
                await self.sleep(delay)
                attempt += 1


def _count_refusals(stats: ReactorStats, output: Mapping[str, Any] | None) -> None:
    """Count the budget claims a run's output says were refused (its own, its shadow's)."""
    for part in (output or {}, (output or {}).get("shadow")):
        budget = part.get("over_budget") if isinstance(part, Mapping) else None
        if isinstance(budget, str):
            stats.budget_refusals[budget] = stats.budget_refusals.get(budget, 0) + 1
