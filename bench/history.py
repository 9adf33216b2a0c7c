"""Reads that do not grow with history: the handle's reads on a tenant of N envelopes, each in
a fresh process, from the tenant's materialized view.

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.history --envelopes 100000
    .venv/bin/python -m bench.history --envelopes 1000000 --fold-limit 0

1. Seeds a tenant (3 partitions) with `--envelopes` envelopes: chains of an app event, its
   rule firing and its run (two rules, alternating), and feedback (`triage_quality`, by one
   of ten users) on 5% of the runs. Records are encoded from templates with the fast codec
   and produced in batches (no pydantic object per record), so seeding takes seconds, not
   minutes; the floor is that produce rate.
2. `build`: in a fresh process with an empty state directory, the view's first build (an
   offline step: `build_view`, what `streams views build` runs), its rate in envelopes/s and
   the process's peak RSS. The floor: the same records read and decoded by the fast codec
   to plain dicts, nothing stored.
3. The index's first build over the log (`streams index build`: what give_feedback and a
   machine without the view look up; a tenant seeded without index entries needs it once),
   in its own process, printed beside the view figures (`--no-index-build` leaves it out:
   no read below uses the index).
4. Each read in a fresh process, with a state directory of its own holding only the built
   view (so the index's local store starts empty, as on a machine that never read the
   index; one probe's reads do not warm the next one's): time of the first call (from the
   client's construction: the view's catch-up of what was appended since, the query, the
   decoding), the process's peak RSS, and the median and p99 of `--warm` further calls,
   then of `--warm` more after `gc.freeze()` (`_frozen`: as in a process that froze its
   heap, as `streams serve` does after its start-up), each with the full garbage
   collections that ran meanwhile (`full_gcs`, `full_gc_max_ms`): `runs(rule, limit=1)`, `runs(rule,
   limit=50)`, a participant's feedback of a type (all of it: 1 in 10 of the feedback, so
   it grows with the log) and its first page of 100,
   one `run_record`, one chain's `chain_events`, the first and next page of 50 runs by cursor,
   and `why` of a rule on an event it fired on (`why_fired`: the event, its firing and its
   run's events read) and on one its filter leaves out (`why_filtered_out`). The seeded
   firings and runs carry the ids a worker derives, so `why` finds them. Then a queue of the
   first rule's runs: every item id (`queue_items_all`, what a sampled queue's progress
   reads) against its count in the view (`queue_items_count`, what the others' progress
   reads since this stop). Then the same reads over REST (`rest`): `streams serve` started
   on a state directory holding only the view, `GET .../runs?rule=&limit=1` and `limit=50`,
   `GET .../runs/{id}`, `GET .../chains/{id}`: first call after `/readyz`, median and p99 of
   `--warm` more, the next page of 50 by cursor, and the server's peak RSS; then again with
   `STREAMS_GC_FREEZE=false` (`rest_gc_unfrozen`: the server without its frozen heap).
5. With `--fold-limit N` (default 200000) and N or fewer envelopes: the whole-log fold's
   answer to `runs(rule, limit=1)` (`latest_runs(ws.read())`, what runs() did before the view)
   in a fresh process, for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from bench.reads import decode_topic
from bench.served import start_serve, until_ready
from bench.surfaces import _free_port
from streams.adapters.kafka.admin import TenantAdmin
from streams.adapters.kafka.log import envelope_headers
from streams.core.actors import AgentActor, UserActor
from streams.core.events import AppEvent, Envelope, FeedbackGiven, RuleFired, RunStarted
from streams.core.feedback import value_record
from streams.core.ids import fired_event_id, firing_id, run_id_of, started_event_id
from streams.core.queues import Entry, queue_from_dict
from streams.core.rules import F, Rule, on, run
from streams.core.runs import latest_runs
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.runtime.client.keys import KeyStore
from streams.runtime.client.views import build_view, view_path
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.root import Runtime
from streams.settings import Settings

TENANT = "history"
RULES = ("ops:error-spike", "ops:latency")
FEEDBACK_EVERY = 20  # feedback on 1 run in 20: 5%


def _peak_of(pid: int) -> float:
    """Process `pid`'s peak RSS in MB (VmHWM)."""
    with open(f"/proc/{pid}/status") as status:
        high = next(line for line in status if line.startswith("VmHWM"))
    return round(int(high.split()[1]) / 1024, 1)


