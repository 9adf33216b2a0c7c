"""Dead letters: what each one is, which ones an operator chose, and how to re-drive them.

A dead letter (`<prefix>.<tenant>.deadletter`, record `streams.deadletter.DeadLetter`) holds
the original bytes of a record the pipeline gave up on, where they were (`source_topic`,
`partition`, `offset`), who gave up (`stage`: `mirror`, or `sink:<cursor>`) and why
(`reason`, also in the `reason` header). Two stages write them today:

- the feedback mirror (`streams.runtime.worker.mirror`): an events record it could not decode, or
  feedback whose value, or target kind, its type refuses;
- a sink runner (`streams.runtime.sink.runner`): a score record it could not decode, or one
  the sink refused.

A run that exhausted its attempts is *not* a dead letter here: its `run_dead_lettered` event is
in the events topic, and re-running an action is the application's decision.

Re-driving a letter after its cause was fixed (`redrive_plan`):

- a mirror letter is **re-scored**: the mirror's own step runs again on the original bytes,
  with the feedback types the re-driving process loads, and the scores go to the tenant's
  scores topic. Nothing is written to the events topic, so rules do not see the feedback a
  second time. The scores are the ones the mirror would have written (their ids derive from
  the feedback's event id, their `seq` from the original partition and offset).
- a sink letter is **re-published**: the original score record, unchanged, to the scores
  topic it came from; every sink reads it again (same score id, so a sink that keeps one
  record per id, as Langfuse does, absorbs the repeat).

Idempotency: each letter's re-drive is recorded in the tenant's compacted
`<prefix>.<tenant>.redriven` topic, keyed by the letter's own coordinates in the dead-letter
topic (`redrive_key`: `<partition>:<offset>`), written after the re-driven records were
delivered. A letter whose key is there is not re-driven again. A process that dies between the
two writes re-drives that letter once more on the next run, with the same ids.

Pure: standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from streams.core.errors import ValidationFailed
from streams.core.tenancy import EVENTS, SCORES, sibling_topic, tenant_topics, topic_kind

__all__ = [
    "KINDS",
    "DeadLetter",
    "Redrive",
    "RedriveMarker",
    "RedrivePlan",
    "Selection",
    "describe",
    "kind_of",
    "parse_at",
    "parse_source",
    "redrive_key",
    "redrive_plan",
]

Kind = Literal["undecodable", "invalid", "rejected", "internal", "unknown"]
KINDS: tuple[Kind, ...] = ("undecodable", "invalid", "rejected", "internal", "unknown")

# Reason texts written by streams.adapters.avro.fast and streams.runtime.worker.mirror/sink_runner
# (see docs/guarantees.md's list): a letter's kind is read from them, since the record has no
# field for it.
_UNDECODABLE = ("not confluent-framed", "record has no value", "the record has no value",
                "the registry does not know", "undecodable", "bytes after the",
                "not an event", "is not a tenant events topic")
_INVALID = ("invalid ", "cannot be given on", "is not a finite number", "out of range",
            "not valid text", "64-bit")


def kind_of(stage: str, reason: str) -> Kind:
    """What went wrong, from the letter's stage and reason: `undecodable` (bytes no reader
    can read: framing, unknown schema id, not an event), `invalid` (decoded, but the feedback
    type refuses the value or target), `rejected` (a sink refused a score), `internal` (a bug
    in the pipeline), or `unknown`."""
    text = reason.lower()
    if text.startswith("internal error"):
        return "internal"
    if stage.startswith("sink:") and text.startswith("rejected by"):
        return "rejected"
    if any(marker in text for marker in _UNDECODABLE):
        return "undecodable"
    if stage == "mirror" and any(marker in text for marker in _INVALID):
        return "invalid"
    return "unknown"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead letter: where it is (`topic`, `partition`, `offset` in the dead-letter
    topic), where its record was, who gave up, why and when."""

    topic: str
    partition: int
    offset: int
    source_topic: str
    source_partition: int
    source_offset: int
    stage: str
    reason: str
    time: datetime
    kind: Kind
    key: bytes | None = None
    value: bytes | None = field(default=None, repr=False)

    @property
    def at(self) -> str:
        """The letter's own coordinates, `<partition>:<offset>` of the dead-letter topic."""
        return redrive_key(self.partition, self.offset)

    @property
    def source(self) -> str:
        """Where its record was: `<topic>:<partition>:<offset>`."""
        return f"{self.source_topic}:{self.source_partition}:{self.source_offset}"

    def summary(self) -> dict[str, Any]:
        """A JSON-ready description (the key as text, the value's size, not its bytes)."""
        return {
            "at": self.at, "source": self.source, "stage": self.stage, "kind": self.kind,
            "reason": self.reason, "time": self.time.isoformat(),
            "key": self.key.decode(errors="replace") if self.key is not None else None,
            "value_bytes": len(self.value) if self.value is not None else None,
        }


