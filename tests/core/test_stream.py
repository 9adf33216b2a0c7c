"""The stream subscription's pure parts: frames, the start cursor and the ack window."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.core.errors import ValidationFailed
from streams.core.events import Seq
from streams.core.stream import (
    AckFrame,
    AckWindow,
    SubscribeFrame,
    parse_stream_frame,
    resolve_start,
)

WATERMARKS = {0: (0, 10), 1: (5, 8), 2: (0, 0)}


def test_subscribe_frame_defaults_to_the_end_and_reads_a_cursor() -> None:
    assert parse_stream_frame({"type": "subscribe"}) == SubscribeFrame(type="subscribe")
    frame = parse_stream_frame({"type": "subscribe", "from": {"0": 3, "1": 7}})
    assert isinstance(frame, SubscribeFrame) and frame.from_ == {"0": 3, "1": 7}


@pytest.mark.parametrize(("frame", "names"), [
    ({"type": "subscribe", "from": "middle"}, "from"),
    ({"type": "subscribe", "from": {"x": 1}}, "from.x"),
    ({"type": "subscribe", "from": {"0": -1}}, "from.0"),
    ({"type": "subscribe", "extra": 1}, "extra"),
    ({"type": "ack"}, "seq"),
    ({"type": "ack", "seq": {"partition": 0}}, "seq.offset"),
])
def test_a_malformed_stream_frame_names_its_field(frame: dict[str, object], names: str) -> None:
    with pytest.raises(ValidationFailed, match=names.replace(".", r"\.")):
        parse_stream_frame(frame)


def test_start_and_end_resolve_to_the_watermarks() -> None:
    assert resolve_start("start", WATERMARKS) == {0: 0, 1: 5, 2: 0}
    assert resolve_start("end", WATERMARKS) == {0: 10, 1: 8, 2: 0}


def test_a_cursor_is_clamped_and_fills_missing_partitions_from_their_start() -> None:
    assert resolve_start({0: 4, 1: 2}, WATERMARKS) == {0: 4, 1: 5, 2: 0}
    assert resolve_start({0: 99}, WATERMARKS) == {0: 10, 1: 5, 2: 0}
    with pytest.raises(ValidationFailed, match=r"partitions 0-2, not \[7\]"):
        resolve_start({7: 0}, WATERMARKS)


def test_the_window_refuses_past_its_capacity_until_an_ack_frees_room() -> None:
    window = AckWindow(2, {0: 0, 1: 0})
    assert window.admit(Seq(partition=0, offset=3))
    assert window.admit(Seq(partition=1, offset=0))
    assert window.full and not window.admit(Seq(partition=0, offset=4))
    assert window.pending == 2
    assert window.ack(Seq(partition=0, offset=3)) == 1
    assert window.admit(Seq(partition=0, offset=4))
    assert window.acknowledged() == {0: 4, 1: 0}


def test_an_ack_frees_every_earlier_event_of_its_partition_only() -> None:
    window = AckWindow(10, {0: 0, 1: 0})
    for offset in (1, 4, 6):
        window.admit(Seq(partition=0, offset=offset))
    window.admit(Seq(partition=1, offset=2))
    assert window.ack(Seq(partition=0, offset=4)) == 2
    assert window.pending == 2
    assert window.acknowledged() == {0: 5, 1: 0}


def test_a_repeated_ack_frees_nothing_and_an_undelivered_seq_is_refused() -> None:
    window = AckWindow(10, {0: 0})
    window.admit(Seq(partition=0, offset=2))
    assert window.ack(Seq(partition=0, offset=2)) == 1
    assert window.ack(Seq(partition=0, offset=2)) == 0
    with pytest.raises(ValidationFailed, match="was not delivered"):
        window.ack(Seq(partition=0, offset=3))
    with pytest.raises(ValidationFailed, match="was not delivered"):
        window.ack(Seq(partition=5, offset=0))


def test_out_of_order_admission_is_a_bug() -> None:
    window = AckWindow(10, {0: 0})
    window.admit(Seq(partition=0, offset=2))
    with pytest.raises(ValueError, match="out of order"):
        window.admit(Seq(partition=0, offset=2))


def test_an_empty_window_is_refused() -> None:
    with pytest.raises(ValidationFailed):
        AckWindow(0, {})


@given(st.lists(st.tuples(st.integers(0, 2), st.booleans()), max_size=200),
       st.integers(1, 8))
def test_resuming_from_the_acknowledged_cursor_repeats_nothing_acked_and_skips_nothing(
        steps: list[tuple[int, bool]], capacity: int) -> None:
    """Deliver events of three partitions (a partition's events at rising offsets, with gaps
    standing for other workspaces' events), ack some; then everything delivered at or after
    the resume cursor is exactly what was delivered and not acknowledged."""
    window = AckWindow(capacity, {0: 0, 1: 0, 2: 0})
    next_offset = {0: 0, 1: 0, 2: 0}
    delivered: list[Seq] = []
    acked: set[Seq] = set()
    for partition, ack in steps:
        if ack and delivered:
            mine = [s for s in delivered if s.partition == partition]
            if mine:
                last = mine[-1]
                window.ack(last)
                acked.update(s for s in mine if s.offset <= last.offset)
            continue
        seq = Seq(partition=partition, offset=next_offset[partition])
        next_offset[partition] += 2
        if window.admit(seq):
            delivered.append(seq)
        assert window.pending <= capacity
    cursor = window.acknowledged()
    again = {s for s in delivered if s.offset >= cursor[s.partition]}
    assert again == set(delivered) - acked
    assert window.pending == len(again)


def test_frames_are_frozen_models() -> None:
    frame = parse_stream_frame({"type": "ack", "seq": {"partition": 1, "offset": 2}})
    assert frame == AckFrame(type="ack", seq=Seq(partition=1, offset=2))
