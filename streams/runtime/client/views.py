"""The keeper of a tenant's materialized read view: catches it up from the events topic and
answers the handle's reads from it.

    view = TenantView(runtime, "acme")       # no I/O yet
    view.catch_up()                           # reads from the view's checkpoint to the end
    records = view.runs("prod", rule="ops:error-spike", limit=50)
    build_view(runtime, "acme", progress=lambda done, total: ...)   # `streams views build`

The view (`streams.adapters.views.ViewStore`, one SQLite file per tenant and layout under
`Settings.state_path("views", <prefix>, "<tenant>.v<layout>.sqlite")`) outlives the process,
so a fresh
process pays only for what was appended since the last one caught it up. A catch-up reads
each events partition from the view's checkpoint to the end offset of the moment it started
(so a read after an append in the same process sees it), decodes each record with the fast
codec to a plain dict (`streams.core.viewrows.rows_of`: no pydantic object per record), and
applies batches of rows with their checkpoint in one SQLite transaction each. A read then runs
one indexed query and decodes only the rows it returns.

Undecodable records are counted (`skipped`) and recorded in the view with the reason, then
skipped; the worker's feedback mirror dead-letters the same records to the tenant's
deadletter topic, so the view does not write a second letter. A view file that is missing,
damaged, built for another layout or tenant, or whose checkpoint is past the topic's end (a
recreated topic) is not trusted: it is started afresh and rebuilt from the topic.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from confluent_kafka import Consumer, TopicPartition

from streams.adapters.avro.codec import envelope_from_record
from streams.adapters.kafka.log import take, watermarks_of
from streams.adapters.views import LAYOUT_VERSION, RawEvent, ViewCorrupt, ViewStore
from streams.core.errors import KafkaUnavailable, SchemaError, ValidationFailed
from streams.core.events import Envelope, RuleFired, RunStarted, Seq
from streams.core.feedback import FeedbackRegistry
from streams.core.ids import fired_event_id, firing_id, run_id_of, throttled_event_id
from streams.core.measures.agreement import Verdict, VerdictPair
from streams.core.measures.calibration import (
    AlarmBook,
    Calibration,
    CalibrationKey,
    CalibrationPolicy,
    State,
    alarm_book,
    calibrate,
)
from streams.core.queues import Entry
from streams.core.rules import Rule
from streams.core.rules.why import Why, considered, decided_why
from streams.core.runs import RunRecord
from streams.core.spans import JUMPABLE
from streams.core.tenancy import check_tenant, reader_group, tenant_topics
from streams.core.viewrows import PageKey, Rows, position, rows_of
from streams.runtime.root import Runtime
from streams.settings import Settings

__all__ = [
    "BATCH",
    "DECODED_KEPT",
    "PAGES_AT_LEAST",
    "CatchUp",
    "Progress",
    "TenantView",
    "build_view",
    "calibration_of",
    "calibration_pairs",
    "view_path",
]

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
"""Called as `progress(offsets_applied, offsets_to_apply)` while a view catches up."""

_T = TypeVar("_T")

BATCH = 5000
"""Records per SQLite transaction while catching up (rows and checkpoint together)."""
PAGES_AT_LEAST = 10
"""Pages of `window` person verdicts calibration reads before it may stop: a version with no
pair among the newest `PAGES_AT_LEAST x window` person verdicts is not measured."""
SCAN_PER_WINDOW = 50
"""Calibration reads at most the newest `SCAN_PER_WINDOW x window` person verdicts: enough
for a version paired with one in 50 of the targets people review to fill its window, and a
bound on the read however long the log (docs/measures.md)."""


DECODED_KEPT = 4 * 2**20
"""Raw bytes of the envelopes a tenant's view keeps decoded for reads that return them again
(about 10,000 envelopes of 400 bytes, 20 pages of 50 runs); records over DECODED_LARGEST
bytes are decoded each time."""

DECODED_LARGEST = 16 * 2**10


def view_path(settings: Settings, tenant: str) -> Path:
    """Where a tenant's view file lives: under STREAMS_STATE_DIR, per topic prefix, named by
    its layout, so a release with a new layout builds its file beside the old one while the
    old release still reads its own (docs/operations.md, "Upgrading")."""
    return settings.state_path("views", settings.topic_prefix,
                               f"{tenant}.v{LAYOUT_VERSION}.sqlite")


@dataclass
class CatchUp:
    """What one catch-up did."""

    applied: int = 0
    skipped: int = 0
    seconds: float = 0.0
    rebuilt: bool = False


def _at(ms: int) -> datetime:
    """A view row's time (milliseconds since the epoch, as the records carry it)."""
    return datetime.fromtimestamp(ms / 1000, UTC)


