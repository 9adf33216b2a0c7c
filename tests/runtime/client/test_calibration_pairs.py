"""Calibration's read of a view (no broker): the pages it walks, where it stops, its cap."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from streams.adapters.views import ViewStore
from streams.core.measures.calibration import CalibrationPolicy
from streams.core.viewrows import EventRow, FeedbackRow, Rows, position
from streams.runtime.client.views import PAGES_AT_LEAST, SCAN_PER_WINDOW, calibration_pairs


def _verdict(o: int, target: int, who: str, correct: bool) -> Rows:
    event = EventRow(position(0, o), f"e{o}", "prod", "feedback_given", 1000 + o, "c", None,
                     b"")
    person = who.startswith("user:")
    return Rows(event, feedback=FeedbackRow(
        "prod", "verdict", who, event.time_ms, event.pos, target_kind="run",
        target_id=f"r{target}", value_json=json.dumps({"correct": correct}),
        evaluator=None if person else who.split(":")[1].split("@")[0], person=person))


class Counting(ViewStore):
    """A store that counts the pages calibration asks for."""

    pages = 0

    def verdict_pairs(self, *args: Any, **kwargs: Any) -> Any:
        self.pages += 1
        return super().verdict_pairs(*args, **kwargs)


def _store(tmp_path: Path, targets: int, *, shadow_every: int,
           shadow_on: frozenset[int] = frozenset()) -> Counting:
    store = Counting(tmp_path / "v.sqlite", tenant="acme", topic="fs.acme.events")
    store.open()
    rows, o = [], 0
    for target in range(targets):
        judges = ["evaluator:judge@1"]
        if target % shadow_every == 0 or target in shadow_on:
            judges.append("evaluator:judge@2")
        for who in [*judges, "user:ada"]:
            rows.append(_verdict(o, target, who, target % 2 == 0))
            o += 1
    store.apply(rows, [], {})
    return store


def test_it_reads_on_until_every_version_met_has_its_window(tmp_path: Path) -> None:
    store = _store(tmp_path, 200, shadow_every=10)
    pairs = calibration_pairs(store, "prod", CalibrationPolicy(window=5, min_pairs=5))
    counts = {e: sum(p.evaluator == e for p in pairs) for e in {p.evaluator for p in pairs}}
    assert counts == {"evaluator:judge@1": 5, "evaluator:judge@2": 5}
    # Ten pages of five first; the shadow judges one target in ten: it has its five pairs
    # in them too (the newest 50 person verdicts), so the walk stops there.
    assert store.pages == PAGES_AT_LEAST == 10
    newest = max(p.time for p in pairs if p.evaluator == "evaluator:judge@1")
    assert all(p.time <= newest for p in pairs)


def test_the_walk_stops_at_its_cap_or_the_first_verdict(tmp_path: Path) -> None:
    # The shadow judged one target in 10, the newest ones: met in the first pages, its
    # window of 20 fills only 200 person verdicts back, past the cap of 50 pages of 2.
    store = _store(tmp_path, 1000, shadow_every=10)
    pairs = calibration_pairs(store, "prod", CalibrationPolicy(window=2, min_pairs=1))
    assert [p.evaluator for p in pairs].count("evaluator:judge@2") == 2
    assert store.pages == PAGES_AT_LEAST
    wide = _store(tmp_path / "wide", 1000, shadow_every=10)
    pairs = calibration_pairs(wide, "prod", CalibrationPolicy(window=20, min_pairs=1))
    assert [p.evaluator for p in pairs].count("evaluator:judge@2") == 20
    assert wide.pages == PAGES_AT_LEAST  # 200 person verdicts: 20 shadow pairs
    # One in 400: met beyond the first ten pages of 2 (20 verdicts), never: not measured.
    rare = _store(tmp_path / "rare", 1000, shadow_every=400)
    pairs = calibration_pairs(rare, "prod", CalibrationPolicy(window=2, min_pairs=1))
    assert "evaluator:judge@2" not in {p.evaluator for p in pairs}
    assert rare.pages == PAGES_AT_LEAST
    # Met on the newest target alone: its window never fills, and the walk stops at its cap.
    capped = _store(tmp_path / "capped", 1000, shadow_every=10_000, shadow_on=frozenset({999}))
    pairs = calibration_pairs(capped, "prod", CalibrationPolicy(window=2, min_pairs=1))
    assert [p.evaluator for p in pairs].count("evaluator:judge@2") == 1
    assert capped.pages == SCAN_PER_WINDOW
    small = _store(tmp_path / "small", 7, shadow_every=400)
    pairs = calibration_pairs(small, "prod", CalibrationPolicy(window=5, min_pairs=1))
    assert small.pages == 2 and len(pairs) == 6  # judge@1 full; judge@2's one pair too
