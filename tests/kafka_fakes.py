"""A consumed record for unit tests of the loops that read confluent-kafka messages."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["FakeMessage"]


@dataclass
class FakeMessage:
    """What the loops read of a confluent-kafka Message: where it is, its key, value and
    headers; never an error."""

    topic_: str
    partition_: int = 0
    offset_: int = 0
    key_: bytes | None = None
    value_: bytes | None = None
    headers_: list[tuple[str, bytes]] = field(default_factory=list)

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def key(self) -> bytes | None:
        return self.key_

    def value(self) -> bytes | None:
        return self.value_

    def headers(self) -> list[tuple[str, bytes]]:
        return self.headers_