def calibration_of(store: ViewStore, workspace: str, policy: CalibrationPolicy, *,
                   previous: Mapping[CalibrationKey, State] | None = None,
                   types: FeedbackRegistry | None = None) -> list[Calibration]:
    """`TenantView.calibration` on a store as it is (no catch-up): `calibration_pairs`,
    measured."""
    return calibrate(calibration_pairs(store, workspace, policy), policy, previous=previous,
                     types=types)


def calibration_pairs(store: ViewStore, workspace: str,
                      policy: CalibrationPolicy) -> list[VerdictPair]:
    """Each (evaluator version, feedback type)'s window of pairs with people in the store.

    Walks the person verdicts newest first, a page of `window` at a time, keeping each
    (evaluator version, feedback type)'s first `window` pairs. It reads at least
    `PAGES_AT_LEAST` pages (so a version paired with one person verdict in ten is met), then
    on while a version met has fewer than `window` pairs, up to `SCAN_PER_WINDOW` pages:
    never more, however long the log."""
    window = policy.window
    cap = SCAN_PER_WINDOW * window
    kept: dict[tuple[str, str], list[VerdictPair]] = {}
    before: tuple[int, int] | None = None
    read = 0
    while read < cap:
        asked = min(window, cap - read)
        rows = store.verdict_pairs(workspace, limit=asked, before=before)
        people = {(pt, pp) for *_rest, pt, pp in rows}
        read += len(people)
        for evaluator, feedback_type, judged, said, ms, pt, pp in rows:
            before = (pt, pp)
            if evaluator is None or judged is None:
                continue
            group = kept.setdefault((evaluator, feedback_type), [])
            if len(group) < window:
                group.append(VerdictPair(evaluator, feedback_type, json.loads(judged),
                                         json.loads(said),
                                         datetime.fromtimestamp(ms / 1000, UTC)))
        if len(people) < asked or (read >= PAGES_AT_LEAST * window
                                   and all(len(g) >= window for g in kept.values())):
            break
    return [pair for group in kept.values() for pair in group]


