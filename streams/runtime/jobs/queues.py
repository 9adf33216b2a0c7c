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
import json
import re
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Any

from streams.core.actors import Actor, SystemActor
from streams.core.commands import (
    CommandFrame,
    ErrorFrame,
    OutcomeFrame,
    check_value,
    error_frame_of,
    parse_frame,
)
from streams.core.errors import Conflict, NotFound, ValidationFailed
from streams.core.feedback import FeedbackRegistry
from streams.core.leases import LEASE_ID_PATTERN, item_of, target_of_item
from streams.core.measures.agreement import agreement_json, agreement_of, verdict_pairs
from streams.core.measures.annotators import people_agreement, people_agreement_json
from streams.core.pairwise import display_order
from streams.core.queues import (
    InvalidQueue,
    Queue,
    QueueEntry,
    check_install,
    entry_json,
    entry_key,
    queue_from_dict,
    queue_to_dict,
)
from streams.core.spans import JUMPABLE, ClosedSpan, SpanWalk
from streams.core.tenancy import tenant_topics
from streams.core.viewrows import PageKey
from streams.runtime.client.commands import CommandService
from streams.runtime.client.entries import EntryView, read_entries, topic_exists, write_entry
from streams.runtime.client.workspace import Workspace
from streams.runtime.jobs.leases import Lease, LeaseBook
from streams.runtime.root import Runtime

__all__ = ["QueueBook", "QueueInstalled", "QueueService", "lease_next", "queue_items"]


@dataclass(frozen=True)
class QueueInstalled:
    """The outcome of an install: the queue's entry, and whether it was live already with
    this definition (nothing written)."""

    entry: QueueEntry
    repeat: bool


class QueueBook:
    """Installs, archives and lists a tenant's annotation queues (the `streams queues`
    commands), on the runtime's admin client, producer and readers.

    With `follow` (a server), each tenant's queues topic is read once and then followed
    (an EntryView per tenant, until `close`); without it (the CLI), each look-up reads the
    topic."""

    def __init__(self, runtime: Runtime, *, follow: bool = False) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.follow = follow
        self._views: dict[str, EntryView[QueueEntry]] = {}
        self._lock = threading.Lock()

    def entries(self, tenant: str) -> dict[str, QueueEntry]:
        """The tenant's queues, newest entry per workspace and name ({} when none was ever
        installed), by `entry_key`; what was written before the call is in it."""
        topic = tenant_topics(tenant, self.settings.topic_prefix).queues
        if not self.follow:
            return read_entries(self.runtime, topic, QueueEntry.decode)
        with self._lock:
            view = self._views.get(tenant)
            if view is None:
                if not topic_exists(self.runtime, topic):
                    return {}
                view = EntryView(self.runtime, topic, QueueEntry.decode)
                view.start()
                self._views[tenant] = view
        return view.current()

    def close(self) -> None:
        """Stop following every tenant's queues topic."""
        with self._lock:
            views, self._views = list(self._views.values()), {}
        for view in views:
            view.close()

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


# Items offered per look at a queue's source: a page of the view.
_CANDIDATES_PAGE = 200
_HEAD_PAGE = 20
"""The first page of a walk that knows a closed stretch: the items that arrived above it."""


def _sampled(queue: Queue, item: str) -> bool:
    # A uniform share of the items, the same in every process: by a hash of the item.
    return queue.sample >= 1.0 or zlib.crc32(item.encode()) / 2**32 < queue.sample


async def queue_items(ws: Workspace, queue: Queue) -> list[str]:
    """Every item of a queue (`kind:id`, newest first): its source's targets in `ws` (ids
    only, from the view), within the queue's sample."""
    ids = await ws.queue_items_all(queue.enters)
    return [i for i in (item_of(queue.item_kind, i) for i in ids) if _sampled(queue, i)]


