"""The workspace handle: give feedback as an actor, append events, read the log.

    client = StreamsClient.from_env()      # or StreamsClient(runtime), on a process's Runtime
    ada = await client.open("acme", "prod", actor=UserActor(id="ada"))
    [latest] = await ada.runs(rule="ops:error-spike", limit=1)
    recorded = await ada.give_feedback(TriageQuality(correct=False, severity="high"),
                                       on=RunTarget(run_id=latest.id))
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from confluent_kafka import Message

from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.index import TenantIndex
from streams.adapters.kafka.log import EventLog, decode_envelopes
from streams.adapters.kafka.outputs import rule_forward
from streams.adapters.kafka.reports import produce_all
from streams.adapters.tracing import current_trace, tracing_enabled
from streams.core.actors import Actor, AnyActor, SystemActor
from streams.core.capabilities import Capability, Grants, builtin_grants
from streams.core.commands import (
    COMMAND_ID_PATTERN,
    GiveFeedback,
    LedgerEntry,
    command_digest,
)
from streams.core.errors import (
    IndexBehind,
    KafkaUnavailable,
    NotFound,
    StreamsError,
    ValidationFailed,
)
from streams.core.events import (
    ArtifactCreated,
    Change,
    Envelope,
    Event,
    FeedbackGiven,
    ProposalMade,
    ProposalResolved,
    RuleFired,
    RunStarted,
    Seq,
    TraceContext,
)
from streams.core.feedback import (
    Feedback,
    validate_feedback,
    value_record,
)
from streams.core.ids import (
    command_event_id,
    fired_event_id,
    firing_id,
    throttled_event_id,
)
from streams.core.measures.agreement import Verdict, compared_fields
from streams.core.measures.calibration import Calibration, CalibrationPolicy
from streams.core.proposals.checks import (
    artifact_to_create,
    change_of,
    proposal_to_make,
    resolution_to_record,
)
from streams.core.proposals.evaluator import EVALUATOR
from streams.core.proposals.fold import ProposalFold
from streams.core.queues import Entry
from streams.core.rules import Rule
from streams.core.rules.why import Why, considered, decided_why
from streams.core.runs import RunRecord, run_record_of
from streams.core.targets import ChainTarget, FiringTarget, RunTarget
from streams.core.tenancy import check_tenant, check_workspace, tenant_topics
from streams.core.view import (
    IndexEntry,
    Located,
    LogIndex,
    event_key,
    located_or_refused,
    not_found,
    target_key,
)
from streams.core.viewrows import PageKey, decode_cursor, encode_cursor
from streams.runtime.client.folds import ProposalLog
from streams.runtime.client.ledger import CommandLedger
from streams.runtime.client.many import FeedbackBatcher, FeedbackItem, Given, give_many
from streams.runtime.client.telemetry import feedback_counter, tracer
from streams.runtime.client.views import TenantView, view_path
from streams.runtime.root import Runtime
from streams.settings import Settings

BATCHERS_KEPT = 10_000
"""Group-commit batchers a client keeps (one per event loop, actor and workspace) before it
drops the idle ones."""


@dataclass(frozen=True)
class RunsPage:
    """A page of runs, newest first, and the cursor of the next page (None: no more now)."""

    runs: list[RunRecord]
    next_cursor: str | None


@dataclass(frozen=True)
class FeedbackPage:
    """A page of feedback envelopes, oldest first, and the next page's cursor (None: no
    more now)."""

    feedback: list[Envelope]
    next_cursor: str | None


@dataclass(frozen=True)
class Recorded:
    """Where an appended event landed (`seq`: partition and offset) and its event id."""

    seq: Seq
    id: str
    envelope: Envelope


class _TenantLog:
    """A tenant's whole log as one process sees it, for the calls that need all of it
    (`Workspace.read`, `feedback`, `runs`): grows with the log, read incrementally."""

    def __init__(self, runtime: Runtime, tenant: str) -> None:
        self.tenant = tenant
        self.serde = runtime.serde
        self.reader = runtime.topic_reader(
            tenant_topics(tenant, runtime.settings.topic_prefix).events)
        self.index = LogIndex()
        self.envelopes: list[Envelope] = []
        self.by_id: dict[str, Envelope] = {}
        # A thread lock, not an asyncio one: the client may be used from several event loops.
        self.lock = threading.Lock()
        self.caught_up_at = float("-inf")

    def _catch_up(self, asked: float) -> None:
        with self.lock:
            # A catch-up that started after this one was asked for read everything
            # acknowledged before it: concurrent callers share one read.
            if self.caught_up_at >= asked:
                return
            started = time.monotonic()
            for envelope in decode_envelopes(self.serde, self.reader.read_to_end(),
                                             on_error=lambda _m, _e: None):
                self.index.apply(envelope)
                self.envelopes.append(envelope)
                self.by_id[envelope.event_id] = envelope
            self.caught_up_at = started

    async def catch_up(self) -> None:
        """Read to the end of the log as it is now, folding every envelope into the index."""
        await asyncio.to_thread(self._catch_up, time.monotonic())


async def _caught_up(index: TenantIndex) -> None:
    """Catch `index` up with what was acknowledged before this call. The call's time is
    taken here, before the thread hop: a caller queued for a thread while another's
    catch-up began shares that one instead of waiting for the next (the pool's few threads
    would otherwise make each catch-up serve only the callers that held one)."""
    await asyncio.to_thread(partial(index.catch_up, asked=time.monotonic()))


class StreamsClient:
    """A process's connection to the pipeline: per-tenant views on a Runtime's clients.

    `StreamsClient(runtime)` shares the runtime's producer, serde and registry client (and
    its feedback types); `StreamsClient.from_env()` builds a Runtime of its own. Building one
    does no I/O. Usable from several event loops (and threads) at once: it holds no asyncio
    object across calls. Closed by `close()` or by its runtime's `close()`. With
    `read_views=False` (a worker's), `run_record` and `why` always read the index, never a
    read view the machine keeps.
    """

    def __init__(self, runtime: Runtime, *, grants: Grants | None = None,
                 read_views: bool = True) -> None:
        if not isinstance(runtime, Runtime):
            raise TypeError(
                f"StreamsClient takes a Runtime, not {type(runtime).__name__}: use "
                "StreamsClient(Runtime(settings)) or StreamsClient.from_env()")
        self.runtime = runtime
        self.settings = runtime.settings
        self.types = runtime.types
        # Who may do what (streams.core.capabilities); every handle checks it before I/O.
        self.grants = grants or builtin_grants()
        # Whether look-ups (run_record, why) may read a read view this machine keeps: a
        # worker's client says no, so its actions never catch a view up (a busy worker would
        # apply every event twice, and share the file with the machine's server).
        self.read_views = read_views
        self._tenants: dict[str, _TenantLog] = {}
        self._proposal_logs: dict[str, ProposalLog] = {}
        self._indexes: dict[str, TenantIndex] = {}
        self._views: dict[str, TenantView] = {}
        self._ledgers: dict[str, CommandLedger] = {}
        self._batchers: dict[tuple[int, str, str, Actor, frozenset[Capability] | None],
                             FeedbackBatcher] = {}
        self._made = threading.Lock()
        self._owns_runtime = False
        self._closed = False
        runtime.on_close(self.close)

    @classmethod
    def from_env(cls, **overrides: Any) -> StreamsClient:
        """A client on a Runtime of its own, configured from the environment (see
        Settings.from_env); its `close()` closes that runtime too."""
        client = cls(Runtime(Settings.from_env(**overrides)))
        client._owns_runtime = True
        return client

    @property
    def serde(self) -> AvroSerde:
        """The runtime's Avro serde."""
        return self.runtime.serde

    @property
    def log(self) -> EventLog:
        """The runtime's event log (appends, on its shared producer)."""
        return self.runtime.event_log

    def workspace(self, tenant: str, workspace: str, *, actor: Actor | None = None) -> Workspace:
        """A handle on one workspace of a tenant, acting as `actor` (default: the system)."""
        check_tenant(tenant)
        check_workspace(workspace)
        return Workspace(self, tenant, workspace, actor or SystemActor())

    async def open(self, tenant: str, workspace: str, *, actor: Actor | None = None,
                   ) -> Workspace:
        """A handle on one workspace of a tenant, acting as `actor`, once the tenant is known
        to exist: NotFound (saying how to create it) otherwise.

        `workspace()` gives the same handle without asking the broker; a missing tenant then
        shows at the first append or read.
        """
        handle = self.workspace(tenant, workspace, actor=actor)
        await self.log.require_tenant(tenant)
        return handle

    def tenant_log(self, tenant: str) -> _TenantLog:
        """The tenant's whole-log view, created on first use."""
        with self._made:
            log = self._tenants.get(tenant)
            if log is None:
                log = self._tenants[tenant] = _TenantLog(self.runtime, tenant)
            return log

    def proposal_log(self, tenant: str) -> ProposalLog:
        """The tenant's proposal folds (the proposal-outcome rule's state), created on first
        use; no I/O until a fold is asked for."""
        with self._made:
            found = self._proposal_logs.get(tenant)
            if found is None:
                topic = tenant_topics(tenant, self.settings.topic_prefix).events
                found = self._proposal_logs[tenant] = ProposalLog(
                    partial(self.runtime.topic_reader, topic), self.runtime.codec)
            return found

    def proposal_log_if_kept(self, tenant: str) -> ProposalLog | None:
        """The tenant's proposal folds if this process keeps them already (None otherwise:
        they are never made for this)."""
        return self._proposal_logs.get(tenant)

    def tenant_log_if_kept(self, tenant: str) -> _TenantLog | None:
        """The tenant's whole-log view if this process keeps one already (None otherwise:
        it is never made for this)."""
        return self._tenants.get(tenant)

    def tenant_view(self, tenant: str) -> TenantView:
        """The tenant's materialized read view (a SQLite file in STREAMS_STATE_DIR that
        outlives the process), created on first use; no I/O until it catches up."""
        found = self._views.get(tenant)
        if found is not None:
            return found
        with self._made:
            view = self._views.get(tenant)
            if view is None:
                view = self._views[tenant] = TenantView(self.runtime, tenant)
            return view

    def tenant_view_if_kept(self, tenant: str) -> TenantView | None:
        """The tenant's materialized read view if this machine keeps one: this process has
        it open, or its file is in STREAMS_STATE_DIR (a serving process's, or one `streams
        views build` made). None otherwise (and always for a client made with
        `read_views=False`, a worker's): a look-up never builds a view from the log."""
        if not self.read_views:
            return None
        if tenant in self._views or view_path(self.settings, tenant).exists():
            return self.tenant_view(tenant)
        return None

    def tenant_index(self, tenant: str) -> TenantIndex:
        """The tenant's index view (its compacted index topic), created on first use; the
        index topic is created for a tenant that has none yet."""
        found = self._indexes.get(tenant)
        if found is not None:
            return found
        with self._made:
            index = self._indexes.get(tenant)
            if index is None:
                index = self._indexes[tenant] = self.runtime.index(tenant)
            return index

    async def opened_index(self, tenant: str) -> TenantIndex:
        """`tenant_index`, opened on first use (the tenant's topics required first)."""
        index = self.tenant_index(tenant)
        if not index.is_open:
            await self.log.require_topic(tenant)
            await asyncio.to_thread(index.open)
        return index

    async def indexed_events(self, index: TenantIndex, event_ids: Sequence[str], *,
                             catch_up: bool = True, workspace: str | None = None,
                             ) -> list[Envelope]:
        """The events `event_ids` the index knows (of `workspace`, or of any), each read
        where its entry says it is, in the ids' order (ids not found left out); on a miss,
        when `catch_up`, the index is first caught up once with what was acknowledged before
        the call and the missing ids looked up again. IndexBehind when the index is too far
        behind to catch up."""
        wanted = list(dict.fromkeys(event_ids))

        def look(ids: list[str]) -> dict[str, IndexEntry]:
            found = {i: index.lookup(event_key(i)) for i in ids}
            return {i: e for i, e in found.items() if e is not None}

        entries = await asyncio.to_thread(look, wanted) if wanted else {}
        missing = [i for i in wanted if i not in entries]
        if missing and catch_up:
            await _caught_up(index)
            entries.update(await asyncio.to_thread(look, missing))
        if workspace is not None:  # another workspace's event is known by its entry: not read
            entries = {i: e for i, e in entries.items() if e.located.workspace == workspace}
        if not entries:
            return []
        places = [entries[i] for i in wanted if i in entries]

        def read() -> list[Message]:
            return [m for m in index.messages_at(places) if m is not None]

        decoded = decode_envelopes(self.serde, iter(await asyncio.to_thread(read)),
                                   on_error=lambda _m, _e: None)
        return [e for e in decoded if e.event_id in entries]

    async def events_by_id(self, tenant: str, event_ids: Sequence[str]) -> dict[str, Envelope]:
        """Events of `tenant`, of any workspace, by id (`indexed_events`: the index looked
        up, caught up once on a miss, each found event one record read). Ids not found are
        left out. An index too far behind to catch up (IndexBehind) is answered from the
        tenant's whole log instead (read into this process, as before the index: a worker's
        runs then still find their events)."""
        if not event_ids:
            return {}
        index = await self.opened_index(tenant)
        try:
            found = await self.indexed_events(index, event_ids)
        except IndexBehind:
            log = self.tenant_log(tenant)
            await log.catch_up()
            return {i: log.by_id[i] for i in event_ids if i in log.by_id}
        return {e.event_id: e for e in found}

    def batcher(self, ws: Workspace) -> FeedbackBatcher:
        """The event loop's group commit for `ws`'s actor in `ws`'s workspace (see
        FeedbackBatcher): every handle of that actor, workspace and capabilities shares it."""
        key = (id(asyncio.get_running_loop()), ws.tenant, ws.workspace, ws.actor,
               ws.capabilities)
        found = self._batchers.get(key)
        if found is None:
            if len(self._batchers) >= BATCHERS_KEPT:
                # One per actor and workspace seen: a server meets many over its life. An
                # idle one holds nothing, so dropping it loses nothing.
                for old in [k for k, b in self._batchers.items() if b.idle]:
                    del self._batchers[old]
            found = self._batchers[key] = FeedbackBatcher(ws)
        return found

    async def ledger(self, tenant: str) -> CommandLedger:
        """The tenant's command ledger (idempotent command ids), followed from first use; its
        topic is created when missing."""
        ledger = self._ledgers.get(tenant)
        if ledger is not None and ledger.running:
            return ledger
        with self._made:
            ledger = self._ledgers.get(tenant)
            if ledger is None:
                ledger = self._ledgers[tenant] = CommandLedger(
                    self.runtime, tenant, reports=self.log.reports)
        await self.log.require_tenant(tenant)
        await asyncio.to_thread(ledger.start)
        return ledger

    def close(self) -> None:
        """Flush pending writes and leave the broker (once; later calls do nothing). A
        client from `from_env` closes its runtime too."""
        if self._closed:
            return
        self._closed = True
        for ledger in self._ledgers.values():
            ledger.close()
        for log in self._tenants.values():
            log.reader.close()
        for folds in self._proposal_logs.values():
            folds.close()
        for index in self._indexes.values():
            index.close()
        for view in self._views.values():
            view.close()
        if self._owns_runtime:
            self.runtime.close()
        else:
            # Index entries follow appends without being awaited: flush them now.
            self.runtime.flush()


class Workspace:
    """One workspace of one tenant, seen and written as one actor."""

    def __init__(self, client: StreamsClient, tenant: str, workspace: str, actor: Actor, *,
                 capabilities: frozenset[Capability] | None = None) -> None:
        self.client = client
        self.tenant = tenant
        self.workspace = workspace
        self.actor = actor
        # None: whatever the actor's grant allows; else narrowed to these as well.
        self.capabilities = capabilities

    def as_actor(self, actor: Actor, *,
                 capabilities: frozenset[Capability] | None = None) -> Workspace:
        """The same workspace, acting as someone else (an evaluator, say); `capabilities`
        narrows what this handle may do below the actor's grant (never widens it)."""
        return Workspace(self.client, self.tenant, self.workspace, actor,
                         capabilities=capabilities)

    def _check_append(self, event_type: str) -> None:
        self.client.grants.check_append(self.actor, event_type, narrowed=self.capabilities)

    def _check_read(self, what: str) -> None:
        self.client.grants.check(self.actor, Capability.READ, doing=f"reading {what}",
                                 narrowed=self.capabilities)

    async def append(
        self,
        event: Event,
        *,
        correlation_id: str | None = None,
        causation_id: str | None = None,
        trace: TraceContext | None = None,
        event_id: str | None = None,
    ) -> Recorded:
        """Append an event as this actor; without a correlation id it starts a new chain.
        Without `trace` it carries the active span's trace context, if there is one.
        `event_id` (default: a new random id) is for ids derived from what caused the event.

        Forbidden if the actor (or this handle) may not append events of this type."""
        self._check_append(event.type_name)
        envelope = Envelope.new(
            event, tenant=self.tenant, workspace=self.workspace, actor=self.actor,
            correlation_id=correlation_id, causation_id=causation_id,
            trace=trace if trace is not None else current_trace(),
            event_id=event_id,
        )
        return await self.append_envelope(envelope)

    async def append_envelope(self, envelope: Envelope) -> Recorded:
        """Append a ready envelope (rules and replays build their own).

        Returns once the broker acknowledged it, without flushing the producer: concurrent
        appends share its batches. The envelope's index entries follow it, so this process
        finds what it appended at once, and others within the producer's linger.
        """
        self.client.grants.check_append(envelope.actor, envelope.event_type,
                                        narrowed=self.capabilities)
        index = await self._index()
        seq = await self.client.log.append(envelope, landed=index.appended)
        return Recorded(seq=seq, id=envelope.event_id,
                        envelope=envelope.model_copy(update={"seq": seq}))

    async def _index(self) -> TenantIndex:
        return await self.client.opened_index(self.tenant)

    async def locate(self, target: RunTarget | FiringTarget | ChainTarget) -> Located:
        """Where a target is in this workspace; NotFound if the log does not have it.

        Answered from the tenant's index topic: the one index partition of the target's key,
        read from where this process stopped. On a miss the index first catches up with the
        events appended since the last catch-up (by workers, say), so anything acknowledged
        before the call is found; the whole log is never read for it.
        """
        # A process that keeps the tenant's whole log (`read()`'s) has every target it read
        # already, and one running the proposal-outcome rule every run its folds read: a
        # hit there needs no broker; a miss asks the index.
        view = self.client.tenant_log_if_kept(self.tenant)
        if view is not None:
            seen = view.index.locate(target, self.workspace)
            if seen is not None:
                return seen
        folds = self.client.proposal_log_if_kept(self.tenant)
        if folds is not None and isinstance(target, RunTarget):
            read = folds.locate_run(target.run_id, self.workspace)
            if read is not None:
                return read
        index = await self._index()
        cached = index.cached(target_key(target))
        if cached is not None:
            found = located_or_refused(target, cached, None, self.workspace)
        else:
            found = await asyncio.to_thread(index.locate, target, self.workspace)
        if found is None:
            raise not_found(target, self.tenant, self.workspace)
        return found

    async def chain_events(self, correlation_id: str) -> list[Envelope]:
        """Every envelope of a causal chain in this workspace, in log order ([] if there is
        no such chain).

        Where this machine keeps the tenant's read view (`StreamsClient.tenant_view_if_kept`),
        from the view: the events filed under the chain's key, an index range. Otherwise, in
        the chain's one partition, the span from its first to its last indexed event (both
        found in the index) and the partition's unindexed tail; not the log.
        """
        self._check_read("a chain")
        view = await self._kept_view()
        if view is not None:
            return await asyncio.to_thread(view.chain_events, self.workspace, correlation_id)
        index = await self._index()
        head = await asyncio.to_thread(index.lookup, f"chain:{correlation_id}")
        if head is None:
            await _caught_up(index)
            head = await asyncio.to_thread(index.lookup, f"chain:{correlation_id}")
        if head is None or head.located.workspace != self.workspace:
            return []
        # Reading and decoding the chain are both off the event loop.
        return await asyncio.to_thread(lambda: self._decoded(index.chain_messages(head)))

    def _decoded(self, messages: list[Message]) -> list[Envelope]:
        return [e for e in decode_envelopes(self.client.serde, iter(messages),
                                            on_error=lambda _m, _e: None)
                if e.workspace == self.workspace]

    async def event(self, event_id: str) -> Envelope | None:
        """One event of this workspace by its id, or None: read where the index says it is
        (one record), the index caught up with the unindexed tail first on a miss, so an
        event acknowledged before the call is found (an evaluator's verdict record, say).
        A process that keeps the tenant's whole log (`read()`'s) answers an event it has
        read from memory, with no read."""
        self._check_read("an event")
        kept = self.client.tenant_log_if_kept(self.tenant)
        seen = None if kept is None else kept.by_id.get(event_id)
        if seen is not None and seen.workspace == self.workspace:
            # Events never change once written: what this process read is the event. A miss
            # asks the index, which waits for open transactions (the kept log's reader stops
            # at the last stable offset).
            return seen
        found = await self._indexed_events(await self._index(), [event_id], catch_up=True)
        return found[0] if found else None

    async def _indexed_events(self, index: TenantIndex, event_ids: list[str], *,
                              catch_up: bool) -> list[Envelope]:
        """Events of this workspace read where the index says they are (those it has), the
        index caught up once first on a miss when `catch_up`."""
        found = await self.client.indexed_events(index, event_ids, catch_up=catch_up,
                                                 workspace=self.workspace)
        return [e for e in found if e.workspace == self.workspace]

    async def why(self, rule: Rule, event_id: str) -> Why:
        """What `rule` did with the event `event_id` of this workspace, and why: left out
        (not watched, filtered out, sampled out), counted, throttled, undecided, or fired,
        with its run's state (judged, handed off, over budget, running, retrying,
        dead-lettered); see
        streams.core.rules.why. NotFound if the workspace has no such event.

        Where this machine keeps the tenant's read view (`StreamsClient.tenant_view_if_kept`),
        from the view: the event, its firing and throttle records by the ids derived from
        the rule and the event, and its run's events (a completion rule's: the event's
        chain). Otherwise two reads, not the log: the event where the index says it is, then
        (when the rule's checks let it through) its chain, where a firing or a throttle of
        the event is recorded under those ids, and the run's events.
        """
        self._check_read("an event")
        view = await self._kept_view()
        if view is not None:
            # The machine keeps the tenant's read view: its records by their derived ids,
            # the run's events and the chains.
            answer = await asyncio.to_thread(view.why, self.workspace, rule, event_id)
            if answer is None:
                raise NotFound(f"no event {event_id!r} in workspace {self.tenant}/"
                               f"{self.workspace}")
            return answer
        target = await self.event(event_id)
        if target is None:
            raise NotFound(f"no event {event_id!r} in workspace {self.tenant}/"
                           f"{self.workspace}")
        left_out = considered(rule, target)
        if left_out is not None:
            return left_out
        # A firing (or throttle) joins the chain of the event that caused it.
        chain = await self.chain_events(target.correlation_id)
        return decided_why(rule, event_id, {e.event_id: e for e in chain}.get, chain)

    async def decide(self, rule: Rule, event: Event, *, correlation_id: str,
                     causation_id: str | None = None, wait_s: float | None = None) -> bool:
        """Have the decider of stateful rules decide `event` for `rule` (a budget's claim:
        streams.core.budgets), and wait for the answer: True when the rule fired on it,
        False when it was held back (throttled).

        The event goes to the tenant's rules topic as a forwarded match (not to the events
        topic: the reactor, which forwards matches, may be the very loop waiting on this
        call), and the answer is the firing's `rule_fired` or the throttle's record, found
        in the events topic by ids derived from the rule and the event. KafkaUnavailable
        when the write is not acknowledged, or no answer comes within `wait_s` (default
        STREAMS_FEEDBACK_TIMEOUT): no worker runs the decider, or it is far behind."""
        self._check_append(event.type_name)
        envelope = Envelope.new(
            event, tenant=self.tenant, workspace=self.workspace, actor=self.actor,
            correlation_id=correlation_id, causation_id=causation_id, trace=current_trace())
        log = self.client.log
        wait = log.settings.feedback_timeout if wait_s is None else wait_s
        topics = tenant_topics(self.tenant, log.settings.topic_prefix)
        value = log.encode(envelope, topics.events)  # as the reactor forwards its bytes
        forward = rule_forward(topics.rules, rule.name, rule.scope_key(envelope),
                               envelope.event_type, value)
        [landed] = await produce_all(log.producer, log.reports, [
            (forward.topic, forward.key, value, forward.headers, None)], wait_s=wait)
        if isinstance(landed, Exception):
            raise landed
        firing = firing_id(rule.name, envelope.event_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        pause = 0.05
        self._check_read("a decision")  # as `event` did for each look
        index = await self._index()
        while True:
            # One catch-up of the index per look, on the first miss: the second look-up
            # finds in it whatever the first catch-up indexed.
            fired = await self._indexed_events(index, [fired_event_id(firing)], catch_up=True)
            if fired:
                return True
            held = await self._indexed_events(index, [throttled_event_id(firing)],
                                              catch_up=False)
            if held:
                return False
            if loop.time() + pause > deadline:
                raise KafkaUnavailable(
                    f"rule {rule.name!r} did not decide {envelope.event_type} "
                    f"{envelope.event_id} within {wait:g} s (STREAMS_FEEDBACK_TIMEOUT): is a "
                    "worker with this rule running, and its rule decider caught up?")
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def run_record(self, run_id: str) -> RunRecord:
        """A run, the envelopes that made its rule fire (`matched`) and what it emitted;
        NotFound if this workspace has no such run.

        Where this machine keeps the tenant's read view (`StreamsClient.tenant_view_if_kept`),
        from the view caught up to the log's end as of the call (what `runs` answers with):
        a few indexed reads of its file. Otherwise from the index: the run's chain (see
        `chain_events`) and, for matched events of other chains (a counting rule's), those
        events where the index says they are, in one round; a process's first index read
        loads the key's whole index partition (docs/limitations.md).
        """
        self._check_read("a run")
        view = await self._kept_view()
        if view is not None:
            kept = await asyncio.to_thread(view.run_record, self.workspace, run_id)
            if kept is None:
                raise NotFound(f"no run {run_id!r} in workspace {self.tenant}/{self.workspace}")
            return kept
        where = await self.locate(RunTarget(run_id=run_id))
        envelopes = await self.chain_events(where.correlation_id)
        record = run_record_of(envelopes, run_id)
        if record is not None and record.fired is not None and isinstance(
                record.fired.event, RuleFired):
            envelopes += await self._matched_elsewhere(envelopes, record.fired.event)
            record = run_record_of(envelopes, run_id)
        if record is None:
            raise NotFound(f"no run {run_id!r} in workspace {self.tenant}/{self.workspace}")
        return record

    async def _matched_elsewhere(self, envelopes: list[Envelope],
                                 fired: RuleFired) -> list[Envelope]:
        """The events a firing matched that are not among `envelopes` (a counting rule's,
        of other chains): read where the index says they are, in one round."""
        have = {e.event_id for e in envelopes}
        elsewhere = [i for i in fired.matched if i not in have]
        if not elsewhere:
            return []
        return await self._indexed_events(await self._index(), elsewhere, catch_up=True)

    async def firing_record(self, firing_id: str) -> tuple[Envelope, list[Envelope],
                                                           list[Envelope]]:
        """A firing: its rule_fired envelope, the envelopes it matched and the runs it
        started (their run_started envelopes, first attempts); NotFound if this workspace
        has no such firing. Reads its chain and, for matched events elsewhere, those events
        in one round."""
        self._check_read("a firing")
        where = await self.locate(FiringTarget(firing_id=firing_id))
        envelopes = await self.chain_events(where.correlation_id)
        fired = next((e for e in envelopes if isinstance(e.event, RuleFired)
                      and e.event.firing_id == firing_id), None)
        if fired is None or not isinstance(fired.event, RuleFired):
            raise NotFound(f"no firing {firing_id!r} in workspace "
                           f"{self.tenant}/{self.workspace}")
        envelopes += await self._matched_elsewhere(envelopes, fired.event)
        by_id = {e.event_id: e for e in envelopes}
        matched = [by_id[i] for i in fired.event.matched if i in by_id]
        runs = [e for e in envelopes if isinstance(e.event, RunStarted)
                and e.event.firing_id == firing_id and e.event.attempt == 1]
        return fired, matched, runs

    async def give_feedback(
        self,
        value: Feedback | Mapping[str, Any],
        *,
        on: RunTarget | FiringTarget | ChainTarget,
        feedback_type: str | None = None,
        command_id: str | None = None,
    ) -> Recorded:
        """Record feedback on a run, firing or chain, in the target's causal chain.

        Raises ValidationFailed if the type cannot be given on the target's kind, a chain
        target is not the first event of its chain, or the record would be larger than
        STREAMS_MAX_RECORD_BYTES; NotFound if the target is not in the log; RegistryUnavailable
        (a KafkaUnavailable) if the schema registry cannot be reached, and KafkaUnavailable if
        the broker does not answer, within STREAMS_FEEDBACK_TIMEOUT. Concurrent calls share
        the producer's batches; each returns its own seq and id once delivered.

        With a `command_id` (1-128 letters, digits and `_.:-`), the call records once: the
        same id from the same actor in this workspace returns the first call's seq and id
        every time (across processes and restarts, for STREAMS_COMMAND_RETENTION), and
        raises Conflict if the id was used for different feedback (see docs/api.md).
        """
        if not isinstance(on, RunTarget | FiringTarget | ChainTarget):
            raise ValidationFailed(
                f"on= must be a RunTarget, FiringTarget or ChainTarget, not "
                f"{type(on).__name__} (e.g. on=RunTarget(run_id=...))")
        self._check_append(FeedbackGiven.event_type)
        feedback = validate_feedback(value, feedback_type, self.client.types)
        if command_id is None:
            return await self._give(feedback, on, None)
        return await self._give_once(feedback, on, command_id)

    async def give_feedback_many(
        self,
        items: Iterable[FeedbackItem | tuple[Any, ...]],
        *,
        batch_size: int = 1000,
    ) -> list[Given | StreamsError]:
        """Record many pieces of feedback, each as `give_feedback` would, in far fewer round
        trips: for a producer of feedback in bulk (an import, a labelling job, a surface
        coalescing commands).

        `items` are FeedbackItem(value, on, feedback_type=None, command_id=None), or tuples
        in that order. Returns, in the items' order, a `Given` (seq and event id) for each
        recorded item, or the error that item alone was refused with (ValidationFailed,
        NotFound, TooLarge, Conflict, KafkaUnavailable, ...): one bad item does not fail the
        others. Command ids record once across this call, `give_feedback` and every surface:
        a repeated id answers the first recording's seq and id; an id repeated within the
        call with the same feedback is one command, with different feedback a Conflict.

        Items are processed `batch_size` at a time (each batch waits for one ledger read-back
        and one round of acknowledgements). Raises Forbidden if this actor may not give
        feedback, and KafkaUnavailable (nothing of the failing batch is answered) if the
        brokers do not answer within STREAMS_FEEDBACK_TIMEOUT; retry with the same command
        ids to record each item once.
        """
        return await give_many(self, items, batch_size)

    async def record_command(
        self,
        value: Mapping[str, Any],
        *,
        on: RunTarget | FiringTarget | ChainTarget,
        feedback_type: str,
        command_id: str | None,
    ) -> tuple[Seq, str]:
        """give_feedback for surfaces: the same checks and idempotency, answering only the
        seq and event id, so a repeated command id costs no read of the earlier event.

        Concurrent calls of one actor in one workspace are recorded together
        (`StreamsClient.batcher`, group commit through give_feedback_many): a surface's
        commands in flight share the ledger's claims and the broker's round trips."""
        self._check_append(FeedbackGiven.event_type)

        async def give() -> Given:
            # The item carries the trace context current when it is made (the span's).
            return await self.client.batcher(self).give(FeedbackItem(
                value, on, feedback_type, command_id, trace=current_trace()))

        if not tracing_enabled():
            # No provider: a span would record nothing and carry its parent's context, which
            # the event then carries as it is. Starting one was about a tenth of a
            # WebSocket command's CPU in a sampling profile of bench.surfaces.
            given = await give()
            return given.seq, given.id
        attributes = {"streams.tenant": self.tenant, "streams.workspace": self.workspace,
                      "streams.feedback_type": feedback_type, "streams.target_kind": on.kind,
                      "streams.participant": self.actor.participant}
        # Concurrent commands go to the broker together (FeedbackBatcher); each keeps a span
        # of its own, whose context its event carries, as give_feedback's does.
        with tracer().start_as_current_span(f"streams.feedback {feedback_type}",
                                            attributes=attributes) as span:
            given = await give()
            span.set_attribute("streams.seq", str(given.seq))
            span.set_attribute("streams.event_id", given.id)
        return given.seq, given.id

    async def _give_once(self, feedback: Feedback, on: RunTarget | FiringTarget | ChainTarget,
                         command_id: str) -> Recorded:
        entry, mine = await self._record_once(feedback, on, command_id)
        if mine is not None:
            return mine
        assert entry.partition is not None and entry.offset is not None
        assert entry.event_id is not None
        return await self._recorded_before(entry.event_id, entry.partition, entry.offset)

    async def _record_once(self, feedback: Feedback,
                           on: RunTarget | FiringTarget | ChainTarget,
                           command_id: str) -> tuple[LedgerEntry, Recorded | None]:
        if not isinstance(command_id, str) or not COMMAND_ID_PATTERN.fullmatch(command_id):
            raise ValidationFailed(
                f"invalid command id {command_id!r}: use 1-128 letters, digits and _.:- "
                "starting with a letter or digit")
        name = type(feedback).feedback_name
        digest = command_digest(GiveFeedback(feedback_type=name, target=on,
                                             value=feedback.model_dump(mode="json")))
        event_id = command_event_id(self.tenant, self.workspace, self.actor.participant,
                                    command_id)
        ledger = await self.client.ledger(self.tenant)
        mine: list[Recorded] = []

        async def record() -> tuple[int, int, str]:
            recorded = await self._give(feedback, on, event_id)
            mine.append(recorded)
            return recorded.seq.partition, recorded.seq.offset, recorded.id

        async def find_event() -> tuple[int, int, str] | None:
            index = await self._index()
            await _caught_up(index)
            entry = await asyncio.to_thread(index.lookup, event_key(event_id))
            return None if entry is None else (entry.partition, entry.offset, event_id)

        entry = await ledger.run(workspace=self.workspace, participant=self.actor.participant,
                                 command_id=command_id, digest=digest, record=record,
                                 find_event=find_event)
        return entry, (mine[0] if mine else None)

    async def _recorded_before(self, event_id: str, partition: int, offset: int) -> Recorded:
        """The Recorded of an event appended by an earlier attempt, read back at its seq."""
        index = await self._index()
        at = await asyncio.to_thread(index.message_at, IndexEntry(
            Located(self.workspace, "", event_id, None), partition, offset))
        found = self._decoded([at]) if at is not None else []
        if not found:
            raise KafkaUnavailable(f"the recorded event {event_id} at {partition}:{offset} "
                                   "could not be read back; retry")
        seq = Seq(partition=partition, offset=offset)
        return Recorded(seq=seq, id=event_id, envelope=found[0].model_copy(update={"seq": seq}))

    async def _give(self, feedback: Feedback, on: RunTarget | FiringTarget | ChainTarget,
                    event_id: str | None) -> Recorded:
        cls = type(feedback)
        attributes = {"streams.tenant": self.tenant, "streams.workspace": self.workspace,
                      "streams.feedback_type": cls.feedback_name,
                      "streams.target_kind": on.kind,
                      "streams.participant": self.actor.participant}
        with tracer().start_as_current_span(f"streams.feedback {cls.feedback_name}",
                                             attributes=attributes) as span:
            if on.kind not in cls.feedback_targets:
                raise ValidationFailed(
                    f"{cls.feedback_name} feedback cannot be given on a {on.kind}; it "
                    f"targets {sorted(cls.feedback_targets)}"
                )
            timeout = self.client.settings.feedback_timeout
            try:
                async with asyncio.timeout(timeout):
                    where = await self.locate(on)
            except TimeoutError as exc:
                raise KafkaUnavailable(
                    f"looking up {on.kind} {on.id!r} took more than {timeout:g} s "
                    "(STREAMS_FEEDBACK_TIMEOUT): check that the brokers are up; if the "
                    "index is catching up with a long unindexed log (it goes on in the "
                    f"background), run `streams index build --tenant {self.tenant}`, "
                    "then retry") from exc
            event = FeedbackGiven(
                feedback_type=cls.feedback_name, target=on, target_trace_id=where.trace_id,
                target_rule=where.rule, target_action=where.action,
                value=value_record(feedback),
            )
            recorded = await self.append(event, correlation_id=where.correlation_id,
                                         causation_id=where.event_id, trace=current_trace(),
                                         event_id=event_id)
            span.set_attribute("streams.seq", str(recorded.seq))
            span.set_attribute("streams.event_id", recorded.id)
        feedback_counter.add(1, attributes)
        return recorded

    async def read(self) -> list[Envelope]:
        """This workspace's envelopes, in log order per partition, up to the log's end: an
        offline call, for scripts and analyses of a whole workspace.

        Folds the tenant's whole events topic into pydantic envelopes (once per process, then
        incrementally) and keeps them in memory: its time and memory grow with the log
        (docs/limitations.md). Nothing on a request path uses it: `runs`, `feedback`,
        `give_feedback`, `locate`, `run_record` and `chain_events` read the tenant's view or
        index. `streams report` reads a whole log faster, with a progress bar.
        """
        self._check_read("the log")
        log = self.client.tenant_log(self.tenant)
        await log.catch_up()
        return [e for e in log.envelopes if e.workspace == self.workspace]

    async def proposal_fold(self, evaluator: AnyActor = EVALUATOR) -> ProposalFold:
        """This workspace's artifact ledger and the proposals `evaluator` scored, up to the
        log's end as of the call (`ProposalSource`, the proposal-outcome rule's port).

        Reads the log from where this process stopped and folds only those records into a
        fold kept per workspace, so a call costs what was appended since the last one.
        """
        self._check_read("proposals")
        folds = self.client.proposal_log(self.tenant)
        return await asyncio.to_thread(folds.fold, self.workspace, evaluator,
                                       time.monotonic())

    async def create_artifact(self, artifact_id: str, content: Mapping[str, str], *,
                              kind: str = "note") -> Recorded:
        """Record a new artifact (its first version, by this actor), in a chain of its own.

        ValidationFailed if the id is taken in this workspace or the content is not text
        fields. Checked against the workspace's proposal fold (see `proposal_fold`).
        """
        self._check_append(ArtifactCreated.event_type)  # before any I/O
        fold = await self.proposal_fold()
        return await self.append(artifact_to_create(fold.ledger, artifact_id, content, kind))

    async def propose(self, artifact_id: str, change: Change | Mapping[str, Any] | None = None,
                      *, action: Literal["revise", "archive"] = "revise",
                      proposal_id: str | None = None, run_id: str | None = None,
                      ) -> Recorded:
        """Propose, as this actor, a change to an artifact (`action="revise"`, with `change`:
        a Change or `{"set": {...}, "unset": [...]}`) or its archive (`action="archive"`).

        The proposal id defaults to a fresh one (in `Recorded.envelope`). NotFound: no such
        artifact; ValidationFailed: the id is taken, the artifact is archived, or the change
        does not apply (unsets fields it lacks) or changes nothing. A rule's action proposes
        with `reaction.emit(ProposalMade(...))` instead, so the proposal is in its run's
        chain, which is what traces it to the run.
        """
        self._check_append(ProposalMade.event_type)  # before any I/O
        fold = await self.proposal_fold()
        event = proposal_to_make(fold.ledger, proposal_id or f"proposal-{uuid.uuid4().hex}",
                                 artifact_id, change_of(change), action, run_id)
        return await self.append(event)

    async def resolve(self, proposal_id: str,
                      resolution: Literal["accepted", "rejected"] = "accepted", *,
                      changes: Change | Mapping[str, Any] | None = None) -> Recorded:
        """Accept (with this actor's own `changes` on top, perhaps) or reject an open
        proposal, as this actor, in the proposal's chain (so one proposal's resolutions stay
        on one partition, in order).

        NotFound: no such proposal; ValidationFailed: it was resolved already, changes on a
        rejection or an archive, or changes that do not apply to what the proposal makes.
        """
        self._check_append(ProposalResolved.event_type)  # before any I/O
        fold = await self.proposal_fold()
        event = resolution_to_record(fold.ledger, proposal_id, resolution, change_of(changes))
        state = fold.ledger.proposal(proposal_id)
        assert state is not None  # resolution_to_record found it
        return await self.append(event, correlation_id=state.envelope.correlation_id,
                                 causation_id=state.envelope.event_id)

    async def _view(self, *, catch_up: bool = True) -> TenantView:
        """The tenant's view, caught up to the events topic's end as of this call (so what
        this process appended before the call is in it); as it is with `catch_up=False`
        (the later reads of one walk over it: each catch-up asks the broker for its ends)."""
        view = self.client.tenant_view(self.tenant)
        if catch_up:
            await asyncio.to_thread(view.catch_up, asked=time.monotonic())
        return view

    async def _kept_view(self) -> TenantView | None:
        """`_view`, caught up, where this machine keeps the tenant's view
        (`StreamsClient.tenant_view_if_kept`); None elsewhere (never built for a look-up)."""
        if self.client.tenant_view_if_kept(self.tenant) is None:
            return None
        return await self._view()

    async def runs(self, *, rule: str | None = None, limit: int | None = None,
                   ) -> list[RunRecord]:
        """This workspace's runs (of `rule`, when given), newest first, at most `limit`.

        Each is a RunRecord: `.id` (the run id, for a RunTarget), `.run` (its `run_started`:
        rule, action, scope), `.matched` (the envelopes that made its rule fire) and
        `.emitted` (the events it emitted). Newest by the time of the `run_started`, then by
        partition and offset; a `run_started` recorded again is one run.

        Answered from the tenant's materialized view (`tenant_view`): it first applies what
        was appended since it last caught up (by anyone: a run started before the call is
        there), then runs one indexed query and decodes only the runs it returns, so the
        cost does not grow with the log. `runs_page` pages through them with a cursor.
        """
        page = await self.runs_page(rule=rule, limit=limit)
        return page.runs

    async def runs_page(self, *, rule: str | None = None, limit: int | None = 50,
                        cursor: str | None = None) -> RunsPage:
        """A page of `runs`: at most `limit` runs after `cursor` (a page's `next_cursor`;
        None for the first page), and the cursor of the next page (None when no more runs
        are there as of the call). Runs started after the first page was read are newer than
        it, so they never shift later pages: no run is skipped or repeated.

        ValidationFailed for a cursor not given out by this call or a limit below 1.
        """
        self._check_read("runs")
        before = None if cursor is None else decode_cursor(cursor)
        if limit is not None and limit < 1:
            raise ValidationFailed(
                f"limit must be at least 1 (or None for every run), got {limit}")
        view = await self._view()
        found = await asyncio.to_thread(
            view.runs, self.workspace, rule=rule,
            limit=None if limit is None else limit + 1, before=before)
        return RunsPage(runs=[r for r, _k in found[:limit]],
                        next_cursor=_next_cursor(found, limit))

    async def queue_items_page(self, entry: Entry, *, limit: int = 200,
                               cursor: str | None = None) -> tuple[list[str], str | None]:
        """The ids of a page of the targets that enter a queue by `entry` (its `enters`),
        newest first, without their records: a rule's runs (the runs of `runs_page`, same
        order) or firings, the chains an application event started (named by its event id),
        the targets an evaluator's latest verdict puts below a threshold, or those where it
        differs from a person's latest verdict on a compared field (bool, categorical or
        numeric: `streams.core.measures.agreement.compared_fields`). (ids, the next page's
        cursor or None).

        ValidationFailed for a disagreements entry of a feedback type this client does not
        register, a cursor not given out by this call or a limit below 1."""
        self._check_read(f"{entry.item_kind}s")
        before = None if cursor is None else decode_cursor(cursor)
        if limit < 1:
            raise ValidationFailed(f"limit must be at least 1, got {limit}")
        compared = self._compared(entry)
        found = await self._queue_items(entry, compared, limit=limit + 1, before=before)
        return [item for item, _k in found[:limit]], _next_cursor(found, limit)

    async def queue_items_keyed(self, entry: Entry, *, limit: int = 200,
                                before: PageKey | None = None,
                                catch_up: bool = True) -> list[tuple[str, PageKey]]:
        """`queue_items_page` with each id's page key (the order: newest first) and no
        cursor: at most `limit` ids strictly before `before`; an empty list at the end.
        `catch_up=False` reads the view as an earlier call of the same walk left it."""
        self._check_read(f"{entry.item_kind}s")
        if limit < 1:
            raise ValidationFailed(f"limit must be at least 1, got {limit}")
        return await self._queue_items(entry, self._compared(entry), limit=limit,
                                       before=before, catch_up=catch_up)

    async def _queue_items(self, entry: Entry, compared: list[str], *, limit: int,
                           before: PageKey | None, catch_up: bool = True,
                           ) -> list[tuple[str, PageKey]]:
        view = await self._view(catch_up=catch_up)
        return await asyncio.to_thread(view.queue_items, self.workspace, entry, compared,
                                       limit=limit, before=before)

    def _compared(self, entry: Entry) -> list[str]:
        # The fields a disagreements entry compares: its type's (registered here).
        if entry.kind != "disagreements":
            return []
        cls = self.client.types.get(entry.feedback_type or "")
        if cls is None:
            raise ValidationFailed(f"feedback type {entry.feedback_type!r} is not "
                                   "registered here: its fields cannot be compared")
        return sorted(compared_fields(cls))

    async def verdicts_on(self, kind: str, feedback_types: Sequence[str],
                          target_ids: Sequence[str]) -> list[Verdict]:
        """Every participant's latest verdict of `feedback_types` on the `kind` targets
        named, from the view (a look-up per id: the cost is the ids')."""
        self._check_read("feedback")
        view = await self._view()
        return await asyncio.to_thread(view.verdicts_on, self.workspace, kind, feedback_types,
                                       target_ids)

    async def pair_verdicts(self, entry: Entry, target_id: str) -> dict[str, object]:
        """The latest verdicts of the two versions a pairs entry compares on one target, by
        participant (a version that gave none is absent), from the view."""
        self._check_read(f"{entry.item_kind}s")
        if entry.pair is None:
            raise ValidationFailed(f"a {entry.kind} entry compares no pair of versions")
        view = await self._view()
        return await asyncio.to_thread(view.pair, self.workspace, entry, target_id)

    async def queue_items_count(self, entry: Entry, *,
                                between: tuple[PageKey, PageKey] | None = None,
                                catch_up: bool = True) -> int | None:
        """How many ids `queue_items_all` would give for `entry` (with `between=(newest,
        oldest)`: those from one page key down to the other, both included), counted in the
        view (one COUNT, no id read); None for an entry by verdicts, which must be read to
        count. `catch_up=False` counts in the view as an earlier call left it."""
        self._check_read(f"{entry.item_kind}s")
        view = await self._view(catch_up=catch_up)
        return await asyncio.to_thread(view.queue_items_count, self.workspace, entry,
                                       between=between)

    async def queue_items_all(self, entry: Entry) -> list[str]:
        """Every id `queue_items_page` would page through for `entry`, newest first, in one
        read of the view (for a queue's progress: ids only, no records)."""
        ids: list[str] = []
        cursor: str | None = None
        while True:
            page, cursor = await self.queue_items_page(entry, limit=5000, cursor=cursor)
            ids += page
            if cursor is None:
                return ids

    async def feedback(
        self, *, feedback_type: str | type[Feedback] | None = None,
        participant: str | None = None,
    ) -> list[Envelope]:
        """feedback_given envelopes of this workspace, filtered by type and by who gave them
        (participant, e.g. `user:ada`), oldest first by time, then partition and offset.

        Answered from the tenant's materialized view, caught up first (see `runs`); only the
        returned envelopes are decoded. `feedback_page` pages through them with a cursor.
        """
        page = await self.feedback_page(feedback_type=feedback_type, participant=participant,
                                        limit=None)
        return page.feedback

    async def calibration(self, policy: CalibrationPolicy | None = None,
                          ) -> list[Calibration]:
        """How far each evaluator version agrees with people lately in this workspace: its
        newest pairs per feedback type and field (`streams.core.measures.calibration`), with
        each alarm's state as the alarm events say. `policy` defaults to the
        STREAMS_CALIBRATION_* settings. Answered from the view: bounded by the window, not
        the log."""
        self._check_read("feedback")
        view = await self._view()
        chosen = policy or self.client.settings.calibration_policy()
        return await asyncio.to_thread(view.calibration, self.workspace, chosen,
                                       types=self.client.types)

    async def feedback_page(
        self, *, feedback_type: str | type[Feedback] | None = None,
        participant: str | None = None, limit: int | None = 100, cursor: str | None = None,
    ) -> FeedbackPage:
        """A page of `feedback`: at most `limit` envelopes after `cursor` (a page's
        `next_cursor`; None for the first), and the next page's cursor (None when no more
        are there as of the call); feedback given later sorts after what was paged.

        ValidationFailed for a cursor not given out by this call or a limit below 1.
        """
        self._check_read("feedback")
        after = None if cursor is None else decode_cursor(cursor)
        if limit is not None and limit < 1:
            raise ValidationFailed(f"limit must be at least 1 (or None for all), got {limit}")
        name = feedback_type.feedback_name if isinstance(feedback_type, type) else feedback_type
        view = await self._view()
        found = await asyncio.to_thread(
            view.feedback, self.workspace, feedback_type=name, participant=participant,
            limit=None if limit is None else limit + 1, after=after)
        return FeedbackPage(feedback=[e for e, _k in found[:limit]],
                            next_cursor=_next_cursor(found, limit))


def _next_cursor(found: list[tuple[Any, PageKey]], limit: int | None) -> str | None:
    # `found` holds one row more than the page when there is a next page.
    if limit is None or len(found) <= limit:
        return None
    return encode_cursor(found[limit - 1][1])
