"""A fake events topic (one partition) and codec for the proposal folds' unit tests: records
are envelopes as Avro dicts (`envelope_to_record`), a record's bytes its number."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from streams.adapters.avro.codec import envelope_to_record
from streams.adapters.avro.fast import RegistryUnavailable
from streams.adapters.kafka.log import envelope_headers
from streams.core.errors import SchemaError
from streams.core.events import Envelope


@dataclass
class FakeMessage:
    offset_: int
    value_: bytes
    headers_: list[tuple[str, bytes]]

    def topic(self) -> str:
        return "fs.acme.events"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self.offset_

    def value(self) -> bytes:
        return self.value_

    def headers(self) -> list[tuple[str, bytes]]:
        return self.headers_

    def error(self) -> None:
        return None


@dataclass
class FakeCodec:
    records: list[dict[str, Any]] = field(default_factory=list)
    decoded: int = 0
    outage_at: set[int] = field(default_factory=set)

    def encode(self, record: dict[str, Any]) -> bytes:
        self.records.append(record)
        return str(len(self.records) - 1).encode()

    def decode(self, data: bytes, *, logical: bool = False) -> tuple[None, dict[str, Any]]:
        if not data.isdigit():
            raise SchemaError("not Confluent-framed Avro")
        number = int(data)
        if number in self.outage_at:
            raise RegistryUnavailable("the registry is down")
        self.decoded += 1
        return None, self.records[number]


@dataclass
class FakeReader:
    log: list[FakeMessage]
    position: int = 0
    closed: bool = False

    def read_to_end(self) -> Iterator[FakeMessage]:
        end = len(self.log)
        while self.position < end:
            msg = self.log[self.position]
            self.position += 1
            yield msg

    def rewind(self, partition: int, offset: int) -> None:
        assert partition == 0
        self.position = min(self.position, offset)

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeTopic:
    log: list[FakeMessage] = field(default_factory=list)
    readers: list[FakeReader] = field(default_factory=list)

    def append(self, codec: FakeCodec, envelopes: Sequence[Envelope],
               headers: bool | list[tuple[str, bytes]] = True) -> None:
        """Envelopes as records, with their headers (or none, or the ones given)."""
        for envelope in envelopes:
            given = envelope_headers(envelope) if headers is True else \
                [] if headers is False else headers
            self.log.append(FakeMessage(len(self.log), codec.encode(envelope_to_record(envelope)),
                                        given))

    def append_raw(self, codec: FakeCodec, record: dict[str, Any], *, workspace: bytes) -> None:
        self.log.append(FakeMessage(len(self.log), codec.encode(record),
                                    [("workspace", workspace)]))

    def reader(self) -> FakeReader:
        made = FakeReader(self.log)
        self.readers.append(made)
        return made