async def lease_next(ws: Workspace, queue: Queue, leases: LeaseBook, walk: SpanWalk,
                     reviewer: str, besides: str | None = None) -> Lease | None:
    """Read the queue's items newest first, a page at a time, and lease the first one open
    to `reviewer` (never `besides`); jump the stretch of items closed to everyone that an
    earlier walk found (`walk.known`, streams.core.spans) once a count says it still holds
    what it held. `walk` keeps the longest closed stretch met, for the next walk."""
    before: PageKey | None = None
    first = True
    while True:
        # The view is caught up once, for the first page: the walk reads it as of the call.
        # When a stretch is known, the first page is short: what arrived above it since.
        limit = _HEAD_PAGE if first and walk.known is not None else _CANDIDATES_PAGE
        page = await ws.queue_items_keyed(queue.enters, limit=limit, before=before,
                                          catch_up=first)
        first = False
        candidates: list[str] = []
        jump: PageKey | None = None
        for item_id, item_key in page:
            item = item_of(queue.item_kind, item_id)
            known = walk.known
            if known is not None and walk.at_known(item, item_key):
                held = await ws.queue_items_count(queue.enters, catch_up=False,
                                                  between=(known.top, known.bottom))
                if held == known.n:
                    walk.jumped()
                    jump = known.bottom
                    break
                walk.forget()  # an item arrived inside it: walked like the others
            closed = not _sampled(queue, item) or leases.done(ws.workspace, queue.name,
                                                              item)
            walk.met(item, item_key, closed=closed)
            if not closed and item != besides:
                candidates.append(item)
        # Newest first, as the view pages them.
        lease = await leases.next_item(ws.workspace, queue, reviewer, candidates)
        if lease is not None:
            return lease
        if jump is not None:
            before = jump
        elif len(page) < limit:
            return None
        else:
            before = page[-1][1]


