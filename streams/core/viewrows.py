"""The rows a tenant's materialized read view keeps for each event, and its page cursors.

Pure: no storage here (the SQLite store is `streams.adapters.views`, the keeper that feeds it
from the events topic `streams.runtime.client.views`). An event arrives as the plain dict the
fast Avro codec decodes (`{"envelope": {...}, ...body}`, times as epoch milliseconds), never
as a pydantic object, so a view is built at the codec's speed.

    rows = rows_of(record, partition, offset, raw)   # EventRow, and a run/firing/feedback/chain
                                                     # row when it is one
    cursor = encode_cursor(PageKey(time_ms, partition, offset))
    key = decode_cursor(cursor)                      # ValidationFailed for a bad cursor

Every row is keyed by where its event is in the log (`position(partition, offset)`), so
applying a record twice changes nothing. Pages are ordered by (time, partition, offset):
the cursor is the key of the last row of a page, so the next page starts strictly after it
and records appended meanwhile (newer times) never shift a page, so pages have neither gaps
nor repeats.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streams.core.actors import participant_of
from streams.core.app_events import APP_EVENT_NAME
from streams.core.errors import SchemaError, ValidationFailed
from streams.core.evaluation import VERDICT_RECORD
from streams.core.events import Envelope, FeedbackGiven
from streams.core.measures.calibration import ALARM_EVENT

__all__ = [
    "OFFSET_BITS",
    "PAGE_CURSOR_PATTERN",
    "AlarmRow",
    "ChainRow",
    "EventRow",
    "FeedbackRow",
    "FiringRow",
    "PageKey",
    "Rows",
    "RunRow",
    "chain_key",
    "decode_cursor",
    "encode_cursor",
    "feedback_of",
    "position",
    "rows_of",
    "seq_of",
]

OFFSET_BITS = 40
"""A position is `partition << OFFSET_BITS | offset`: one integer that sorts like (partition,
offset), with room for 2**40 offsets per partition and 2**23 partitions in SQLite's int64."""

_OFFSET_MASK = (1 << OFFSET_BITS) - 1


def position(partition: int, offset: int) -> int:
    """The one-integer key of an events record (sorts like `(partition, offset)`)."""
    if partition < 0 or not 0 <= offset <= _OFFSET_MASK:
        raise ValueError(f"no position for partition {partition}, offset {offset}")
    return partition << OFFSET_BITS | offset


def seq_of(pos: int) -> tuple[int, int]:
    """`(partition, offset)` of a position."""
    return pos >> OFFSET_BITS, pos & _OFFSET_MASK