def _time(value: Any) -> datetime:
    """A DeadLetter's `time`: a datetime (the registry's deserializer), or epoch ms (fastavro
    without logical types)."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int):
        return datetime.fromtimestamp(value / 1000, UTC)
    raise ValidationFailed(f"dead letter time {value!r} is neither a datetime nor epoch ms")


def describe(record: Mapping[str, Any], *, topic: str, partition: int, offset: int,
             headers: Iterable[tuple[str, bytes | None]] | None = None) -> DeadLetter:
    """A dead letter from its decoded DeadLetter record and its place in the dead-letter
    topic. The record's `reason` is the full one; the `reason` header (cut to 200 bytes) is
    used only when the record has none. Raises ValidationFailed naming a missing field."""
    try:
        reason = record.get("reason")
        if not reason:
            for name, value in headers or ():
                if name == "reason" and value is not None:
                    reason = value.decode(errors="replace")
        stage = str(record["stage"])
        return DeadLetter(
            topic=topic, partition=partition, offset=offset,
            source_topic=str(record["source_topic"]),
            source_partition=int(record["partition"]), source_offset=int(record["offset"]),
            stage=stage, reason=str(reason or ""), time=_time(record["time"]),
            kind=kind_of(stage, str(reason or "")), key=record.get("key"),
            value=record.get("value"))
    except KeyError as exc:
        raise ValidationFailed(
            f"{topic}:{partition}:{offset} is not a DeadLetter record: it has no {exc} field"
        ) from exc


def redrive_key(partition: int, offset: int) -> str:
    """The idempotency key of a letter's re-drive: its own `<partition>:<offset>` in the
    dead-letter topic, which no other letter of the tenant has."""
    return f"{partition}:{offset}"


def parse_at(text: str) -> tuple[int, int]:
    """`<partition>:<offset>` of a letter (as `list` prints it), or ValidationFailed."""
    parts = text.split(":")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ValidationFailed(f"--at {text!r}: write a letter's place as PARTITION:OFFSET "
                               "(the `at` column of `streams deadletters list`), e.g. 0:12")
    return int(parts[0]), int(parts[1])


def parse_source(text: str) -> tuple[str, int | None]:
    """`TOPIC` or `TOPIC:PARTITION` of `--source`, or ValidationFailed."""
    topic, sep, partition = text.rpartition(":")
    if not sep:
        return text, None
    if not topic or not partition.isdigit():
        raise ValidationFailed(f"--source {text!r}: write TOPIC or TOPIC:PARTITION, e.g. "
                               f"{tenant_topics('acme').events}:2")
    return topic, int(partition)


@dataclass(frozen=True)
class Selection:
    """Which letters an operator chose; every given filter must hold (all of them: and).

    `reason` is a case-insensitive substring of the reason; `stage` matches exactly, or as a
    prefix ending in `:` (`sink:` is every sink); `kind` is one of KINDS; `source_topic`
    (and `source_partition`) the record's origin; `from_offset`/`to_offset` bound the origin
    offset (inclusive); `since`/`until` the letter's time (`since` inclusive, `until`
    exclusive); `at` the letters' own coordinates.
    """

    reason: str | None = None
    stage: str | None = None
    kind: str | None = None
    source_topic: str | None = None
    source_partition: int | None = None
    from_offset: int | None = None
    to_offset: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    at: frozenset[tuple[int, int]] = frozenset()

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in KINDS:
            raise ValidationFailed(f"kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if (self.from_offset is not None and self.to_offset is not None
                and self.from_offset > self.to_offset):
            raise ValidationFailed(f"--from-offset {self.from_offset} is after --to-offset "
                                   f"{self.to_offset}: nothing could match")
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise ValidationFailed(f"--since {self.since.isoformat()} is not before --until "
                                   f"{self.until.isoformat()}: nothing could match")
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                object.__setattr__(self, name, value.replace(tzinfo=UTC))

    def matches(self, letter: DeadLetter) -> bool:
        """Whether the letter is selected."""
        if self.at and (letter.partition, letter.offset) not in self.at:
            return False
        if self.reason is not None and self.reason.lower() not in letter.reason.lower():
            return False
        if self.stage is not None:
            wanted = self.stage
            if not (letter.stage == wanted or (wanted.endswith(":")
                                               and letter.stage.startswith(wanted))):
                return False
        if self.kind is not None and letter.kind != self.kind:
            return False
        if self.source_topic is not None and letter.source_topic != self.source_topic:
            return False
        if self.source_partition is not None and \
                letter.source_partition != self.source_partition:
            return False
        if self.from_offset is not None and letter.source_offset < self.from_offset:
            return False
        if self.to_offset is not None and letter.source_offset > self.to_offset:
            return False
        if self.since is not None and letter.time < self.since:
            return False
        return not (self.until is not None and letter.time >= self.until)

    def select(self, letters: Iterable[DeadLetter]) -> list[DeadLetter]:
        """The selected letters, in the order given."""
        return [letter for letter in letters if self.matches(letter)]


Action = Literal["rescore", "republish"]


@dataclass(frozen=True, slots=True)
class Redrive:
    """One letter to re-drive: `rescore` (run the mirror's step on its bytes, scores to
    `destination`) or `republish` (its bytes, unchanged, to `destination`), recorded under
    `key` in the redriven topic."""

    letter: DeadLetter
    action: Action
    destination: str
    key: str


@dataclass(frozen=True)
class RedrivePlan:
    """What a re-drive does: the letters to re-drive, those re-driven before (by key), and
    those that cannot be (with why)."""

    todo: list[Redrive]
    done_before: list[DeadLetter]
    cannot: list[tuple[DeadLetter, str]]

    def summary(self) -> dict[str, Any]:
        """Counts, for the command's last line."""
        return {"to_redrive": len(self.todo), "redriven_before": len(self.done_before),
                "cannot": len(self.cannot)}


