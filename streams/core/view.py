"""A view of what exists in a tenant's log: runs, firings, chains and their traces.

Two forms of the same view:

- `LogIndex`, a fold over envelopes in log order, as current as the records fed to it
  (replays and tests use it on a log they hold anyway);
- the entries of a tenant's *index topic* (`index_entries`, `IndexEntry`): one small record
  per key (`run:<id>`, `firing:<id>`, `chain:<id>`, `event:<id>`, and `last:<chain>`, the
  chain's latest event), keyed so a reader finds a
  target by reading the one index partition its key hashes to (`index_partition`), and a
  `cursor:<partition>` record per events partition saying up to where the events topic has
  been indexed by a catch-up. The Kafka side lives in `streams.adapters.kafka.index`.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streams.core.errors import NotFound, ValidationFailed
from streams.core.events import Envelope, RuleFired, RunStarted, trace_id_of
from streams.core.targets import ChainTarget, FiringTarget, RunTarget


@dataclass(frozen=True, slots=True)
class Located:
    """Where a target lives: its workspace, chain, the event that made it, its trace."""

    workspace: str
    correlation_id: str
    event_id: str
    trace_id: str | None
    rule: str | None = None
    action: str | None = None


def run_located(envelope: Envelope, started: RunStarted) -> Located:
    """Where a run is: its `run_started` envelope (`started` is that envelope's event)."""
    return Located(envelope.workspace, envelope.correlation_id, envelope.event_id,
                   envelope.trace.trace_id if envelope.trace else None,
                   rule=started.rule, action=started.action)


@dataclass
class LogIndex:
    """Runs, firings and chains seen so far, and every event's chain."""

    runs: dict[str, Located] = field(default_factory=dict)
    firings: dict[str, Located] = field(default_factory=dict)
    chains: dict[str, Located] = field(default_factory=dict)
    event_chain: dict[str, str] = field(default_factory=dict)
    applied: int = 0

    def apply(self, envelope: Envelope) -> None:
        """Fold one envelope into the view."""
        self.applied += 1
        trace_id = envelope.trace.trace_id if envelope.trace else None
        self.event_chain[envelope.event_id] = envelope.correlation_id
        if envelope.event_id == envelope.correlation_id:
            self.chains[envelope.event_id] = Located(
                envelope.workspace, envelope.correlation_id, envelope.event_id, trace_id)
        event = envelope.event
        if isinstance(event, RunStarted) and event.run_id not in self.runs:
            self.runs[event.run_id] = run_located(envelope, event)
        elif isinstance(event, RuleFired):
            self.firings[event.firing_id] = Located(
                envelope.workspace, envelope.correlation_id, envelope.event_id, trace_id,
                rule=event.rule)

    def locate(self, target: RunTarget | FiringTarget | ChainTarget,
               workspace: str) -> Located | None:
        """Where the target is, or None if this view has not seen it in `workspace`.

        A chain target that names an event other than its chain's first raises
        ValidationFailed naming the chain.
        """
        if isinstance(target, RunTarget):
            found = self.runs.get(target.run_id)
        elif isinstance(target, FiringTarget):
            found = self.firings.get(target.firing_id)
        else:
            found = self.chains.get(target.correlation_id)
            if found is None and target.correlation_id in self.event_chain:
                chain = self.event_chain[target.correlation_id]
                raise ValidationFailed(
                    f"event {target.correlation_id} is not the first event of its chain; "
                    f"give chain feedback on ChainTarget(correlation_id={chain!r})"
                )
        if found is None or found.workspace != workspace:
            return None
        return found


def not_found(target: RunTarget | FiringTarget | ChainTarget, tenant: str,
              workspace: str) -> NotFound:
    """The error for a target missing from a workspace's log."""
    return NotFound(f"no {target.kind} {target.id!r} in workspace {tenant}/{workspace}")


# -- the index topic's entries (pure) ----------------------------------------------------------

CURSOR_PARTITION = 0


def index_partition(key: str, partitions: int) -> int:
    """The index partition a key lives in: cursors alone in partition 0 (so reading them is
    cheap), every other key in 1..partitions-1 by the CRC-32 of the key (all in 0 when the
    topic has one partition).

    Writers produce each entry to this partition explicitly, so a reader knows which one
    partition to read for a key, whatever partitioner a client is configured with.
    """
    if key.startswith("cursor:") or partitions < 2:
        return CURSOR_PARTITION
    return 1 + zlib.crc32(key.encode()) % (partitions - 1)


def target_key(target: RunTarget | FiringTarget | ChainTarget) -> str:
    """The index key of a target: `run:<id>`, `firing:<id>` or `chain:<id>`."""
    if isinstance(target, RunTarget):
        return f"run:{target.run_id}"
    if isinstance(target, FiringTarget):
        return f"firing:{target.firing_id}"
    return f"chain:{target.correlation_id}"


def event_key(event_id: str) -> str:
    """The index key of an event: where it is and which chain it belongs to."""
    return f"event:{event_id}"


def cursor_key(partition: int) -> str:
    """The index key of the cursor of one events partition."""
    return f"cursor:{partition}"


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One index record's value: a target's (or event's) location in the events topic.

    `partition` and `offset` are where the event that made the target is in the events
    topic; a chain's events all share the chain's key, so they follow its head's offset in
    the same partition.
    """

    located: Located
    partition: int
    offset: int

    def encode(self) -> bytes:
        """The entry as compact JSON bytes."""
        loc = self.located
        return entry_json(loc.workspace, loc.correlation_id, loc.event_id, loc.trace_id,
                          loc.rule, loc.action, self.partition, self.offset)

    @staticmethod
    def decode(data: bytes) -> IndexEntry:
        """An entry from its JSON bytes; ValidationFailed if they are not one."""
        try:
            raw = json.loads(data)
            return IndexEntry(Located(str(raw["w"]), str(raw["c"]), str(raw["e"]),
                                      raw.get("t"), raw.get("r"), raw.get("a")),
                              int(raw["p"]), int(raw["o"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValidationFailed(f"not an index entry: {data[:80]!r} ({exc})") from exc


def index_entries(envelope: Envelope, partition: int, offset: int,
                  ) -> list[tuple[str, IndexEntry]]:
    """The index records of one envelope that landed at `partition`/`offset`: its event, and
    the chain, run or firing it starts, or, for an event that continues a chain, the chain's
    newest event (`last:`; how a reader combines repeats: `merge_entry`)."""
    event = envelope.event
    run = firing = None
    if isinstance(event, RunStarted):
        run = (event.run_id, event.rule, event.action)
    elif isinstance(event, RuleFired):
        firing = (event.firing_id, event.rule)
    return _entries(envelope.workspace, envelope.correlation_id, envelope.event_id,
                    envelope.trace.trace_id if envelope.trace else None, run, firing,
                    partition, offset)


def record_entries(record: Mapping[str, Any], partition: int, offset: int,
                   ) -> list[tuple[str, IndexEntry]]:
    """`index_entries` of an event as its plain Avro record (the dict fastavro decodes: an
    `envelope` field and the event's own fields), without building an Envelope: the same
    entries, at a fraction of the cost (what `streams index build` and the workers' index
    writes use). ValidationFailed if the record is not an event envelope."""
    try:
        head = record["envelope"]
        event_type = head["event_type"]
        trace = head.get("trace")
        run = firing = None
        if event_type == RunStarted.event_type:
            run = (str(record["run_id"]), str(record["rule"]), str(record["action"]))
        elif event_type == RuleFired.event_type:
            firing = (str(record["firing_id"]), str(record["rule"]))
        return _entries(str(head["workspace"]), str(head["correlation_id"]),
                        str(head["event_id"]),
                        trace_id_of(str(trace["traceparent"])) if trace else None,
                        run, firing, partition, offset)
    except (KeyError, TypeError) as exc:
        raise ValidationFailed(f"record is not an event envelope: {exc!r}") from exc


def record_entries_encoded(record: Mapping[str, Any], partition: int, offset: int,
                           ) -> list[tuple[str, bytes]]:
    """`record_entries` with each entry already encoded (`IndexEntry.encode`'s bytes),
    without building the entries: one JSON encoding for the event's place (shared by its
    `event:` key and its `chain:` or `last:` key) and one for a run or firing; what the bulk
    paths produce. In `index_entries`' order: `event:`, then `chain:` or `last:`, then a
    run's or firing's (the workers' index writer relies on it). ValidationFailed if the
    record is not an event envelope."""
    try:
        head = record["envelope"]
        event_type = head["event_type"]
        trace = head.get("trace")
        workspace = str(head["workspace"])
        chain = str(head["correlation_id"])
        event_id = str(head["event_id"])
        trace_id = trace_id_of(str(trace["traceparent"])) if trace else None
        here = entry_json(workspace, chain, event_id, trace_id, None, None, partition, offset)
        out = [(f"event:{event_id}", here),
               (f"chain:{event_id}", here) if event_id == chain else (f"last:{chain}", here)]
        if event_type == RunStarted.event_type:
            out.append((f"run:{record['run_id']}", entry_json(
                workspace, chain, event_id, trace_id, str(record["rule"]),
                str(record["action"]), partition, offset)))
        elif event_type == RuleFired.event_type:
            out.append((f"firing:{record['firing_id']}", entry_json(
                workspace, chain, event_id, trace_id, str(record["rule"]), None, partition,
                offset)))
        return out
    except (KeyError, TypeError) as exc:
        raise ValidationFailed(f"record is not an event envelope: {exc!r}") from exc


_quoted = json.encoder.encode_basestring_ascii  # json.dumps's own quoting (ensure_ascii)


def _text(value: str | None) -> str:
    return "null" if value is None else _quoted(value)


def entry_json(workspace: str, correlation_id: str, event_id: str, trace_id: str | None,
               rule: str | None, action: str | None, partition: int, offset: int) -> bytes:
    """An index entry's bytes: exactly `json.dumps` of {"w", "c", "e", "t", "r", "a", "p",
    "o"} with compact separators, written by hand because `json.dumps` makes an encoder per
    call, which cost a worker's rules loop more than all else it does per entry."""
    return (f'{{"w":{_quoted(workspace)},"c":{_quoted(correlation_id)},'
            f'"e":{_quoted(event_id)},"t":{_text(trace_id)},"r":{_text(rule)},'
            f'"a":{_text(action)},"p":{int(partition)},"o":{int(offset)}}}').encode()


def _entries(workspace: str, correlation_id: str, event_id: str, trace_id: str | None,
             run: tuple[str, str, str] | None, firing: tuple[str, str] | None,
             partition: int, offset: int) -> list[tuple[str, IndexEntry]]:
    here = IndexEntry(Located(workspace, correlation_id, event_id, trace_id), partition, offset)
    # A chain's first event has no `last:` entry: `chain:` names it already, and a chain with
    # no `last:` ends at its head (chain_messages). Most events an application emits start a
    # chain of their own, so this spares a worker an index write for most of what it reads.
    out = [(event_key(event_id), here),
           (f"chain:{event_id}", here) if event_id == correlation_id
           else (f"last:{correlation_id}", here)]
    if run is not None:
        run_id, rule, action = run
        out.append((f"run:{run_id}", IndexEntry(
            Located(workspace, correlation_id, event_id, trace_id, rule=rule, action=action),
            partition, offset)))
    elif firing is not None:
        firing_id, rule = firing
        out.append((f"firing:{firing_id}", IndexEntry(
            Located(workspace, correlation_id, event_id, trace_id, rule=rule),
            partition, offset)))
    return out


def merge_entry(key: str, old: IndexEntry | None, new: IndexEntry) -> IndexEntry:
    """The entry a reader keeps for `key` when it sees `new` after `old`.

    A run recorded again (a decision repeated after a crash) is the same run: its first
    `run_started` stays its place. A chain's last event (`last:<chain>`) is the one with the
    highest offset. Everything else takes the newest entry. (This is how a process merges
    what it wrote itself. A reader of the index topic keeps each key's latest write, as
    compaction does, a `run:` key's first excepted: so writers never write a `last:` older
    than one a cursor has passed.)
    """
    if old is not None and key.startswith("run:") and (old.partition, old.offset) <= (
            new.partition, new.offset):
        return old
    if old is not None and key.startswith("last:") and old.offset > new.offset:
        return old
    return new


def located_or_refused(target: RunTarget | FiringTarget | ChainTarget,
                       found: IndexEntry | None, as_event: IndexEntry | None,
                       workspace: str) -> Located | None:
    """The answer of the index for a target in `workspace`, as LogIndex.locate gives it.

    `found` is the entry under the target's key; for a chain target, `as_event` is the entry
    of the event it names (ValidationFailed naming the chain when that event is not its
    chain's first).
    """
    if found is None and isinstance(target, ChainTarget) and as_event is not None:
        chain = as_event.located.correlation_id
        if chain != target.correlation_id:
            raise ValidationFailed(
                f"event {target.correlation_id} is not the first event of its chain; "
                f"give chain feedback on ChainTarget(correlation_id={chain!r})")
    if found is None or found.located.workspace != workspace:
        return None
    return found.located


__all__ = [
    "CURSOR_PARTITION",
    "IndexEntry",
    "Located",
    "LogIndex",
    "cursor_key",
    "entry_json",
    "event_key",
    "index_entries",
    "index_partition",
    "located_or_refused",
    "merge_entry",
    "not_found",
    "record_entries",
    "record_entries_encoded",
    "target_key",
]
