"""The SQLite view store, without a broker: idempotent batches with their checkpoint, the
queries' order and paging, run membership, and files it must not trust."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from streams.adapters.views import ViewCorrupt, ViewStore
from streams.core.viewrows import (
    AlarmRow,
    ChainRow,
    EventRow,
    FeedbackRow,
    FiringRow,
    PageKey,
    Rows,
    RunRow,
    position,
)


def _store(tmp_path: Path, tenant: str = "acme") -> ViewStore:
    store = ViewStore(tmp_path / "views" / f"{tenant}.sqlite", tenant=tenant,
                      topic=f"fs.{tenant}.events")
    store.open()
    return store


def _event(p: int, o: int, event_id: str, *, cause: str | None = None, t: int = 0,
           kind: str = "app_event", ws: str = "prod", corr: str = "chain") -> EventRow:
    return EventRow(position(p, o), event_id, ws, kind, t or 1000 + o, corr, cause,
                    f"raw:{event_id}".encode())


def _run(p: int, o: int, run_id: str, cause: str, *, rule: str = "ops:x", t: int = 0,
         ws: str = "prod") -> Rows:
    event = _event(p, o, f"s_{run_id}", cause=cause, t=t, kind="run_started", ws=ws)
    return Rows(event, run=RunRow(ws, run_id, rule, f"f_{run_id}", event.time_ms, event.pos))


def _fired(p: int, o: int, run_id: str, cause: str, *, rule: str = "ops:x", t: int = 0
           ) -> Rows:
    event = _event(p, o, f"fired_{run_id}", cause=cause, kind="rule_fired", t=t)
    return Rows(event, firing=FiringRow("prod", f"f_{run_id}", rule, event.time_ms, event.pos))


def _feedback(p: int, o: int, event_id: str, cause: str, *, kind: str = "q",
              who: str = "user:ada", t: int = 0) -> Rows:
    event = _event(p, o, event_id, cause=cause, t=t, kind="feedback_given")
    return Rows(event, feedback=FeedbackRow("prod", kind, who, event.time_ms, event.pos))


def _chain(p: int, o: int, n: int, **kw: object) -> list[Rows]:
    head = f"a{n}"
    event = _event(p, o, head, t=kw.get("t", 0))  # type: ignore[arg-type]
    return [Rows(event, chain=ChainRow("prod", head, event.time_ms, event.pos)),
            _fired(p, o + 1, f"r{n}", head, **kw),  # type: ignore[arg-type]
            _run(p, o + 2, f"r{n}", f"fired_r{n}", **kw)]  # type: ignore[arg-type]


def test_batches_are_idempotent_and_carry_their_checkpoint(tmp_path: Path) -> None:
    store = _store(tmp_path)
    batch = _chain(0, 0, 1) + _chain(1, 0, 2)
    store.apply(batch, [], {0: 3, 1: 3})
    store.apply(batch, [(position(0, 3), "bad")], {0: 4, 1: 2})  # again, and an older mark
    assert store.checkpoint() == {0: 4, 1: 3}  # never moves back
    assert store.counts() == {"events": 6, "runs": 2, "firings": 2, "feedback": 0,
                              "verdicts": 0, "caused": 2, "skipped": 1, "alarms": 0}


def test_runs_newest_first_by_rule_and_paged_without_gaps(tmp_path: Path) -> None:
    store = _store(tmp_path)
    rows: list[Rows] = []
    for n in range(10):
        rows += _chain(n % 3, 3 * n, n, rule="ops:x" if n % 2 else "ops:y", t=100 + n // 2)
    store.apply(rows, [], {})
    ids = [r for r, _k in store.runs("prod", rule=None, limit=None)]
    # Newest first; equal times break by partition, then offset (r8 is on partition 2, r9
    # on partition 0, both at time 104).
    expected = sorted(range(10), key=lambda n: (100 + n // 2, n % 3, 3 * n + 2), reverse=True)
    assert ids == [f"r{n}" for n in expected]
    assert ids[:2] == ["r8", "r9"]
    assert [r for r, _ in store.runs("prod", rule="ops:x", limit=None)] == [
        "r9", "r7", "r5", "r3", "r1"]
    paged: list[str] = []
    before: PageKey | None = None
    while True:
        page = store.runs("prod", rule=None, limit=3, before=before)
        if not page:
            break
        paged += [r for r, _ in page]
        before = page[-1][1]
        # A run started meanwhile (newer) never shows in later pages.
        store.apply(_chain(0, 1000 + len(paged) * 3, 100 + len(paged), t=10_000), [], {})
    assert paged == ids
    assert store.runs("staging", rule=None, limit=None) == []


def test_firings_and_chains_page_newest_first_like_runs(tmp_path: Path) -> None:
    store = _store(tmp_path)
    rows: list[Rows] = []
    for n in range(10):
        rows += _chain(n % 3, 3 * n, n, rule="ops:x" if n % 2 else "ops:y", t=100 + n // 2)
    store.apply(rows, [], {})
    runs = [r for r, _k in store.item_ids("run", "prod", limit=None)]
    # A chain's firing and run share its head's time here, so the three orders agree.
    assert [f for f, _k in store.item_ids("firing", "prod")] == [
        f"f_{r}" for r in runs]
    assert [c for c, _k in store.item_ids("chain", "prod")] == [
        f"a{r[1:]}" for r in runs]
    assert [f for f, _k in store.item_ids("firing", "prod", rule="ops:x")] == [
        "f_r9", "f_r7", "f_r5", "f_r3", "f_r1"]
    for kind in ("firing", "chain"):
        paged: list[str] = []
        before: PageKey | None = None
        while page := store.item_ids(kind, "prod", limit=4, before=before):
            paged += [i for i, _k in page]
            before = page[-1][1]
        assert paged == [i for i, _k in store.item_ids(kind, "prod")]
    assert store.item_ids("chain", "staging") == []
    # A count between two keys (both included) is what the page walk between them reads.
    for kind, rule in (("run", None), ("firing", "ops:x"), ("chain", None)):
        keyed = store.item_ids(kind, "prod", rule=rule)
        assert store.count_items(kind, "prod", rule=rule) == len(keyed)
        for top, bottom in ((0, len(keyed) - 1), (1, 3), (2, 2)):
            assert store.count_items(kind, "prod", rule=rule,
                                     between=(keyed[top][1], keyed[bottom][1])) == \
                bottom - top + 1
    with pytest.raises(ValueError, match="no rule"):
        store.item_ids("chain", "prod", rule="ops:x")
    with pytest.raises(ValueError, match="no items of kind"):
        store.item_ids("artifact", "prod")


def test_a_file_of_an_older_layout_is_started_afresh(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.apply(_chain(0, 0, 1), [], {0: 3})
    store.close()
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE meta SET value = '1' WHERE key = 'layout'")
    again = _store(tmp_path)
    assert again.checkpoint() == {}  # read again from the topic, into the new tables
    assert "layout" in again.rebuilt[0]
    again.apply(_chain(0, 0, 1), [], {0: 3})
    assert [c for c, _k in again.item_ids("chain", "prod")] == ["a1"]


def _verdict(o: int, target: str, who: str, value: dict[str, object], *, t: int,
             kind: str = "triage_quality", on: str = "run") -> Rows:
    event = _event(0, o, f"v{o}", t=t, kind="feedback_given")
    evaluator = who.split(":", 1)[1].split("@")[0] if who.startswith("evaluator:") else None
    return Rows(event, feedback=FeedbackRow(
        "prod", kind, who, event.time_ms, event.pos, target_kind=on, target_id=target,
        value_json=json.dumps(value, sort_keys=True), evaluator=evaluator,
        person=who.startswith("user:")))


def test_targets_judged_below_by_the_latest_verdict_of_an_evaluator(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.apply([
        _verdict(0, "r1", "evaluator:judge@1", {"score": 0.2}, t=10),
        _verdict(1, "r2", "evaluator:judge@1", {"score": 0.9}, t=11),
        _verdict(2, "r3", "evaluator:judge@2", {"score": 0.1}, t=12),
        _verdict(3, "r4", "evaluator:other@1", {"score": 0.0}, t=13),
        _verdict(4, "r5", "user:ada", {"score": 0.0}, t=14),
        _verdict(5, "r6", "evaluator:judge@1", {"score": None}, t=15),  # no score: not below
        _verdict(6, "f1", "evaluator:judge@1", {"score": 0.1}, t=16, on="firing"),
    ], [], {})

    def below(evaluator: str = "judge", **kw: object) -> list[str]:
        return [i for i, _k in store.judged("prod", evaluator=evaluator,
                                            feedback_type="triage_quality", on="run",
                                            below=("score", 0.5), **kw)]  # type: ignore[arg-type]

    assert below() == ["r3", "r1"]  # newest verdict first, any version of judge
    assert below("judge@1") == ["r1"]
    # A later verdict replaces the earlier one (r1 judged again, fine now); an older one
    # applied afterwards changes nothing.
    store.apply([_verdict(7, "r1", "evaluator:judge@1", {"score": 0.8}, t=20)], [], {})
    store.apply([_verdict(8, "r2", "evaluator:judge@1", {"score": 0.0}, t=5)], [], {})
    assert below() == ["r3"]
    store.apply([_verdict(9, "r2", "evaluator:judge@1", {"score": 0.0}, t=21)], [], {})
    assert below() == ["r2", "r3"]
    first = store.judged("prod", evaluator="judge", feedback_type="triage_quality", on="run",
                         below=("score", 0.5), limit=1)
    assert [i for i, _k in first] == ["r2"]
    assert below(before=first[0][1]) == ["r3"]
    assert store.counts()["verdicts"] == 7


def test_targets_where_an_evaluator_and_a_person_differ(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.apply([
        _verdict(0, "r1", "evaluator:judge@1", {"correct": True, "note": "x"}, t=10),
        _verdict(1, "r1", "user:ada", {"correct": True, "note": "y"}, t=11),  # text: alike
        _verdict(2, "r2", "evaluator:judge@1", {"correct": True}, t=12),
        _verdict(3, "r2", "user:ada", {"correct": False}, t=13),
        _verdict(4, "r3", "evaluator:judge@1", {"correct": False}, t=14),  # no person yet
        _verdict(5, "r4", "evaluator:judge@1", {"correct": None}, t=15),
        _verdict(6, "r4", "user:bo", {"correct": True}, t=16),  # one side empty: no dispute
        _verdict(7, "r5", "evaluator:judge@2", {"correct": True}, t=17),
        _verdict(8, "r5", "evaluator:other@1", {"correct": False}, t=18),  # not a person
    ], [], {})

    def disputed(evaluator: str = "judge") -> list[str]:
        return [i for i, _k in store.judged("prod", evaluator=evaluator,
                                            feedback_type="triage_quality", on="run",
                                            differs_on=["correct"])]

    assert disputed() == ["r2"]
    store.apply([_verdict(9, "r3", "user:bo", {"correct": True}, t=30),
                 _verdict(10, "r2", "user:ada", {"correct": True}, t=31)], [], {})
    assert disputed() == ["r3"]  # ada changed her mind on r2: her latest agrees
    assert disputed("judge@2") == []
    assert store.judged("prod", evaluator="judge", feedback_type="triage_quality", on="run",
                        differs_on=[]) == []
    with pytest.raises(ValueError, match="one of them"):
        store.judged("prod", evaluator="judge", feedback_type="triage_quality", on="run")


def test_a_run_started_twice_is_one_run(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.apply([*_chain(0, 0, 1), _run(0, 3, "r1", "fired_r1", t=5000)], [], {})
    [(run_id, key)] = store.runs("prod", rule=None, limit=None)
    assert (run_id, key.offset) == ("r1", 2)  # the first one


def test_run_parts_follow_causation_through_runs(tmp_path: Path) -> None:
    store = _store(tmp_path)
    rows = [
        *_chain(0, 0, 1),
        Rows(_event(0, 3, "out1", cause="s_r1", kind="run_succeeded")),
        Rows(_event(0, 4, "emit1", cause="s_r1")),  # an event the run emitted ...
        _fired(0, 5, "r2", "emit1"),                 # ... made another rule fire
        _run(0, 6, "r2", "fired_r2"),
        Rows(_event(0, 7, "out2", cause="s_r2", kind="run_succeeded")),
        _feedback(0, 8, "fb1", "s_r1"),
        Rows(_event(0, 9, "stranger", cause="a1")),  # caused by the app event: no run's
        Rows(_event(0, 10, "other_ws", cause="s_r1", ws="staging")),
    ]
    store.apply(rows[:5], [], {0: 5})
    store.apply(rows[5:], [], {0: 11})
    one = store.run_parts("prod", "r1")
    assert one is not None and one.fired is not None
    assert one.started.raw == b"raw:s_r1" and one.fired.raw == b"raw:fired_r1"
    assert [e.raw.decode()[4:] for e in one.emitted] == [
        "out1", "emit1", "fired_r2", "s_r2", "out2", "fb1"]
    two = store.run_parts("prod", "r2")
    assert two is not None and [e.raw for e in two.emitted] == [b"raw:out2"]
    assert store.run_parts("prod", "r3") is None
    assert set(store.events_by_id("prod", ["a1", "nope"])) == {"a1"}


def test_a_chains_events_in_log_order_and_a_shared_key_returns_both_chains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = _store(tmp_path)
    store.apply([Rows(_event(0, 0, "a1", corr="a1")), Rows(_event(1, 0, "a2", corr="a2")),
                 Rows(_event(0, 1, "f1", cause="a1", corr="a1")),
                 Rows(_event(0, 2, "x1", corr="a1", ws="staging")),
                 Rows(_event(0, 3, "g1", cause="f1", corr="a1")),
                 Rows(_event(2, 0, "h1", corr="a1")),  # another partition: not the chain's
                 Rows(_event(1, 1, "o1", corr="order-7"))], [], {0: 4, 1: 2, 2: 1})
    assert [e.raw for e in store.chain("prod", "a1")] == [b"raw:a1", b"raw:f1", b"raw:g1"]
    assert [(e.partition, e.offset) for e in store.chain("prod", "a2")] == [(1, 0)]
    # As the index answers: no chain without the event that starts it in the workspace.
    assert store.chain("staging", "a1") == []
    assert store.chain("prod", "order-7") == []
    assert store.chain("prod", "a3") == []
    # Two chains under one key: the store gives both, in log order (readers keep theirs).
    monkeypatch.setattr("streams.adapters.views.chain_key", lambda _cid: 7)
    shared = _store(tmp_path, "shared")
    shared.apply([Rows(_event(0, 0, "a1", corr="a1")), Rows(_event(0, 1, "a2", corr="a2"))],
                 [], {0: 2})
    assert [e.raw for e in shared.chain("prod", "a1")] == [b"raw:a1", b"raw:a2"]
    assert [e.raw for e in shared.chain("prod", "a2")] == [b"raw:a2"]


def test_feedback_by_type_and_participant_oldest_first(tmp_path: Path) -> None:
    store = _store(tmp_path)
    rows = [*_chain(0, 0, 1), _feedback(0, 3, "f1", "s_r1", t=50),
            _feedback(0, 4, "f2", "s_r1", who="user:bob"),
            _feedback(1, 0, "f3", "s_r1", kind="other", t=50), _feedback(1, 1, "f4", "s_r1")]
    store.apply(rows, [], {})

    def raws(**kw: object) -> list[str]:
        return [r.raw.decode()[4:] for r in store.feedback(  # type: ignore[arg-type]
            "prod", **{"feedback_type": None, "participant": None, "limit": None, **kw})]

    # By time (50, 50, 1001, 1004), then partition and offset.
    assert raws() == ["f1", "f3", "f4", "f2"]
    assert raws(feedback_type="q") == ["f1", "f4", "f2"]
    assert raws(participant="user:bob") == ["f2"]
    assert raws(feedback_type="q", participant="user:ada") == ["f1", "f4"]
    first = store.feedback("prod", feedback_type=None, participant=None, limit=2)
    last = first[-1]
    rest = store.feedback("prod", feedback_type=None, participant=None, limit=None,
                          after=PageKey(last.time_ms, last.partition, last.offset))
    assert [r.raw for r in first + rest] == [r.raw for r in store.feedback(
        "prod", feedback_type=None, participant=None, limit=None)]


def test_a_file_that_is_not_a_view_is_started_afresh(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.apply(_chain(0, 0, 1), [], {0: 3})
    store.close()
    store.path.write_bytes(b"this is not a database" * 100)
    again = _store(tmp_path)
    assert again.checkpoint() == {} and again.rebuilt and "unreadable" in again.rebuilt[0]
    again.close()
    other = _store(tmp_path, tenant="acme")
    assert other.rebuilt == []  # a sound file is trusted
    other.close()
    # The same file opened as another tenant's view is not trusted.
    moved = ViewStore(again.path, tenant="globex", topic="fs.globex.events")
    moved.open()
    assert moved.rebuilt and "built as" in moved.rebuilt[0]


def test_a_file_damaged_under_an_open_store_raises_view_corrupt(tmp_path: Path) -> None:
    store = _store(tmp_path)
    for n in range(200):  # enough pages that a torn file loses some
        store.apply(_chain(0, 3 * n, n), [], {0: 3 * n + 3})
    store.close()
    with sqlite3.connect(store.path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(store.path.read_bytes())
    data[4096 * 2: 4096 * 6] = b"\xff" * (4096 * 4)
    store.path.write_bytes(bytes(data))
    damaged = _store(tmp_path)
    with pytest.raises(ViewCorrupt):
        for n in range(200):
            damaged.run_parts("prod", f"r{n}")
            damaged.runs("prod", rule=None, limit=None)
            damaged.counts()


def test_deleting_the_file_is_noticed(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert store.still_there()
    store.path.unlink()
    assert not store.still_there()


def test_verdict_pairs_walk_the_newest_person_verdicts(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.apply([
        _verdict(0, "r1", "evaluator:judge@1", {"correct": True}, t=10),
        _verdict(1, "r1", "evaluator:judge@2", {"correct": False}, t=11),
        _verdict(2, "r1", "user:ada", {"correct": True}, t=12),
        _verdict(3, "r2", "evaluator:judge@1", {"correct": True}, t=13),
        _verdict(4, "r2", "user:bo", {"correct": False}, t=40),  # the evaluator's is older
        _verdict(5, "r3", "user:ada", {"correct": True}, t=15),  # no evaluator: no pair
        _verdict(6, "r4", "evaluator:judge@1", {"correct": True}, t=50),  # no person
    ], [], {})
    pairs = store.verdict_pairs("prod", limit=10)
    assert [(e, a and json.loads(a), json.loads(b), t, pt) for e, _type, a, b, t, pt, _p
            in pairs] == [
        ("evaluator:judge@1", {"correct": True}, {"correct": False}, 40, 40),
        (None, None, {"correct": True}, 15, 15),  # no evaluator: a row to page by
        ("evaluator:judge@1", {"correct": True}, {"correct": True}, 12, 12),
        ("evaluator:judge@2", {"correct": False}, {"correct": True}, 12, 12)]
    # `limit` bounds the person verdicts read, newest first; `before` pages on from a row.
    [first] = store.verdict_pairs("prod", limit=1)
    assert first[4] == 40
    rest = store.verdict_pairs("prod", limit=10, before=(first[5], first[6]))
    assert [r[5] for r in rest] == [15, 12, 12]
    assert store.verdict_pairs("other", limit=10) == []
    assert store.verdict_workspaces() == ["prod"]


def test_a_shadow_verdict_enters_the_verdicts_only(tmp_path: Path) -> None:
    store = _store(tmp_path)
    shadow = _event(0, 1, "s1", t=20, kind="streams:verdict")
    store.apply([_verdict(0, "r1", "user:ada", {"correct": True}, t=10),
                 Rows(shadow, verdict=FeedbackRow(
                     "prod", "triage_quality", "evaluator:judge@3", shadow.time_ms,
                     shadow.pos, target_kind="run", target_id="r1",
                     value_json='{"correct": false}', evaluator="judge", shadow=True))],
                [], {})
    assert store.counts()["feedback"] == 1 and store.counts()["verdicts"] == 2
    [(evaluator, *_rest)] = store.verdict_pairs("prod", limit=10)
    assert evaluator == "evaluator:judge@3"
    assert [i for i, _k in store.judged("prod", evaluator="judge@3",
                                        feedback_type="triage_quality", on="run",
                                        differs_on=["correct"])] == ["r1"]
    # By name alone, the live versions only: a shadow's record is not a second item.
    assert store.judged("prod", evaluator="judge", feedback_type="triage_quality", on="run",
                        differs_on=["correct"]) == []


def test_each_keys_newest_alarm_stands(tmp_path: Path) -> None:
    store = _store(tmp_path)

    def alarm(o: int, t: int, raised: bool, episode: int, field: str = "ok") -> Rows:
        event = _event(0, o, f"al{o}", t=t, kind="calibration:alarm")
        return Rows(event, alarm=AlarmRow("prod", "evaluator:j@1", "q", field, raised,
                                          episode, event.time_ms, event.pos))

    store.apply([alarm(0, 100, True, 1), alarm(1, 200, False, 1), alarm(2, 300, True, 2),
                 alarm(3, 50, False, 9),  # older than the newest: changes nothing
                 alarm(4, 120, True, 1, field="other")], [], {})
    assert store.alarms("prod") == [("evaluator:j@1", "q", "ok", True, 2),
                                    ("evaluator:j@1", "q", "other", True, 1)]
    assert store.alarms("elsewhere") == []
    assert store.counts()["alarms"] == 2


def test_targets_two_versions_both_judged_newest_first(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.apply([
        _verdict(0, "r1", "evaluator:judge@2", {"correct": True}, t=10),
        _verdict(1, "r1", "evaluator:judge@3", {"correct": False}, t=11),
        _verdict(2, "r2", "evaluator:judge@2", {"correct": True}, t=12),  # 3 never judged
        _verdict(3, "r3", "evaluator:judge@3", {"correct": True}, t=13),
        _verdict(4, "r3", "evaluator:judge@2", {"correct": True}, t=14),
        _verdict(5, "r4", "evaluator:judge@2", {"correct": True}, t=15, kind="other"),
        _verdict(6, "r4", "evaluator:judge@3", {"correct": True}, t=16, kind="other"),
    ], [], {})

    def paired(**kw: object) -> list[str]:
        return [i for i, _k in store.paired(
            "prod", a="evaluator:judge@2", b="evaluator:judge@3",
            feedback_type="triage_quality", on="run", **kw)]  # type: ignore[arg-type]

    assert paired() == ["r3", "r1"]
    first = store.paired("prod", a="evaluator:judge@2", b="evaluator:judge@3",
                         feedback_type="triage_quality", on="run", limit=1)
    assert paired(before=first[0][1]) == ["r1"]
    assert [(p, v) for _t, _i, p, _h, v, _ms, _pos in sorted(
        store.verdicts_of("prod", "run", ["triage_quality"], ["r1"]))] == [
        ("evaluator:judge@2", '{"correct": true}'), ("evaluator:judge@3", '{"correct": false}')]


def test_verdicts_of_named_targets_and_types(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.apply([
        _verdict(0, "r1", "user:ada", {"correct": True}, t=10),
        _verdict(1, "r1", "evaluator:judge@1", {"correct": False}, t=11),
        _verdict(2, "r2", "user:bo", {"correct": True}, t=12),
        _verdict(3, "r3", "user:ada", {"correct": True}, t=13),  # not asked for
        _verdict(4, "r1", "user:ada", {"x": 1}, t=14, kind="other"),  # another type
    ], [], {})
    found = store.verdicts_of("prod", "run", ["triage_quality"], ["r1", "r2", "r2", "r9"])
    assert sorted((t, i, p, person, json.loads(v)) for t, i, p, person, v, _ms, _pos
                  in found) == [
        ("triage_quality", "r1", "evaluator:judge@1", False, {"correct": False}),
        ("triage_quality", "r1", "user:ada", True, {"correct": True}),
        ("triage_quality", "r2", "user:bo", True, {"correct": True})]
    assert store.verdicts_of("prod", "run", [], ["r1"]) == []
    many = store.verdicts_of("prod", "run", ["triage_quality"],
                             [f"x{i}" for i in range(1200)] + ["r3"])  # three batches
    assert [i for _t, i, *_rest in many] == ["r3"]


def test_the_kind_a_participant_judged_lately(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.apply([
        _verdict(0, "r1", "evaluator:judge@2", {"correct": True}, t=10),
        _verdict(1, "c1", "evaluator:judge@2", {"correct": True}, t=20, on="chain"),
        _verdict(2, "r2", "evaluator:judge@3", {"correct": True}, t=30),
    ], [], {})
    kinds = ["chain", "firing", "run"]
    assert store.newest_kind("prod", "evaluator:judge@2", "triage_quality", kinds) == "chain"
    assert store.newest_kind("prod", "evaluator:judge@3", "triage_quality", kinds) == "run"
    assert store.newest_kind("prod", "evaluator:judge@2", "triage_quality", ["run"]) == "run"
    assert store.newest_kind("prod", "evaluator:judge@9", "triage_quality", kinds) is None