def _scores_topic(events_topic: str) -> str | None:
    return sibling_topic(events_topic, SCORES) if topic_kind(events_topic) == EVENTS else None


def redrive_plan(letters: Sequence[DeadLetter], selection: Selection,
                 redriven: Mapping[str, Any]) -> RedrivePlan:
    """The plan for the selected letters, given the keys already in the redriven topic.

    A letter with no original bytes, from an unknown stage, or whose source topic is not a
    tenant's events or scores topic cannot be re-driven; each such letter is listed with the
    reason, nothing is guessed.
    """
    todo: list[Redrive] = []
    done: list[DeadLetter] = []
    cannot: list[tuple[DeadLetter, str]] = []
    for letter in selection.select(letters):
        key = redrive_key(letter.partition, letter.offset)
        if key in redriven:
            done.append(letter)
            continue
        if letter.value is None:
            cannot.append((letter, "the record had no value: there is nothing to re-drive"))
        elif letter.stage == "mirror":
            scores = _scores_topic(letter.source_topic)
            if scores is None:
                cannot.append((letter, f"{letter.source_topic} is not a tenant events topic"))
            else:
                todo.append(Redrive(letter, "rescore", scores, key))
        elif letter.stage.startswith("sink:"):
            if topic_kind(letter.source_topic) != SCORES:
                cannot.append((letter, f"{letter.source_topic} is not a tenant scores topic"))
            else:
                todo.append(Redrive(letter, "republish", letter.source_topic, key))
        else:
            cannot.append((letter, f"stage {letter.stage!r} has no re-drive (only mirror "
                                   "and sink:<cursor> letters can be re-driven)"))
    return RedrivePlan(todo, done, cannot)


@dataclass(frozen=True, slots=True)
class RedriveMarker:
    """The redriven topic's record of one letter's re-drive (JSON, keyed by its key)."""

    source: str
    action: Action
    destination: str
    records: int
    time: datetime

    def encode(self) -> bytes:
        """The record value."""
        return json.dumps({"source": self.source, "action": self.action,
                           "destination": self.destination, "records": self.records,
                           "time": self.time.isoformat()}).encode()

    @classmethod
    def decode(cls, data: bytes) -> RedriveMarker:
        """A marker from its value; ValidationFailed when it is not one."""
        try:
            raw = json.loads(data)
            return cls(source=raw["source"], action=raw["action"],
                       destination=raw["destination"], records=int(raw["records"]),
                       time=datetime.fromisoformat(raw["time"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValidationFailed(f"not a re-drive marker: {exc}") from exc
