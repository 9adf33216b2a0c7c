"""`give_many`: many pieces of feedback from one actor in one call (`Workspace.
give_feedback_many`), each recorded exactly as `give_feedback` records it, at the cost of a
few round trips per batch instead of a few per piece.

Per batch: every item is validated and its target located (each distinct target once); its
event is encoded straight from its parts (no Envelope per item, the same record
`envelope_to_record` writes); the command ids are claimed in the ledger together, with one
read-back per ledger partition; the events are appended together, with one wait for their
acknowledgements; the outcomes are written without waiting. A command id another attempt
holds goes through `give_feedback`'s own path, which waits for that attempt.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from streams.adapters.avro.codec import actor_record, feedback_record
from streams.adapters.avro.fast import RegistryUnavailable, WriterSchema
from streams.adapters.avro.schemas import feedback_given_schema
from streams.adapters.avro.template import RecordTemplate
from streams.adapters.kafka.log import (
    HEADER_EVENT_TYPE,
    HEADER_TRACEPARENT,
    EventLog,
    Headers,
)
from streams.adapters.tracing import current_trace
from streams.core.actors import Actor
from streams.core.commands import (
    COMMAND_ID_PATTERN,
    LedgerEntry,
    feedback_digest,
    ledger_key,
)
from streams.core.errors import (
    Conflict,
    KafkaUnavailable,
    StreamsError,
    TooLarge,
    ValidationFailed,
)
from streams.core.events import FeedbackGiven, Seq, TraceContext
from streams.core.feedback import Feedback, FeedbackRegistry, validate_feedback, value_record
from streams.core.ids import command_event_id, new_id
from streams.core.targets import ChainTarget, FiringTarget, RunTarget
from streams.core.tenancy import tenant_topics
from streams.core.view import Located
from streams.runtime.client.ledger import CommandLedger
from streams.runtime.client.telemetry import feedback_counter, tracer
from streams.runtime.root import Runtime
from streams.settings import Settings


class _Client(Protocol):
    @property
    def settings(self) -> Settings: ...
    @property
    def types(self) -> FeedbackRegistry: ...
    @property
    def runtime(self) -> Runtime: ...
    @property
    def log(self) -> EventLog: ...
    async def ledger(self, tenant: str) -> CommandLedger: ...


class Handle(Protocol):
    """What a batch needs of a workspace handle; `Workspace` is one. (A protocol, so this
    module does not import the handle's, which imports this one.)"""

    @property
    def tenant(self) -> str: ...
    @property
    def workspace(self) -> str: ...
    @property
    def actor(self) -> Actor: ...
    @property
    def client(self) -> _Client: ...
    def _check_append(self, event_type: str) -> None: ...
    async def locate(self, target: AnyTarget) -> Located: ...
    async def _record_once(self, feedback: Feedback, on: AnyTarget,
                           command_id: str) -> tuple[LedgerEntry, Any]: ...

__all__ = ["FeedbackBatcher", "FeedbackItem", "Given", "Handle", "give_many"]

AnyTarget = RunTarget | FiringTarget | ChainTarget



@dataclass(frozen=True, slots=True)
class FeedbackItem:
    """One piece of feedback for `give_feedback_many`: what `give_feedback` takes."""

    value: Feedback | Mapping[str, Any]
    on: AnyTarget
    feedback_type: str | None = None
    command_id: str | None = None
    trace: TraceContext | None = None
    """The trace context the item's event carries (default: the batch's span's)."""


@dataclass(frozen=True, slots=True)
class Given:
    """Where an item's feedback event is (its seq) and its event id; for a repeated command
    id, those of the first time it was recorded."""

    seq: Seq
    id: str


@dataclass(slots=True)
class _Item:
    n: int
    feedback: Feedback
    on: AnyTarget
    command_id: str | None
    where: Located | None = None
    event_id: str = ""
    value: bytes = b""
    key: str = ""
    digest: str = ""
    trace: TraceContext | None = None
    headers: Headers | None = None


async def give_many(ws: Handle, items: Iterable[FeedbackItem | tuple[Any, ...]],
                    batch_size: int) -> list[Given | StreamsError]:
    """See `Workspace.give_feedback_many`."""
    listed = [i if isinstance(i, FeedbackItem) else FeedbackItem(*i) for i in items]
    ws._check_append(FeedbackGiven.event_type)
    if batch_size < 1:
        raise ValidationFailed(f"batch_size must be at least 1, not {batch_size}")
    out: list[Given | StreamsError] = []
    for start in range(0, len(listed), batch_size):
        out += await _batch(ws, listed[start:start + batch_size])
    return out


def _checked(ws: Handle, n: int, item: FeedbackItem) -> _Item:
    on = item.on
    if not isinstance(on, RunTarget | FiringTarget | ChainTarget):
        raise ValidationFailed(
            f"item {n}: on= must be a RunTarget, FiringTarget or ChainTarget, not "
            f"{type(on).__name__} (e.g. on=RunTarget(run_id=...))")
    command_id = item.command_id
    if command_id is not None and (not isinstance(command_id, str)
                                   or not COMMAND_ID_PATTERN.fullmatch(command_id)):
        raise ValidationFailed(
            f"invalid command id {command_id!r}: use 1-128 letters, digits and _.:- "
            "starting with a letter or digit")
    feedback = validate_feedback(item.value, item.feedback_type, ws.client.types)
    cls = type(feedback)
    if on.kind not in cls.feedback_targets:
        raise ValidationFailed(f"{cls.feedback_name} feedback cannot be given on a {on.kind}; "
                               f"it targets {sorted(cls.feedback_targets)}")
    return _Item(n, feedback, on, command_id, trace=item.trace)


async def _located(ws: Handle, targets: Mapping[tuple[str, str], AnyTarget],
                   ) -> dict[tuple[str, str], Located | StreamsError]:
    timeout = ws.client.settings.feedback_timeout
    found: dict[tuple[str, str], Located | StreamsError] = {}
    try:
        async with asyncio.timeout(timeout):
            for key, target in targets.items():
                try:
                    found[key] = await ws.locate(target)
                except StreamsError as exc:
                    found[key] = exc
    except TimeoutError as exc:
        raise KafkaUnavailable(
            f"looking up {len(targets)} targets took more than {timeout:g} s "
            "(STREAMS_FEEDBACK_TIMEOUT): check that the brokers are up; if the index is "
            f"catching up with a long unindexed log, run `streams index build --tenant "
            f"{ws.tenant}`, then retry with the same command ids") from exc
    return found


async def _writer(ws: Handle, cls: type[Feedback], deadline: float) -> WriterSchema:
    # The schema is registered once per type and process; an outage is waited out, as
    # give_feedback waits, until the deadline.
    loop = asyncio.get_running_loop()
    while True:
        try:
            settings = ws.client.settings
            return ws.client.runtime.codec.registered(
                feedback_given_schema(cls),
                tenant_topics(ws.tenant, settings.topic_prefix).events)
        except RegistryUnavailable as exc:
            if loop.time() + 0.5 >= deadline:
                raise RegistryUnavailable(f"{exc}; gave up (STREAMS_FEEDBACK_TIMEOUT)") from exc
            await asyncio.sleep(0.5)


class _Traced:
    """The record headers of a batch's events, and the trace field's encoded bytes per
    template, made once per trace context (a batch's items usually share one)."""

    def __init__(self, workspace: str) -> None:
        self._base: Headers = [(HEADER_EVENT_TYPE, FeedbackGiven.event_type.encode()),
                               ("workspace", workspace.encode())]
        self._made: dict[tuple[str, str | None], Headers] = {}
        self._encoded: dict[tuple[RecordTemplate, TraceContext | None], bytes] = {}

    def field(self, template: RecordTemplate, trace: TraceContext | None) -> bytes:
        """The `envelope.trace` field of `template`'s records, encoded."""
        key = (template, trace)
        made = self._encoded.get(key)
        if made is None:
            made = self._encoded[key] = template.encode_field(
                "envelope.trace", None if trace is None else trace.model_dump())
        return made

    def headers(self, trace: TraceContext | None) -> Headers:
        if trace is None:
            return self._base
        key = (trace.traceparent, trace.tracestate)
        made = self._made.get(key)
        if made is None:
            made = self._made[key] = [*self._base,
                                      (HEADER_TRACEPARENT, trace.traceparent.encode())]
            if trace.tracestate:
                made.append(("tracestate", trace.tracestate.encode()))
        return made


# A template per writer schema, made once per process: the writer objects are the codec's
# cached ones, so identity tells them apart (two registries may reuse an id).
_templates: dict[int, tuple[WriterSchema, RecordTemplate]] = {}
_VARYING = ("envelope.event_id", "envelope.time", "envelope.trace", "value")


def _template(writer: WriterSchema) -> RecordTemplate:
    found = _templates.get(id(writer))
    if found is None or found[0] is not writer:
        found = _templates[id(writer)] = (writer, RecordTemplate(writer, _VARYING))
    return found[1]


def _flat(record: dict[str, Any]) -> dict[str, Any]:
    flat = {f"envelope.{k}": v for k, v in record["envelope"].items()}
    flat.update((k, v) for k, v in record.items() if k != "envelope")
    return flat


def _too_large(item: _Item, size: int, limit: int) -> TooLarge:
    sizes = {k: len(repr(v)) for k, v in value_record(item.feedback).items()}
    largest = max(sizes, key=lambda k: sizes[k]) if sizes else "(none)"
    return TooLarge(
        f"the feedback_given event is {size} bytes encoded, over the maximum record size of "
        f"{limit} bytes (STREAMS_MAX_RECORD_BYTES); its largest field is value.{largest}: "
        "shorten it, or store the content elsewhere and give a reference to it")


async def _batch(ws: Handle, batch: list[FeedbackItem]) -> list[Given | StreamsError]:
    client = ws.client
    settings = client.settings
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.feedback_timeout
    results: list[Given | StreamsError | None] = [None] * len(batch)
    ready: list[_Item] = []
    for n, raw in enumerate(batch):
        try:
            ready.append(_checked(ws, n, raw))
        except StreamsError as exc:
            results[n] = exc
    targets: dict[tuple[str, str], AnyTarget] = {(i.on.kind, i.on.id): i.on for i in ready}
    located = await _located(ws, targets) if targets else {}
    participant = ws.actor.participant
    attributes = {"streams.tenant": ws.tenant, "streams.workspace": ws.workspace,
                  "streams.participant": participant}
    with tracer().start_as_current_span("streams.feedback_many", attributes=attributes) as span:
        span.set_attribute("streams.items", len(batch))
        trace = current_trace()
        shared = {"tenant": ws.tenant, "workspace": ws.workspace,
                  "event_type": FeedbackGiven.event_type, "actor": actor_record(ws.actor),
                  "time": int(time.time() * 1000)}
        traced = _Traced(ws.workspace)
        for item in ready:
            item.trace = item.trace or trace
            item.headers = traced.headers(item.trace)
        writers = {cls: _template(await _writer(ws, cls, deadline))
                   for cls in {type(i.feedback) for i in ready}}
        kept = _encoded(ws, ready, located, results, writers, shared, traced)
        await _record(ws, kept, results)
        counts: dict[str, int] = {}
        for item in kept:
            if isinstance(results[item.n], Given):
                name = type(item.feedback).feedback_name
                counts[name] = counts.get(name, 0) + 1
        for name, count in counts.items():
            feedback_counter.add(count, {**attributes, "streams.feedback_type": name})
    assert all(r is not None for r in results)
    return [r for r in results if r is not None]


def _encoded(ws: Handle, ready: list[_Item],
             located: Mapping[tuple[str, str], Located | StreamsError],
             results: list[Given | StreamsError | None],
             writers: Mapping[type[Feedback], RecordTemplate],
             shared: Mapping[str, Any], traced: _Traced) -> list[_Item]:
    """Encode each located item's event (and digest its command); the items to record."""
    participant = ws.actor.participant
    now = shared["time"]
    # The batch's time, encoded once per template (the trace by `traced`, per context).
    times = {made: made.encode_field("envelope.time", now) for made in writers.values()}
    limit = ws.client.settings.max_record_bytes
    target_json: dict[tuple[type[Feedback], str, str], dict[str, Any]] = {}
    kept: list[_Item] = []
    for item in ready:
        where = located[(item.on.kind, item.on.id)]
        if isinstance(where, StreamsError):
            results[item.n] = where
            continue
        item.where = where
        cls = type(item.feedback)
        made = writers[cls]
        tkey = (cls, item.on.kind, item.on.id)
        # What every event of this type by this actor on this target shares, kept across
        # batches: small batches (a surface's) find it made.
        fkey = (ws.tenant, ws.workspace, shared["actor"]["kind"], shared["actor"]["id"],
                shared["actor"]["version"], item.on.kind, item.on.id, where)
        fixed = made.cached(fkey)
        if fixed is None:
            fixed = made.keep(fkey, made.fixed(_flat(feedback_record(
                {**shared, "event_id": "", "correlation_id": where.correlation_id,
                 "causation_id": where.event_id, "trace": None},
                cls.feedback_name, item.on.kind, item.on.id, where.trace_id, {},
                where.rule, where.action))))
        item.event_id = new_id("evt") if item.command_id is None else command_event_id(
            ws.tenant, ws.workspace, participant, item.command_id)
        item.value = made.encode(
            fixed, {"envelope.event_id": item.event_id, "value": value_record(item.feedback)},
            {"envelope.time": times[made], "envelope.trace": traced.field(made, item.trace)})
        if len(item.value) > limit:
            results[item.n] = _too_large(item, len(item.value), limit)
            continue
        if item.command_id is not None:
            on_json = target_json.get(tkey)
            if on_json is None:
                on_json = target_json[tkey] = item.on.model_dump(mode="json")
            item.digest = feedback_digest(cls.feedback_name, on_json,
                                          item.feedback.model_dump(mode="json"))
            item.key = ledger_key(ws.workspace, participant, item.command_id)
        kept.append(item)
    return kept


async def _record(ws: Handle, items: list[_Item],
                  results: list[Given | StreamsError | None]) -> None:
    """Claim the items' command ids, append the events of the claims won and of the items
    without ids, then write the outcomes; each item's answer goes to `results`."""
    appending = [i for i in items if i.command_id is None]
    first: dict[str, _Item] = {}
    repeats: list[_Item] = []
    for item in items:
        if item.command_id is not None:
            if item.key in first:
                repeats.append(item)  # the same command twice in a batch: answered as one
            else:
                first[item.key] = item
    claimed = list(first.values())
    won: list[tuple[_Item, Any]] = []
    held: list[_Item] = []
    if claimed:
        ledger = await ws.client.ledger(ws.tenant)
        answers = await ledger.claim_many([(i.key, i.digest, i.command_id or "")
                                           for i in claimed])
        for item, answer in zip(claimed, answers, strict=True):
            if isinstance(answer, StreamsError):
                results[item.n] = answer
            elif answer[0] == "recorded":
                entry = answer[1]
                assert entry is not None and entry.partition is not None
                assert entry.offset is not None and entry.event_id is not None
                results[item.n] = Given(Seq(partition=entry.partition, offset=entry.offset),
                                        entry.event_id)
            elif answer[0] == "won":
                won.append((item, answer[1]))
                appending.append(item)
            else:
                held.append(item)
    if appending:
        where = await ws.client.log.append_encoded(
            ws.tenant, [(i.where.correlation_id.encode(), i.value, i.headers or [])  # type: ignore[union-attr]
                        for i in appending])
        for item, seq in zip(appending, where, strict=True):
            if isinstance(seq, StreamsError):
                results[item.n] = seq
            elif isinstance(seq, Exception):
                results[item.n] = KafkaUnavailable(f"append failed: {seq}")
            else:
                results[item.n] = Given(seq, item.event_id)
    if won:
        if ws.client.settings.serve_fault == "kill_after_produce":
            os.kill(os.getpid(), signal.SIGKILL)  # failure tests: die before the outcomes
        ledger = await ws.client.ledger(ws.tenant)
        outcomes = []
        for item, claim in won:
            given = results[item.n]
            if isinstance(given, Given):
                outcomes.append((item.key, claim, given.seq.partition, given.seq.offset,
                                 given.id))
        ledger.record_many(outcomes)
    if held:
        # Another attempt holds these: give_feedback's path waits for its outcome (or takes
        # over its lease), one command at a time, as rare as concurrent retries are.
        answered = await asyncio.gather(*(_one(ws, i) for i in held), return_exceptions=True)
        for item, one in zip(held, answered, strict=True):
            if isinstance(one, BaseException) and not isinstance(one, StreamsError):
                raise one
            results[item.n] = one
    for item in repeats:
        before = first[item.key]
        earlier = results[before.n]
        if isinstance(earlier, Given) and item.digest != before.digest:
            results[item.n] = _conflict(item)
        else:
            results[item.n] = earlier


async def _one(ws: Handle, item: _Item) -> Given:
    assert item.command_id is not None
    entry, mine = await ws._record_once(item.feedback, item.on, item.command_id)
    if mine is not None:
        return Given(mine.seq, mine.id)
    assert entry.partition is not None and entry.offset is not None
    assert entry.event_id is not None
    return Given(Seq(partition=entry.partition, offset=entry.offset), entry.event_id)


def _conflict(item: _Item) -> StreamsError:
    return Conflict(f"command id {item.command_id!r} was already used for a different command "
                    "by this actor in this workspace: use a new command id")


class FeedbackBatcher:
    """Group commit for one actor's feedback in one workspace: calls made while a batch is
    being recorded wait and go together in the next (`give_many`), so concurrent commands of
    a surface (a WebSocket's frames, REST requests, MCP tool calls) share claims, round trips
    and acknowledgements. A call to an idle batcher is sent at once: nothing waits for a
    batch to fill. One per event loop (its futures belong to the loop).
    """

    def __init__(self, ws: Handle, batch_size: int = 1000) -> None:
        self._ws = ws
        self._batch_size = batch_size
        self._pending: list[tuple[FeedbackItem, asyncio.Future[Given | StreamsError]]] = []
        self._flushing = False
        self.batches = 0
        """Batches sent so far."""

    @property
    def idle(self) -> bool:
        """Nothing waits and nothing is being recorded: the batcher may be dropped."""
        return not self._flushing and not self._pending

    async def give(self, item: FeedbackItem) -> Given:
        """Record one item with the next batch; its Given, or raises the error it alone was
        refused with (or the batch's, when the brokers did not answer)."""
        future: asyncio.Future[Given | StreamsError] = \
            asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().create_task(self._flush())
        answer = await asyncio.shield(future)
        if isinstance(answer, StreamsError):
            raise answer
        return answer

    async def _flush(self) -> None:
        try:
            while self._pending:
                batch = self._pending[:self._batch_size]
                del self._pending[:self._batch_size]
                self.batches += 1
                try:
                    answers: list[Given | StreamsError] = await _batch(
                        self._ws, [item for item, _ in batch])
                except StreamsError as exc:  # the batch as a whole: every call gets it
                    answers = [exc] * len(batch)
                except Exception as exc:  # never leave a caller waiting
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (_, future), answer in zip(batch, answers, strict=True):
                    if not future.done():
                        future.set_result(answer)
        finally:
            self._flushing = False