def _peak_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _templates(runtime: Runtime, topic: str) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Per event kind, its writer schema and a decoded record to copy (the schemas are
    registered by encoding one real envelope each)."""
    app = Envelope.new(AppEvent(name="ops:error_spike", data={"service": "api"}),
                       tenant=TENANT, workspace="prod", actor=UserActor(id="app"))
    actor = AgentActor(id="rule:ops:error-spike")
    fired = Envelope.new(RuleFired(firing_id="f", rule=RULES[0], matched=[app.event_id]),
                         tenant=TENANT, workspace="prod", actor=actor,
                         correlation_id=app.event_id, causation_id=app.event_id)
    run = Envelope.new(RunStarted(run_id="r", rule=RULES[0], action="triage", firing_id="f"),
                       tenant=TENANT, workspace="prod", actor=actor,
                       correlation_id=app.event_id, causation_id=fired.event_id)
    feedback = Envelope.new(
        FeedbackGiven(feedback_type="triage_quality", target=RunTarget(run_id="r"),
                      value=value_record(TriageQuality(correct=True, severity="high"))),
        tenant=TENANT, workspace="prod", actor=UserActor(id="u0"),
        correlation_id=app.event_id, causation_id=run.event_id)
    out = {}
    for name, envelope in (("app", app), ("fired", fired), ("run", run),
                           ("feedback", feedback)):
        writer, record = runtime.codec.decode(runtime.serde.encode_envelope(envelope, topic))
        out[name] = (writer, record)
    return out


def _record(template: dict[str, Any], event_id: str, time_ms: int, correlation: str,
            causation: str | None, **body: Any) -> dict[str, Any]:
    record = copy.copy(template)
    head = dict(template["envelope"])
    head.update(event_id=event_id, time=time_ms, correlation_id=correlation,
                causation_id=causation)
    record["envelope"] = head
    record.update(body)
    return record


def seed(settings: Settings, envelopes: int) -> dict[str, Any]:
    """Write the tenant's log fast; returns the probes' targets and the seeding figures."""
    TenantAdmin(settings).create_tenant(TENANT, 3)
    runtime = Runtime(settings)
    topic = tenant_topics(TENANT, settings.topic_prefix).events
    templates = _templates(runtime, topic)
    producer = runtime.producer_of_own(**{"linger.ms": 50, "batch.size": 1_000_000,
                                          "compression.type": "lz4"})
    headers = {name: envelope_headers(Envelope.new(
        AppEvent(name="x"), tenant=TENANT, workspace="prod", actor=UserActor(id="app")))
        for name in templates}
    for name in templates:
        headers[name] = [(k, v) for k, v in headers[name] if k != "event_type"] + [
            ("event_type", templates[name][1]["envelope"]["event_type"].encode())]
    chains = max(1, int(envelopes / (3 + 1 / FEEDBACK_EVERY)))
    base = int(time.time() * 1000) - 4 * chains
    encode = runtime.codec.encode
    started = time.monotonic()
    written = 0
    middle = chains // 2
    for i in range(chains):
        t = base + 4 * i
        head = f"evt_{i}_a"
        rule = RULES[i % 2]
        # The ids a worker derives (so `why` finds the firing as it would in production).
        firing = firing_id(rule, head)
        fired_id, run_id = fired_event_id(firing), run_id_of(firing)
        started_id = started_event_id(run_id)
        records = [
            ("app", _record(templates["app"][1], head, t, head, None,
                            data_json=json.dumps({"service": f"svc{i % 50}"}))),
            ("fired", _record(templates["fired"][1], fired_id, t + 1, head, head,
                              firing_id=firing, rule=rule, matched=[head])),
            ("run", _record(templates["run"][1], started_id, t + 2, head, fired_id,
                            run_id=run_id, rule=rule, firing_id=firing)),
        ]
        if i % FEEDBACK_EVERY == 0:
            fb = _record(templates["feedback"][1], f"evt_{i}_q", t + 3, head, started_id,
                         target={"kind": "run", "id": run_id})
            who = f"u{(i // FEEDBACK_EVERY) % 10}"
            fb["envelope"]["actor"] = {"kind": "user", "id": who, "version": None}
            records.append(("feedback", fb))
        for name, record in records:
            value = encode(templates[name][0], record)
            while True:
                try:
                    producer.produce(topic, value, head.encode(), headers=headers[name])
                    break
                except BufferError:
                    producer.poll(0.05)
            written += 1
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0
    seconds = time.monotonic() - started
    runtime.close()
    return {"envelopes": written, "seed_s": round(seconds, 1),
            "seed_rate_per_s": round(written / seconds),
            "run": run_id_of(firing_id(RULES[middle % 2], f"evt_{middle}_a")),
            "chain": f"evt_{middle}_a", "rule": RULES[middle % 2],
            "participant": f"user:u{(middle // FEEDBACK_EVERY) % 10}"}


# -- the probes, each run in a fresh process --------------------------------------------------


def _decode_floor(settings: Settings) -> dict[str, Any]:
    """The records read and decoded to plain dicts by the fast codec, nothing stored."""
    runtime = Runtime(settings)
    started = time.monotonic()
    n = decode_topic(runtime, tenant_topics(TENANT, settings.topic_prefix).events)
    seconds = time.monotonic() - started
    runtime.close()
    return {"records": n, "s": round(seconds, 2), "rate_per_s": round(n / seconds),
            "peak_rss_mb": _peak_mb()}


def _build(settings: Settings) -> dict[str, Any]:
    runtime = Runtime(settings)
    started = time.monotonic()
    done = build_view(runtime, TENANT)
    seconds = time.monotonic() - started
    runtime.close()
    return {"applied": done.applied, "skipped": done.skipped, "s": round(seconds, 2),
            "rate_per_s": round(done.applied / seconds), "peak_rss_mb": _peak_mb()}


def _index_catch_up(settings: Settings) -> dict[str, Any]:
    client = StreamsClient(Runtime(settings))
    index = client.tenant_index(TENANT)
    started = time.monotonic()
    index.open()
    # What `streams index build` runs: a look-up's catch-up stops at
    # STREAMS_INDEX_CATCH_UP_LIMIT events (IndexBehind) and says to run it.
    index.build()
    client.runtime.flush()
    seconds = time.monotonic() - started
    client.close()
    client.runtime.close()
    return {"s": round(seconds, 1), "peak_rss_mb": _peak_mb()}


async def _probe(settings: Settings, what: str, targets: dict[str, Any],
                 warm: int) -> dict[str, Any]:
    started = time.monotonic()
    client = StreamsClient(Runtime(settings))
    ws = client.workspace(TENANT, "prod", actor=UserActor(id="ada"))
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "runs_limit_1": lambda: ws.runs(rule=RULES[0], limit=1),
        "runs_limit_50": lambda: ws.runs(rule=RULES[0], limit=50),
        "feedback_of_participant": lambda: ws.feedback(feedback_type="triage_quality",
                                                       participant=targets["participant"]),
        "feedback_page_100": lambda: _feedback_page(ws, targets["participant"]),
        "run_record": lambda: ws.run_record(targets["run"]),
        "chain_events": lambda: ws.chain_events(targets["chain"]),
        "fold_runs_limit_1": lambda: _fold_runs(ws),
        # A rule that fired on the event (its firing and run found, the chain read), and
        # one whose filter leaves it out (the event read, the rule's checks re-run).
        # A queue of a rule's runs: its progress reads every item id (a sampled queue's,
        # one entered by verdicts) or counts them in the view (the rest).
        "queue_items_all": lambda: ws.queue_items_all(_runs_entry()),
        "queue_items_count": lambda: ws.queue_items_count(_runs_entry()),
        "why_fired": lambda: ws.why(_rule(targets["rule"]), targets["chain"]),
        "why_filtered_out": lambda: ws.why(
            _rule(targets["rule"], where={"service": "none"}), targets["chain"]),
    }
    if what == "pages_of_50":
        first = await ws.runs_page(rule=RULES[0], limit=50)
        first_s = time.monotonic() - started
        t = time.monotonic()
        second = await ws.runs_page(rule=RULES[0], limit=50, cursor=first.next_cursor)
        next_s = time.monotonic() - t
        out: dict[str, Any] = {"first_s": round(first_s, 3), "next_page_s": round(next_s, 4),
                               "rows": len(first.runs) + len(second.runs),
                               "peak_rss_mb": _peak_mb()}
        client.close()
        client.runtime.close()
        return out
    call = calls[what]
    answer = await call()
    first_s = time.monotonic() - started
    out = {"first_s": round(first_s, 3), "peak_rss_mb": _peak_mb(),
           "rows": len(answer) if isinstance(answer, list) else 1}
    if warm:
        out.update(await _warm(call, warm))
        # Then as in a process that froze its start-up heap (what `streams serve` does,
        # Runtime.started): a full garbage collection no longer walks it.
        gc.collect()
        gc.freeze()
        out.update({f"{k}_frozen": v for k, v in (await _warm(call, warm)).items()})
    client.close()
    client.runtime.close()
    return out


async def _warm(call: Callable[[], Awaitable[Any]], calls: int, *,
                collections: bool = True) -> dict[str, float]:
    """Median and p99 in ms of `calls` calls, and (`collections`) the full garbage
    collections (generation 2) this process ran meanwhile: how many, and the longest in
    ms."""
    full: list[float] = []
    began = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                began[0] = time.perf_counter()
            else:
                full.append(time.perf_counter() - began[0])

    gc.callbacks.append(timed)
    times = []
    try:
        for _ in range(calls):
            t = time.monotonic()
            await call()
            times.append(time.monotonic() - t)
    finally:
        gc.callbacks.remove(timed)
    out = {"warm_median_ms": round(statistics.median(times) * 1000, 2),
           "warm_p99_ms": round(statistics.quantiles(times, n=100)[98] * 1000, 2)}
    if collections:
        out.update(full_gcs=len(full), full_gc_max_ms=round(max(full, default=0) * 1000, 1))
    return out


async def _rest(settings: Settings, targets: dict[str, Any], warm: int) -> dict[str, Any]:
    """The same reads over REST: `streams serve` started on the probe's state directory (the
    view built, nothing else), a key made, then each route's first call after /readyz and
    `warm` further calls; the server's peak RSS at the end."""
    keys = KeyStore(Runtime(settings))
    keys.start()
    token = keys.create(TENANT, UserActor(id="ada"), {"read"})[1]
    keys.close()
    port = _free_port()
    server = await start_serve(settings, port)
    base = f"http://127.0.0.1:{port}/v1/workspaces/{TENANT}.prod"
    out: dict[str, Any] = {}
    try:
        await until_ready(f"http://127.0.0.1:{port}")
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                     timeout=120) as http:

            async def get(path: str, **params: Any) -> dict[str, Any]:
                answer = await http.get(f"{base}{path}", params=params)
                if answer.status_code != 200:
                    raise SystemExit(f"GET {path} answered {answer.status_code}: "
                                     f"{answer.text[:500]}")
                body: dict[str, Any] = answer.json()
                return body

            routes: dict[str, Callable[[], Awaitable[Any]]] = {
                "rest_runs_limit_1": lambda: get("/runs", rule=RULES[0], limit=1),
                "rest_runs_limit_50": lambda: get("/runs", rule=RULES[0], limit=50),
                "rest_run": lambda: get(f"/runs/{targets['run']}"),
                "rest_chain": lambda: get(f"/chains/{targets['chain']}"),
            }
            for name, call in routes.items():
                t = time.monotonic()
                await call()
                # The server's collections are not this process's: none counted here.
                out[name] = {"first_s": round(time.monotonic() - t, 3),
                             **await _warm(call, warm, collections=False)}
            first = await get("/runs", rule=RULES[0], limit=50)
            t = time.monotonic()
            second = await get("/runs", rule=RULES[0], limit=50, cursor=first["next_cursor"])
            out["rest_next_page_of_50"] = {"s": round(time.monotonic() - t, 4),
                                           "rows": len(second["runs"])}
        out["server_peak_rss_mb"] = _peak_of(server.pid)
    finally:
        server.terminate()
        await server.wait()
    return out