def chain_key(correlation_id: str) -> int:
    """The 64-bit key a view files an event's chain under: the first 8 bytes of the
    correlation id's BLAKE2b digest, as a signed integer (SQLite's int64).

    A digest, not the id itself: 8 bytes a row against the id's 36 or more, in the table and
    in its index (about 0.5 GB less at 10M events). Two chains may share a key (about one
    pair in 10^19 for two chains of a tenant); a reader keeps only the events whose decoded
    correlation id is the one asked for, so a shared key costs a read, never a wrong answer.
    """
    digest = hashlib.blake2b(correlation_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@dataclass(frozen=True, slots=True)
class EventRow:
    """Every event: where it is, what a run record needs to find it, and its raw value (the
    Confluent-framed Avro bytes, decoded again only when a read returns it)."""

    pos: int
    event_id: str
    workspace: str
    event_type: str
    time_ms: int
    correlation_id: str
    causation_id: str | None
    raw: bytes


@dataclass(frozen=True, slots=True)
class RunRow:
    """A `run_started`: the runs query's row (the first one of a run id is the run)."""

    workspace: str
    run_id: str
    rule: str
    firing_id: str
    time_ms: int
    pos: int


@dataclass(frozen=True, slots=True)
class FiringRow:
    """A `rule_fired`: where a run's firing (and through it, its matched ids) is, and the
    firings query's row (a queue of a rule's firings pages them)."""

    workspace: str
    firing_id: str
    rule: str
    time_ms: int
    pos: int


@dataclass(frozen=True, slots=True)
class ChainRow:
    """An application event that starts its chain (its correlation id is its own id): the
    chains query's row (a chain is a target of feedback, named by that id)."""

    workspace: str
    correlation_id: str
    time_ms: int
    pos: int


@dataclass(frozen=True, slots=True)
class FeedbackRow:
    """A `feedback_given`: the feedback query's row, and what a verdict on its target is
    (`value_json`, the value as canonical JSON; `evaluator` the evaluator's name when an
    evaluator gave it, `person` whether a person did): the latest per target and participant
    is what queues of judged or disputed targets read."""

    workspace: str
    feedback_type: str
    participant: str
    time_ms: int
    pos: int
    target_kind: str = ""
    target_id: str = ""
    value_json: str = "{}"
    evaluator: str | None = None
    person: bool = False
    shadow: bool = False


@dataclass(frozen=True, slots=True)
class AlarmRow:
    """A `calibration:alarm` event: where one evaluator version's alarm on one field stands
    after it (the newest per key is the view's `alarms` row)."""

    workspace: str
    evaluator: str
    feedback_type: str
    field: str
    raised: bool
    episode: int
    time_ms: int
    pos: int


@dataclass(frozen=True, slots=True)
class Rows:
    """What one event adds to a view."""

    event: EventRow
    run: RunRow | None = None
    firing: FiringRow | None = None
    feedback: FeedbackRow | None = None
    chain: ChainRow | None = None
    verdict: FeedbackRow | None = None
    """A shadow evaluator version's recorded verdict: a verdict on its target (the
    verdicts table), not feedback anyone gave (not in the feedback table)."""
    alarm: AlarmRow | None = None


def rows_of(record: Mapping[str, Any], partition: int, offset: int, raw: bytes) -> Rows:
    """The rows of one decoded events record; SchemaError if it is not an event envelope."""
    try:
        head = record["envelope"]
        event_type = str(head["event_type"])
        workspace = str(head["workspace"])
        time_ms = _millis(head["time"])
        pos = position(partition, offset)
        event = EventRow(pos=pos, event_id=str(head["event_id"]), workspace=workspace,
                         event_type=event_type, time_ms=time_ms,
                         correlation_id=str(head["correlation_id"]),
                         causation_id=head.get("causation_id"), raw=raw)
        if event_type == "run_started":
            return Rows(event, run=RunRow(workspace, str(record["run_id"]),
                                          str(record["rule"]), str(record["firing_id"]),
                                          time_ms, pos))
        if event_type == "rule_fired":
            return Rows(event, firing=FiringRow(workspace, str(record["firing_id"]),
                                                str(record["rule"]), time_ms, pos))
        if event_type == "feedback_given":
            actor = head["actor"]
            kind = str(actor["kind"])
            who = participant_of(kind, str(actor["id"]), actor.get("version"))
            target = record["target"]
            return Rows(event, feedback=FeedbackRow(
                workspace, str(record["feedback_type"]), who, time_ms, pos,
                target_kind=str(target["kind"]), target_id=str(target["id"]),
                value_json=json.dumps(record["value"], sort_keys=True, default=str),
                evaluator=str(actor["id"]) if kind == "evaluator" else None,
                person=kind == "user"))
        if event_type == VERDICT_RECORD:
            return Rows(event, verdict=_shadow_verdict(record, workspace, time_ms, pos))
        if event_type == ALARM_EVENT:
            return Rows(event, alarm=_alarm(record, workspace, time_ms, pos))
        if event.correlation_id == event.event_id and APP_EVENT_NAME.match(event_type):
            return Rows(event, chain=ChainRow(workspace, event.event_id, time_ms, pos))
        return Rows(event)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SchemaError(f"record at {partition}:{offset} is not an event envelope: "
                          f"{exc!r}") from exc


def _alarm(record: Mapping[str, Any], workspace: str, time_ms: int,
           pos: int) -> AlarmRow | None:
    # Not this view's to judge: an alarm it cannot read keeps its event row, without a state.
    try:
        data = json.loads(record["data_json"])
        version = data.get("version") or "0"
        return AlarmRow(workspace, f"evaluator:{data['evaluator']}@{version}",
                        str(data["feedback_type"]), str(data["field"]),
                        data["raised"] is True, int(data.get("episode") or 0), time_ms, pos)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _shadow_verdict(record: Mapping[str, Any], workspace: str, time_ms: int,
                    pos: int) -> FeedbackRow | None:
    # A shadow evaluator version's verdict is recorded, never given as feedback
    # (streams.core.evaluation): it is a verdict on its target all the same, so calibration
    # measures shadow versions beside the live one. A live version's record (shadow false)
    # has its feedback_given, which is the verdict.
    try:
        data = json.loads(record["data_json"])
    except ValueError:  # not this view's to judge: the event row is kept, without a verdict
        return None
    if not isinstance(data, dict):
        return None
    target, value = data.get("target"), data.get("value")
    if data.get("shadow") is not True or not isinstance(target, dict) \
            or not isinstance(value, dict):
        return None
    evaluator = str(data.get("evaluator"))
    return FeedbackRow(workspace, str(data.get("feedback_type")),
                       f"evaluator:{evaluator}@{data.get('version')}", time_ms, pos,
                       target_kind=str(target.get("kind")), target_id=str(target.get("id")),
                       value_json=json.dumps(value, sort_keys=True, default=str),
                       evaluator=evaluator, person=False, shadow=True)


def _millis(value: Any) -> int:
    # The fast codec gives epoch milliseconds; a datetime (another codec's) is converted.
    if isinstance(value, int):
        return value
    stamp = getattr(value, "timestamp", None)
    if stamp is None:
        raise TypeError(f"time is {type(value).__name__}, not epoch milliseconds")
    return round(float(stamp()) * 1000)


@dataclass(frozen=True, order=True, slots=True)
class PageKey:
    """The order of a page's rows, and what a cursor holds: the last row's key."""

    time_ms: int
    partition: int
    offset: int

    @property
    def pos(self) -> int:
        """The row's position (see `position`)."""
        return position(self.partition, self.offset)


PAGE_CURSOR_PATTERN = r"^v1\.(0|-?[1-9][0-9]{0,17})\.(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,11})$"
"""Every cursor `encode_cursor` makes, and every one `decode_cursor` takes: `v1.<time ms>.
<partition>.<offset>`, digits without leading zeros. The published document declares it, so a
client (or a property-based tester) sending any string of this pattern is answered a page.
Its bounds keep every position in range (partitions below 10**6, offsets below 10**12)."""

_CURSOR = re.compile(PAGE_CURSOR_PATTERN)


def encode_cursor(key: PageKey) -> str:
    """An opaque, URL-safe cursor for the page after the row `key`."""
    cursor = f"v1.{key.time_ms}.{key.partition}.{key.offset}"
    if not _CURSOR.fullmatch(cursor):
        raise ValueError(f"no cursor for {key}: partition or offset out of range")
    return cursor


def decode_cursor(cursor: str) -> PageKey:
    """The key a cursor holds; ValidationFailed if it is not one `encode_cursor` makes (the
    pattern PAGE_CURSOR_PATTERN, exactly)."""
    found = _CURSOR.fullmatch(cursor)
    if found is None:
        raise ValidationFailed(
            f"invalid cursor {cursor[:40]!r}: pass the next_cursor of an earlier page "
            "unchanged, or no cursor for the first page")
    time_ms, partition, offset = (int(part) for part in found.groups())
    return PageKey(time_ms, partition, offset)


def feedback_of(envelopes: Sequence[Envelope], *, feedback_type: str | None = None,
                participant: str | None = None) -> list[Envelope]:
    """The whole-log fold's answer to a feedback read (the offline reference a view's answer
    is checked against): feedback_given envelopes of the type and participant, in the order
    given."""
    return [e for e in envelopes if isinstance(e.event, FeedbackGiven)
            and (feedback_type is None or e.event.feedback_type == feedback_type)
            and (participant is None or e.actor.participant == participant)]
