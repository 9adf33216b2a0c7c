"""Annotation queues installed as data on the broker: installing, archiving and listing them
(the `streams queues` commands); streams.core.queues says what a queue and its entry are.

Each queue's newest entry is kept in its tenant's queues topic (`<prefix>.<tenant>.queues`,
compacted, one partition, keyed by workspace and name), so a reader reads one small topic to
know every queue of every workspace, never the log.

- **Install**: check the JSON form against the feedback types this process knows, then
  write the queue's entry (its canonical form, defaults spelled out). A repeat of a live
  queue with the same definition writes nothing; a live queue of that name with another
  definition is refused (archive it first).
- **Archive**: write the entry as archived. Its items stay in the log; a queue installed again
  under the name starts over.

Two processes installing the same name at the same moment both write: the newer entry wins.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from streams.core.actors import Actor, SystemActor
from streams.core.errors import NotFound
from streams.core.feedback import FeedbackRegistry
from streams.core.queues import QueueEntry, check_install, entry_key, queue_to_dict
from streams.core.tenancy import tenant_topics
from streams.runtime.jobs.entries import read_entries, write_entry
from streams.runtime.root import Runtime

__all__ = ["QueueBook", "QueueInstalled"]


@dataclass(frozen=True)
class QueueInstalled:
    """The outcome of an install: the queue's entry, and whether it was live already with
    this definition (nothing written)."""

    entry: QueueEntry
    repeat: bool


class QueueBook:
    """Installs, archives and lists a tenant's annotation queues (the `streams queues`
    commands), on the runtime's admin client, producer and readers."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.settings = runtime.settings

    def entries(self, tenant: str) -> dict[str, QueueEntry]:
        """The tenant's queues, newest entry per workspace and name ({} when none was ever
        installed), by `entry_key`."""
        return read_entries(self.runtime, tenant_topics(tenant, self.settings.topic_prefix)
                            .queues, QueueEntry.decode)

    def queues(self, tenant: str, workspace: str, *,
               archived: bool = False) -> list[QueueEntry]:
        """A workspace's live queues (and archived ones with `archived`), by name."""
        return sorted((e for e in self.entries(tenant).values()
                       if e.workspace == workspace and (archived or e.live)),
                      key=lambda e: e.name)

    async def install(self, tenant: str, workspace: str, definition: object, *,
                      types: FeedbackRegistry | None = None,
                      actor: Actor | None = None) -> QueueInstalled:
        """Install a queue from its JSON form (see the module's docstring); InvalidQueue when
        the checks refuse it. The tenant must exist (the caller checks)."""
        installed = await asyncio.to_thread(self.entries, tenant)
        queue, repeat = check_install(definition, workspace, installed, types=types)
        if repeat:
            return QueueInstalled(installed[entry_key(workspace, queue.name)], True)
        entry = QueueEntry(workspace=workspace, name=queue.name, state="installed",
                           definition=queue_to_dict(queue),
                           installed_at_ms=int(time.time() * 1000),
                           installed_by=(actor or SystemActor()).participant)
        await asyncio.to_thread(self._write, tenant, entry)
        return QueueInstalled(entry, False)

    async def archive(self, tenant: str, workspace: str, name: str, *,
                      actor: Actor | None = None) -> QueueEntry:
        """Archive a live queue; NotFound naming the live ones when there is none of that
        name in the workspace."""
        entries = await asyncio.to_thread(self.entries, tenant)
        current = entries.get(entry_key(workspace, name))
        if current is None or not current.live:
            live = sorted(e.name for e in entries.values()
                          if e.workspace == workspace and e.live)
            raise NotFound(f"workspace {workspace!r} of tenant {tenant!r} has no live queue "
                           f"{name!r} to archive; live queues: {live} (streams queues list "
                           f"--tenant {tenant} --workspace {workspace})")
        entry = current.archived(int(time.time() * 1000),
                                 (actor or SystemActor()).participant)
        await asyncio.to_thread(self._write, tenant, entry)
        return entry

    def _write(self, tenant: str, entry: QueueEntry) -> None:
        write_entry(self.runtime, self.runtime.admin.ensure_queues_topic(tenant),
                    entry.key.encode(), entry.encode(), f"the entry of queue {entry.name!r}",
                    "check the brokers, then run the same command again")
