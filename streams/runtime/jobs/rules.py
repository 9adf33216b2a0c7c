"""Rules installed as data on the broker: installing, archiving and listing them (the
`streams rules` commands) and backfilling one over a tenant's history (streams.core.rulebook
says what the records are; a worker follows them with streams.runtime.worker.follower).

- **Install**: check the JSON (schema, event types, the action in the registry of the given
  rules modules, the name), note the installation point (the end offset of each partition
  of the tenant's events topic), append `rule_installed` (definition and installation point
  included) as the installer, then write the rule's rulebook entry. A repeat of a live rule
  with the same definition writes nothing.
- **Archive**: append `rule_archived`, then write the entry as archived.
- **Backfill**: replay the rule over the events before its installation point (in event
  time order) and write the firings the log does not have yet (`rule_fired`, `run_started`,
  with ids derived from the rule and the causing event); workers with the action run them.
  Run again, it finds its firings in the log and writes nothing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from streams.adapters.kafka.log import watermarks
from streams.core.actors import Actor, SystemActor
from streams.core.app_events import AppEventTypes
from streams.core.budgets import backfill_budget
from streams.core.errors import NotFound, ValidationFailed
from streams.core.events import Envelope, RuleArchived, RuleFired, RuleInstalled
from streams.core.rulebook import (
    RulebookEntry,
    backfill_firings,
    check_install,
    history_before,
)
from streams.core.rules import Fire, InvalidRule, Rule
from streams.core.rules.serialized import rule_from_dict
from streams.core.runs import fire_envelopes
from streams.core.tenancy import rulebook_group, rulebook_topic, tenant_topics
from streams.runtime.client.entries import read_entries, write_entry
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.root import Runtime

__all__ = ["BackfillProgress", "BackfillScope", "Backfilled", "Installed", "RuleFinder",
           "Rulebook"]


@dataclass(frozen=True)
class Backfilled:
    """What a backfill did: the history events it read, the firings it wrote, the firings
    it found in the log already (so did not write again), and those it left for a later run
    (past its `limit`). Only firings caused by events in its window count."""

    events: int
    written: int
    already: int
    left: int = 0


BackfillProgress = Callable[[int, int], None]
"""Called after each firing a backfill writes, with the count written and the count it will
write."""


@dataclass(frozen=True)
class BackfillScope:
    """Which of a rule's history firings a backfill writes: those caused by events in
    `[since, until)` (times of the causing events; None: unbounded), at most `limit` of them
    in log order (None: all). A run again writes the next ones: the firings written are in the
    log, found there and skipped. ValidationFailed for an empty window or a limit below 1."""

    since: datetime | None = None
    until: datetime | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise ValidationFailed(f"the backfill window is empty: --since "
                                   f"{self.since.isoformat()} is not before --until "
                                   f"{self.until.isoformat()}")
        if self.limit is not None and self.limit < 1:
            raise ValidationFailed(f"the backfill limit must be at least 1 firing, got "
                                   f"{self.limit}")

    def holds(self, cause: Envelope) -> bool:
        """Whether a firing caused by `cause` is in the window."""
        return (self.since is None or cause.time >= self.since) and (
            self.until is None or cause.time < self.until)


@dataclass(frozen=True)
class Installed:
    """The outcome of an install: the rule's entry, whether it was live already (nothing
    written), and the backfill's outcome when one was asked for."""

    entry: RulebookEntry
    repeat: bool
    backfilled: Backfilled | None = None


