"""Dead letters in the core: description, selection and the re-drive plan."""

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.core.deadletters import (
    DeadLetter,
    RedriveMarker,
    Selection,
    describe,
    kind_of,
    parse_at,
    parse_source,
    redrive_key,
    redrive_plan,
)
from streams.core.errors import ValidationFailed
from streams.core.tenancy import redriven_topic

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def record_factory() -> Callable[..., dict[str, Any]]:
    """DeadLetter records as the mirror writes them; keywords override fields."""
    def make(**fields: Any) -> dict[str, Any]:
        return {"source_topic": "fs.acme.events", "partition": 1, "offset": 7, "key": b"k",
                "value": b"\x00bytes", "stage": "mirror",
                "reason": "invalid resolution value: minutes: Input should be >= 0",
                "time": T0, **fields}
    return make


def letter_factory() -> Callable[..., DeadLetter]:
    """Described letters at coordinates; keywords override the record's fields."""
    records = record_factory()

    def make(partition: int = 0, offset: int = 0, /, **fields: Any) -> DeadLetter:
        return describe(records(**fields), topic="fs.acme.deadletter", partition=partition,
                        offset=offset)
    return make


def test_describe_reads_the_record_and_its_place() -> None:
    letter = letter_factory()(2, 5)
    assert letter.at == "2:5"
    assert letter.source == "fs.acme.events:1:7"
    assert (letter.stage, letter.kind, letter.key) == ("mirror", "invalid", b"k")
    assert letter.summary() == {
        "at": "2:5", "source": "fs.acme.events:1:7", "stage": "mirror", "kind": "invalid",
        "reason": "invalid resolution value: minutes: Input should be >= 0",
        "time": T0.isoformat(), "key": "k", "value_bytes": 6}


def test_describe_takes_epoch_millis_and_the_reason_header_when_the_field_is_empty() -> None:
    record = record_factory()(time=int(T0.timestamp() * 1000), reason="")
    letter = describe(record, topic="fs.acme.deadletter", partition=0, offset=0,
                      headers=[("reason", b"not Confluent-framed Avro (bad magic byte)")])
    assert letter.time == T0
    assert letter.kind == "undecodable"


def test_describe_names_a_missing_field() -> None:
    record = record_factory()()
    del record["stage"]
    with pytest.raises(ValidationFailed, match=re.escape(
            "fs.acme.deadletter:0:3 is not a DeadLetter record: it has no 'stage' field")):
        describe(record, topic="fs.acme.deadletter", partition=0, offset=3)


@pytest.mark.parametrize(("stage", "reason", "kind"), [
    ("mirror", "not Confluent-framed Avro (bad magic byte or too short)", "undecodable"),
    ("mirror", "record has no value", "undecodable"),
    ("mirror", "schema id 99: the registry does not know it", "undecodable"),
    ("mirror", "undecodable streams.x record: EOFError()", "undecodable"),
    ("mirror", "2 bytes after the streams.x record: not one record", "undecodable"),
    ("mirror", "not an event: the record has no envelope field", "undecodable"),
    ("mirror", "triage_quality feedback cannot be given on a chain; it targets ['run']",
     "invalid"),
    ("mirror", "invalid resolution value: minutes_to_mitigate: Input should be >= 0",
     "invalid"),
    ("mirror", "fault_edges.anything: nan is not a finite number", "invalid"),
    ("mirror", "internal error: KeyError('x')", "internal"),
    ("sink:langfuse", "rejected by langfuse: value too long", "rejected"),
    ("sink:langfuse", "undecodable score: EOFError()", "undecodable"),
    ("rules", "something else", "unknown"),
])
def test_kind_from_the_reasons_the_pipeline_writes(stage: str, reason: str, kind: str) -> None:
    assert kind_of(stage, reason) == kind


def test_each_filter_selects_exactly_what_it_says() -> None:
    make = letter_factory()
    a = make(0, 0, reason="invalid resolution value: x")
    b = make(0, 1, offset=20, partition=2, reason="not Confluent-framed Avro",
             time=T0 + timedelta(hours=1))
    c = make(1, 0, stage="sink:lf", source_topic="fs.acme.scores",
             reason="rejected by langfuse: too long", time=T0 + timedelta(hours=2))
    letters = [a, b, c]
    assert Selection().select(letters) == letters
    assert Selection(reason="CONFLUENT").select(letters) == [b]
    assert Selection(stage="mirror").select(letters) == [a, b]
    assert Selection(stage="sink:").select(letters) == [c]
    assert Selection(stage="sink").select(letters) == []
    assert Selection(kind="rejected").select(letters) == [c]
    assert Selection(source_topic="fs.acme.events").select(letters) == [a, b]
    assert Selection(source_topic="fs.acme.events", source_partition=2).select(letters) == [b]
    assert Selection(from_offset=8).select(letters) == [b]
    assert Selection(to_offset=7).select(letters) == [a, c]
    assert Selection(since=T0 + timedelta(hours=1)).select(letters) == [b, c]
    assert Selection(until=T0 + timedelta(hours=1)).select(letters) == [a]
    assert Selection(at=frozenset({(0, 1), (1, 0)})).select(letters) == [b, c]
    assert Selection(stage="mirror", reason="invalid").select(letters) == [a]


