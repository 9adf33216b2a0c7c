"""`CommandLedger` makes a command id record once: a tenant's compacted topic
`<prefix>.<tenant>.commands`, keyed by (workspace, actor, command id), holding claims and
outcomes, followed by every process that executes commands (see docs/api.md, "Idempotency").
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

from confluent_kafka import KafkaException, Message

from streams.adapters.kafka.reports import (
    Outgoing,
    ReportPoller,
    produce_acked,
    produce_all,
)
from streams.core.commands import (
    LedgerEntry,
    fold_ledger,
    ledger_key,
)
from streams.core.errors import (
    Conflict,
    KafkaUnavailable,
    NotFound,
    ValidationFailed,
)
from streams.core.tenancy import commands_topic
from streams.runtime.root import Runtime

__all__ = ["Claim", "CommandLedger", "FindEvent", "Recorder"]

log = logging.getLogger(__name__)

Recorder = Callable[[], Awaitable[tuple[int, int, str]]]
"""Gives a command's feedback; returns its (partition, offset, event id)."""

FindEvent = Callable[[], Awaitable[tuple[int, int, str] | None]]
"""Where the command's (derived) event is in the events topic, if it landed:
(partition, offset, event id)."""

# How often a command waiting on another process's claim looks at the ledger, and how often
# it looks for the other attempt's event in the log.
_POLL = 0.05
_LOOK_FOR_EVENT = 2.0

_OWNER = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"

_OWN_LIMIT = 200_000

Claim = tuple[str, LedgerEntry | None]
"""What `claim_many` found for a command: ("recorded", its entry), ("won", this call's
claim: record it, then `record_many`), or ("held", None): another attempt holds it or a
write failed, so `run` decides (it waits for that attempt, or takes over its lease)."""


def _log_failure(err: Any, msg: Message) -> None:
    if err is not None:
        log.warning("a command outcome was not written to %s: %s (a retry finds the event "
                    "in the log instead)", msg.topic(), err)