class Rulebook:
    """Installs, archives and lists a tenant's rules as data (the `streams rules` commands).

    The facts go to the tenant's log through a workspace handle on the runtime (closed with
    it), the entries to the tenant's rulebook topic through the runtime's producer.
    """

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.client = StreamsClient(runtime)

    def entries(self, tenant: str) -> dict[str, RulebookEntry]:
        """The tenant's rulebook, newest entry per rule ({} when nothing was installed)."""
        return read_entries(self.runtime, rulebook_topic(tenant, self.settings.topic_prefix),
                            RulebookEntry.decode)

    def installation_point(self, tenant: str) -> dict[int, int]:
        """The end offset of each partition of the tenant's events topic, now."""
        events = tenant_topics(tenant, self.settings.topic_prefix).events
        consumer = self.runtime.reader(rulebook_group(self.settings.topic_prefix))
        try:
            return {p: high for p, (_low, high) in watermarks(consumer, events).items()}
        finally:
            consumer.close()

    async def install(
        self,
        tenant: str,
        workspace: str,
        definition: object,
        *,
        actions: Collection[str],
        module_rules: Collection[str] = (),
        types: AppEventTypes | None = None,
        artifact_id: str | None = None,
        backfill: bool = False,
        scope: BackfillScope | None = None,
        progress: BackfillProgress | None = None,
        actor: Actor | None = None,
        budget_tokens: int | None = None,
        costs: Mapping[str, int | None] | None = None,
    ) -> Installed:
        """Install a rule from its JSON form (see the module's docstring); InvalidRule when
        the checks refuse it, NotFound when the tenant does not exist. With `backfill`, the
        history firings `scope` chooses are written too (`progress` told of each).

        `budget_tokens` gives the rule's backfill runs a budget of their own, that many
        tokens in all (streams.core.budgets.backfill_budget), kept in the rule's entry (a
        repeat install with another amount replaces it, and a backfill resumed later spends
        from what is left); the rule's action must be in `costs` (the actions that declare
        one evaluation's worst case, `EvaluatorAction(cost=...)`: a fixed cost, or None for
        a function of the input), and a fixed cost must fit the amount: InvalidRule
        otherwise, ValidationFailed for an amount that is not a whole number above 0."""
        await self.client.log.require_tenant(tenant)
        installed = await asyncio.to_thread(self.entries, tenant)
        rule, repeat = check_install(definition, actions=actions, module_rules=module_rules,
                                     installed=installed, types=types)
        assert isinstance(definition, dict)  # check_install refused anything else
        if budget_tokens is not None:
            backfill_budget(rule.name, budget_tokens)  # ValidationFailed before any write
            if costs is not None and rule.then.name not in costs:
                raise InvalidRule(
                    f"rule {rule.name!r}: --budget-tokens needs an action that declares the "
                    f"worst case of one evaluation, and action {rule.then.name!r} has no "
                    "cost (EvaluatorAction(cost=...))")
            cost = (costs or {}).get(rule.then.name)
            if cost is not None and cost > budget_tokens:
                raise InvalidRule(
                    f"rule {rule.name!r}: one evaluation of action {rule.then.name!r} costs "
                    f"{cost} tokens, over the whole --budget-tokens {budget_tokens}: no run "
                    "could ever be judged; raise the budget")
        if repeat:
            entry = installed[rule.name]
            if budget_tokens is not None and entry.backfill_tokens != budget_tokens:
                entry = replace(entry, backfill_tokens=budget_tokens)
                await asyncio.to_thread(self._write, tenant, entry)
        else:
            start = await asyncio.to_thread(self.installation_point, tenant)
            who = actor or SystemActor()
            ws = self.client.workspace(tenant, workspace, actor=who)
            recorded = await ws.append(RuleInstalled(
                rule=rule.name, artifact_id=artifact_id,
                definition=json.dumps(dict(definition), sort_keys=True),
                start_offsets={str(p): o for p, o in start.items()}))
            assert recorded.envelope is not None
            entry = RulebookEntry(
                rule=rule.name, state="installed", definition=dict(definition), start=start,
                workspace=workspace, installed_event_id=recorded.id,
                installed_at=recorded.envelope.time, installed_by=who.participant,
                artifact_id=artifact_id, backfill_tokens=budget_tokens)
            await asyncio.to_thread(self._write, tenant, entry)
        done = await self.backfill(tenant, rule, entry, scope=scope, progress=progress) \
            if backfill else None
        return Installed(entry, repeat, done)

    async def _live_entry(self, tenant: str, name: str, purpose: str) -> RulebookEntry:
        """The tenant's live entry of rule `name`; NotFound naming the live ones when there
        is none (`purpose`, e.g. " to archive", says what it was wanted for)."""
        entries = await asyncio.to_thread(self.entries, tenant)
        current = entries.get(name)
        if current is None or not current.live:
            live = sorted(n for n, e in entries.items() if e.live)
            raise NotFound(f"tenant {tenant!r} has no live rule {name!r}{purpose}; live "
                           f"rules: {live} (streams rules list --tenant {tenant})")
        return current

    async def switch_action(self, tenant: str, name: str, action: str, *,
                            actions: Collection[str], types: AppEventTypes | None = None,
                            actor: Actor | None = None) -> tuple[RulebookEntry, str]:
        """Point a live rule at another action of the registry (a promotion to an
        evaluator's next version, or back), keeping its installation point, so the events
        it has not reacted to yet go to the new action: a `rule_installed` with the new
        definition and the same start, then the entry. Returns the new entry and the action
        it replaced. NotFound when the tenant has no live rule of that name; InvalidRule
        when the action is not in `actions`."""
        current = await self._live_entry(tenant, name, "")
        before = str(current.definition["then"]["action"])
        definition = {**current.definition,
                      "then": {**current.definition["then"], "action": action}}
        rule_from_dict(definition, actions=actions, types=types)  # InvalidRule, saying why
        if before == action:
            return current, before
        who = actor or SystemActor()
        ws = self.client.workspace(tenant, current.workspace, actor=who)
        recorded = await ws.append(RuleInstalled(
            rule=name, artifact_id=current.artifact_id,
            definition=json.dumps(definition, sort_keys=True),
            start_offsets={str(p): o for p, o in current.start.items()}))
        assert recorded.envelope is not None
        entry = replace(current, definition=definition, installed_event_id=recorded.id,
                        installed_at=recorded.envelope.time, installed_by=who.participant)
        await asyncio.to_thread(self._write, tenant, entry)
        return entry, before

    async def archive(self, tenant: str, workspace: str, name: str, *,
                      actor: Actor | None = None) -> RulebookEntry:
        """Archive a live rule: `rule_archived`, then its entry as archived. NotFound when
        the tenant has no live rule of that name."""
        current = await self._live_entry(tenant, name, " to archive")
        who = actor or SystemActor()
        ws = self.client.workspace(tenant, workspace, actor=who)
        recorded = await ws.append(RuleArchived(rule=name))
        assert recorded.envelope is not None
        entry = replace(current, state="archived", archived_event_id=recorded.id,
                        archived_at=recorded.envelope.time, archived_by=who.participant)
        await asyncio.to_thread(self._write, tenant, entry)
        return entry

    def _write(self, tenant: str, entry: RulebookEntry) -> None:
        write_entry(self.runtime, self.runtime.admin.ensure_rulebook_topic(tenant),
                    entry.rule.encode(), entry.encode(),
                    f"the rulebook entry of {entry.rule!r}",
                    "the fact is in the log: run the same install again to write the entry")

    async def backfill(self, tenant: str, rule: Rule, entry: RulebookEntry, *,
                       scope: BackfillScope | None = None,
                       progress: BackfillProgress | None = None) -> Backfilled:
        """Replay `rule` over the tenant's events before its installation point and write
        the firings the log does not have yet, of those `scope` chooses (the rule is decided
        over the whole history, so counts and limits see every event; the window picks
        among its firings). Offline by nature: it reads the tenant's log."""
        scope = scope or BackfillScope()
        client = self.client
        view = client.tenant_log(tenant)
        await view.catch_up()
        envelopes = list(view.envelopes)
        fired = {e.event.firing_id for e in envelopes
                 if isinstance(e.event, RuleFired) and e.event.rule == rule.name}
        history = history_before(envelopes, entry.start)
        every = [(f, c) for f, c in backfill_firings(rule, history, ()) if scope.holds(c)]
        missing = [(f, c) for f, c in every if f.firing_id not in fired]
        chosen = missing if scope.limit is None else missing[:scope.limit]
        await _write_firings(client, tenant, chosen, progress)
        return Backfilled(events=len(history), written=len(chosen),
                          already=len(every) - len(missing), left=len(missing) - len(chosen))