class TenantView:
    """One tenant's view as this process keeps it: thread-safe, shared by its workspaces."""

    def __init__(self, runtime: Runtime, tenant: str) -> None:
        check_tenant(tenant)
        self.runtime = runtime
        self.tenant = tenant
        self.settings = runtime.settings
        self.topic = tenant_topics(tenant, self.settings.topic_prefix).events
        self.store = ViewStore(view_path(self.settings, tenant), tenant=tenant,
                               topic=self.topic)
        self.skipped = 0  # undecodable records this process skipped
        self._consumer: Consumer | None = None
        self._opened = False
        self._lock = threading.Lock()
        self._caught_up_at = -math.inf
        # The events topic's partitions as last seen: later catch-ups ask for their offsets
        # in one round trip (`watermarks_of`).
        self._partitions: list[int] = []
        # Envelopes decoded lately, by place and raw value (a file rebuilt under the same
        # places holds other bytes there, so a stale one is never returned), with the raw
        # bytes they hold: a page read again, as a dashboard or a team's queue does, skips
        # the decode and the pydantic objects (docs/design.md, "Decoded envelopes are kept").
        self._decoded: dict[tuple[int, int, bytes], Envelope] = {}
        self._decoded_bytes = 0
        self._decoded_lock = threading.Lock()

    # -- catching up ------------------------------------------------------------------------

    def catch_up(self, *, asked: float | None = None,
                 progress: Progress | None = None) -> CatchUp:
        """Apply what the events topic holds past the view's checkpoint, up to its end as of
        this call. `asked` (a `time.monotonic()`): a catch-up that started after it already
        read everything acknowledged before it, so concurrent callers share one read.

        KafkaUnavailable when the broker does not answer or records stop arriving (what was
        applied stays applied); a damaged view is rebuilt from the topic.
        """
        with self._lock:
            if asked is not None and self._caught_up_at >= asked:
                return CatchUp()
            started = time.monotonic()
            rebuilds = len(self.store.rebuilt)
            try:
                done = self._catch_up(progress)
            except ViewCorrupt as exc:
                self.store.reset(str(exc))
                done = self._catch_up(progress)
            done.rebuilt = len(self.store.rebuilt) > rebuilds
            done.seconds = time.monotonic() - started
            self._caught_up_at = started
            return done

    def _reader(self) -> Consumer:
        if self._consumer is None:
            self._consumer = self.runtime.reader(
                reader_group(self.topic, "views", self.settings.topic_prefix),
                **{"fetch.wait.max.ms": 10})
        return self._consumer

    def _catch_up(self, progress: Progress | None) -> CatchUp:
        if not self._opened or not self.store.still_there():
            self.store.open()
            self._opened = True
        consumer = self._reader()
        marks = watermarks_of(self.runtime.admin.client, consumer, self.topic,
                              self._partitions, timeout=self.settings.admin_timeout,
                              settings=self.settings)
        self._partitions = list(marks)
        checkpoint = self.store.checkpoint()
        if any(checkpoint.get(p, 0) > high for p, (_low, high) in marks.items()) or \
                set(checkpoint) - set(marks):
            self.store.reset("its checkpoint is past the events topic's end (was the topic "
                             "deleted and created again?)")
            checkpoint = {}
        start = {p: max(checkpoint.get(p, 0), low) for p, (low, _high) in marks.items()}
        todo = {p: high for p, (_low, high) in marks.items() if start[p] < high}
        total = sum(todo[p] - start[p] for p in todo)
        out = CatchUp()
        if progress is not None:
            progress(0, total)
        if not todo:
            return out
        consumer.assign([TopicPartition(self.topic, p, start[p]) for p in todo])
        try:
            self._read(consumer, start, todo, total, out, progress)
        finally:
            consumer.unassign()
        return out

    def _read(self, consumer: Consumer, start: dict[int, int], todo: dict[int, int],
              total: int, out: CatchUp, progress: Progress | None) -> None:
        codec = self.runtime.codec
        nexts = dict(start)
        rows: list[Rows] = []
        skipped: list[tuple[int, str]] = []
        wait = self.settings.flush_timeout
        last = time.monotonic()
        # One batch is written by a thread of its own while the next is decoded (sqlite3
        # lets go of the GIL while it works); batches are written one at a time, in order.
        writer = ThreadPoolExecutor(1, thread_name_prefix=f"view-{self.tenant}")
        pending: list[Future[None]] = []

        def write(batch: list[Rows], bad: list[tuple[int, str]], marks: dict[int, int],
                  ) -> None:
            self.store.apply(batch, bad, marks)
            out.applied += len(batch)
            out.skipped += len(bad)
            self.skipped += len(bad)
            if progress is not None:
                progress(sum(marks[p] - start[p] for p in start), total)

        def apply(*, wait_written: bool = False) -> None:
            nonlocal rows, skipped
            for done in pending:
                done.result()  # the batch before: raises what its write raised
            pending.clear()
            pending.append(writer.submit(write, rows, skipped, {p: nexts[p] for p in start}))
            rows, skipped = [], []
            if wait_written:
                pending.pop().result()

        try:
            while todo:
                # Not consume(1000, 0.2): a catch-up of a few records would wait out 0.2 s.
                messages = take(consumer, 1000, 0.2)
                if not messages:
                    # The last offsets of a partition may be transaction markers, never
                    # delivered: a position at the end means the partition is done.
                    for tp in consumer.position([TopicPartition(self.topic, p) for p in todo]):
                        if tp.offset >= 0 and tp.offset >= todo.get(tp.partition, math.inf):
                            nexts[tp.partition] = max(nexts[tp.partition], tp.offset)
                            del todo[tp.partition]
                    if todo and time.monotonic() - last > wait:
                        apply(wait_written=True)
                        raise KafkaUnavailable(
                            f"catching up the view of {self.topic} stalled: nothing arrived for "
                            f"{wait:g} s with records still due (is the broker up?)")
                    continue
                last = time.monotonic()
                for msg in messages:
                    if msg.error():
                        apply(wait_written=True)
                        raise KafkaUnavailable(f"reading {self.topic} failed: {msg.error()}")
                    p, offset = msg.partition(), msg.offset()
                    assert p is not None and offset is not None
                    if offset < nexts.get(p, 0):
                        continue
                    nexts[p] = offset + 1
                    if p in todo and offset + 1 >= todo[p]:
                        del todo[p]
                    value = msg.value() or b""
                    try:
                        _writer, record = codec.decode(value)
                        rows.append(rows_of(record, p, offset, value))
                    except SchemaError as exc:
                        # Counted and kept in the view's `skipped` table; the mirror dead-letters.
                        skipped.append((position(p, offset), str(exc)[:500]))
                        log.warning("view of %s skips %s:%d: %s", self.tenant, p, offset, exc)
                if len(rows) + len(skipped) >= BATCH:
                    apply()
            apply(wait_written=True)
        finally:
            writer.shutdown(wait=True)

    # -- reading ----------------------------------------------------------------------------

    def _guarded_read(self, read: Callable[[], _T]) -> _T:
        try:
            return read()
        except ViewCorrupt as exc:
            with self._lock:
                self.store.reset(str(exc))
                self._caught_up_at = -math.inf
            self.catch_up()
            return read()

    def _envelope(self, raw: RawEvent) -> Envelope:
        key = (raw.partition, raw.offset, raw.raw)
        kept = self._decoded.get(key)
        if kept is not None:
            return kept  # frozen models, shared (callers must not change their dicts)
        try:
            _writer, record = self.runtime.codec.decode(raw.raw)
            envelope = envelope_from_record(record,
                                            Seq(partition=raw.partition, offset=raw.offset))
        except SchemaError as exc:  # it decoded when it was applied: the file is not sound
            raise ViewCorrupt(f"a stored event at {raw.partition}:{raw.offset} does not "
                              f"decode: {exc}") from exc
        if len(raw.raw) > DECODED_LARGEST:
            return envelope  # a large run output is not kept: it would push out many pages
        with self._decoded_lock:
            if key not in self._decoded:
                self._decoded[key] = envelope
                self._decoded_bytes += len(raw.raw)
            while self._decoded_bytes > DECODED_KEPT:  # the oldest decoded go first
                oldest = next(iter(self._decoded))
                del self._decoded[oldest]
                self._decoded_bytes -= len(oldest[2])
        return envelope

    def run_record(self, workspace: str, run_id: str) -> RunRecord | None:
        """A run's record from the view (None if the workspace has no such run)."""
        return self._guarded_read(lambda: self._run_record(workspace, run_id))

    def _run_record(self, workspace: str, run_id: str) -> RunRecord | None:
        parts = self.store.run_parts(workspace, run_id)
        if parts is None:
            return None
        started = self._envelope(parts.started)
        assert isinstance(started.event, RunStarted)
        fired = None if parts.fired is None else self._envelope(parts.fired)
        ids = fired.event.matched if fired is not None and isinstance(
            fired.event, RuleFired) else []
        found = self.store.events_by_id(workspace, ids)
        decoded = {i: self._envelope(raw) for i, raw in found.items()}
        return RunRecord(run=started.event, started=started,
                         matched=[decoded[i] for i in ids if i in decoded],
                         emitted=[self._envelope(e) for e in parts.emitted], fired=fired)

    def why(self, workspace: str, rule: Rule, event_id: str) -> Why | None:
        """What `rule` did with the event, from the view: the event, its firing and throttle
        records by their derived ids and its run's events, or for a completion rule the
        event's chain; None if the workspace has no such event (streams.core.rules.why, as
        `Workspace.why` answers from the index)."""
        return self._guarded_read(lambda: self._why(workspace, rule, event_id))

    def _why(self, workspace: str, rule: Rule, event_id: str) -> Why | None:
        firing = firing_id(rule.name, event_id)
        found = self.store.events_by_id(
            workspace, [event_id, fired_event_id(firing), throttled_event_id(firing)])
        if event_id not in found:
            return None
        decoded = {i: self._envelope(raw) for i, raw in found.items()}
        left_out = considered(rule, decoded[event_id])
        if left_out is not None:
            return left_out
        if rule.when.completion is not None:
            # A chain's judgement is recorded in the chain: its firings list what it gathered.
            chain = self._chain(workspace, decoded[event_id].correlation_id)
            return decided_why(rule, event_id, {e.event_id: e for e in chain}.get, chain)
        run_events: list[Envelope] = []
        if fired_event_id(firing) in decoded:
            parts = self.store.run_parts(workspace, run_id_of(firing))
            if parts is not None:
                run_events = [self._envelope(e) for e in parts.emitted]
        return decided_why(rule, event_id, decoded.get, run_events)

    def chain_events(self, workspace: str, correlation_id: str) -> list[Envelope]:
        """Every envelope of the workspace's chain `correlation_id`, in log order ([] if
        there is no such chain)."""
        return self._guarded_read(lambda: self._chain(workspace, correlation_id))

    def _chain(self, workspace: str, correlation_id: str) -> list[Envelope]:
        decoded = (self._envelope(raw) for raw in self.store.chain(workspace, correlation_id))
        # Two chains may share a key: keep the one asked for.
        return [e for e in decoded if e.correlation_id == correlation_id]


    def runs(self, workspace: str, *, rule: str | None, limit: int | None,
             before: PageKey | None = None) -> list[tuple[RunRecord, PageKey]]:
        """The workspace's runs (of `rule`), newest first, at most `limit`, strictly before
        `before`: each record with its page key."""
        if limit is not None and limit < 1:
            raise ValidationFailed(
                f"limit must be at least 1 (or None for every run), got {limit}")

        def read() -> list[tuple[RunRecord, PageKey]]:
            out = []
            for run_id, key in self.store.runs(workspace, rule=rule, limit=limit,
                                               before=before):
                record = self._run_record(workspace, run_id)
                if record is not None:
                    out.append((record, key))
            return out

        return self._guarded_read(read)

    def queue_items(self, workspace: str, entry: Entry, compared: Sequence[str] = (), *,
                    limit: int | None, before: PageKey | None = None,
                    ) -> list[tuple[str, PageKey]]:
        """The ids of the targets that enter a queue by `entry`, newest first, without
        reading their records: a rule's runs (as `runs` pages them) or firings, the chains,
        the targets an evaluator judged below a threshold, or those where its verdict
        differs from a person's on one of the `compared` fields."""
        if entry.kind in ("runs_of", "firings_of", "chains"):
            return self._guarded_read(lambda: list(self.store.item_ids(
                entry.item_kind, workspace, rule=entry.rule, limit=limit, before=before)))
        assert entry.evaluator is not None and entry.feedback_type is not None
        evaluator, feedback_type = entry.evaluator, entry.feedback_type
        if entry.pair is not None:
            a, b = entry.pair
            return self._guarded_read(lambda: list(self.store.paired(
                workspace, a=a, b=b, feedback_type=feedback_type, on=entry.on, limit=limit,
                before=before)))
        below: tuple[str, float] | None = None
        if entry.kind == "judged_below":
            assert entry.field is not None and entry.threshold is not None
            below = (entry.field, entry.threshold)
        differs_on = None if below is not None else list(compared)
        return self._guarded_read(lambda: list(self.store.judged(
            workspace, evaluator=evaluator, feedback_type=feedback_type, on=entry.on,
            below=below, differs_on=differs_on, limit=limit, before=before)))

    def pair(self, workspace: str, entry: Entry, target_id: str) -> dict[str, object]:
        """The two verdicts a pairs entry compares on one target: the participants' latest
        values (dicts) by participant; one that gave none is absent."""
        assert entry.pair is not None and entry.feedback_type is not None
        feedback_type, pair = entry.feedback_type, list(entry.pair)
        found = self._guarded_read(lambda: self.store.verdicts_of(
            workspace, entry.on, [feedback_type], [target_id]))
        return {who: json.loads(value) for _t, _i, who, _h, value, _ms, _pos in found
                if who in pair}

    def verdicts_on(self, workspace: str, kind: str, feedback_types: Sequence[str],
                    target_ids: Sequence[str]) -> list[Verdict]:
        """Every participant's latest verdict of `feedback_types` on the `kind` targets
        named (shadow versions' recorded verdicts included), as the agreement measures
        take them."""
        found = self._guarded_read(lambda: self.store.verdicts_of(
            workspace, kind, feedback_types, target_ids))
        return [Verdict(t, f"{kind}:{i}", p, person, json.loads(value), _at(ms), f"pos:{pos}")
                for t, i, p, person, value, ms, pos in found]

    def queue_items_count(self, workspace: str, entry: Entry, *,
                          between: tuple[PageKey, PageKey] | None = None) -> int | None:
        """How many targets enter a queue by `entry` (as `queue_items` lists them; with
        `between=(newest, oldest)`, those from one key down to the other, both included),
        counted in the view, for a rule's runs or firings and the chains; None for an entry
        by verdicts (judged below, disagreements, pairs), whose items are decided row by
        row."""
        if entry.kind not in JUMPABLE:
            return None
        return self._guarded_read(lambda: self.store.count_items(
            entry.item_kind, workspace, rule=entry.rule, between=between))

    def feedback(self, workspace: str, *, feedback_type: str | None, participant: str | None,
                 limit: int | None = None, after: PageKey | None = None,
                 ) -> list[tuple[Envelope, PageKey]]:
        """The workspace's feedback, oldest first, at most `limit`, strictly after `after`:
        each envelope with its page key."""
        return self._guarded_read(lambda: [
            (self._envelope(raw), PageKey(raw.time_ms, raw.partition, raw.offset))
            for raw in self.store.feedback(workspace, feedback_type=feedback_type,
                                           participant=participant, limit=limit,
                                           after=after)])

    def alarms(self, workspace: str) -> AlarmBook:
        """Where the workspace's calibration alarms stand: each key's newest alarm event,
        as the view keeps it (one row per key)."""
        found = self._guarded_read(lambda: self.store.alarms(workspace))
        return alarm_book(((e, t, f), raised, episode) for e, t, f, raised, episode in found)

    def calibration(self, workspace: str, policy: CalibrationPolicy, *,
                    previous: Mapping[CalibrationKey, State] | None = None,
                    types: FeedbackRegistry | None = None) -> list[Calibration]:
        """Each evaluator version's calibration in the workspace as the view has it now: its
        pairs on the targets of the newest person verdicts, up to `policy.window` of them
        (`calibration_pairs`), per feedback type and field; an alarm
        stands as `previous` says (default: as the workspace's alarm events say)."""
        if previous is None:
            previous = self.alarms(workspace).states
        states = previous
        return self._guarded_read(lambda: calibration_of(self.store, workspace, policy,
                                                         previous=states, types=types))

    def close(self) -> None:
        """Leave the broker and close the file (the view stays for the next process)."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()
        self.store.close()


def build_view(runtime: Runtime, tenant: str, *, progress: Progress | None = None,
               ) -> CatchUp:
    """Build (or catch up) a tenant's view in this process's state directory, with
    `progress(done, total)` as batches are applied: what `streams views build` runs.
    Resumable (a killed build goes on from its checkpoint) and idempotent."""
    view = TenantView(runtime, tenant)
    try:
        return view.catch_up(progress=progress)
    finally:
        view.close()