def _runs_entry() -> Entry:
    """What a queue of the first rule's runs enters by."""
    return queue_from_dict({"name": "runs", "enters": {"runs_of": RULES[0]},
                            "feedback_types": ["triage_quality"]}).enters


def _rule(name: str, where: dict[str, Any] | None = None) -> Rule:
    """The seeded rule `name` as a Rule (on the seeded app events), with `where` filters."""
    when = on("ops:error_spike")
    for path, value in (where or {}).items():
        when = when.where(F.data[path].eq(value))
    return Rule(name=name, when=when, then=run("triage"))


async def _feedback_page(ws: Any, participant: str) -> list[Any]:
    page = await ws.feedback_page(feedback_type="triage_quality", participant=participant,
                                  limit=100)
    return list(page.feedback)


async def _fold_runs(ws: Any) -> list[Any]:
    return latest_runs(await ws.read(), rule=RULES[0], limit=1)


def _child(args: argparse.Namespace, settings: Settings) -> None:
    targets = json.loads(args.targets)
    if args.probe == "build":
        out = _build(settings)
    elif args.probe == "decode_floor":
        out = _decode_floor(settings)
    elif args.probe == "index_catch_up":
        out = _index_catch_up(settings)
    elif args.probe in ("rest", "rest_gc_unfrozen"):
        out = asyncio.run(_rest(settings, targets, args.warm))
    else:
        out = asyncio.run(_probe(settings, args.probe, targets, args.warm))
    print(json.dumps(out))


