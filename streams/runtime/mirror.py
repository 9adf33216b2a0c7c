"""The feedback mirror's step: one events-topic record in, score records (or a dead letter) out.

The step is synchronous and I/O-free apart from the registry lookups its serde caches, so the
Faust agent, the raw benchmark floor and tests all run the very same code. It never raises
for bad input: an undecodable record becomes a dead letter with its reason, and feedback of
a type this process does not register is skipped and counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opentelemetry import metrics

from streams.adapters.avro.codec import score_to_record, utc_time
from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.outputs import Output, dead_letter_output
from streams.core.actors import participant_of
from streams.core.errors import SchemaError
from streams.core.events import FEEDBACK_GIVEN
from streams.core.feedback import FeedbackRegistry, registry
from streams.core.scores import ScoreConfigs, score_configs, scores_from_value
from streams.core.tenancy import parse_topic, tenant_topics

_meter = metrics.get_meter("streams.mirror")
_scores_out = _meter.create_counter("streams.mirror.scores", description="scores produced")
_skipped = _meter.create_counter("streams.mirror.skipped", description="feedback of unknown type")
_dead = _meter.create_counter("streams.mirror.dead_letters", description="records dead-lettered")


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
        counters = self.per_tenant.setdefault(tenant, {"feedback": 0, "scores": 0,
                                                       "skipped": 0, "dead_letters": 0})
        counters[key] += n


class MirrorStep:
    """Turns feedback_given records into Score records on the tenant's scores topic."""

    def __init__(self, serde: AvroSerde, *, prefix: str = "fs",
                 types: FeedbackRegistry | None = None) -> None:
        self.serde = serde
        self.prefix = prefix
        self.types = types or registry
        self.stats = MirrorStats()
        self._configs: dict[str, ScoreConfigs | None] = {}
        self._routes: dict[str, tuple[str, str] | None] = {}

    def _route(self, topic: str) -> tuple[str, str] | None:
        """(tenant, scores topic) of an events topic, remembered per topic."""
        if topic not in self._routes:
            parsed = parse_topic(topic, self.prefix)
            self._routes[topic] = (parsed[0], tenant_topics(parsed[0], self.prefix).scores) \
                if parsed else None
        return self._routes[topic]

    def _configs_for(self, feedback_type: str) -> ScoreConfigs | None:
        if feedback_type not in self._configs:
            cls = self.types.get(feedback_type)
            self._configs[feedback_type] = score_configs(cls) if cls else None
        return self._configs[feedback_type]

    def handle(self, topic: str, partition: int, offset: int, key: bytes | None,
               value: bytes | None, event_type: bytes | None) -> list[Output]:
        """The records to produce for one consumed record; never raises for bad input."""
        self.stats.records += 1
        route = self._route(topic)
        tenant = route[0] if route else "?"
        if event_type is not None and event_type != b"feedback_given":
            return []
        try:
            if value is None:
                raise SchemaError("record has no value")
            record = self.serde.decode(value, topic)
            head = record["envelope"]
            if head["event_type"] != FEEDBACK_GIVEN:
                return []
            self.stats.feedback += 1
            self.stats.bump(tenant, "feedback")
            configs = self._configs_for(record["feedback_type"])
            if configs is None:
                self.stats.skipped_unknown_type += 1
                self.stats.bump(tenant, "skipped")
                _skipped.add(1, {"tenant": tenant})
                return []
            target = record["target"]
            actor = head["actor"]
            participant = participant_of(actor["kind"], actor["id"], actor.get("version"))
            scores = scores_from_value(
                configs, record["value"], feedback_event_id=head["event_id"],
                timestamp=utc_time(head["time"]), tenant=head["tenant"],
                workspace=head["workspace"], target_kind=target["kind"],
                target_id=target["id"], participant=participant,
                trace_id=record.get("target_trace_id"), session_id=head["correlation_id"],
                seq=f"{partition}:{offset}",
            )
        except (SchemaError, KeyError, TypeError, ValueError) as exc:
            return [self.dead_letter(topic, partition, offset, key, value, f"{exc}")]
        if route is None:
            return [self.dead_letter(topic, partition, offset, key, value,
                                     f"{topic} is not a tenant events topic")]
        scores_topic = route[1]
        feedback_key = head["event_id"].encode()
        out = [Output(scores_topic, feedback_key,
                      self.serde.encode_score(score_to_record(s), scores_topic))
               for s in scores]
        self.stats.scores += len(out)
        self.stats.bump(tenant, "scores", len(out))
        _scores_out.add(len(out), {"tenant": tenant})
        return out

    def dead_letter(self, topic: str, partition: int, offset: int, key: bytes | None,
                    value: bytes | None, reason: str, stage: str = "mirror") -> Output:
        """A dead-letter record for the tenant of `topic`, with the reason."""
        route = self._route(topic)
        tenant = route[0] if route else "?"
        self.stats.dead_letters += 1
        self.stats.bump(tenant, "dead_letters")
        _dead.add(1, {"tenant": tenant})
        return dead_letter_output(self.serde, self.prefix, topic=topic, partition=partition,
                                  offset=offset, key=key, value=value, reason=reason,
                                  stage=stage)

