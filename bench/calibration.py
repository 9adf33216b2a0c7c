"""Online calibration's read against the size of the log: one workspace's calibration from
its view (`streams.runtime.client.views.calibration_of`: the newest person verdicts' pairs
walked by index, decoded, measured) at each view size, beside its floor, the same
measurement on the same pairs already decoded in memory (no SQL, no JSON).

Each view is built directly in a SQLite file (no broker): a judge's verdict on every target,
a person's on one in `--people-every` (5%: a team reviewing a sample), and with
`--shadow-every N` a second version's on one target in N, each with its feedback event row,
as the view keeper would write them. Rounds alternate read and floor.

    .venv/bin/python -m bench.calibration --verdicts 1000000,10000000

Prints one JSON line per size: the read's and the floor's median ms and CPU ms, their ratio,
the pairs measured, and how long the view took to build.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from streams.adapters.views import ViewStore
from streams.core.feedback import FeedbackRegistry
from streams.core.measures.calibration import CalibrationPolicy, calibrate
from streams.core.viewrows import EventRow, FeedbackRow, Rows, position
from streams.runtime.client.views import calibration_of, calibration_pairs

__all__ = ["main"]

WORKSPACE = "prod"
BATCH = 50_000


def _rows(start: int, stop: int, people_every: int, shadow_every: int) -> list[Rows]:
    rows = []
    offset = 3 * start
    for target in range(start, stop):
        judged = target % 3 != 0
        judges = ("evaluator:judge@1", "evaluator:judge@2") \
            if shadow_every and target % shadow_every == 0 else ("evaluator:judge@1",)
        for who in (*judges, "user:ada") if target % people_every == 0 else judges:
            person = who.startswith("user:")
            said = judged if not person or target % 5 else not judged
            time_ms = 1_700_000_000_000 + target * 10 + person
            pos = position(target % 3, offset)
            offset += 1
            event = EventRow(pos, f"e{offset}", WORKSPACE, "feedback_given", time_ms,
                             f"c{target}", None, b"")
            rows.append(Rows(event, feedback=FeedbackRow(
                WORKSPACE, "verdict", who, time_ms, pos, target_kind="run",
                target_id=f"r{target}",
                value_json=json.dumps({"correct": said, "score": (target % 10) / 10}),
                evaluator=None if person else "judge", person=person)))
    return rows


def _build(path: Path, verdicts: int, people_every: int, shadow_every: int) -> float:
    store = ViewStore(path, tenant="bench", topic="bench.events")
    store.open()
    started = time.monotonic()
    for start in range(0, verdicts, BATCH):
        store.apply(_rows(start, min(verdicts, start + BATCH), people_every, shadow_every),
                    [], {})
    store.close()
    return time.monotonic() - started


def _timed(call: Any) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def _measure(path: Path, rounds: int, policy: CalibrationPolicy) -> dict[str, Any]:
    store = ViewStore(path, tenant="bench", topic="bench.events")
    store.open()
    types = FeedbackRegistry()
    pairs = calibration_pairs(store, WORKSPACE, policy)
    reads: list[tuple[float, float]] = []
    floors: list[tuple[float, float]] = []
    for _ in range(rounds):
        reads.append(_timed(lambda: calibration_of(store, WORKSPACE, policy, types=types)))
        floors.append(_timed(lambda: calibrate(pairs, policy, types=types)))
    rows = calibration_of(store, WORKSPACE, policy, types=types)
    store.close()
    read_ms = statistics.median(w for w, _c in reads) * 1e3
    floor_ms = statistics.median(w for w, _c in floors) * 1e3
    return {"read_ms": round(read_ms, 2), "read_cpu_ms": round(
                statistics.median(c for _w, c in reads) * 1e3, 2),
            "floor_ms": round(floor_ms, 2), "floor_cpu_ms": round(
                statistics.median(c for _w, c in floors) * 1e3, 2),
            "ratio": round(read_ms / floor_ms, 2) if floor_ms else None,
            "pairs_measured": max((r.n for r in rows), default=0),
            "pairs_least": min((r.n for r in rows), default=0)}


def main(argv: list[str] | None = None) -> None:
    """Build a view per size and print the calibration read's cost beside its floor."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verdicts", default="100000,1000000",
                        help="comma-separated view sizes: a judge's verdicts (targets)")
    parser.add_argument("--people-every", type=int, default=20,
                        help="a person judges one target in this many")
    parser.add_argument("--shadow-every", type=int, default=0,
                        help="a second version judges one target in this many (0: none); "
                        "one that cannot fill its window makes a read walk all its pages")
    parser.add_argument("--window", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    policy = CalibrationPolicy(thresholds={"judge": 0.5}, window=args.window,
                               min_pairs=min(30, args.window))
    with tempfile.TemporaryDirectory(prefix="bench-calibration-") as tmp:
        for verdicts in (int(v) for v in args.verdicts.split(",")):
            path = Path(tmp) / f"view-{verdicts}.sqlite"
            built = _build(path, verdicts, args.people_every, args.shadow_every)
            print(json.dumps({"verdicts": verdicts, "rows": verdicts + verdicts //
                              args.people_every, "build_s": round(built, 1),
                              **_measure(path, args.rounds, policy)}), flush=True)
            path.unlink()


if __name__ == "__main__":
    main()
