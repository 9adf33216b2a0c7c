"""The view's pure part: the rows an event makes, positions and page cursors."""

from __future__ import annotations

import json
import re

import pytest

from streams.adapters.avro.codec import envelope_to_record
from streams.core.actors import EvaluatorActor, UserActor
from streams.core.errors import SchemaError, ValidationFailed
from streams.core.events import AppEvent, Envelope, FeedbackGiven, RuleFired, RunStarted
from streams.core.targets import RunTarget
from streams.core.viewrows import (
    PAGE_CURSOR_PATTERN,
    PageKey,
    chain_key,
    decode_cursor,
    encode_cursor,
    feedback_of,
    position,
    rows_of,
    seq_of,
)


def _env(event: AppEvent | RuleFired | RunStarted | FeedbackGiven, **kw: object) -> Envelope:
    return Envelope.new(event, tenant="acme", workspace="prod", **kw)  # type: ignore[arg-type]


def test_positions_sort_like_partition_then_offset() -> None:
    assert seq_of(position(3, 41)) == (3, 41)
    pairs = [(0, 5), (0, 6), (1, 0), (2, 2**39)]
    assert sorted(pairs) == sorted(pairs, key=lambda p: position(*p))
    with pytest.raises(ValueError):
        position(0, 2**40)


def test_rows_of_each_kind() -> None:
    app = _env(AppEvent(name="ops:spike"))
    fired = _env(RuleFired(firing_id="f1", rule="ops:x", matched=[app.event_id]),
                 correlation_id=app.event_id, causation_id=app.event_id)
    run = _env(RunStarted(run_id="r1", rule="ops:x", action="triage", firing_id="f1"),
               correlation_id=app.event_id, causation_id=fired.event_id)
    given = _env(FeedbackGiven(feedback_type="triage_quality", target=RunTarget(run_id="r1"),
                               value={"correct": True}),
                 actor=EvaluatorActor(name="judge", version="2"), causation_id=run.event_id,
                 correlation_id=app.event_id)
    rows = [rows_of(envelope_to_record(e), 1, n, b"raw") for n, e in
            enumerate([app, fired, run, given])]
    assert [r.event.pos for r in rows] == [position(1, n) for n in range(4)]
    assert rows[0].run is rows[0].firing is rows[0].feedback is None
    # The application event starts its chain: a chain row named by its own id.
    assert rows[0].chain is not None and rows[0].chain.correlation_id == app.event_id
    assert all(r.chain is None for r in rows[1:])
    assert rows[1].firing is not None and rows[1].firing.firing_id == "f1"
    assert (rows[1].firing.rule, rows[1].firing.time_ms) == ("ops:x", rows[1].event.time_ms)
    assert rows[2].run is not None and (rows[2].run.run_id, rows[2].run.rule) == ("r1", "ops:x")
    assert rows[2].event.causation_id == fired.event_id
    fb = rows[3].feedback
    assert fb is not None and fb.participant == "evaluator:judge@2"
    assert (fb.target_kind, fb.target_id, fb.evaluator, fb.person) == ("run", "r1", "judge",
                                                                       False)
    assert json.loads(fb.value_json) == {"correct": True}
    assert fb.feedback_type == "triage_quality"
    assert rows[3].event.time_ms == int(given.time.timestamp() * 1000)


def test_a_record_that_is_no_envelope_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="2:7 is not an event envelope"):
        rows_of({"name": "x"}, 2, 7, b"")
    record = envelope_to_record(_env(RunStarted(run_id="r", rule="x", action="a",
                                                firing_id="f")))
    del record["run_id"]
    with pytest.raises(SchemaError):
        rows_of(record, 0, 0, b"")


def test_cursors_round_trip_and_refuse_anything_else() -> None:
    key = PageKey(1_760_000_000_123, 2, 99)
    cursor = encode_cursor(key)
    assert decode_cursor(cursor) == key
    assert cursor.isascii() and re.fullmatch(PAGE_CURSOR_PATTERN, cursor)
    assert decode_cursor(encode_cursor(PageKey(-5, 0, 0))) == PageKey(-5, 0, 0)
    for bad in ("", "nope", encode_cursor(key)[:-3] + "x", "v2.1.2.3", "v1.01.2.3",
                "v1.1.2.3 ", "v1.1.1000000.3", "v1.1.2.1000000000000", "v1.+1.2.3"):
        with pytest.raises(ValidationFailed, match="invalid cursor"):
            decode_cursor(bad)