class QueueService:
    """The queues for the surfaces (REST, MCP): each call checks the caller's key through the
    command service (`read` to list, `manage_queues` to install or archive, `give_feedback`
    to review), then asks the books, acting as the key's actor. Answers are JSON-ready
    dicts or frames."""

    def __init__(self, service: CommandService, book: QueueBook) -> None:
        self.service = service
        self.book = book
        self._leases: dict[str, LeaseBook] = {}
        self._leases_lock = threading.Lock()
        # Per queue, the longest stretch of items closed to everyone a walk found
        # (streams.core.spans): later walks jump it.
        self._spans: dict[tuple[str, str, Queue], ClosedSpan] = {}
        self._spans_lock = threading.Lock()

    def _lease_book(self, tenant: str) -> LeaseBook:
        # Started on first use, in the caller's thread (it reads the tenant's leases topic).
        with self._leases_lock:
            book = self._leases.get(tenant)
            if book is None:
                book = LeaseBook(self.service.client.runtime, tenant)
                book.start()
                self._leases[tenant] = book
        return book

    def _live(self, tenant: str, workspace: str, name: str) -> Queue:
        entry = self.book.entries(tenant).get(entry_key(workspace, name))
        if entry is None or not entry.live:
            state = "archived" if entry is not None else "not installed"
            raise NotFound(f"queue {name!r} of workspace {workspace!r} is {state}: its items "
                           "are not handed out (streams queues list shows the live ones)")
        return queue_from_dict(entry.definition, types=self.service.client.types)

    async def next(self, token: str | None, workspace_id: str, name: str,
                   besides: str | None = None) -> dict[str, Any]:
        """Lease the next item of a live queue to the key's actor (newest first, as its source
        gives them: see Workspace.queue_items_page):
        {"lease": {"item", "target", "request_id", "ends_ms"}}, or {"lease": null} when none
        is left for them. The item the actor holds already comes back first, but never
        `besides`: a client showing one item leases the one after it ahead with
        `besides=<the item shown>`, so the next turn waits for no round trip."""
        key, ws = self.service.authorize(token, workspace_id, "give_feedback")
        await self.service.client.log.require_tenant(ws.tenant)
        queue = await asyncio.to_thread(self._live, ws.tenant, ws.workspace, name)
        leases = await asyncio.to_thread(self._lease_book, ws.tenant)
        at = (ws.tenant, ws.workspace, queue)
        jumpable = queue.enters.kind in JUMPABLE
        with self._spans_lock:
            walk = SpanWalk(self._spans.get(at) if jumpable else None)
        try:
            lease = await lease_next(ws, queue, leases, walk, key.actor.participant, besides)
        finally:
            span = walk.span()
            if jumpable:
                with self._spans_lock:
                    if span is None:
                        self._spans.pop(at, None)
                    else:
                        self._spans[at] = span
        if lease is None:
            return {"lease": None}
        return {"lease": {"item": lease.item, "request_id": lease.request_id,
                          "ends_ms": lease.ends_ms, "target": target_of_item(lease.item)}}

    async def progress(self, token: str | None, workspace_id: str,
                       name: str) -> dict[str, Any]:
        """Where a live queue stands (the key needs `read`): {"queue", "items", "done",
        "in_review", "left", "verdicts"} (streams.core.leases.QueueProgress).

        A queue of a rule's runs or firings, or of chains, with no sample is counted in the
        view (one COUNT) and its progress folded from the lease states people made: it
        costs what was reviewed, not what the queue holds. A sampled queue, or one entered
        by verdicts (whose items come and go with newer verdicts), reads every item id of
        its source (ids only), so it costs what the queue holds."""
        _key, ws = self.service.authorize(token, workspace_id, "read")
        await self.service.client.log.require_tenant(ws.tenant)
        queue = await asyncio.to_thread(self._live, ws.tenant, ws.workspace, name)
        leases = await asyncio.to_thread(self._lease_book, ws.tenant)
        total = None if queue.sample < 1.0 else await ws.queue_items_count(queue.enters)
        if total is not None:
            done = leases.progress_counted(ws.workspace, queue.name, total)
        else:
            done = leases.progress(ws.workspace, queue.name, await queue_items(ws, queue))
        return {"queue": queue.name, "items": done.items, "done": done.done,
                "in_review": done.in_review, "left": done.left, "verdicts": done.verdicts}

    async def agreement(self, token: str | None, workspace_id: str,
                        name: str) -> dict[str, Any]:
        """Agreement on a live queue's items (the key needs `read`): {"queue", "items",
        "judged", "people_agreement": [...], "judge_agreement": [...]}: Krippendorff's alpha
        between people and each evaluator version's kappa or Spearman against people, on
        the verdicts of the queue's feedback types given on its items (docs/measures.md).
        It reads every item id of the queue and their verdicts: it costs what the queue
        holds."""
        _key, ws = self.service.authorize(token, workspace_id, "read")
        await self.service.client.log.require_tenant(ws.tenant)
        queue = await asyncio.to_thread(self._live, ws.tenant, ws.workspace, name)
        items = await queue_items(ws, queue)
        ids = [item.partition(":")[2] for item in items]
        verdicts = await ws.verdicts_on(queue.item_kind, queue.feedback_types, ids)
        types = self.service.client.types

        def measured() -> dict[str, Any]:
            return {"queue": queue.name, "items": len(items),
                    "judged": len({v.target for v in verdicts}),
                    "people_agreement": [people_agreement_json(a)
                                         for a in people_agreement(verdicts, types=types)],
                    "judge_agreement": [agreement_json(a) for a in agreement_of(
                        verdict_pairs(verdicts), types=types)]}
        return await asyncio.to_thread(measured)

    async def pair(self, token: str | None, workspace_id: str, name: str,
                   item: str) -> dict[str, Any]:
        """The two verdicts a queue of pairs shows for one item (the key needs `read`):
        {"item", "target", "feedback_type", "a", "b", "shown": [{"side": "a" | "b",
        "value": {...} | null}, ...]}, `shown` in the order a page shows them (half the
        items `b` first: `streams.core.pairwise.display_order`). ValidationFailed naming
        `path.item` for an item that is not one of the queue's kind, or a queue that is not
        of pairs."""
        _key, ws = self.service.authorize(token, workspace_id, "read")
        await self.service.client.log.require_tenant(ws.tenant)
        queue = await asyncio.to_thread(self._live, ws.tenant, ws.workspace, name)
        entry = queue.enters
        if entry.pair is None:
            raise ValidationFailed(
                f"path.item: queue {name!r} enters by {entry.kind}, not by pairs: it has no "
                "pair of verdicts to show; read the item's record instead")
        kind, _, target_id = item.partition(":")
        if kind != queue.item_kind or not target_id:
            raise ValidationFailed(
                f"path.item: {item!r} is not an item of queue {name!r}, whose items are "
                f"{queue.item_kind}:<id>")
        found = await ws.pair_verdicts(entry, target_id)
        a, b = entry.pair
        sides = {"a": a, "b": b}
        return {"item": item, "target": target_of_item(item),
                "feedback_type": entry.feedback_type, "a": a, "b": b,
                "shown": [{"side": side, "value": found.get(sides[side])}
                          for side in display_order(item, queue.name)]}

    async def submit(self, token: str | None, workspace_id: str, name: str,
                     body: bytes | str | dict[str, Any]) -> OutcomeFrame | ErrorFrame:
        """A reviewer's verdict under a lease: {"request_id", "command": give_feedback on the
        leased item, optional "command_id"}. Recorded once (the command id is the lease's)
        when the lease still runs; Conflict when it expired, is not the key's, or the queue
        does not take that feedback type; NotFound for an archived queue."""
        command_id: str | None = None
        try:
            key, ws = self.service.authorize(token, workspace_id, "give_feedback")
            try:
                data: Any = json.loads(body) if isinstance(body, bytes | str) else body
            except (ValueError, UnicodeDecodeError) as exc:
                raise ValidationFailed(f"the body is not JSON: {exc}") from exc
            if not isinstance(data, dict) or not isinstance(data.get("request_id"), str) \
                    or not re.fullmatch(LEASE_ID_PATTERN, data["request_id"]):
                raise ValidationFailed("the body is {\"request_id\": \"lease_...\", "
                                       "\"command\": {give_feedback}}: request_id must be "
                                       "the lease's, as next_item gave it")
            unknown = sorted(set(data) - {"request_id", "command"})
            if unknown:
                raise ValidationFailed(f"unknown fields {unknown}: the body has request_id "
                                       "and command only")
            rid = data["request_id"]
            frame: CommandFrame = parse_frame({"type": "command", "command":
                                               data.get("command"),
                                               "command_id": f"lease-{rid}"[:128]})
            command_id = frame.command_id
            check_value(frame.command, self.service.client.types)
            await self.service.client.log.require_tenant(ws.tenant)
            queue = await asyncio.to_thread(self._live, ws.tenant, ws.workspace, name)
            if frame.command.feedback_type not in queue.feedback_types:
                raise Conflict(f"queue {name!r} takes {list(queue.feedback_types)} feedback, "
                               f"not {frame.command.feedback_type!r}")
            target = frame.command.target
            item = item_of(target.kind, target.id)
            leases = await asyncio.to_thread(self._lease_book, ws.tenant)
            outcome = await leases.submit(ws.workspace, name, item, key.actor.participant,
                                          rid)
            if outcome == "expired":
                raise Conflict(f"the lease {rid} on {item} is not running (it expired, or was "
                               "never yours): nothing recorded; ask for the next item")
            # accepted, or submitted before under this lease: record it (once, by the
            # lease's command id: a retry answers the same outcome, another value conflicts).
        except Exception as exc:
            return error_frame_of(exc, command_id)
        return await self.service.execute(token, workspace_id, frame.model_dump(mode="json"))

    async def skip(self, token: str | None, workspace_id: str, name: str, item: str,
                   request_id: str) -> dict[str, Any]:
        """Give a leased item back: {"outcome": "skipped"}; Conflict when the lease is not
        running. The reviewer never gets that item again."""
        key, ws = self.service.authorize(token, workspace_id, "give_feedback")
        await self.service.client.log.require_tenant(ws.tenant)
        await asyncio.to_thread(self._live, ws.tenant, ws.workspace, name)
        leases = await asyncio.to_thread(self._lease_book, ws.tenant)
        outcome = await leases.skip(ws.workspace, name, item, key.actor.participant,
                                    request_id)
        if outcome != "skipped":
            raise Conflict(f"the lease {request_id} on {item} is not running: nothing to skip")
        return {"outcome": outcome}

    def close(self) -> None:
        """Stop following the queues and leases topics."""
        self.book.close()
        with self._leases_lock:
            books, self._leases = list(self._leases.values()), {}
        for book in books:
            book.close()

    async def list(self, token: str | None, workspace_id: str, *,
                   archived: bool = False) -> dict[str, Any]:
        """{"queues": [entry, ...]}: the workspace's live queues (and archived ones with
        `archived`), by name."""
        _key, ws = self.service.authorize(token, workspace_id, "read")
        await self.service.client.log.require_tenant(ws.tenant)
        found = await asyncio.to_thread(self.book.queues, ws.tenant, ws.workspace,
                                        archived=archived)
        return {"queues": [entry_json(e) for e in found]}

    async def install(self, token: str | None, workspace_id: str,
                      body: bytes | str | dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Install a queue from its JSON form: ({"queue": entry, "repeat": bool}, created).
        InvalidQueue (naming the JSON path), QueueNameTaken (a live queue of that name with
        another definition), or the key's refusal."""
        key, ws = self.service.authorize(token, workspace_id, "manage_queues")
        definition: object = body
        if isinstance(body, bytes | str):
            try:
                definition = json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise InvalidQueue(f"the body is not JSON: {exc}; send a queue's JSON form "
                                   "(schemas/queue/v1.schema.json)") from exc
        await self.service.client.log.require_tenant(ws.tenant)
        done = await self.book.install(ws.tenant, ws.workspace, definition,
                                       types=self.service.client.types, actor=key.actor)
        return {"queue": entry_json(done.entry), "repeat": done.repeat}, not done.repeat

    async def archive(self, token: str | None, workspace_id: str,
                      name: str) -> dict[str, Any]:
        """Archive a live queue: {"queue": entry}; NotFound naming the live ones."""
        key, ws = self.service.authorize(token, workspace_id, "manage_queues")
        await self.service.client.log.require_tenant(ws.tenant)
        entry = await self.book.archive(ws.tenant, ws.workspace, name, actor=key.actor)
        return {"queue": entry_json(entry)}
