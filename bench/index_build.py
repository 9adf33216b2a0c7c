"""`streams index build`'s rate, and a fresh process's first give_feedback with and without the
local index store.

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.index_build --envelopes 1000000 [--before /path/to/old/checkout]

1. Seeds a tenant with `--envelopes` envelopes (chains of an app event, a firing and a run,
   bench.handle_view's), written without index entries: a tenant from before the index.
2. Runs `streams index build --tenant bench` in a child process (its JSON line: events,
   entries, seconds, events/s), then again (idempotent: nothing to index).
3. give_feedback on a run in the middle of the log from a fresh process (bench.handle_view's
   probe: time from the client's construction, peak RSS, index records read), first with an
   empty state directory (the store is filled from the index partition), then with the state
   directory the first left (only the delta is read). With `--before`, the same probe run
   from another checkout (the code before the store), on the same tenant.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from bench.handle_view import TENANT, seed
from streams.settings import Settings


def _child(args: list[str], env: dict[str, str], cwd: str | None = None) -> dict[str, Any]:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          cwd=cwd, check=False)
    if done.returncode:
        raise SystemExit(f"{args} failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    """Seed, build, probe; print the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envelopes", type=int, default=1_000_000)
    parser.add_argument("--before", help="a checkout whose bench.handle_view probe runs too")
    args = parser.parse_args()
    settings = Settings.from_env(topic_prefix=f"ib{uuid.uuid4().hex[:6]}")
    targets = seed(settings, args.envelopes, indexed=False)
    figures: dict[str, Any] = {"prefix": settings.topic_prefix,
                               "envelopes": targets["envelopes"],
                               "seed_s": round(targets["seconds"], 1)}
    with tempfile.TemporaryDirectory() as build_state, \
            tempfile.TemporaryDirectory() as probe_state:
        env = {**os.environ, "STREAMS_TOPIC_PREFIX": settings.topic_prefix,
               "STREAMS_STATE_DIR": build_state,
               "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        figures["build"] = _child(["-m", "streams", "index", "build", "--tenant", TENANT], env)
        again = _child(["-m", "streams", "index", "build", "--tenant", TENANT], env)
        figures["build_again_events"] = again["events"]
        probe = ["-m", "bench.handle_view", "--probe",
                 json.dumps({"prefix": settings.topic_prefix, "targets": targets})]
        env["STREAMS_STATE_DIR"] = probe_state
        keys = ("first_feedback_s", "first_feedback_peak_rss_mb",
                "first_feedback_index_records_read", "first_feedback_event_records_read")
        cold = _child(probe, env)
        figures["fresh_process_empty_store"] = {k: cold[k] for k in keys}
        warm = _child(probe, env)
        figures["fresh_process_filled_store"] = {k: warm[k] for k in keys}
        if args.before:
            before_env = {**env, "PYTHONPATH": args.before}
            old = _child(probe, before_env, cwd=args.before)
            figures["fresh_process_before"] = {k: old[k] for k in keys}
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
