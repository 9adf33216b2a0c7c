"""The feedback mirror's step: events-topic records in, score records (or dead letters) out.

The step is synchronous and does no I/O but the registry lookups its codec caches (once per
schema id), so the batch loop, the benchmark and tests all run the very same code. It decodes
with fastavro against the writer's schema (`FastCodec`), checks the value against the
registered feedback type (its ranges, categories and target kinds: a record written by
another producer is trusted no more than a caller of give_feedback), maps it straight to Score
records and encodes them. It never raises for bad data: such a record becomes a dead letter
with its reason; feedback of a type this process does not register is skipped and counted. It
raises `RegistryUnavailable` when a schema cannot be fetched now: that is an outage, and the
caller retries the batch later instead of dead-lettering good data.

Its counts (`MirrorStats`, per tenant) are what the exported metrics read
(streams.runtime.observe.metrics): the hot path adds to plain integers, never to an instrument; the
one measurement made per feedback is its delay (`on_delay`, given by the worker).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from streams.adapters.avro.codec import SCORES_SHARE_FROM, score_records
from streams.adapters.avro.fast import (
    FastCodec,
    RegistryUnavailable,
    WriterSchema,
    letter_writer,
)
from streams.adapters.avro.schemas import score_schema
from streams.adapters.kafka.log import Headers
from streams.adapters.kafka.outputs import (
    Output,
    dead_letter_record,
    reason_headers,
)
from streams.core.actors import participant_of
from streams.core.errors import AccessDenied, SchemaError, ValidationFailed
from streams.core.events import FEEDBACK_GIVEN
from streams.core.feedback import Feedback, FeedbackRegistry, check_plain_value, registry
from streams.core.scores import ScoreConfigs, score_configs
from streams.core.tenancy import dead_letter_topic, parse_topic, tenant_topics

__all__ = ["BAD_DATA", "MirrorStats", "MirrorStep"]

log = logging.getLogger(__name__)

_FEEDBACK_HEADER = FEEDBACK_GIVEN.encode()
_new_tuple = tuple.__new__
_UNSEEN = object()  # a cache's "not looked up yet" (None is a remembered answer)

BAD_DATA: tuple[type[Exception], ...] = (SchemaError, KeyError, TypeError, ValueError,
                                         AttributeError)
"""What a record that is not valid feedback raises while it is mapped to scores."""


@dataclass
class MirrorStats:
    """What a mirror has done since it started, per tenant and in all."""

    records: int = 0
    feedback: int = 0
    scores: int = 0
    skipped_unknown_type: int = 0
    dead_letters: int = 0
    per_tenant: dict[str, dict[str, int]] = field(default_factory=dict)

    def bump(self, tenant: str, key: str, n: int = 1) -> None:
        """Add `n` to a tenant's counter `key`."""
        counters = self.per_tenant.get(tenant)
        if counters is None:  # not setdefault: that builds the default twice per feedback
            counters = self.per_tenant[tenant] = {"feedback": 0, "scores": 0, "skipped": 0,
                                                  "dead_letters": 0}
        counters[key] += n


