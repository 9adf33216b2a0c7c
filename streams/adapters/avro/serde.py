"""Registry-backed Avro serde: confluent-kafka's serializers, Confluent wire format.

Records are registered under the subject of their full name for the topic's tenant
(`<prefix>.<tenant>.<full name>`, streams.core.subjects), so one topic carries many event types
and tenants' schemas evolve apart. Decoding uses the writer's schema from the registry,
so a reader needs no compiled-in schema and sees every field the writer wrote.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from confluent_kafka.schema_registry import (
    Schema as RegistrySchema,
)
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext, SerializationError

from streams.adapters.avro.codec import envelope_to_record, record_kind
from streams.adapters.avro.fast import RegistryUnavailable, registry_refusal
from streams.adapters.avro.schemas import (
    Schema,
    all_schemas,
    dead_letter_schema,
    event_schemas,
    feedback_given_schema,
    fullname,
    score_schema,
)
from streams.adapters.kafka.config import registry_config
from streams.core.errors import KafkaUnavailable, SchemaError
from streams.core.events import Envelope, FeedbackGiven
from streams.core.feedback import FeedbackRegistry, registry
from streams.core.subjects import subject_of
from streams.core.tenancy import EVENTS, tenant_topic
from streams.settings import Settings

WIRE_MAGIC = 0


def _unavailable(exc: Exception, what: str) -> RegistryUnavailable:
    """The one error of an unreachable or failing (5xx) registry: retry later, the data is
    not at fault."""
    return RegistryUnavailable(
        f"{what}: schema registry unavailable ({type(exc).__name__}: {exc}); check "
        "SCHEMA_REGISTRY_URL and that the registry is up")


def registry_client(settings: Settings | str) -> SchemaRegistryClient:
    """A schema registry client for the settings' registry (with its basic auth), or for a
    bare Confluent-compatible URL."""
    if isinstance(settings, str):
        return SchemaRegistryClient({"url": settings})
    return SchemaRegistryClient(registry_config(settings))


class AvroSerde:
    """Encodes and decodes the pipeline's records through one schema registry."""

    def __init__(
        self, client: SchemaRegistryClient | Settings | str, *,
        types: FeedbackRegistry | None = None, prefix: str | None = None,
    ) -> None:
        self.client = client if isinstance(client, SchemaRegistryClient) else \
            registry_client(client)
        self.types = types or registry
        self.prefix = prefix or (client.topic_prefix if isinstance(client, Settings) else "fs")
        self._serializers: dict[str, AvroSerializer] = {}
        self._deserializer = AvroDeserializer(self.client)
        self._events = event_schemas()

    def _serializer(self, schema: Schema, topic: str) -> AvroSerializer:
        # One per subject, not per record: a serializer keeps the one schema id it
        # registered, and each tenant's subject has its own.
        subject = subject_of(topic, fullname(schema), self.prefix)
        ser = self._serializers.get(subject)
        if ser is None:
            ser = AvroSerializer(
                self.client, json.dumps(schema), conf={
                    "auto.register.schemas": True,
                    "subject.name.strategy": lambda _ctx, _name: subject,
                },
            )
            self._serializers[subject] = ser
        return ser

    def envelope_schema_for(self, envelope: Envelope) -> Schema:
        """The record schema an envelope is written with."""
        event = envelope.event
        if isinstance(event, FeedbackGiven):
            return feedback_given_schema(self.types.require(event.feedback_type))
        return self._events[record_kind(event)]

    def encode_envelope(self, envelope: Envelope, topic: str) -> bytes:
        """Confluent-framed Avro bytes of an envelope."""
        return self.encode(self.envelope_schema_for(envelope), envelope_to_record(envelope), topic)

    def encode_score(self, record: Mapping[str, Any], topic: str) -> bytes:
        """Confluent-framed Avro bytes of a score record (see codec.score_to_record)."""
        return self.encode(score_schema(), record, topic)

    def encode_dead_letter(self, record: Mapping[str, Any], topic: str) -> bytes:
        """Confluent-framed Avro bytes of a dead-letter record."""
        return self.encode(dead_letter_schema(), record, topic)

    def encode(self, schema: Schema, record: Mapping[str, Any], topic: str) -> bytes:
        """Encode `record` with `schema`, registering the schema on first use."""
        ctx = SerializationContext(topic, MessageField.VALUE)
        try:
            out = self._serializer(schema, topic)(record, ctx)
        except SchemaRegistryError as exc:
            refused = registry_refusal(exc, f"registering {fullname(schema)} for {topic}")
            if refused is not None:
                raise refused from exc
            if exc.http_status_code is None or exc.http_status_code >= 500:
                raise _unavailable(exc, f"registering {fullname(schema)}") from exc
            raise KafkaUnavailable(f"schema registry refused {fullname(schema)}: {exc}") from exc
        except (SerializationError, ValueError, TypeError) as exc:
            raise SchemaError(f"cannot encode {fullname(schema)}: {exc}") from exc
        except Exception as exc:  # the registry client's transport errors (connect, timeout)
            raise _unavailable(exc, f"registering {fullname(schema)}") from exc
        assert out is not None
        return bytes(out)

    def decode(self, data: bytes, topic: str) -> dict[str, Any]:
        """Decode Confluent-framed Avro bytes with the writer's schema."""
        if len(data) < 5 or data[0] != WIRE_MAGIC:
            raise SchemaError("not Confluent-framed Avro (bad magic byte or too short)")
        # No context: the record subject comes from the writer schema, and confluent-kafka
        # then skips its data-contract rule engine, which walks the whole schema per record
        # (half the decode time). This pipeline defines no data-contract rules.
        try:
            out = self._deserializer(data, None)
        except SchemaRegistryError as exc:
            refused = registry_refusal(exc, "fetching a writer schema")
            if refused is not None:
                raise refused from exc
            if exc.http_status_code and 400 <= exc.http_status_code < 500:
                raise SchemaError(f"unknown schema id: {exc}") from exc
            raise _unavailable(exc, "fetching a writer schema") from exc
        except (SerializationError, ValueError, TypeError, EOFError, IndexError) as exc:
            raise SchemaError(f"undecodable record: {exc}") from exc
        except Exception as exc:  # the registry client's transport errors (connect, timeout)
            raise _unavailable(exc, "fetching a writer schema") from exc
        if not isinstance(out, dict):
            raise SchemaError("record is not an Avro record")
        return out

    def register_all(self, compatibility: str = "BACKWARD",
                     tenant: str | None = None) -> list[str]:
        """Register every known schema (see `register_schemas`); returns the subjects."""
        return self.register_schemas(all_schemas(self.types), compatibility, tenant)

    def register_schemas(self, schemas: Mapping[str, Schema],
                         compatibility: str = "BACKWARD",
                         tenant: str | None = None) -> list[str]:
        """Register schemas with the given compatibility level, under the tenant's subjects
        (`<prefix>.<tenant>.<full name>`, as its records are written) or, without a tenant,
        under their full names (shared subjects); returns the subjects.

        A schema the registry refuses as incompatible with the subject's registered versions
        (or as invalid) raises SchemaError naming the subject; refused credentials or
        principal raise AccessDenied; a registry that cannot be reached raises
        KafkaUnavailable.
        """
        topic = tenant_topic(tenant, EVENTS, self.prefix) if tenant else None
        subjects = []
        for full_name, schema in schemas.items():
            name = subject_of(topic, full_name, self.prefix) if topic else full_name
            try:
                self.client.set_compatibility(subject_name=name, level=compatibility)
                self.client.register_schema(name, RegistrySchema(json.dumps(schema), "AVRO"))
            except SchemaRegistryError as exc:
                refused = registry_refusal(exc, f"registering {name}")
                if refused is not None:
                    raise refused from exc
                if exc.http_status_code in (409, 422):
                    raise SchemaError(
                        f"the schema registry refused {name}: {exc.error_message}; it is not "
                        f"{compatibility} compatible with the registered versions (give a new "
                        f"field a default, or the type a new name)") from exc
                raise KafkaUnavailable(f"schema registry refused {name}: {exc}") from exc
            subjects.append(name)
        return subjects
