"""The index topic's entries, as pure data (streams.core.view)."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.core.actors import UserActor
from streams.core.errors import ValidationFailed
from streams.core.events import AppEvent, Envelope, RuleFired, RunStarted, TraceContext
from streams.core.targets import ChainTarget, FiringTarget, RunTarget
from streams.core.tenancy import index_topic
from streams.core.view import (
    CURSOR_PARTITION,
    IndexEntry,
    Located,
    LogIndex,
    cursor_key,
    entry_json,
    index_entries,
    index_partition,
    located_or_refused,
    merge_entry,
    target_key,
)

TRACE = TraceContext(traceparent=f"00-{'a' * 32}-{'b' * 16}-01")


def _chain() -> list[Envelope]:
    spike = Envelope.new(AppEvent(name="ops:error_spike"), tenant="acme", workspace="prod",
                         actor=UserActor(id="app"), trace=TRACE)
    fired = spike.follow(RuleFired(firing_id="fir_1", rule="r", matched=[spike.event_id]))
    started = fired.follow(RunStarted(run_id="run_1", rule="r", action="a",
                                      firing_id="fir_1"))
    return [spike, fired, started]


def _entries(envelopes: list[Envelope]) -> dict[str, IndexEntry]:
    out: dict[str, IndexEntry] = {}
    for offset, envelope in enumerate(envelopes):
        for key, entry in index_entries(envelope, 2, offset):
            out[key] = merge_entry(key, out.get(key), entry)
    return out


def test_the_entries_answer_as_the_fold_does() -> None:
    chain = _chain()
    entries = _entries(chain)
    fold = LogIndex()
    for envelope in chain:
        fold.apply(envelope)
    spike = chain[0].event_id
    targets: list[RunTarget | FiringTarget | ChainTarget] = [
        RunTarget(run_id="run_1"), FiringTarget(firing_id="fir_1"),
        ChainTarget(correlation_id=spike)]
    for target in targets:
        found = located_or_refused(target, entries.get(target_key(target)), None, "prod")
        assert found == fold.locate(target, "prod")
        assert located_or_refused(target, entries.get(target_key(target)), None,
                                  "staging") is None
    assert entries[f"chain:{spike}"].partition == 2
    assert entries[f"chain:{spike}"].offset == 0
    assert entries[f"event:{chain[2].event_id}"].offset == 2
    assert set(entries) == {f"event:{e.event_id}" for e in chain} | {
        f"chain:{spike}", "run:run_1", "firing:fir_1", f"last:{spike}"}
    assert entries[f"last:{spike}"].offset == 2


def test_a_chains_head_names_the_chain_and_the_events_after_it_its_newest() -> None:
    spike, fired, started = _chain()
    # The head: its event and its chain, no `last:` (a chain without one ends at its head).
    assert [k for k, _ in index_entries(spike, 2, 0)] == [f"event:{spike.event_id}",
                                                           f"chain:{spike.event_id}"]
    # Every later event: its own, then the chain's newest, then the firing or run it starts.
    assert [k for k, _ in index_entries(fired, 2, 1)] == [
        f"event:{fired.event_id}", f"last:{spike.event_id}", "firing:fir_1"]
    assert [k for k, _ in index_entries(started, 2, 2)] == [
        f"event:{started.event_id}", f"last:{spike.event_id}", "run:run_1"]


def test_a_chain_target_naming_a_later_event_names_the_chain() -> None:
    chain = _chain()
    entries = _entries(chain)
    later = chain[2].event_id
    target = ChainTarget(correlation_id=later)
    with pytest.raises(ValidationFailed, match=chain[0].event_id):
        located_or_refused(target, entries.get(target_key(target)),
                           entries[f"event:{later}"], "prod")


def test_a_repeated_run_keeps_its_first_place() -> None:
    loc = Located("prod", "c", "e", None, "r")
    first, again = IndexEntry(loc, 0, 5), IndexEntry(loc, 0, 9)
    assert merge_entry("run:x", first, again) == first
    assert merge_entry("run:x", again, first) == first
    assert merge_entry("firing:x", first, again) == again
    assert merge_entry("last:c", again, first) == again


def test_entries_round_trip_and_refuse_garbage() -> None:
    entry = IndexEntry(Located("prod", "c", "e", "t" * 32, "rule"), 3, 12)
    assert IndexEntry.decode(entry.encode()) == entry
    with pytest.raises(ValidationFailed, match="not an index entry"):
        IndexEntry.decode(b"{}")


def test_keys_partitions_and_topic() -> None:
    assert index_topic("acme", "fs") == "fs.acme.index"
    assert index_partition(cursor_key(4), 8) == CURSOR_PARTITION
    spread = {index_partition(f"run:{i}", 8) for i in range(100)}
    assert spread == set(range(1, 8))  # partition 0 holds the cursors alone
    assert index_partition("run:1", 1) == 0
    assert index_partition("run:1", 8) == index_partition("run:1", 8)
    with pytest.raises(ValidationFailed):
        index_topic("Not A Tenant", "fs")


_TEXT = st.text()  # any Unicode, quotes, backslashes and control characters included


@given(_TEXT, _TEXT, _TEXT, st.none() | _TEXT, st.none() | _TEXT, st.none() | _TEXT,
       st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1))
def test_an_entrys_bytes_are_json_dumps_of_its_fields(
    workspace: str, chain: str, event_id: str, trace_id: str | None, rule: str | None,
    action: str | None, partition: int, offset: int,
) -> None:
    # Written by hand for speed: byte for byte what json.dumps wrote before, so entries
    # written by either are the same record (compaction, equality checks in readers).
    place = {"w": workspace, "c": chain, "e": event_id, "t": trace_id, "r": rule,
             "a": action, "p": partition, "o": offset}
    made = entry_json(workspace, chain, event_id, trace_id, rule, action, partition, offset)
    assert made == json.dumps(place, separators=(",", ":")).encode()
    assert json.loads(made) == place