BACKFILL_IN_FLIGHT = 64
"""Firings a backfill writes at once: each firing's envelopes in order, awaited one by one
(its `run_started` never lands before its `rule_fired`), many firings side by side (one at a
time, a backfill wrote about 70 firings a second: two acknowledgements each)."""


async def _write_firings(client: StreamsClient, tenant: str,
                         chosen: Sequence[tuple[Fire, Envelope]],
                         progress: BackfillProgress | None) -> None:
    """Write `chosen` firings, BACKFILL_IN_FLIGHT at a time; the first failure stops the
    others and is raised (what was written is in the log: the same backfill again skips
    it)."""
    pending = iter(chosen)
    done = [0]

    async def writer() -> None:
        for fire, cause in pending:  # one iterator: each firing is taken once
            ws = client.workspace(tenant, cause.workspace)
            for envelope in fire_envelopes(fire, cause):
                await ws.append_envelope(envelope)
            done[0] += 1
            if progress is not None:
                progress(done[0], len(chosen))

    writers = [asyncio.ensure_future(writer())
               for _ in range(min(BACKFILL_IN_FLIGHT, len(chosen)))]
    try:
        await asyncio.gather(*writers)
    except BaseException:
        for task in writers:
            task.cancel()
        await asyncio.gather(*writers, return_exceptions=True)
        raise


class RuleFinder:
    """Finds a tenant's rule by name, for the reads that explain a rule's decisions (`why`):
    the process's own rules (its rules modules) first, then the rules installed as data in
    the tenant's rulebook (read on each miss: the rulebook is a small compacted topic)."""

    def __init__(self, runtime: Runtime, module_rules: Iterable[Rule] = (), *,
                 types: AppEventTypes | None = None) -> None:
        self.runtime = runtime
        self.module_rules = {rule.name: rule for rule in module_rules}
        self.types = types

    def find(self, tenant: str, name: str) -> Rule | None:
        """The rule called `name` for `tenant`, or None. An installed definition this
        process cannot build (an app event type it has not declared) raises InvalidRule
        naming what to load."""
        found = self.module_rules.get(name)
        if found is not None:
            return found
        entry = Rulebook(self.runtime).entries(tenant).get(name)
        if entry is None:
            return None
        try:
            return rule_from_dict(entry.definition, types=self.types)
        except InvalidRule as exc:
            raise InvalidRule(f"installed rule {name!r}: {exc}; load the module declaring "
                              "its event types (--types)") from exc

