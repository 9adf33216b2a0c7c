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
from streams.core.actors import AnyActor
from streams.core.errors import SchemaError
from streams.core.events import RunStarted, Seq
from streams.core.proposals.fold import ProposalFold, folded_whole
from streams.core.view import Located

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
            if fold is None:
                fold = ProposalFold(evaluator)
                if self._reader is not None:
                    # The shared reader has moved on: this fold reads the history itself.
                    # What it reads past the shared reader comes again from that one, and
                    # a fold skips an event id it has folded.
                    history = self._reader_of()
                    try:
                        self._feed(history, {workspace.encode(): [fold]})
                    finally:
                        history.close()
                self._folds[key] = fold
                self._by_workspace.setdefault(workspace.encode(), []).append(fold)
            if self.caught_up_at < asked:
                started = time.monotonic()
                if self._reader is None:
                    self._reader = self._reader_of()
                self._feed(self._reader, self._by_workspace)
                self.caught_up_at = started
            return fold

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
        decode = self._codec.decode
        for msg in reader.read_to_end():
            self.read += 1
            workspace: bytes | None = None
            for name, value in msg.headers() or ():
                if name == "workspace":
                    workspace = value
                    break
            folds = folds_of.get(workspace) if workspace is not None else None
            if folds is None and workspace is not None:
                continue  # a workspace no fold follows: not decoded
            try:
                _writer, record = decode(msg.value() or b"")
                head = record["envelope"]
                if folds is None:  # no header: the record says
                    folds = folds_of.get(str(head["workspace"]).encode())
                    if folds is None:
                        continue
                kind = head["event_type"]
                if folded_whole(kind, record.get("feedback_type")):
                    envelope = envelope_from_record(record, Seq(partition=msg.partition(),
                                                                offset=msg.offset()))
                    self.built += 1
                    event = envelope.event
                    if isinstance(event, RunStarted) and event.run_id not in self._runs:
                        self._runs[event.run_id] = Located(
                            envelope.workspace, envelope.correlation_id, envelope.event_id,
                            envelope.trace.trace_id if envelope.trace else None,
                            rule=event.rule, action=event.action)
                    for fold in folds:
                        fold.add(envelope)
                else:
                    event_id, chain = head["event_id"], head["correlation_id"]
                    cause = head.get("causation_id")
                    for fold in folds:
                        fold.link(event_id, kind, chain, cause)
            except RegistryUnavailable:
                reader.rewind(msg.partition(), msg.offset())  # an outage: read it again
                raise
            except (SchemaError, KeyError, TypeError, ValueError) as exc:
                # Not an event envelope: no fold can hold it (the mirror dead-letters it).
                log.debug("proposal folds pass over %s[%s]@%s: %s", msg.topic(),
                          msg.partition(), msg.offset(), exc)