class CommandLedger:
    """One process's view of a tenant's command ledger, and its writer. Thread-safe.

    `start()` (blocking) creates the topic if needed (compacted and deleted after
    STREAMS_COMMAND_RETENTION) and reads it to its end; a tail then keeps it current.
    """

    def __init__(self, runtime: Runtime, tenant: str,
                 reports: ReportPoller | None = None) -> None:
        self.runtime = runtime
        self.settings = settings = runtime.settings
        self.tenant = tenant
        self.topic = commands_topic(tenant, settings.topic_prefix)
        # The runtime's shared producer: outcomes share its batches with the appends.
        self._producer = producer = runtime.producer
        self._state: dict[str, LedgerEntry] = {}
        self._lock = threading.Lock()
        self._tail = runtime.tail(self.topic, self._apply)
        self._started = threading.Lock()
        self._running = False
        self._inflight: dict[tuple[int, str], asyncio.Future[LedgerEntry]] = {}
        # The producer's report poller (the event log's, when it shares the producer).
        self._reports = reports or ReportPoller(producer, 0.001)
        self.claims = 0
        # Records written by give_feedback_many and not read back yet, by their value.
        self._own: dict[bytes, LedgerEntry] = {}

    def _apply(self, _partition: int, _offset: int, key: bytes, value: bytes | None) -> None:
        name = key.decode()
        with self._lock:
            if value is None:
                self._state.pop(name, None)
                return
            # A record this process wrote is known: its bytes name it (each claim id is
            # unique), so reading it back costs no decoding.
            record = self._own.pop(value, None) or LedgerEntry.decode(value)
            if record is None:
                return
            folded = fold_ledger(self._state.get(name), record)
            if folded is not None:
                self._state[name] = folded

    def _remember(self, value: bytes, entry: LedgerEntry) -> None:
        # Bounded: a record never read back (the topic gone) must not hold memory for ever.
        if len(self._own) >= _OWN_LIMIT:
            self._own.clear()
        self._own[value] = entry

    def start(self) -> None:
        """Create the topic if missing and follow it (once; later calls return at once)."""
        with self._started:
            if self._running:
                return
            retention = str(int(self.settings.command_retention * 1000))
            self.runtime.admin.ensure_compacted_topic(
                self.topic, self.settings.command_partitions,
                {"cleanup.policy": "compact,delete", "retention.ms": retention,
                 # a claim must outlive every attempt that may still act on it
                 "min.compaction.lag.ms": str(int(max(self.settings.command_lease,
                                                      3600.0) * 1000))})
            self._tail.start()
            self._tail.sync()
            self._running = True

    @property
    def running(self) -> bool:
        """Whether the ledger has been read and is followed."""
        return self._running

    def get(self, key: str) -> LedgerEntry | None:
        """The folded state of a command by its ledger key."""
        with self._lock:
            return self._state.get(key)

    def _partition(self, key: str) -> int:
        # Explicit, so every client (whatever its partitioner) puts a command's records in
        # one partition.
        return zlib.crc32(key.encode()) % max(1, self._tail.partitions)

    def _produce(self, key: str, entry: LedgerEntry,
                 on_delivery: Callable[[Any, Message], None]) -> None:
        self._produce_value(key, entry.encode(), on_delivery)

    def _produce_value(self, key: str, value: bytes,
                       on_delivery: Callable[[Any, Message], None]) -> None:
        try:
            self._producer.produce(self.topic, key=key.encode(), value=value,
                                   partition=self._partition(key), on_delivery=on_delivery)
        except (KafkaException, BufferError) as exc:
            raise KafkaUnavailable(f"writing to {self.topic} failed: {exc}; check the "
                                   "brokers, then retry with the same command id") from exc

    async def _write(self, key: str, entry: LedgerEntry) -> tuple[int, int]:
        """Produce a record and return its (partition, offset) once acknowledged; nothing is
        flushed, so concurrent commands share the producer's batches."""
        return await produce_acked(self._producer, self._reports, self.topic, key.encode(),
                                   entry.encode(), partition=self._partition(key),
                                   wait_s=self.settings.feedback_timeout,
                                   then="then retry with the same command id")

    async def _read_back(self, partition: int, offset: int, wait_s: float) -> bool:
        """Whether the tail handed on the record at `offset` within `wait_s` seconds."""
        return await self._tail.reached(partition, offset, wait_s)

    async def run(self, *, workspace: str, participant: str, command_id: str, digest: str,
                  record: Recorder,
                  find_event: FindEvent) -> LedgerEntry:
        """Record a command once: the recorded entry of its first successful attempt.

        `record()` gives the feedback (with the command's derived event id) and returns its
        (partition, offset, event id); `find_event()` says whether that event is in the log,
        for an attempt whose process died before writing the outcome. Conflict if the command
        id names another command (a different digest); KafkaUnavailable if another attempt
        holds the command and its outcome is not known within STREAMS_FEEDBACK_TIMEOUT.
        """
        key = ledger_key(workspace, participant, command_id)
        loop = asyncio.get_running_loop()
        flight = (id(loop), key)
        running = self._inflight.get(flight)
        if running is not None:  # the same command already running in this loop: share it
            entry = await asyncio.shield(running)
            return self._answer(entry, digest, command_id)
        future: asyncio.Future[LedgerEntry] = loop.create_future()
        self._inflight[flight] = future
        try:
            entry = await self._run(key, digest, command_id, record, find_event)
            future.set_result(entry)
            return entry
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        finally:
            del self._inflight[flight]

    def _answer(self, entry: LedgerEntry, digest: str, command_id: str) -> LedgerEntry:
        if entry.digest != digest:
            raise Conflict(f"command id {command_id!r} was already used for a different "
                           "command by this actor in this workspace: use a new command id")
        return entry

    async def _run(self, key: str, digest: str, command_id: str,
                   record: Recorder,
                   find_event: FindEvent) -> LedgerEntry:
        loop = asyncio.get_running_loop()
        timeout = self.settings.feedback_timeout
        deadline = loop.time() + timeout
        looked_at = 0.0
        while True:
            current = self.get(key)
            supersedes = None
            if current is not None and current.state == "recorded":
                return self._answer(current, digest, command_id)
            if current is not None and current.state == "claimed":
                self._answer(current, digest, command_id)
                if loop.time() - looked_at >= _LOOK_FOR_EVENT:
                    looked_at = loop.time()
                    found = await find_event()
                    if found is not None:  # its attempt recorded it and died before saying so
                        return await self._recorded(key, current, found)
                if time.time() * 1000 - current.at_ms < self.settings.command_lease * 1000:
                    if loop.time() > deadline:
                        raise KafkaUnavailable(
                            f"command {command_id!r} is being recorded by another attempt "
                            f"(process {current.owner}) whose outcome is not known yet; "
                            "retry with the same command id")
                    await asyncio.sleep(_POLL)
                    continue
                supersedes = current.claim  # its lease passed: its record can no longer land
            mine = LedgerEntry(state="claimed", digest=digest, claim=uuid.uuid4().hex,
                               supersedes=supersedes, owner=_OWNER,
                               at_ms=int(time.time() * 1000))
            partition, offset = await self._write(key, mine)
            self.claims += 1
            if not await self._read_back(partition, offset, max(0.0, deadline - loop.time())):
                raise KafkaUnavailable(f"{self.topic} was not read back within {timeout:g} s; "
                                       "check the brokers, then retry with the same command id")
            winner = self.get(key)
            if winner is None or winner.claim != mine.claim or winner.state != "claimed":
                continue  # another attempt won: wait for its outcome
            try:
                at_partition, at_offset, event_id = await record()
            except (ValidationFailed, NotFound):
                # Refused before anything was produced: let a corrected retry go ahead.
                released = mine.replace(state="released")
                await self._write(key, released)
                raise
            if self.settings.serve_fault == "kill_after_produce":
                os.kill(os.getpid(), signal.SIGKILL)  # failure tests: die before answering
            done = mine.replace(state="recorded", partition=at_partition, offset=at_offset,
                                event_id=event_id)
            # Not waited for: the answer is known. Should this record be lost, a retry finds
            # the claim without an outcome and the event in the log (find_event).
            self._produce(key, done, _log_failure)
            self._apply(partition, offset, key.encode(), done.encode())
            return done

    async def claim_many(self, commands: list[tuple[str, str, str]],
                         ) -> list[Claim | Conflict]:
        """Claim many commands at once: (ledger key, digest, command id) each, distinct keys.

        The claims are produced together and read back together (one wait per partition,
        not per command), so a batch costs what one command does. A command already
        recorded answers its entry, Conflict in its place if the digest differs; one that
        another attempt holds, or whose claim was not acknowledged, is "held" (give it to
        `run`). Raises KafkaUnavailable only if the ledger cannot be read back in time.
        """
        loop = asyncio.get_running_loop()
        timeout = self.settings.feedback_timeout
        deadline = loop.time() + timeout
        answers: list[Claim | Conflict] = []
        mine: dict[int, LedgerEntry] = {}
        out: list[Outgoing] = []
        now = int(time.time() * 1000)
        prefix = uuid.uuid4().hex[:24]
        with self._lock:  # once for the batch: the tail thread takes it per record
            found = [self._state.get(key) for key, _, _ in commands]
        for n, ((key, digest, command_id), current) in enumerate(zip(commands, found,
                                                                      strict=True)):
            if current is not None and current.state in ("recorded", "claimed"):
                try:
                    self._answer(current, digest, command_id)
                except Conflict as exc:
                    answers.append(exc)
                    continue
                answers.append(("recorded", current) if current.state == "recorded"
                               else ("held", None))
                continue
            # Named by the batch's random prefix and the item's place: a claim id only needs
            # to be unique.
            entry = LedgerEntry(state="claimed", digest=digest, claim=f"{prefix}{n:08x}",
                                owner=_OWNER, at_ms=now)
            mine[n] = entry
            answers.append(("won", entry))
            value = entry.encode()
            self._remember(value, entry)
            out.append((self.topic, key.encode(), value, None, self._partition(key)))
        landed = await produce_all(self._producer, self._reports, out, wait_s=timeout)
        ends: dict[int, int] = {}
        for n, where in zip(mine, landed, strict=True):
            if isinstance(where, Exception):
                answers[n] = ("held", None)
                continue
            ends[where[0]] = max(ends.get(where[0], -1), where[1])
            self.claims += 1
        read = await asyncio.gather(*(self._read_back(p, o, max(0.0, deadline - loop.time()))
                                      for p, o in ends.items()))
        if not all(read):
            raise KafkaUnavailable(f"{self.topic} was not read back within {timeout:g} s; "
                                   "check the brokers, then retry with the same command ids")
        claims: list[Claim | Conflict] = []
        with self._lock:
            winners = {n: self._state.get(commands[n][0]) for n in mine}
        for n, answer in enumerate(answers):
            if not isinstance(answer, Exception) and answer[0] == "won":
                winner = winners[n]
                if winner is None or winner.claim != mine[n].claim or \
                        winner.state != "claimed":
                    answer = ("held", None)  # another attempt's claim came first
            claims.append(answer)
        return claims

    def record_many(self, outcomes: list[tuple[str, LedgerEntry, int, int, str]]) -> None:
        """Write the outcomes of claims `claim_many` won: (key, claim, partition, offset,
        event id) each; not waited for, and applied here at once (as `run` does: should a
        record be lost, a retry finds the claim and the event in the log)."""
        written: list[tuple[str, LedgerEntry]] = []
        try:
            for key, claim, partition, offset, event_id in outcomes:
                done = claim.replace(state="recorded", partition=partition, offset=offset,
                                     event_id=event_id)
                value = done.encode()
                self._remember(value, done)
                self._produce_value(key, value, _log_failure)
                written.append((key, done))
        finally:  # what was written is known here, even if a later write failed
            with self._lock:
                for key, done in written:
                    folded = fold_ledger(self._state.get(key), done)
                    if folded is not None:
                        self._state[key] = folded

    async def _recorded(self, key: str, claimed: LedgerEntry,
                        found: tuple[int, int, str]) -> LedgerEntry:
        done = claimed.replace(state="recorded", partition=found[0], offset=found[1],
                               event_id=found[2])
        await self._write(key, done)
        return done

    def close(self) -> None:
        """Stop following the ledger."""
        self._tail.close()