class MirrorStep:
    """Turns feedback_given records into Score records on the tenant's scores topic."""

    def __init__(self, codec: FastCodec, *, prefix: str = "fs",
                 types: FeedbackRegistry | None = None,
                 on_delay: Callable[[str, float], None] | None = None,
                 workspace: str | None = None) -> None:
        self.codec = codec
        # None: every workspace (the worker's mirror); a name: that workspace's feedback
        # only, the rest passed over uncounted (the in-process mirror of one workspace).
        self.workspace = workspace
        # Called per scored feedback with its tenant and the seconds from the feedback's
        # event time to now, when its scores are handed to the producer.
        self.on_delay = on_delay
        self.prefix = prefix
        self.types = types or registry
        self.stats = MirrorStats()
        self._types: dict[str, tuple[type[Feedback], ScoreConfigs] | None] = {}
        self._routes: dict[str, tuple[str, str] | None] = {}
        self._writers: dict[str, WriterSchema] = {}

    def _route(self, topic: str) -> tuple[str, str] | None:
        """(tenant, scores topic) of an events topic, remembered per topic."""
        route = self._routes.get(topic, _UNSEEN)
        if route is _UNSEEN:
            parsed = parse_topic(topic, self.prefix)
            route = self._routes[topic] = \
                (parsed[0], tenant_topics(parsed[0], self.prefix).scores) if parsed else None
        return cast("tuple[str, str] | None", route)

    def _type(self, feedback_type: str) -> tuple[type[Feedback], ScoreConfigs] | None:
        known = self._types.get(feedback_type, _UNSEEN)
        if known is _UNSEEN:
            cls = self.types.get(feedback_type)
            known = self._types[feedback_type] = (cls, score_configs(cls)) if cls else None
        return cast("tuple[type[Feedback], ScoreConfigs] | None", known)

    def handle_batch(self, messages: Sequence[Any]) -> list[Output]:
        """The records to produce for a batch of confluent-kafka messages (errors skipped).

        Raises RegistryUnavailable, having produced nothing, when a schema cannot be fetched.
        """
        out: list[Output] = []
        for msg in messages:
            if msg.error() is not None:
                continue
            event_type = None
            trace: Headers | None = None
            headers = msg.headers()
            for name, value in headers if headers is not None else ():
                if name == "event_type":
                    event_type = value
                elif name == "traceparent" or name == "tracestate":
                    # Copied onto the scores, so a sink continues the feedback's trace.
                    trace = [(name, value)] if trace is None else [*trace, (name, value)]
            try:
                out += self.handle(msg.topic(), msg.partition(), msg.offset(), msg.key(),
                                   msg.value(), event_type, trace)
            except (RegistryUnavailable, AccessDenied):  # not the record's fault: stop here
                raise
            except Exception as exc:  # a bug must not stop the mirror or skip the record
                log.exception("mirror step failed on %s[%s]@%s", msg.topic(), msg.partition(),
                              msg.offset())
                out.append(self.dead_letter(msg.topic(), msg.partition(), msg.offset(),
                                            msg.key(), msg.value(), f"internal error: {exc!r}"))
        return out

    def handle(self, topic: str, partition: int, offset: int, key: bytes | None,
               value: bytes | None, event_type: bytes | None,
               trace: Headers | None = None) -> list[Output]:
        """The records to produce for one consumed record; never raises for bad data.
        `trace` (the record's traceparent/tracestate headers) goes onto every score."""
        self.stats.records += 1
        if event_type is not None and event_type != _FEEDBACK_HEADER:
            return []
        try:
            mapped = self._mapped(topic, partition, offset, value)
            if not mapped:
                return []
            head, scores = mapped
        except BAD_DATA as exc:
            return [self.dead_letter(topic, partition, offset, key, value, f"{exc}")]
        route = self._routes[topic]  # _mapped remembered it, and refused another topic's
        assert route is not None
        tenant, scores_topic = route
        try:
            writer = self._score_writer(scores_topic)
        except SchemaError as exc:
            # The tenant's own Score subject refused the service (a tenant may evolve or
            # lock its subjects): this feedback waits as a dead letter, other tenants go on.
            return [self.dead_letter(topic, partition, offset, key, value,
                                     f"the scores' schema cannot be registered: {exc}")]
        feedback_key = head["event_id"].encode()
        # The tuples made directly: Output's own __new__ is a Python call per score.
        out = [_new_tuple(Output, (scores_topic, feedback_key, encoded, trace, None))
               for encoded in self.codec.encode_all(writer, scores,
                                                      shared_from=SCORES_SHARE_FROM)]
        self._scored(tenant, head, len(out))
        return out

    def score_records(self, topic: str, partition: int, offset: int, value: bytes | None,
                      event_type: bytes | None) -> list[dict[str, Any]]:
        """The score records (Avro dicts, not encoded) of one consumed record, for a caller
        that hands scores to a sink itself (streams.runtime.sink.mirror): the same checks
        and counts as `handle`, but bad data raises (SchemaError, KeyError, TypeError,
        ValueError, AttributeError: `BAD_DATA`) instead of becoming a dead letter, and
        what is not feedback of this step's workspace, or of an unknown type, is []."""
        self.stats.records += 1
        if event_type is not None and event_type != _FEEDBACK_HEADER:
            return []
        mapped = self._mapped(topic, partition, offset, value)
        if not mapped:
            return []
        head, scores = mapped
        route = self._route(topic)
        assert route is not None
        self._scored(route[0], head, len(scores))
        return scores

    def _mapped(self, topic: str, partition: int, offset: int, value: bytes | None,
                ) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """(envelope head, score records) of a feedback record; None for a record that is
        not feedback (of this step's workspace), and for feedback of a type this process does
        not register (counted). Raises one of `BAD_DATA` for a record that is not valid."""
        route = self._route(topic)
        tenant = route[0] if route else "?"
        if value is None:
            raise SchemaError("record has no value")
        _writer, record = self.codec.decode(value)
        head = record.get("envelope")
        if not isinstance(head, dict) or "event_type" not in head:
            raise SchemaError("not an event: the record has no envelope field (streams "
                              "events are records whose first field is the Envelope)")
        if head["event_type"] != FEEDBACK_GIVEN:
            return None
        if route is None:
            raise SchemaError(f"{topic} is not a tenant events topic")
        if self.workspace is not None and head["workspace"] != self.workspace:
            return None
        stats = self.stats
        stats.feedback += 1
        stats.bump(tenant, "feedback")
        known = self._type(record["feedback_type"])
        if known is None:
            stats.skipped_unknown_type += 1
            stats.bump(tenant, "skipped")
            return None
        cls, configs = known
        target = record["target"]
        if target["kind"] not in cls.feedback_targets:
            raise SchemaError(
                f"{cls.feedback_name} feedback cannot be given on a {target['kind']}; "
                f"it targets {sorted(cls.feedback_targets)}")
        try:
            # The checks of give_feedback: the type's own, and the ones Pydantic does
            # not make (finite numbers, 64-bit integers, valid text).
            check_plain_value(cls, record["value"])
        except ValidationFailed as exc:
            raise SchemaError(str(exc)) from exc
        actor = head["actor"]
        scores = score_records(
            configs, record["value"], feedback_event_id=head["event_id"],
            timestamp=head["time"], tenant=head["tenant"], workspace=head["workspace"],
            target_kind=target["kind"], target_id=target["id"],
            participant=participant_of(actor["kind"], actor["id"], actor.get("version")),
            trace_id=record.get("target_trace_id"), session_id=head["correlation_id"],
            seq=f"{partition}:{offset}", rule=record.get("target_rule"),
            action=record.get("target_action"),
        )
        return head, scores

    def _scored(self, tenant: str, head: dict[str, Any], n: int) -> None:
        """Count a feedback's `n` scores and report its delay."""
        self.stats.scores += n
        self.stats.bump(tenant, "scores", n)
        if self.on_delay is not None:
            # The codec keeps timestamps as epoch milliseconds (no logical types).
            sent = head["time"]
            seconds = sent.timestamp() if isinstance(sent, datetime) else sent / 1000
            self.on_delay(tenant, time.time() - seconds)

    def _score_writer(self, topic: str) -> WriterSchema:
        # Registered once per tenant's topic (the codec remembers it too; this spares its
        # subject look-up per record).
        writer = self._writers.get(topic)
        if writer is None:
            writer = self._writers[topic] = self.codec.registered(score_schema(), topic)
        return writer

    def dead_letter(self, topic: str, partition: int, offset: int, key: bytes | None,
                    value: bytes | None, reason: str, stage: str = "mirror") -> Output:
        """A dead-letter record for the tenant of `topic`, with the reason."""
        route = self._route(topic)
        tenant = route[0] if route else "?"
        self.stats.dead_letters += 1
        self.stats.bump(tenant, "dead_letters")
        record = dead_letter_record(topic=topic, partition=partition, offset=offset, key=key,
                                    value=value, reason=reason, stage=stage,
                                    time=int(time.time() * 1000))
        letters = dead_letter_topic(self.prefix, topic)
        return Output(letters, key, self.codec.encode(letter_writer(self.codec, letters), record),
                      reason_headers(reason))
