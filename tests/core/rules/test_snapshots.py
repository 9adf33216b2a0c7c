"""Rule state as records: one (rule, scope) key's state to a plain record and back, and a
rules partition's state restored from its snapshot deciding what the uninterrupted one does."""

from __future__ import annotations

import json
import random
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.events import Envelope
from streams.core.rules import F, Fire, Rule, RuleSet, RuleState, evaluate, on, run
from streams.core.rules.snapshots import (
    POSITION_KEY,
    PartitionState,
    encode_position,
    entity_key,
    from_record,
    parse_entity_key,
    record_of,
    record_upto,
    to_record,
)
from tests.core.rules.samples import SPIKE, T0, spike

LIMITED = Rule(
    name="ops:limited",
    when=on("ops:error_spike").at_most(2, per=timedelta(minutes=10)).scope(
        service=lambda e: e.event.data.get("service")),  # type: ignore[attr-defined]
    then=run("page"),
)
COUNTED_LIMITED = Rule(
    name="ops:both",
    when=on("ops:error_spike").count(2, within=timedelta(minutes=5))
    .at_most(1, per=timedelta(minutes=30)),
    then=run("page"),
)
RULES = [SPIKE, LIMITED, COUNTED_LIMITED]


def test_entity_keys_round_trip() -> None:
    assert entity_key("ops:a", "service=api") == "ops:a|service=api"
    assert entity_key("ops:a", None) == "ops:a|"
    assert parse_entity_key("ops:a|service=api") == ("ops:a", "service=api")
    assert parse_entity_key("ops:a|") == ("ops:a", None)


def test_a_count_window_and_rate_windows_round_trip() -> None:
    state = RuleState()
    for minute in (0, 1):
        evaluate(RuleSet([SPIKE]), spike("api", at=T0 + timedelta(minutes=minute)), state)
    for minute in (0, 11, 12):
        evaluate(RuleSet([LIMITED]), spike("db", at=T0 + timedelta(minutes=minute)), state)
    count = to_record(state, SPIKE.name, "service=api", upto=7)
    assert count is not None and count["upto"] == 7 and len(count["count"]["entries"]) == 2
    rate = to_record(state, LIMITED.name, "service=db", upto=9)
    assert rate is not None and sorted(rate["rate"]["windows"].values()) == [1, 2]
    assert to_record(state, SPIKE.name, "service=db", upto=1) is None
    back, upto = from_record(json.loads(json.dumps(count)), SPIKE.name, "service=api")
    assert upto == 7
    assert back.counts[SPIKE.name].windows == state.counts[SPIKE.name].windows
    back, _ = from_record(json.loads(json.dumps(rate)), LIMITED.name, "service=db")
    assert back.rates[LIMITED.name].windows == {
        k: w for k, w in state.rates[LIMITED.name].windows.items() if k[0] == "service=db"}


def test_record_of_refuses_what_is_no_state_record() -> None:
    with pytest.raises(ValueError):
        record_of(b"[1, 2]")
    with pytest.raises(ValueError):
        record_of(b"not json")


def _events(n: int, seed: int) -> list[Envelope]:
    rng = random.Random(seed)
    return [spike(rng.choice(["api", "db", "web"]), at=T0 + timedelta(seconds=20 * i))
            for i in range(n)]


def _decide(part: PartitionState, offset: int, envelope: Envelope) -> list[str]:
    """What the decider does with one rules record: per rule, the key's state."""
    fired: list[str] = []
    for rule in RULES:
        if not rule.matches(envelope):
            continue
        key = entity_key(rule.name, rule.scope_key(envelope))
        if not part.wants(key, offset):
            continue
        for decision in evaluate(RuleSet([rule]), envelope, part.state_of(key)):
            if isinstance(decision, Fire):
                fired.append(f"{rule.name}:{decision.firing_id}")
        part.applied(key, offset)
    part.passed(offset)
    return fired


def _restored(records: dict[str, bytes | None]) -> PartitionState:
    part = PartitionState()
    for key, value in records.items():
        part.load(key, value)
    return part


