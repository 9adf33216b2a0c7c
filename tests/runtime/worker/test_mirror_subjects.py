"""The worker's mirror step against a tenant whose own subjects refuse the service: that
tenant's feedback becomes dead letters under the service's shared subject, and the other
tenants' scores go on (no broker: a registry double that refuses one tenant's subjects)."""

from __future__ import annotations

from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from streams.adapters.avro.fast import FastCodec
from streams.adapters.avro.serde import AvroSerde
from streams.core.actors import UserActor
from streams.core.events import Envelope, FeedbackGiven
from streams.core.feedback import Feedback, FeedbackRegistry, value_record
from streams.core.targets import RunTarget
from streams.runtime.worker.mirror import MirrorStep

TYPES = FeedbackRegistry()


class Checked(Feedback, name="subject_check", targets={"run"}, registry=TYPES):
    ok: bool


class LockedTenant:
    """confluent-kafka's in-process registry, refusing every registration under the
    subjects of tenant `locked` as an incompatible version (409), as a tenant that set its
    own subjects' compatibility and registered something else would make it."""

    def __init__(self, url: str) -> None:
        self.inner = SchemaRegistryClient.new_client({"url": url})
        self.refused: list[str] = []

    def register_schema(self, subject: str, schema: Any, **kwargs: Any) -> int:
        if subject.startswith("fs.locked."):
            self.refused.append(subject)
            raise SchemaRegistryError(409, 40901, "incompatible with an earlier version")
        return int(self.inner.register_schema(subject, schema, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _feedback(registry: LockedTenant, tenant: str) -> bytes:
    envelope = Envelope.new(
        FeedbackGiven(feedback_type="subject_check", target=RunTarget(run_id="run_1"),
                      value=value_record(Checked(ok=True))),
        tenant=tenant, workspace="prod", actor=UserActor(id="ada"))
    # Written by the tenant before its subjects were locked: under an open one.
    return AvroSerde(registry.inner, types=TYPES).encode_envelope(envelope,
                                                                   f"fs.{tenant}.events")


def test_a_tenant_whose_subjects_refuse_the_service_gets_letters_the_others_scores() -> None:
    registry = LockedTenant("mock://locked-tenant")
    codec = FastCodec(registry)  # type: ignore[arg-type]
    step = MirrorStep(codec, prefix="fs", types=TYPES)
    [letter] = step.handle("fs.locked.events", 0, 1, b"k", _feedback(registry, "locked"),
                           b"feedback_given")
    assert letter.topic == "fs.locked.deadletter"
    assert "the scores' schema cannot be registered" in dict(letter.headers or [])[
        "reason"].decode()
    writer, record = codec.decode(letter.value)
    assert writer.id == registry.get_latest_version(
        "fs._shared.streams.deadletter.DeadLetter").schema_id
    assert record["source_topic"] == "fs.locked.events"
    assert registry.refused == ["fs.locked.streams.scores.Score",
                                "fs.locked.streams.deadletter.DeadLetter"]
    [score] = step.handle("fs.open.events", 0, 1, b"k", _feedback(registry, "open"),
                          b"feedback_given")
    assert score.topic == "fs.open.scores"
