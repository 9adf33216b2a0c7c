"""The proposal-outcome evaluator's state in a process: one incremental `ProposalFold` per
workspace (and evaluator), fed from the tenant's events topic as this process reads it.

Each call reads only what was appended since the last one (a `TopicReader` remembers its
positions) and folds it, so deciding on a resolution costs the new records, never the whole
log. The records are decoded with the fast codec (fastavro against the writer's schema);
an Envelope is built only for what a fold needs whole (the ledger's events, `run_started`
and `proposal_outcome` feedback: `streams.core.proposals.folded_whole`); every other event
is folded by its place in its chain (`ProposalFold.link`), and a record of a workspace no
fold follows is passed over by its `workspace` header, undecoded. Nothing else is kept: the
process holds the folds (their ledgers and links), not the log, and where each run it read
is (`locate_run`), so the rule's feedback on a run it read needs no index look-up.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from streams.adapters.avro.codec import envelope_from_record
from streams.adapters.avro.fast import RegistryUnavailable
from streams.adapters.kafka.log import header_value
from streams.core.actors import AnyActor
from streams.core.errors import SchemaError
from streams.core.events import Envelope, RunStarted, Seq
from streams.core.proposals.fold import ProposalFold, folded_whole
from streams.core.view import Located, run_located

__all__ = ["LogReader", "ProposalLog", "RecordDecoder"]

log = logging.getLogger(__name__)


class LogReader(Protocol):
    """What the folds read a tenant's events with (streams.adapters.kafka.log.TopicReader)."""

    def read_to_end(self) -> Iterator[Any]:
        """Messages from the remembered positions up to the end as of the call."""
        ...

    def rewind(self, partition: int, offset: int) -> None:
        """Read `partition` from `offset` again at the next call."""
        ...

    def close(self) -> None:
        """Leave the broker."""
        ...


class RecordDecoder(Protocol):
    """What decodes a record's bytes (streams.adapters.avro.fast.FastCodec)."""

    def decode(self, data: bytes, *, logical: bool = False) -> tuple[Any, dict[str, Any]]:
        """The writer and the record of the bytes."""
        ...


class ProposalLog:
    """Incremental proposal folds of one tenant's workspaces, fed from its events topic.

    `reader_of` makes a new reader of the topic (one is kept for the folds' catch-ups; a
    fold made after it has read records gets a reader of its own for the history, once).
    `read` counts the records read and `built` the envelopes built, over all calls.
    """

    def __init__(self, reader_of: Callable[[], LogReader], codec: RecordDecoder) -> None:
        self._reader_of = reader_of
        self._codec = codec
        self._reader: LogReader | None = None
        self._folds: dict[tuple[str, str], ProposalFold] = {}
        self._by_workspace: dict[bytes, list[ProposalFold]] = {}
        self._runs: dict[str, Located] = {}
        self._histories: dict[tuple[str, str], threading.Lock] = {}
        self.read = 0
        self.built = 0
        self.caught_up_at = float("-inf")
        # Thread lock: handles are used from several event loops and threads.
        self._lock = threading.Lock()

    def fold(self, workspace: str, evaluator: AnyActor, asked: float) -> ProposalFold:
        """The workspace's fold for `evaluator`, after a catch-up that started after `asked`
        (`time.monotonic()` when the caller asked: concurrent callers share one read).
        Raises KafkaUnavailable when the topic cannot be read and RegistryUnavailable when a
        writer's schema cannot be fetched now (that record is read again at the next call)."""
        key = (workspace, evaluator.participant)
        with self._lock:
            fold = self._folds.get(key)
            if fold is None and self._reader is None:  # the first: the shared read feeds it
                fold = self._add(key, ProposalFold(evaluator))
            gate = self._histories.setdefault(key, threading.Lock()) if fold is None else None
        if fold is None:
            assert gate is not None
            fold = self._with_history(key, evaluator, gate)
        with self._lock:
            if self.caught_up_at < asked:
                started = time.monotonic()
                if self._reader is None:
                    self._reader = self._reader_of()
                self._feed(self._reader, self._by_workspace)
                self.caught_up_at = started
        return fold

    def _add(self, key: tuple[str, str], fold: ProposalFold) -> ProposalFold:
        self._folds[key] = fold
        self._by_workspace.setdefault(key[0].encode(), []).append(fold)
        return fold

    def _with_history(self, key: tuple[str, str], evaluator: AnyActor,
                      gate: threading.Lock) -> ProposalFold:
        """A fold asked for after the shared reader moved on reads the history itself, with a
        reader of its own and without the tenant's lock (the other folds' catch-ups go on
        meanwhile; a second caller for the same fold waits for the first). What it reads past
        the shared reader comes again from that one: a fold skips an event id it has
        folded."""
        with gate:
            with self._lock:
                found = self._folds.get(key)
            if found is not None:
                return found
            fold = ProposalFold(evaluator)
            history = self._reader_of()
            try:
                self._feed(history, {key[0].encode(): [fold]})
            finally:
                history.close()
            with self._lock:
                return self._add(key, fold)

    def locate_run(self, run_id: str, workspace: str) -> Located | None:
        """Where a run this process read is, or None (not read here, or of another
        workspace): the `run_started` the folds were given."""
        found = self._runs.get(run_id)
        return found if found is not None and found.workspace == workspace else None

    def close(self) -> None:
        """Leave the broker (the shared reader's)."""
        with self._lock:
            reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()

    def _feed(self, reader: LogReader, folds_of: dict[bytes, list[ProposalFold]]) -> None:
        for msg in reader.read_to_end():
            self.read += 1
            workspace = header_value(msg.headers(), "workspace")
            if workspace is not None and workspace not in folds_of:
                continue  # a workspace no fold follows: not decoded
            read = self._read(reader, msg)
            if read is None:
                continue
            head, envelope = read
            # The record's own workspace decides (the header only spared decoding the others).
            folds = folds_of.get(str(head["workspace"]).encode())
            if folds is None:
                continue
            if envelope is None:
                event_id, kind = head["event_id"], head["event_type"]
                chain, cause = head["correlation_id"], head.get("causation_id")
                for fold in folds:
                    fold.link(event_id, kind, chain, cause)
                continue
            event = envelope.event
            if isinstance(event, RunStarted) and event.run_id not in self._runs:
                self._runs[event.run_id] = run_located(envelope, event)
            for fold in folds:
                fold.add(envelope)

    def _read(self, reader: LogReader, msg: Any) -> tuple[dict[str, Any], Envelope | None] | None:
        """A record's envelope fields, and its envelope when a fold needs it whole; None for
        a record that is not an event envelope (no fold can hold it: the mirror dead-letters
        it). A registry outage rewinds the reader to the record and raises."""
        try:
            _writer, record = self._codec.decode(msg.value() or b"")
            head = record["envelope"]
            for name in ("event_id", "event_type", "workspace", "correlation_id"):
                if not isinstance(head[name], str):
                    raise SchemaError(f"the envelope's {name} is not text")
            if not folded_whole(head["event_type"], record.get("feedback_type")):
                return head, None
            self.built += 1
            return head, envelope_from_record(record, Seq(partition=msg.partition(),
                                                          offset=msg.offset()))
        except RegistryUnavailable:
            reader.rewind(msg.partition(), msg.offset())  # an outage: read it again
            raise
        except (SchemaError, KeyError, TypeError, ValueError) as exc:
            log.debug("proposal folds pass over %s[%s]@%s: %s", msg.topic(), msg.partition(),
                      msg.offset(), exc)
            return None