@pytest.mark.parametrize("seed", range(5))
def test_a_restored_partition_decides_what_the_uninterrupted_one_did(seed: int) -> None:
    events = _events(120, seed)
    whole = PartitionState()
    expected = [f for offset, e in enumerate(events) for f in _decide(whole, offset, e)]
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(events)), 4))
    changelog: dict[str, bytes | None] = {}  # a compacted changelog: the newest per key
    part = PartitionState()
    got: list[str] = []
    durable = 0
    start = 0
    for cut in [*cuts, len(events)]:
        for offset in range(start, cut):
            got += _decide(part, offset, events[offset])
        for key, value in part.snapshot(durable):
            changelog[key] = value
        durable = part.position
        # restart: only the changelog survives; read the rules topic again from a little
        # before the position (a commit that did not happen), which must count nothing twice
        part = _restored({k: v for k, v in changelog.items() if v is not None})
        start = max(0, part.position - rng.randrange(0, 5))
        replayed = []
        for offset in range(start, cut):
            replayed += _decide(part, offset, events[offset])
        assert replayed == []  # everything below the position is reflected: nothing again
        start = cut
    assert got == expected
    assert sum(f.startswith("ops:limited") for f in got) >= 2


def test_empty_keys_become_tombstones_once_a_position_past_them_is_durable() -> None:
    part = PartitionState()
    for offset, minute in enumerate((0, 1, 2)):  # the third completes SPIKE's count
        env = spike("api", at=T0 + timedelta(minutes=minute))
        key = entity_key(SPIKE.name, SPIKE.scope_key(env))
        evaluate(RuleSet([SPIKE]), env, part.state_of(key))
        part.applied(key, offset)
    first = dict(part.snapshot(durable_position=0))
    value = first[key]
    assert value is not None and json.loads(value) == {"upto": 3}
    assert first[POSITION_KEY] == b"3"
    second = dict(part.snapshot(durable_position=3))
    assert second == {key: None, POSITION_KEY: b"3"}
    assert key not in part.states and key not in part.upto


def test_load_keeps_the_newer_of_two_records_and_applies_tombstones() -> None:
    part = PartitionState()
    newer = json.dumps({"upto": 9}).encode()
    older = json.dumps({"upto": 4}).encode()
    part.load("ops:a|", newer)
    part.load("ops:a|", older)
    assert part.upto["ops:a|"] == 9
    part.load(POSITION_KEY, b"12")
    part.load(POSITION_KEY, b"10")
    assert part.position == 12
    part.load("ops:a|", None)
    assert "ops:a|" not in part.upto


def test_expiry_keeps_a_keys_current_windows_not_its_history() -> None:
    # A rate-limited key seen in 200 ten-minute windows: without expiry its record held
    # every window (state growing with history); expired after each match, the windows of
    # the grace period only.
    part = PartitionState()
    key = entity_key(LIMITED.name, "service=api")
    grace = timedelta(minutes=30)
    for i in range(200):
        event = spike("api", at=T0 + timedelta(minutes=10 * i))
        evaluate(RuleSet([LIMITED]), event, part.state_of(key))
        part.applied(key, i)
        part.expire(key, event.time - grace)
    record = json.loads(dict(part.snapshot(0))[key] or b"{}")
    assert len(record["rate"]["windows"]) <= 4
    assert record["upto"] == 200
    # A late match inside the grace still finds its window: the limit holds for it.
    late = spike("api", at=T0 + timedelta(minutes=10 * 199 + 1))
    decisions = evaluate(RuleSet([LIMITED]), late, part.state_of(key))
    assert [type(d).__name__ for d in decisions] == ["Fire"]  # 2 per window: the second
    again = evaluate(RuleSet([LIMITED]), late, part.state_of(key))
    assert [type(d).__name__ for d in again] == ["Throttled"]


def _state_records() -> list[dict[str, Any]]:
    """Well-formed state records of SPIKE's key `service=api`: counts of 1 and 2 entries."""
    state = RuleState()
    out = []
    for minute in (0, 1):
        evaluate(RuleSet([SPIKE]), spike("api", at=T0 + timedelta(minutes=minute)), state)
        record = to_record(state, SPIKE.name, "service=api", upto=0)
        assert record is not None
        out.append(record)
    return out


KEYS = [entity_key(SPIKE.name, "service=api"), entity_key(SPIKE.name, "service=db")]


def _seen(part: PartitionState) -> dict[str, Any]:
    """What a partition's state holds, comparable."""
    return {"position": part.position, "upto": dict(part.upto), "empty": dict(part.empty),
            "states": {k: to_record(s, SPIKE.name, parse_entity_key(k)[1], 0)
                       for k, s in part.states.items()}}