def _fresh(probe: str, env: dict[str, str], targets: dict[str, Any], warm: int) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "bench.history", "--probe", probe, "--targets",
         json.dumps(targets), "--warm", str(warm)],
        env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"probe {probe} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envelopes", type=int, default=100_000)
    parser.add_argument("--warm", type=int, default=200, help="warm calls per read")
    parser.add_argument("--fold-limit", type=int, default=200_000,
                        help="run the whole-log fold for comparison up to this many envelopes")
    parser.add_argument("--no-index-build", action="store_true",
                        help="leave out the index's first build (no read probe uses it)")
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    parser.add_argument("--targets", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        _child(args, Settings.from_env())
        return
    state = tempfile.mkdtemp(prefix="bench-history-")
    settings = Settings.from_env(topic_prefix=f"bh{uuid.uuid4().hex[:8]}", state_dir=state,
                                 feedback_timeout=3600.0)
    env = {**os.environ, **settings.child_env()}
    report: dict[str, Any] = {"envelopes_asked": args.envelopes,
                              "prefix": settings.topic_prefix}
    print(f"seeding {args.envelopes} envelopes ...", file=sys.stderr)
    targets = seed(settings, args.envelopes)
    report["seed"] = {k: targets[k] for k in ("envelopes", "seed_s", "seed_rate_per_s")}
    print(json.dumps(report["seed"]), file=sys.stderr)
    steps = [("decode_floor", 0), ("build", 0), *([] if args.no_index_build else
                                                   [("index_catch_up", 0)]),
             ("runs_limit_1", args.warm), ("runs_limit_50", args.warm),
             ("feedback_of_participant", args.warm), ("feedback_page_100", args.warm),
             ("run_record", args.warm),
             ("chain_events", args.warm), ("pages_of_50", 0),
             ("why_fired", args.warm), ("why_filtered_out", args.warm),
             ("queue_items_all", 5), ("queue_items_count", args.warm), ("rest", args.warm),
             ("rest_gc_unfrozen", args.warm)]
    if targets["envelopes"] <= args.fold_limit:
        steps.append(("fold_runs_limit_1", 0))
    for probe, warm in steps:
        own = env if probe in _SHARED_STATE else _own_state(state, probe, env)
        if probe == "rest_gc_unfrozen":  # the server as it was before Runtime.started()
            own = {**own, "STREAMS_GC_FREEZE": "false"}
        report[probe] = _fresh(probe, own, targets, warm)
        print(f"{probe}: {json.dumps(report[probe])}", file=sys.stderr)
    view = view_path(settings, TENANT)
    report["view_file_mb"] = round(sum(
        os.path.getsize(f"{view}{s}") for s in ("", "-wal") if os.path.exists(f"{view}{s}"))
        / 2**20, 1)
    print(json.dumps(report, indent=1))
    TenantAdmin(settings).delete_tenant(TENANT)
    shutil.rmtree(state, ignore_errors=True)  # the view alone is 5 GB at 10M


# The steps that make or measure the shared state; every read probe has a state directory
# of its own (`_own_state`).
_SHARED_STATE = ("decode_floor", "build", "index_catch_up")


def _own_state(state: str, probe: str, env: dict[str, str]) -> dict[str, str]:
    """`env` with a state directory of the probe's own that shares only the built view (a
    link to it): the index's local store starts empty, as on a machine that has never read
    the index. Before, the probes shared one directory, and one probe's index reads filled
    the store the next one read (chain_events looked 0.17 s at 10M after run_record's
    probe had loaded its index partition; 15.9 s on its own)."""
    own = os.path.join(state, "probes", probe)
    os.makedirs(own, exist_ok=True)
    link = os.path.join(own, "views")
    if not os.path.lexists(link):
        os.symlink(os.path.join(state, "views"), link)
    return {**env, "STREAMS_STATE_DIR": own}


if __name__ == "__main__":
    main()
