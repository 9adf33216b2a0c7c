"""Online calibration kept current: `streams calibration follow` runs a `CalibrationKeeper`.

Each pass (every `interval` seconds) catches each tenant's materialized view up to its events
topic, then, for each workspace where people gave verdicts, measures every evaluator
version over its newest pairs with people (`TenantView.calibration`, bounded by the window)
and compares the states with where the workspace's alarm events left them:

- a version that fell below its threshold gets a `calibration:alarm` event (`raised`), and
  its disagreements with people enter an annotation queue, `calibration.<evaluator>.<type>`
  (installed with the alarm when no queue of that name exists: a `disagreements` queue on
  that version, newest first), so people review them before anything else;
- one that came back above `threshold + margin` gets a `calibration:alarm` (not raised).

The alarm events are the keeper's state: a restarted keeper reads where it left off from the
view, so it neither repeats nor loses a change. An event's id is derived from what it is
about and its episode, so two keepers running at once write the same change under the same
id (readers that key by event id see it once; docs/measures.md). The rows of the last pass
are exported as metrics (`streams.calibration.*`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from streams.core.errors import StreamsError
from streams.core.ids import alarm_event_id
from streams.core.measures.calibration import (
    AlarmBook,
    Calibration,
    CalibrationPolicy,
    changed,
    evaluator_version,
)
from streams.core.queues import InvalidQueue, QueueNameTaken, queue_from_dict
from streams.runtime.client.views import TenantView
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.jobs.queues import QueueBook

__all__ = ["Announced", "CalibrationKeeper", "alarm_queue_name"]

log = logging.getLogger(__name__)

_NOT_IN_NAME = re.compile(r"[^a-z0-9:_.-]+")


def alarm_queue_name(evaluator: str, feedback_type: str) -> str:
    """The queue an evaluator's disagreements enter when its calibration alarms:
    `calibration.<evaluator>.<feedback type>`, lower case, other characters as `-`."""
    name = f"calibration.{evaluator}.{feedback_type}".lower()
    return _NOT_IN_NAME.sub("-", name)[:128]


@dataclass(frozen=True)
class Announced:
    """A change the keeper wrote: the row, where, the event's id, and the queue (on a raise
    whose queue exists now)."""

    tenant: str
    workspace: str
    row: Calibration
    event_id: str
    queue: str | None


class CalibrationKeeper:
    """Measures every evaluator version against people as feedback arrives, and writes an
    alarm event each time one crosses its threshold (see the module's docstring).

    `tenants`: the tenants to keep (None: every tenant the broker has, listed each pass).
    `enqueue`: whether a raise installs the version's disagreements queue."""

    def __init__(self, client: StreamsClient, queues: QueueBook, policy: CalibrationPolicy,
                 *, tenants: Sequence[str] | None = None, enqueue: bool = True) -> None:
        self.client = client
        self.queues = queues
        self.policy = policy
        self.tenants = list(tenants) if tenants is not None else None
        self.enqueue = enqueue
        self.rows: dict[tuple[str, str], list[Calibration]] = {}
        self.passes = 0
        self.failing: str | None = None  # why the last pass failed (None: it did not)
        self._measured: set[str] = set()  # tenants measured once (see _tenant)

    def snapshot(self) -> list[tuple[str, str, Calibration]]:
        """(tenant, workspace, row) of the last pass, for the metrics."""
        return [(t, w, row) for (t, w), rows in sorted(self.rows.items()) for row in rows]

    def ready(self) -> str | None:
        """A readiness check (streams.runtime.observe.health): why the last pass failed, or
        None. A keeper that fails pass after pass is alive but not ready."""
        return None if self.failing is None else f"the last calibration pass failed: " \
            f"{self.failing}"

    async def step(self, on_change: Callable[[Announced], None] | None = None,
                   ) -> list[Announced]:
        """One pass over the tenants; the changes written. `on_change` gets each tenant's
        changes as soon as they are written, so a later tenant that fails the pass does not
        keep them from it."""
        tenants = self.tenants
        if tenants is None:
            tenants = await asyncio.to_thread(self.client.runtime.admin.tenants)
        out: list[Announced] = []
        for tenant in tenants:
            changes = await self._tenant(tenant)
            if on_change is not None:
                for change in changes:
                    on_change(change)
            out.extend(changes)
        self.passes += 1
        return out

    async def _tenant(self, tenant: str) -> list[Announced]:
        view = self.client.tenant_view(tenant)
        done = await asyncio.to_thread(view.catch_up)
        if done.applied == 0 and not done.rebuilt and tenant in self._measured:
            return []  # nothing new in its log: its measures and alarms are as they were
        out: list[Announced] = []
        for workspace in await asyncio.to_thread(view.store.verdict_workspaces):
            try:
                out.extend(await self._workspace(view, tenant, workspace))
            except StreamsError:
                # The broker or the view: the pass is tried again, and this tenant is
                # measured again then even if its log brought nothing new (a change it
                # could not write must not wait for new events).
                self._measured.discard(tenant)
                raise
            except Exception:
                # One workspace's bad data (a value no measure can take) must not stop the
                # keeper for every other one: logged with its trace, measured next pass.
                log.exception("calibration of %s/%s failed; the other workspaces go on",
                              tenant, workspace)
        self._measured.add(tenant)
        return out

    async def _workspace(self, view: TenantView, tenant: str,
                         workspace: str) -> list[Announced]:
        book = await asyncio.to_thread(view.alarms, workspace)
        rows = await asyncio.to_thread(view.calibration, workspace, self.policy,
                                       previous=book.states, types=self.client.types)
        self.rows[(tenant, workspace)] = rows
        return [await self._announce(tenant, workspace, row, book)
                for row in changed(book.states, rows)]

    async def _announce(self, tenant: str, workspace: str, row: Calibration,
                        book: AlarmBook) -> Announced:
        raised = row.state == "alarm"
        queue = await self._enqueue(tenant, workspace, row) if raised and self.enqueue \
            else None
        evaluator, feedback_type, name = row.key
        episode = book.next_episode(row.key, raised)
        event_id = alarm_event_id(workspace, evaluator, feedback_type, name, episode, raised)
        event = row.alarm_event(episode=episode, queue=queue).to_event()
        await self.client.workspace(tenant, workspace).append(event, event_id=event_id)
        log.warning("calibration %s: %s on %s.%s in %s/%s: %s %s over %d pairs (threshold "
                    "%s)%s", "ALARM" if raised else "cleared", evaluator, feedback_type, name,
                    tenant, workspace, row.measure,
                    "undefined" if row.value is None else f"{row.value:.3f}", row.n,
                    row.threshold, f"; disagreements in queue {queue}" if queue else "")
        return Announced(tenant, workspace, row, event_id, queue)

    async def _enqueue(self, tenant: str, workspace: str, row: Calibration) -> str | None:
        evaluator, feedback_type, _field = row.key
        name, version = evaluator_version(evaluator)
        queue = alarm_queue_name(f"{name}@{version}", feedback_type)
        live = await asyncio.to_thread(self.queues.queues, tenant, workspace)
        for entry in live:
            if entry.name != queue:
                continue
            try:
                enters = queue_from_dict(entry.definition, types=self.client.types).enters
            except InvalidQueue:  # not a queue this process can read: not the keeper's
                continue
            if enters.kind == "disagreements" and enters.evaluator == f"{name}@{version}" \
                    and enters.feedback_type == feedback_type:
                # An earlier raise installed it (its kind as the version judged then): the
                # disagreements go on entering it; a kind chosen anew must not make it
                # "someone else's" queue.
                return queue
        cls = self.client.types.get(feedback_type)
        kinds = sorted(cls.feedback_targets) if cls is not None else ["run"]
        # The queue's items are of one kind: where the version judged lately (a type given
        # on runs and chains alike sends its disagreements where the judge works now).
        view = self.client.tenant_view(tenant)
        newest = await asyncio.to_thread(view.store.newest_kind, workspace, evaluator,
                                         feedback_type, kinds) if len(kinds) > 1 else None
        on = newest or ("run" if "run" in kinds else kinds[0])
        definition = {
            "name": queue,
            "description": f"where {name}@{version} and people disagreed on {feedback_type} "
                           "(its calibration alarmed)",
            "enters": {"disagreements": {"evaluator": f"{name}@{version}",
                                         "feedback_type": feedback_type, "on": on}},
            "feedback_types": [feedback_type]}
        try:
            await self.queues.install(tenant, workspace, definition, types=self.client.types)
        except QueueNameTaken as exc:
            # A live queue of that name is someone else's, with another definition: the
            # disagreements are not in it, and the alarm says no queue.
            log.warning("calibration alarm of %s on %s in %s/%s: no queue (%s)", evaluator,
                        feedback_type, tenant, workspace, exc)
            return None
        except StreamsError as exc:
            # The alarm matters more than its queue: it is written without one.
            log.warning("calibration alarm of %s on %s in %s/%s: no queue (%s)", evaluator,
                        feedback_type, tenant, workspace, exc)
            return None
        return queue

    async def run(self, stop: asyncio.Event, *, interval: float = 1.0,
                  on_change: Callable[[Announced], None] | None = None) -> None:
        """Pass after pass, `interval` seconds apart, until `stop` is set; `on_change` is
        called with each change written. A pass that fails is logged and tried again at the
        next: the broker or registry away (a warning) or anything else (with its trace),
        never the end of the keeper."""
        while not stop.is_set():
            try:
                await self.step(on_change)
                self.failing = None
            except StreamsError as exc:
                self.failing = str(exc)
                log.warning("calibration pass failed (tried again in %.1f s): %s", interval,
                            exc)
            except Exception as exc:
                self.failing = f"{type(exc).__name__}: {exc}"
                log.exception("calibration pass failed (tried again in %.1f s)", interval)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)
