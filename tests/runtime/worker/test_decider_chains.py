"""The decider's clock and completion rules, without a broker: records of one rules
partition handed to `RuleDecider.handle_batch` (a local store, a stand-in for the registry
decode), in the orders two events partitions can interleave them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from streams.adapters.kafka.outputs import HEADER_RULE, Output, rule_tick
from streams.adapters.state import open_store
from streams.core.events import AppEvent, Envelope, RuleFired
from streams.core.matching import Matcher
from streams.core.rules import Rule, RuleSet, on, run
from streams.core.rules.snapshots import PartitionState, entity_key
from streams.runtime.worker.decider import RuleDecider, _Owned
from streams.settings import Settings
from tests.kafka_fakes import FakeMessage

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TOPIC = "fs.acme.rules"
RULE = "judge:quiet"


class Records:
    """The decoding and encoding the decider asks of RuleRecords, by a table of envelopes."""

    def __init__(self) -> None:
        self.by_value: dict[bytes, Envelope] = {}

    def decode(self, value: bytes | None, *_where: Any) -> Envelope | None:
        return self.by_value.get(value or b"")

    def envelope(self, envelope: Envelope) -> Output:
        return Output("fs.acme.events", None, None, None)


class Stage:
    """One decider over one owned partition, fed records in a chosen order."""

    def __init__(self, tmp: Path, *, late: str = "rejudge") -> None:
        rule = Rule(
            name=RULE, when=on("t:qstep").completes(quiet=timedelta(minutes=5),
                                                    late=late),  # type: ignore[arg-type]
            then=run("noop"))
        self.matcher = Matcher(RuleSet([rule]))
        self.records = Records()
        runtime = cast(Any, type("Runtime", (), {"settings": Settings()})())
        self.decider = RuleDecider(runtime, self.matcher, cast(Any, self.records))
        self.decider.loop = cast(Any, type("Loop", (), {"stats": type(
            "S", (), {"commits": 0, "rewinds": 0})()})())
        self.decider.owned[(TOPIC, 0)] = _Owned(
            "acme", TOPIC, 0, "fs.acme.rulestate", open_store(tmp / "s.sqlite"),
            PartitionState())
        self.offset = 0

    def match(self, chain: str, minutes: float) -> FakeMessage:
        envelope = Envelope.new(AppEvent(name="t:qstep", data={}), tenant="acme",
                                workspace="prod", correlation_id=chain,
                                time=T0 + timedelta(minutes=minutes))
        value = envelope.event_id.encode()
        self.records.by_value[value] = envelope
        self.offset += 1
        return FakeMessage(TOPIC, 0, self.offset, entity_key(RULE, f"chain={chain}").encode(),
                           value, [(HEADER_RULE, RULE.encode())])

    def tick(self, minutes: float) -> FakeMessage:
        self.offset += 1
        tick = rule_tick(TOPIC, 0, T0 + timedelta(minutes=minutes))
        return FakeMessage(TOPIC, 0, self.offset, tick.key, tick.value)


def _matched(stage: Stage, *messages: FakeMessage) -> list[tuple[str, ...]]:
    """The matched ids of the firings a batch makes, read from the matcher's envelopes."""
    made: list[tuple[str, ...]] = []
    original = stage.matcher.fired

    def fired(decision: Any, cause: Any) -> list[Envelope]:
        envelopes = original(decision, cause)
        made.extend(tuple(e.event.matched) for e in envelopes if isinstance(e.event, RuleFired))
        return envelopes

    stage.matcher.fired = fired  # type: ignore[method-assign]
    try:
        stage.decider.handle_batch(cast(Any, list(messages)))
    finally:
        stage.matcher.fired = original  # type: ignore[method-assign]
    return made


def test_a_tick_ends_a_quiet_chain_and_a_late_event_behind_the_clock_is_judged_at_once(
        tmp_path: Path) -> None:
    stage = Stage(tmp_path)
    q1, q2 = stage.match("q", 0), stage.match("q", 1)
    assert _matched(stage, q1, q2) == []
    assert _matched(stage, stage.tick(5.5)) == []  # q2 + 5 min not reached
    q_ids = tuple(stage.records.by_value[m.value()].event_id for m in (q1, q2))
    assert _matched(stage, stage.tick(10)) == [q_ids]
    # The tenant's clock is at minute 20 (another events partition was read first) when
    # q's late event (minute 12) arrives: it is 5 minutes quiet on that clock already.
    assert _matched(stage, stage.tick(20)) == []
    late = stage.match("q", 12)
    late_id = stage.records.by_value[late.value()].event_id
    assert _matched(stage, late) == [(*q_ids, late_id)]


def test_ignored_late_events_and_the_clock_survive_a_restore_from_the_store(
        tmp_path: Path) -> None:
    stage = Stage(tmp_path, late="ignore")
    stage.decider.handle_batch(cast(Any, [stage.match("r", 0), stage.tick(6)]))
    owned = stage.decider.owned[(TOPIC, 0)]
    owned.store.write(owned.part.snapshot(0), {"position": owned.part.position})
    restored = RuleDecider._from_store(owned.store)
    assert restored.clock == T0 + timedelta(minutes=6)
    assert [w.ended for s in restored.states.values() for w in s.chains.values()] == \
        [T0 + timedelta(minutes=5)]
    owned.part = restored
    stage.decider._schedule_all(owned)
    assert _matched(stage, stage.match("r", 7), stage.tick(30)) == []  # late: ignored


def test_a_record_whose_own_time_ends_its_chain_is_still_decided(tmp_path: Path) -> None:
    stage = Stage(tmp_path)
    q1, q2 = stage.match("q", 0), stage.match("q", 1)
    ids = tuple(stage.records.by_value[m.value()].event_id for m in (q1, q2))
    assert _matched(stage, q1, q2) == []
    # Minute 7 moves the clock past q's quiet end: q is judged as it stood, then this
    # event of q is decided (late, judged again after its own quiet period), not skipped.
    late = stage.match("q", 7)
    late_id = stage.records.by_value[late.value()].event_id
    assert _matched(stage, late) == [ids]
    assert stage.decider.stats.skipped == 0
    assert _matched(stage, stage.tick(12)) == [(*ids, late_id)]


def test_chains_of_a_rule_this_process_lacks_are_forgotten_after_grace(tmp_path: Path) -> None:
    stage = Stage(tmp_path)
    stage.decider.handle_batch(cast(Any, [stage.match("gone", 0)]))
    owned = stage.decider.owned[(TOPIC, 0)]
    assert any(s.chains for s in owned.part.states.values())
    stage.decider.matcher = Matcher(RuleSet([]))  # the rule was removed (or not loaded yet)
    stage.decider.handle_batch(cast(Any, [stage.tick(10)]))
    assert any(s.chains for s in owned.part.states.values())  # kept within grace
    stage.decider.handle_batch(cast(Any, [stage.tick(61)]))
    assert not any(s.chains for s in owned.part.states.values())
