"""The worker's run executor: the pure one of `streams.core.execution` (retries, timeouts,
per-scope serialisation, dead letters; shared with the in-memory replay), building each
attempt's `Reaction` from the events the reactor read last, or through the tenant's index.

Traced: a run is a span `run <rule>`, the child of its `run_started`'s trace context (the
firing's span), and each attempt of its action a span `action <name>` inside it; what the
action emits or gives as feedback carries the action span's context, and the run's outcomes
(`run_succeeded`, `run_failed`, ...) the run span's, so a rule on them continues the run.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from streams.adapters.tracing import child_span, traced_as, tracer, tracing_enabled
from streams.core.budgets import BUDGET_RULE_PREFIX, GRANT_ACTION
from streams.core.events import Envelope, RunStarted
from streams.core.execution import Emit, scope_lock_key
from streams.core.execution import RunExecutor as CoreRunExecutor
from streams.core.matching import ReactorStats
from streams.core.rulebook import RulebookEntry
from streams.core.rules import RuleSet
from streams.core.runs import ActionFn, Reaction, rule_actor
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.worker.records import RecentEvents

__all__ = ["Emit", "RunExecutor", "scope_lock_key"]


class RunExecutor(CoreRunExecutor):
    """Runs the actions this process has, acting through the workspace handle."""

    def __init__(
        self,
        rules: RuleSet,
        actions: Mapping[str, ActionFn],
        *,
        client: Callable[[], StreamsClient],
        emit: Emit,
        deps: Mapping[str, Any] | None = None,
        action_timeout: float = 300.0,
        max_concurrent_runs: int = 128,
        stats: ReactorStats | None = None,
        recent: RecentEvents | None = None,
    ) -> None:
        traced = {name: _traced_action(name, fn) for name, fn in actions.items()}
        super().__init__(rules, traced, reaction=self._from_log, emit=_traced_emit(emit),
                         deps=deps,
                         action_timeout=action_timeout,
                         max_concurrent_runs=max_concurrent_runs, stats=stats)
        self._client = client
        self.recent = recent if recent is not None else RecentEvents()
        # The entries of the tenants' rules installed as data, by (tenant, rule), once the
        # worker follows the rulebooks: as the follower has them (no I/O), and read from the
        # rulebook on a miss (blocking). A backfill budget rides on them.
        self.installed: Callable[[str, str], RulebookEntry | None] | None = None
        self.installed_now: Callable[[str, str], RulebookEntry | None] | None = None
        # The entry as the rulebook holds it now (blocking), for a backfill's run whose
        # entry as the follower has it has no budget (the follower may be behind).
        self.installed_current: Callable[[str, str], RulebookEntry | None] | None = None

    async def execute(self, started: Envelope) -> None:
        """Run one run's action to success or to its dead letter, in a span `run <rule>`."""
        if not tracing_enabled():
            await super().execute(started)
            return
        run = started.event
        assert isinstance(run, RunStarted)
        with child_span(f"run {run.rule}", started.trace, attributes=_run_attributes(started)):
            await super().execute(started)

    @property
    def client(self) -> StreamsClient:
        """The workspace handle actions act through (made on first use)."""
        return self._client()

    async def _from_log(self, started: Envelope, attempt: int,
                        deps: Mapping[str, Any]) -> Reaction:
        """The reaction an action gets: its run, the matched events, its workspace.

        The firing and the events it matched come from what the reactor decoded last
        (`recent`: a live run's were read moments before), else through the tenant's index
        (a backfill's matched events are history), so the worker's memory does not grow
        with the log; the whole log is read only when the index is too far behind to catch
        up (`StreamsClient.events_by_id`). A run of a rule installed with a backfill budget
        whose cause is before the rule's installation point gets that budget
        (`RulebookEntry.budget_of`)."""
        run = started.event
        assert isinstance(run, RunStarted)
        workspace = self.client.workspace(started.tenant, started.workspace,
                                          actor=rule_actor(run.rule))
        if run.action == GRANT_ACTION:  # a budget's grant reads nothing
            return Reaction(run=run, started=started, events=[], workspace=workspace,
                            attempt=attempt, deps=deps)
        firing_id = started.causation_id or ""
        fired = self.recent.get(started.tenant, firing_id)
        if fired is None:
            fired = (await self.client.events_by_id(started.tenant, [firing_id])).get(firing_id)
        matched_ids = list(getattr(fired.event, "matched", [])) if fired else []
        installed = await self._entry_of(started.tenant, run.rule)
        # A rule installed as data: the event that made it fire says whether the run is a
        # backfill's (before the installation point) or a live one.
        cause_id = fired.causation_id if fired is not None and installed is not None else None
        wanted = matched_ids + ([cause_id] if cause_id and cause_id not in matched_ids else [])
        have = self.recent.found(started.tenant, wanted)
        missing = [i for i in wanted if i not in have]
        if missing:
            have.update(await self.client.events_by_id(started.tenant, missing))
        matched = [have[i] for i in matched_ids if i in have]
        cause = have.get(cause_id) if cause_id else None
        if installed is not None and installed.backfill_tokens is None \
                and installed.is_history(cause) and self.installed_current is not None:
            # A backfill's run, and the entry as the follower has it has no budget: a repeat
            # install may have given it one just before writing the run's firing. Asked of
            # the rulebook as it is now (after the run was read), so no run evaluates
            # outside a budget it was backfilled with.
            installed = await asyncio.to_thread(self.installed_current, started.tenant,
                                                run.rule)
        budget = installed.budget_of(cause) if installed is not None else None
        return Reaction(run=run, started=started, events=matched, workspace=workspace,
                        attempt=attempt, deps=deps, budget=budget)

    async def _entry_of(self, tenant: str, rule: str) -> RulebookEntry | None:
        """The rulebook entry of a run's rule; None for a rules module's rule or a budget's
        (its grants judge nothing)."""
        if self.installed is None or self.rules.get(rule) is not None \
                or rule.startswith(BUDGET_RULE_PREFIX):
            return None
        found = self.installed(tenant, rule)
        if found is None and self.installed_now is not None:
            found = await asyncio.to_thread(self.installed_now, tenant, rule)
        return found


def _run_attributes(started: Envelope) -> dict[str, Any]:
    run = started.event
    assert isinstance(run, RunStarted)
    return {"streams.tenant": started.tenant, "streams.workspace": started.workspace,
            "streams.rule": run.rule, "streams.action": run.action,
            "streams.run_id": run.run_id, "streams.event_id": started.event_id}


def _traced_action(name: str, action: ActionFn) -> ActionFn:
    """The action, each attempt in a span `action <name>` whose context what it emits
    carries (an exception marks the span as an error and propagates)."""

    async def traced(reaction: Reaction) -> Mapping[str, Any] | None:
        if not tracing_enabled():
            return await action(reaction)
        attributes = {**_run_attributes(reaction.started), "streams.attempt": reaction.attempt}
        with tracer().start_as_current_span(f"action {name}", attributes=attributes,
                                            record_exception=True,
                                            set_status_on_exception=True) as span:
            started = traced_as(reaction.started, span)
            output = await action(dataclasses.replace(reaction, started=started))
            span.set_status(Status(StatusCode.OK))
            return output

    return traced


def _traced_emit(emit: Emit) -> Emit:
    """`emit`, the envelopes carrying the current span's context (the run's) when tracing."""

    async def traced(envelopes: Sequence[Envelope]) -> None:
        span = trace.get_current_span()
        await emit([traced_as(e, span) for e in envelopes] if span.is_recording()
                   else envelopes)

    return traced
