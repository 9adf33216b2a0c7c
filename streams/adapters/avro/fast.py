"""The batch data path's Avro codec: fastavro against schemas cached per registry id.

confluent-kafka's AvroSerializer and AvroDeserializer cost 25 and 53 µs per call here, most
of it per-call schema handling; fastavro alone decodes a feedback record in about 14 µs. This
codec keeps confluent's registry client (lookups, registration, auth) and its wire format, and
does the per-record work with fastavro:

- `decode` reads the 5-byte Confluent frame (magic 0, big-endian schema id), fetches the
  writer's schema from the registry once per id, and reads the body with fastavro against it.
- `encode` writes a record with a schema registered once per subject (the tenant's subject of
  the record's full name, streams.core.subjects, as the registry serde does) behind the same
  frame.

Timestamps stay epoch milliseconds on the mirror's path (logicalType is dropped from the
parsed schemas): converting to datetime and back costs more than the rest of the mapping, and
the bytes written are the same. `decode(data, logical=True)` keeps the logical types
(timestamp-millis as an aware UTC datetime, as the registry serde reads them), against a
second parse of the same cached writer schema: the rules reactor reads its plain records so
(about 3 µs more per record than without, measured on an app event record). Registry
failures are typed: an id the registry does not know is
`SchemaError` (bad data: dead-letter it), an unreachable or failing registry is
`RegistryUnavailable` (an outage: wait and retry, never dead-letter).
"""

from __future__ import annotations

import io
import json
import struct
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import fastavro
from confluent_kafka.schema_registry import Schema as RegistrySchema
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from streams.adapters.avro.schemas import Schema, dead_letter_schema, fullname
from streams.core.errors import AccessDenied, KafkaUnavailable, SchemaError
from streams.core.subjects import subject_of

__all__ = ["FastCodec", "RegistryUnavailable", "WriterSchema", "frame", "letter_writer",
           "registry_refusal", "without_logical_types"]

MAGIC = 0
_HEADER = struct.Struct(">bI")
_MISSING = object()
_CONTAINERS = (dict, list, tuple)


class RegistryUnavailable(KafkaUnavailable):
    """The schema registry could not be reached or failed (5xx); retry later, the data is
    not at fault."""


