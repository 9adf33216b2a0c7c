"""The serde against confluent-kafka's in-process registry (a registry double, not Kafka)."""

import struct
from typing import Any

import pytest
from confluent_kafka.schema_registry import RegisteredSchema, SchemaRegistryClient

from streams.adapters.avro.codec import envelope_from_record
from streams.adapters.avro.serde import AvroSerde
from streams.core.errors import SchemaError
from streams.core.events import AppEvent, Envelope
from streams.core.subjects import subject_of


@pytest.fixture
def serde() -> AvroSerde:
    return AvroSerde(SchemaRegistryClient.new_client({"url": "mock://serde-tests"}))


def test_confluent_wire_format_and_the_tenants_record_subject(serde: AvroSerde) -> None:
    envelope = Envelope.new(AppEvent(name="x", data={"a": 1}), tenant="acme", workspace="w")
    data = serde.encode_envelope(envelope, "fs.acme.events")
    assert data[0] == 0
    schema_id = struct.unpack(">I", data[1:5])[0]
    assert schema_id >= 1
    assert serde.client.get_subjects() == ["fs.acme.streams.events.AppEvent"]  # the tenant's
    assert envelope_from_record(serde.decode(data, "fs.acme.events")) == envelope


@pytest.mark.parametrize("data", [b"", b"\x01\x00\x00\x00\x01abc", b"garbage!"])
def test_undecodable_bytes_raise_schema_error(serde: AvroSerde, data: bytes) -> None:
    with pytest.raises(SchemaError):
        serde.decode(data, "fs.acme.events")



class IdPerSubject(SchemaRegistryClient):
    """A registry that gives each subject its own id, as the stack's Apicurio does (ids per
    version, not per content); nothing is sent anywhere."""

    def __init__(self) -> None:
        super().__init__({"url": "http://registry.invalid"})
        self.ids: dict[str, int] = {}

    def register_schema_full_response(  # type: ignore[override]
            self, subject: str, schema: Any, normalize_schemas: bool = False,
    ) -> RegisteredSchema:
        schema_id = self.ids.setdefault(subject, 100 + len(self.ids))
        return RegisteredSchema(subject, 1, schema_id, None, schema)


def test_each_tenants_records_carry_the_id_of_its_own_subject() -> None:
    # A serializer shared by two tenants would frame one tenant's records with the id it
    # registered last, the other tenant's.
    registry = IdPerSubject()
    serde = AvroSerde(registry)
    envelope = Envelope.new(AppEvent(name="ops:x"), tenant="t", workspace="w")
    for topic in ("fs.acme.events", "fs.globex.events", "fs.acme.events", "fs.globex.events"):
        data = serde.encode_envelope(envelope, topic)
        assert struct.unpack(">I", data[1:5])[0] == \
            registry.ids[subject_of(topic, "streams.events.AppEvent")]
    assert sorted(registry.ids) == ["fs.acme.streams.events.AppEvent",
                                    "fs.globex.streams.events.AppEvent"]
