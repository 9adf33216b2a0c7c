"""`RecordTemplate`: a batch of Avro records that share most of their fields, written with
the shared fields encoded once.

An Avro record's binary form is its fields' binary forms one after another, with nothing
between them. So a writer schema's fields (a nested record's fields taken in its place) split
into runs: runs of fields that vary per record and runs that are the same across a batch.
The fixed runs are encoded once (`fixed`), each record's varying runs per record (`encode`),
and their bytes interleaved. fastavro writes every run, with the writer schema's own field
types, so nothing here encodes Avro by hand; `tests/adapters/avro/test_template.py` checks
the bytes against fastavro's encoding of the whole record.

give_feedback_many writes a batch's feedback_given events this way: of an event's 15 fields
only the event id and the value vary per item, the chain's and the target's per target.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Collection, Hashable, Mapping
from typing import Any

import fastavro

from streams.adapters.avro.fast import WriterSchema, frame, without_logical_types
from streams.core.errors import SchemaError

__all__ = ["KEPT", "RecordTemplate"]

KEPT = 10_000
"""How many sets of fixed runs a template keeps for reuse."""


class _Run:
    __slots__ = ("alone", "fields", "parsed", "varying")

    def __init__(self, varying: bool) -> None:
        self.varying = varying
        self.fields: list[tuple[str, str, Any]] = []  # (dotted name, field name here, type)
        self.parsed: Any = None
        self.alone: str | None = None  # a varying run's one field's dotted name


class RecordTemplate:
    """A writer schema's fields as runs of varying and fixed fields (see the module).

    `varying` names the fields that differ per record, by dotted name (`envelope.event_id`
    for the event_id field of the record-typed field `envelope`); record-typed fields named in
    `expand` are taken field by field. Values are given by the same dotted names.
    """

    def __init__(self, writer: WriterSchema, varying: Collection[str],
                 expand: Collection[str] = ("envelope",)) -> None:
        self.writer = writer
        raw = writer.raw
        if not isinstance(raw, dict) or raw.get("type") != "record":
            raise SchemaError(f"{writer.name}: a template needs a record schema")
        named: dict[str, Any] = {}
        fastavro.parse_schema(without_logical_types(raw), named_schemas=named)
        leaves: list[tuple[str, Any]] = []
        for field in raw["fields"]:
            kind = field["type"]
            if field["name"] in expand and isinstance(kind, dict) and \
                    kind.get("type") == "record":
                leaves += [(f"{field['name']}.{sub['name']}", sub["type"])
                           for sub in kind["fields"]]
            else:
                leaves.append((field["name"], kind))
        unknown = set(varying) - {name for name, _ in leaves}
        if unknown:
            raise SchemaError(f"{writer.name} has no fields {sorted(unknown)}")
        self.runs: list[_Run] = []
        for name, kind in leaves:
            vary = name in varying
            if not self.runs or self.runs[-1].varying != vary:
                self.runs.append(_Run(vary))
            self.runs[-1].fields.append((name, f"f{len(self.runs[-1].fields)}", kind))
        for n, run in enumerate(self.runs):
            if run.varying and len(run.fields) == 1:
                run.alone = run.fields[0][0]
            schema = {"type": "record", "name": f"_run{n}", "namespace": "streams.template",
                      "fields": [{"name": here, "type": without_logical_types(kind)}
                                 for _, here, kind in run.fields]}
            run.parsed = fastavro.parse_schema(schema, named_schemas=dict(named))
        self._header = frame(writer.id, b"")
        self._kept: dict[Hashable, tuple[bytes, ...]] = {}
        self._keeping = threading.Lock()

    def cached(self, key: Hashable) -> tuple[bytes, ...] | None:
        """Fixed runs kept under `key` by `keep`, if still kept."""
        return self._kept.get(key)

    def keep(self, key: Hashable, fixed: tuple[bytes, ...]) -> tuple[bytes, ...]:
        """Keep fixed runs for reuse under `key` (the values they were made from); the
        oldest go past KEPT entries. Returns `fixed`."""
        with self._keeping:  # callers in several threads share a template
            if len(self._kept) >= KEPT:
                del self._kept[next(iter(self._kept))]
            self._kept[key] = fixed
        return fixed

    def _write(self, run: _Run, values: Mapping[str, Any]) -> bytes:
        out = io.BytesIO()
        try:
            fastavro.schemaless_writer(out, run.parsed,
                                       {here: values[name] for name, here, _ in run.fields})
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SchemaError(f"cannot encode {self.writer.name}: {exc!r}") from exc
        return out.getvalue()

    def fixed(self, values: Mapping[str, Any]) -> tuple[bytes, ...]:
        """The fixed runs of records with these values, encoded (one per fixed run, in
        order); `values` needs only the fixed fields."""
        return tuple(self._write(run, values) for run in self.runs if not run.varying)

    def encode_field(self, name: str, value: Any) -> bytes:
        """The bytes of the varying field `name` alone, for `encode`'s `known`: a value
        that many records share (a batch's time, its trace context) is encoded once.
        SchemaError unless `name` is a varying field with no varying neighbour."""
        for run in self.runs:
            if run.alone == name:
                return self._write(run, {name: value})
        raise SchemaError(f"{self.writer.name}: {name} is not a varying field of its own "
                          "in this template")

    def encode(self, fixed: tuple[bytes, ...], values: Mapping[str, Any],
               known: Mapping[str, bytes] | None = None) -> bytes:
        """Confluent-framed bytes of a record whose fixed runs are `fixed` (from `fixed()`)
        and whose varying fields are in `values`, or already encoded in `known` (by
        `encode_field`; a field there need not be in `values`)."""
        parts = [self._header]
        shared = iter(fixed)
        for run in self.runs:
            if not run.varying:
                parts.append(next(shared))
            elif known is not None and run.alone is not None and run.alone in known:
                parts.append(known[run.alone])
            else:
                parts.append(self._write(run, values))
        return b"".join(parts)