def without_logical_types(schema: Any) -> Any:
    """A copy of a schema with every `logicalType` removed, so fastavro reads and writes the
    underlying primitives (timestamp-millis stays an int of milliseconds)."""
    if isinstance(schema, dict):
        return {k: without_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [without_logical_types(s) for s in schema]
    return schema


def frame(schema_id: int, body: bytes) -> bytes:
    """Confluent's wire format: magic byte, 4-byte big-endian schema id, Avro body."""
    return _HEADER.pack(MAGIC, schema_id) + body


class WriterSchema:
    """A schema as this codec uses it: registry id, full name, parsed for fastavro, and the
    five bytes that frame a record written with it (`header`)."""

    __slots__ = ("_logical", "_splits", "header", "id", "name", "parsed", "raw")

    def __init__(self, schema_id: int, name: str, parsed: Any, raw: Any = None) -> None:
        self.id = schema_id
        self.name = name
        self.parsed = parsed
        self.raw = raw
        self.header = _HEADER.pack(MAGIC, schema_id)
        self._logical: Any = None
        self._splits: dict[str, tuple[Any, Any, tuple[str, ...]] | None] = {}

    def split(self, at: str) -> tuple[Any, Any, tuple[str, ...]] | None:
        """The record schema cut before its field `at`, each part parsed for fastavro
        without logical types (as `parsed`), and the names of the fields from `at` on; None
        when the schema has no such field or a part does not parse alone (it names a type
        the other part defines). Avro writes a record as its fields' encodings one after
        another, with nothing between them, so the bytes of the first part's fields
        followed by the second's are the record's bytes. Cut once per field name."""
        if at not in self._splits:
            self._splits[at] = self._cut(at)
        return self._splits[at]

    def _cut(self, at: str) -> tuple[Any, Any, tuple[str, ...]] | None:
        raw = self.raw
        if not isinstance(raw, dict) or raw.get("type") != "record":
            return None
        fields = raw.get("fields") or []
        names = [f.get("name") for f in fields]
        k = names.index(at) if at in names else 0
        if k == 0:  # no such field, or nothing before it
            return None
        plain = without_logical_types(raw)
        parts = []
        for part, kept in (("head", plain["fields"][:k]), ("tail", plain["fields"][k:])):
            # Named apart from the record, and from each other, in the record's namespace
            # (the fields' own named types keep their full names).
            schema = {"type": "record", "name": f"{raw['name']}__{part}",
                      "namespace": raw.get("namespace", ""), "fields": kept}
            try:
                parts.append(fastavro.parse_schema(schema))
            except (ValueError, fastavro.schema.SchemaParseException):
                return None
        return parts[0], parts[1], tuple(names[k:])

    @property
    def logical(self) -> Any:
        """The schema parsed for fastavro with its logical types kept (parsed once)."""
        if self._logical is None:
            if self.raw is None:
                raise SchemaError(f"{self.name}: no schema text to read logical types with")
            try:
                self._logical = fastavro.parse_schema(self.raw)
            except (ValueError, fastavro.schema.SchemaParseException) as exc:
                raise SchemaError(f"{self.name} is not an Avro schema: {exc}") from exc
        return self._logical


def registry_refusal(exc: Exception, what: str) -> AccessDenied | None:
    """An AccessDenied when the registry refused these credentials (401) or this principal
    (403), naming the settings to check; None for any other error."""
    if not isinstance(exc, SchemaRegistryError):
        return None
    if exc.http_status_code == 401:
        return AccessDenied(
            f"{what}: the schema registry did not accept the credentials "
            f"({exc.error_message}); check SCHEMA_REGISTRY_USERNAME and "
            "SCHEMA_REGISTRY_PASSWORD (behind `streams registry-proxy` they are the principal's "
            "broker user and password)")
    if exc.http_status_code == 403:
        return AccessDenied(
            f"{what}: the schema registry refused this principal ({exc.error_message}); "
            "check SCHEMA_REGISTRY_USERNAME, or have an operator grant the topic ACLs the "
            "subject needs")
    return None


def _registry_error(exc: Exception, what: str) -> Exception:
    refused = registry_refusal(exc, what)
    if refused is not None:
        return refused
    status = getattr(exc, "http_status_code", None)
    if isinstance(exc, SchemaRegistryError) and status is not None and 400 <= status < 500:
        return SchemaError(f"{what}: the registry does not know it ({exc})")
    return RegistryUnavailable(
        f"{what}: schema registry unavailable ({type(exc).__name__}: {exc}); check "
        "SCHEMA_REGISTRY_URL and that the registry is up")


class FastCodec:
    """Decodes and encodes Confluent-framed Avro with fastavro; thread-safe caches.

    Construction does no I/O: schemas are fetched or registered on first use.
    """

    def __init__(self, client: SchemaRegistryClient, prefix: str = "fs") -> None:
        self.client = client
        self.prefix = prefix
        self._writers: dict[int, WriterSchema] = {}
        self._registered: dict[str, WriterSchema] = {}
        self._lock = threading.Lock()

    def writer(self, schema_id: int) -> WriterSchema:
        """The writer schema of a registry id, fetched once."""
        found = self._writers.get(schema_id)
        if found is not None:
            return found
        try:
            registered = self.client.get_schema(schema_id)
        except Exception as exc:  # requests/httpx errors vary by client version
            raise _registry_error(exc, f"schema id {schema_id}") from exc
        try:
            raw = json.loads(registered.schema_str or "")
            parsed = fastavro.parse_schema(without_logical_types(raw))
        except (ValueError, fastavro.schema.SchemaParseException) as exc:
            raise SchemaError(f"schema id {schema_id} is not an Avro schema: {exc}") from exc
        name = fullname(raw) if isinstance(raw, dict) and "namespace" in raw else \
            str(raw.get("name", "?")) if isinstance(raw, dict) else "?"
        writer = WriterSchema(schema_id, name, parsed, raw)
        with self._lock:
            self._writers[schema_id] = writer
        return writer

    def registered(self, schema: Schema, topic: str) -> WriterSchema:
        """`schema` registered (once) under its subject for records written on `topic`
        (streams.core.subjects.subject_of), ready to encode with."""
        name = fullname(schema)
        subject = subject_of(topic, name, self.prefix)
        found = self._registered.get(subject)
        if found is not None:
            return found
        try:  # a schema Avro refuses is no registry outage: say so before asking
            parsed = fastavro.parse_schema(without_logical_types(schema))
        except (ValueError, fastavro.schema.SchemaParseException) as exc:
            raise SchemaError(f"{name} is not a valid Avro schema: {exc}") from exc
        try:
            schema_id = self.client.register_schema(
                subject, RegistrySchema(json.dumps(schema), "AVRO"))
        except Exception as exc:
            raise _registry_error(exc, f"registering {subject}") from exc
        writer = WriterSchema(schema_id, name, parsed, schema)
        with self._lock:
            self._registered[subject] = writer
            self._writers.setdefault(schema_id, writer)
        return writer

    def decode(self, data: bytes, *, logical: bool = False,
               ) -> tuple[WriterSchema, dict[str, Any]]:
        """The writer schema and the record of Confluent-framed Avro bytes; with `logical`,
        its logical types read as such (timestamps as aware UTC datetimes).

        Raises SchemaError for bytes that are not such a record (dead-letter them) and
        RegistryUnavailable when the writer schema cannot be fetched now (retry later).
        """
        if len(data) < 5 or data[0] != MAGIC:
            raise SchemaError("not Confluent-framed Avro (bad magic byte or too short)")
        writer = self.writer(_HEADER.unpack_from(data)[1])
        stream = io.BytesIO(data)
        stream.seek(5)
        try:
            record = fastavro.schemaless_reader(
                stream, writer.logical if logical else writer.parsed, None)
        except (EOFError, ValueError, TypeError, IndexError, KeyError, UnicodeDecodeError,
                struct.error) as exc:
            raise SchemaError(f"undecodable {writer.name} record: {exc!r}") from exc
        if not isinstance(record, dict):
            raise SchemaError(f"{writer.name} is not an Avro record")
        if stream.tell() != len(data):
            raise SchemaError(f"{len(data) - stream.tell()} bytes after the {writer.name} "
                              "record: not one record")
        return writer, record

    @staticmethod
    def encode(writer: WriterSchema, record: Mapping[str, Any], *,
               logical: bool = False) -> bytes:
        """Confluent-framed Avro bytes of `record` written with `writer`; with `logical`, a
        record whose logical types are Python's (a timestamp as an aware datetime): the bytes
        confluent-kafka's AvroSerializer writes for it, without its walk of the schema per
        record."""
        return FastCodec.encode_all(writer, (record,), logical=logical)[0]

    @staticmethod
    def encode_all(writer: WriterSchema, records: Sequence[Mapping[str, Any]], *,
                   logical: bool = False, shared_from: str | None = None) -> list[bytes]:
        """`encode` of each record, in order: one call for a feedback's scores (a call per
        record cost the mirror 0.3 µs a score more).

        `shared_from` names a field from which on the records are expected to agree (a
        feedback's scores share their time, trace and source): those fields are written
        once and their bytes appended to each record's own fields' (`WriterSchema.split`),
        the same bytes as writing each record whole. Records that do not agree on them,
        logical types, or a schema that does not split are written whole."""
        split = writer.split(shared_from) \
            if shared_from is not None and not logical and len(records) > 1 else None
        parsed = writer.logical if logical else writer.parsed
        header, write = writer.header, fastavro.schemaless_writer
        encoded = []
        try:
            if split is not None and _agree(records, split[2]):
                # The shared fields once, then each record's own with their bytes after.
                parsed, tail = split[0], io.BytesIO()
                write(tail, split[1], records[0])
                shared = tail.getvalue()
            else:
                shared = b""
            for record in records:  # inline: a call per record costs the mirror
                out = io.BytesIO()
                out.write(header)
                write(out, parsed, record)
                out.write(shared)
                encoded.append(out.getvalue())
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SchemaError(f"cannot encode {writer.name}: {exc!r}") from exc
        return encoded


def _agree(records: Sequence[Mapping[str, Any]], names: tuple[str, ...]) -> bool:
    """Whether the records hold the same values under `names`: the same object, or (not a
    container) equal and of the same type (1 and 1.0 are equal, but a union of long and
    double writes them apart). A record, map or array agrees only as the same object: its
    values could be equal and of other types (the mirror hands a feedback's scores one
    source dict). Missing in all of them counts as the same, missing in some does not
    (fastavro writes the field's default for it)."""
    first = records[0]
    ours = [first.get(name, _MISSING) for name in names]
    for record in records[1:]:
        for name, value in zip(names, ours, strict=True):
            theirs = record.get(name, _MISSING)
            if theirs is value:
                continue
            if type(theirs) is not type(value) or isinstance(value, _CONTAINERS) \
                    or theirs != value:
                return False
    return True


def letter_writer(codec: FastCodec, letters: str) -> WriterSchema:
    """The dead-letter schema registered for the letters topic `letters`: under its
    tenant's subject, or, when that subject refuses it (a tenant may evolve or lock its own
    subjects), under the shared one the service owns, so a letter can always be written."""
    try:
        return codec.registered(dead_letter_schema(), letters)
    except SchemaError:
        return codec.registered(dead_letter_schema(), "")