def test_selections_that_cannot_match_are_refused_saying_why() -> None:
    with pytest.raises(ValidationFailed, match="--from-offset 5 is after --to-offset 4"):
        Selection(from_offset=5, to_offset=4)
    with pytest.raises(ValidationFailed, match="is not before --until"):
        Selection(since=T0, until=T0)
    with pytest.raises(ValidationFailed, match="kind 'bad' is not one of undecodable"):
        Selection(kind="bad")


def test_naive_times_are_utc() -> None:
    selection = Selection(since=datetime(2026, 11, 30, 9, 30))
    assert selection.since == datetime(2026, 11, 30, 9, 30, tzinfo=UTC)


def test_parse_at_and_source() -> None:
    assert parse_at("3:14") == (3, 14)
    for bad in ("3", "a:1", "1:2:3", "-1:2"):
        with pytest.raises(ValidationFailed, match="PARTITION:OFFSET"):
            parse_at(bad)
    assert parse_source("fs.acme.events") == ("fs.acme.events", None)
    assert parse_source("fs.acme.events:2") == ("fs.acme.events", 2)
    with pytest.raises(ValidationFailed, match="TOPIC or TOPIC:PARTITION"):
        parse_source("fs.acme.events:x")


def test_redriven_topic_sits_beside_the_dead_letters() -> None:
    assert redriven_topic("fs.acme.deadletter") == "fs.acme.redriven"
    with pytest.raises(ValidationFailed, match="not a dead-letter topic"):
        redriven_topic("fs.acme.events")


def test_plan_rescores_mirror_letters_and_republishes_sink_letters() -> None:
    make = letter_factory()
    mirror = make(0, 0)
    sink = make(0, 1, stage="sink:lf", source_topic="fs.acme.scores",
                reason="rejected by langfuse: too long")
    empty = make(0, 2, value=None, reason="record has no value")
    other = make(0, 3, stage="rules")
    stray = make(0, 4, source_topic="elsewhere")
    plan = redrive_plan([mirror, sink, empty, other, stray], Selection(), {})
    assert [(r.letter, r.action, r.destination, r.key) for r in plan.todo] == [
        (mirror, "rescore", "fs.acme.scores", "0:0"),
        (sink, "republish", "fs.acme.scores", "0:1")]
    assert [(letter.at, why.split(":")[0]) for letter, why in plan.cannot] == [
        ("0:2", "the record had no value"), ("0:3", "stage 'rules' has no re-drive (only "
                                             "mirror and sink"),
        ("0:4", "elsewhere is not a tenant events topic")]
    assert plan.summary() == {"to_redrive": 2, "redriven_before": 0, "cannot": 3}


letters_strategy = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 50), st.sampled_from(["mirror", "sink:lf"])),
    unique_by=lambda t: (t[0], t[1]), max_size=30)


@given(letters_strategy, st.data())
def test_redriving_is_idempotent_by_the_letters_own_coordinates(
        coords: list[tuple[int, int, str]], data: st.DataObject) -> None:
    make = letter_factory()
    letters = [make(p, o, stage=s, source_topic="fs.acme.scores" if s != "mirror"
                    else "fs.acme.events") for p, o, s in coords]
    first_done = data.draw(st.sets(st.sampled_from([lt.at for lt in letters]))
                           if letters else st.just(set()))
    first = redrive_plan(letters, Selection(), dict.fromkeys(first_done, True))
    # Each letter is either re-driven now or was before, never both, never lost.
    now = {r.key for r in first.todo}
    assert now | {lt.at for lt in first.done_before} == {lt.at for lt in letters}
    assert not now & first_done
    # Keys are unique per letter, so recording this run's keys leaves nothing for the next.
    assert len({r.key for r in first.todo}) == len(first.todo)
    recorded = first_done | {r.key for r in first.todo}
    again = redrive_plan(letters, Selection(), dict.fromkeys(recorded, True))
    assert again.todo == []
    assert len(again.done_before) == len(letters)


@given(st.integers(0, 10_000), st.integers(0, 2**62))
def test_redrive_key_round_trips_through_parse_at(partition: int, offset: int) -> None:
    assert parse_at(redrive_key(partition, offset)) == (partition, offset)


def test_marker_round_trips_and_refuses_other_data() -> None:
    marker = RedriveMarker(source="fs.acme.events:1:7", action="rescore",
                           destination="fs.acme.scores", records=2, time=T0)
    assert RedriveMarker.decode(marker.encode()) == marker
    with pytest.raises(ValidationFailed, match="not a re-drive marker"):
        RedriveMarker.decode(b"{}")
