"""CommandLedger's bookkeeping without a broker: a stand-in producer and tail."""

from __future__ import annotations

from typing import Any

import pytest

from streams.core.commands import LedgerEntry
from streams.core.errors import KafkaUnavailable
from streams.runtime.client.ledger import CommandLedger
from streams.settings import Settings


class _Producer:
    """Takes `room` records, then refuses with a full queue (BufferError)."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.values: list[bytes] = []

    def produce(self, _topic: str, *, key: bytes, value: bytes, **_: Any) -> None:
        if len(self.values) >= self.room:
            raise BufferError("Local: Queue full")
        self.values.append(value)


class _Tail:
    partitions = 4


class _Runtime:
    def __init__(self, producer: _Producer) -> None:
        self.settings = Settings()
        self.producer = producer

    def tail(self, _topic: str, _apply: Any) -> _Tail:
        return _Tail()


def _claim(name: str) -> LedgerEntry:
    return LedgerEntry(state="claimed", digest="d", claim=name, owner="o", at_ms=1)


def test_outcomes_written_before_a_failed_write_are_known_at_once() -> None:
    ledger = CommandLedger(_Runtime(_Producer(room=1)), "acme",  # type: ignore[arg-type]
                           reports=object())  # type: ignore[arg-type]
    with pytest.raises(KafkaUnavailable, match="retry with the same command id"):
        ledger.record_many([("k1", _claim("a"), 0, 5, "evt_1"),
                            ("k2", _claim("b"), 1, 6, "evt_2")])
    first = ledger.get("k1")
    assert first is not None and (first.state, first.offset, first.event_id) == (
        "recorded", 5, "evt_1")
    assert ledger.get("k2") is None  # its write failed: nothing known of it here


def test_the_tail_reads_this_processs_own_records_without_decoding_them() -> None:
    producer = _Producer(room=10)
    ledger = CommandLedger(_Runtime(producer), "acme",  # type: ignore[arg-type]
                           reports=object())  # type: ignore[arg-type]
    ledger.record_many([("k1", _claim("a"), 0, 5, "evt_1")])
    [value] = producer.values
    assert value in ledger._own
    ledger._apply(0, 0, b"k1", value)  # read back: known by its bytes, then forgotten
    assert value not in ledger._own
    entry = ledger.get("k1")
    assert entry is not None and entry.state == "recorded"
    # Another process's record is decoded; a record this version cannot read is skipped.
    ledger._apply(0, 1, b"k2", _claim("z").encode())
    ledger._apply(0, 2, b"k3", b"not json")
    assert ledger.get("k2") == _claim("z") and ledger.get("k3") is None