def test_every_cursor_of_the_published_pattern_is_taken() -> None:
    # Found by Schemathesis: the document allowed any cursor string and the server refused
    # most as invalid; now the document declares the pattern and every match is a page key.
    from hypothesis import given, strategies

    @given(strategies.from_regex(PAGE_CURSOR_PATTERN, fullmatch=True))
    def taken(cursor: str) -> None:
        assert encode_cursor(decode_cursor(cursor)) == cursor

    taken()


def test_page_keys_order_by_time_then_position() -> None:
    keys = [PageKey(5, 1, 0), PageKey(4, 2, 9), PageKey(5, 0, 3)]
    assert sorted(keys) == [PageKey(4, 2, 9), PageKey(5, 0, 3), PageKey(5, 1, 0)]


def test_feedback_of_filters_by_type_and_participant() -> None:
    run = _env(RunStarted(run_id="r", rule="x", action="a", firing_id="f"))
    ada = _env(FeedbackGiven(feedback_type="a", target=RunTarget(run_id="r"), value={}),
               actor=UserActor(id="ada"))
    bob = _env(FeedbackGiven(feedback_type="b", target=RunTarget(run_id="r"), value={}),
               actor=UserActor(id="bob"))
    assert feedback_of([run, ada, bob]) == [ada, bob]
    assert feedback_of([run, ada, bob], feedback_type="b") == [bob]
    assert feedback_of([run, ada, bob], participant="user:ada") == [ada]


def test_only_an_application_event_that_starts_its_chain_is_a_chain() -> None:
    head = _env(AppEvent(name="ops:spike"))
    follow_up = _env(AppEvent(name="ops:spike"), correlation_id=head.event_id,
                     causation_id=head.event_id)
    # A system event with its own correlation (feedback given at the top level) is no chain.
    loose = _env(FeedbackGiven(feedback_type="q", target=RunTarget(run_id="r1"),
                               value={"correct": True}))
    chains = [rows_of(envelope_to_record(e), 0, n, b"raw").chain
              for n, e in enumerate([head, follow_up, loose])]
    assert chains[0] is not None and chains[0].correlation_id == head.event_id
    assert chains[1:] == [None, None]


def test_a_shadow_versions_recorded_verdict_is_a_verdict_not_feedback() -> None:
    data = {"key": "k", "feedback_type": "triage_quality", "value": {"correct": False},
            "evaluator": "judge", "version": "3", "shadow": True,
            "target": {"kind": "run", "id": "r1"}}
    shadow = _env(AppEvent(name="streams:verdict", data=data), correlation_id="c1")
    rows = rows_of(envelope_to_record(shadow), 0, 4, b"raw")
    assert rows.feedback is None and rows.chain is None
    verdict = rows.verdict
    assert verdict is not None and verdict.participant == "evaluator:judge@3"
    assert (verdict.target_kind, verdict.target_id, verdict.evaluator, verdict.person) == \
        ("run", "r1", "judge", False)
    assert json.loads(verdict.value_json) == {"correct": False}
    # A live version's record (its feedback_given is the verdict) and a damaged one: none.
    live = _env(AppEvent(name="streams:verdict", data={**data, "shadow": False}))
    assert rows_of(envelope_to_record(live), 0, 5, b"raw").verdict is None
    broken = envelope_to_record(shadow)
    broken["data_json"] = "{not json"
    kept = rows_of(broken, 0, 6, b"raw")
    assert kept.verdict is None and kept.event.event_type == "streams:verdict"


def test_an_alarm_event_says_where_its_key_stands() -> None:
    data = {"evaluator": "judge", "version": "3", "feedback_type": "q", "field": "ok",
            "measure": "kappa", "value": 0.1, "n": 40, "threshold": 0.5, "raised": True,
            "episode": 2}
    rows = rows_of(envelope_to_record(_env(AppEvent(name="calibration:alarm", data=data))),
                   1, 9, b"raw")
    alarm = rows.alarm
    assert alarm is not None
    assert (alarm.evaluator, alarm.feedback_type, alarm.field, alarm.raised, alarm.episode,
            alarm.pos) == ("evaluator:judge@3", "q", "ok", True, 2, position(1, 9))
    broken = envelope_to_record(_env(AppEvent(name="calibration:alarm", data={"x": 1})))
    assert rows_of(broken, 0, 1, b"raw").alarm is None  # kept as an event, no state


def test_a_chain_key_is_a_fixed_signed_64_bit_digest_of_the_correlation_id() -> None:
    # Pinned: views on disk are filed by it (a change needs a new view layout).
    assert chain_key("evt_0") == 5882358707955474629
    assert chain_key("chain") == -166460429754986961
    keys = {chain_key(f"evt_{n}") for n in range(10_000)}
    assert len(keys) == 10_000
    assert all(-(2**63) <= k < 2**63 for k in keys)