_CHANGELOG = st.lists(st.one_of(
    st.tuples(st.sampled_from(KEYS), st.none()),  # tombstones
    st.tuples(st.sampled_from(KEYS), st.integers(0, 40), st.integers(0, 2),
              st.booleans()),  # a state record: upto, content, its fields' order
    st.tuples(st.just(POSITION_KEY), st.integers(0, 60)),
), max_size=40)


def _encoded(item: tuple[Any, ...]) -> tuple[str, bytes | None]:
    if item[0] == POSITION_KEY:
        return POSITION_KEY, encode_position(item[1])
    if len(item) == 2:
        return item[0], None
    key, upto, content, upto_last = item
    record: dict[str, Any] = {"upto": upto}
    if content:
        record.update({k: v for k, v in _state_records()[content - 1].items() if k != "upto"})
    if upto_last:  # not the form `snapshot` writes: read by parsing it whole
        record = {**{k: v for k, v in record.items() if k != "upto"}, "upto": upto}
    return key, json.dumps(record, separators=(",", ":")).encode()


@settings(max_examples=300, deadline=None)
@given(before=_CHANGELOG, tail=_CHANGELOG)
def test_a_restore_in_one_pass_holds_what_loading_each_record_in_order_does(
    before: list[tuple[Any, ...]], tail: list[tuple[Any, ...]],
) -> None:
    # `before` is what the local store held; `tail` the changelog read after it.
    held = [_encoded(item) for item in before]
    records = [_encoded(item) for item in tail]
    one_by_one, at_once, from_store = PartitionState(), PartitionState(), PartitionState()
    for part in (one_by_one, at_once, from_store):
        for key, value in held:
            part.load(key, value)
    for key, value in records:
        one_by_one.load(key, value)
    stored, unreadable = at_once.restore(records)
    assert unreadable == []
    assert _seen(at_once) == _seen(one_by_one)
    # What it returns, stored and loaded again in order, gives the same state too.
    for key, value in stored:
        from_store.load(key, value)
    assert _seen(from_store) == _seen(one_by_one)
    assert len(stored) <= 2 * len(KEYS) + 1


def test_record_upto_reads_the_first_field_and_parses_any_other_form() -> None:
    assert record_upto(b'{"upto":17,"count":{"n":2}}') == 17
    assert record_upto(b'{"upto":3}') == 3
    assert record_upto(b'{"count":{"n":2},"upto":5}') == 5
    assert record_upto(b'{"upto": 8}') == 8  # a space: parsed whole
    for bad in (b'{"upto":}', b"[1]", b"nope", b'{"count":1}'):
        with pytest.raises((ValueError, KeyError)):
            record_upto(bad)


def test_a_kept_record_that_cannot_be_read_falls_back_to_the_one_before_it() -> None:
    key = KEYS[0]
    good = json.dumps({"upto": 4, **{k: v for k, v in _state_records()[0].items()
                                     if k != "upto"}}).encode()
    broken = b'{"upto":9,"count":{"n":"two"}}'
    part = PartitionState()
    stored, unreadable = part.restore([(key, good), (key, broken), (POSITION_KEY, b"x")])
    assert unreadable == [POSITION_KEY, key]
    assert part.upto[key] == 4 and stored == [(key, good)]


def test_a_budgets_weighted_windows_restore_with_their_weight() -> None:
    # A restored state must keep the limit's weight, or the rule's limit compares unequal
    # and the engine starts the budget's windows from zero after every restart.
    budget = Rule(name="t:budget", when=on("ops:error_spike").at_most(
        100, per=timedelta(hours=1), weight=F.data.errors), then=run("judge"))
    state = RuleState()
    decided = [d for _ in range(20) for d in evaluate(RuleSet([budget]), spike("api"), state)]
    assert sum(isinstance(d, Fire) for d in decided) == 14  # 7 errors each: 14 x 7 = 98
    record = to_record(state, budget.name, None, upto=20)
    assert record is not None and record["rate"]["weight"] == ["event", "data", "errors"]
    back, _ = from_record(json.loads(json.dumps(record)), budget.name, None)
    assert back.limiter(budget) is back.rates[budget.name]  # the same limit: kept
    assert back.rates[budget.name].windows == state.rates[budget.name].windows
    assert evaluate(RuleSet([budget]), spike("api"), back)[0].__class__.__name__ == "Throttled"
