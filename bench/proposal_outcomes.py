"""Proposal outcomes scored by one worker, against a floor, and how the earlier-feedback
check scales with the log.

1. Worker: writes N traced proposals and their resolutions to a fresh tenant (each: a cause,
   a drafting rule's `rule_fired` and `run_started`, the run's `proposal_made`, a person's
   `proposal_resolved`), starts `streams worker --proposal-outcome` and times it from its
   first finished proposal-outcome run to its N-th (its stats lines count them). Each run
   goes the worker's whole way: the reactor forwards the resolution to the rules topic, the
   decider starts the run, the action catches the log up, folds what is new, decides (the
   earlier-feedback check included) and gives the ProposalOutcome, awaiting its delivery.
2. Floor: the same decisions and feedback in a plain loop, in process: decode the records,
   fold them into one ProposalFold, decide per resolution, encode each feedback record.
3. The action alone, in process: the handle's proposal fold, the decision and the feedback
   (delivered) per resolution, many in flight, without the reactor, decider and mirror.
4. Scaling: the cost of one decision, earlier-feedback check included, after a log of L
   envelopes, for the worker's incremental fold and for the whole-log fold the action used
   before (fold the ledger and scan every feedback per resolution).

    eval "$(deploy/stack.sh env)"    # or the shared stack's KAFKA_BOOTSTRAP_SERVERS etc.
    .venv/bin/python -m bench.proposal_outcomes --proposals 3000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from rich.console import Console

from bench.writes import produce_envelope
from streams.adapters.avro.codec import envelope_from_record
from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.admin import TenantAdmin
from streams.adapters.kafka.config import producer_config
from streams.core.actors import UserActor
from streams.core.events import (
    AppEvent,
    Change,
    Envelope,
    FeedbackGiven,
    ProposalMade,
    ProposalResolved,
)
from streams.core.feedback import value_record
from streams.core.proposals import EVALUATOR, PROPOSAL_OUTCOME, ProposalFold, decide, fold_ledger
from streams.core.rules import Rule, RuleEngine, on, run
from streams.core.runs import fire_envelopes, rule_actor
from streams.core.tenancy import tenant_topics
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.root import Runtime
from streams.settings import Settings

console = Console(stderr=True)
REPO = Path(__file__).resolve().parent.parent
DRAFT = "bench:draft"
ADA = UserActor(id="ada")
_ENGINE = RuleEngine([Rule(name=DRAFT, when=on("bench:ask"), then=run("draft"))])


def story(tenant: str, n: int, resolve: bool = True) -> list[Envelope]:
    """N traced proposals, each resolved by a person (accepted, edited or rejected)."""
    out: list[Envelope] = []
    for i in range(n):
        cause = Envelope.new(AppEvent(name="bench:ask", data={"i": i}), tenant=tenant,
                             workspace="bench", actor=ADA)
        [fire] = _ENGINE.evaluate(cause)
        fired, started = fire_envelopes(fire, cause)  # type: ignore[arg-type]
        run_id = started.event.run_id  # type: ignore[attr-defined]
        proposal = started.follow(ProposalMade(
            proposal_id=f"p{i}", artifact_id=f"a{i % 50}", kind="runbook",
            change=Change(set={"when": f"v{i}"}), run_id=run_id), actor=rule_actor(DRAFT))
        out += [cause, fired, started, proposal]
        if resolve:
            kind = i % 3
            out.append(proposal.follow(ProposalResolved(
                proposal_id=f"p{i}", resolution="rejected" if kind == 2 else "accepted",
                changes=Change(set={"note": "n"}) if kind == 1 else None), actor=ADA))
    return out


def produce(settings: Settings, serde: AvroSerde, topic: str,
            envelopes: list[Envelope]) -> list[bytes]:
    producer = Producer(producer_config(settings, **{"linger.ms": 20}))
    values = []
    for envelope in envelopes:
        values.append(produce_envelope(producer, serde, topic, envelope))
    producer.flush(60)
    return values


def floor(serde: AvroSerde, topic: str, values: list[bytes]) -> float:
    """Decode, fold, decide per resolution, encode each feedback: no broker, one loop."""
    start = time.perf_counter()
    fold = ProposalFold()
    given = 0
    for value in values:
        envelope = envelope_from_record(serde.decode(value, topic))
        fold.add(envelope)
        if isinstance(envelope.event, ProposalResolved):
            decision = fold.decide(envelope)
            if decision.score:
                assert decision.feedback is not None and decision.target is not None
                feedback = envelope.follow(FeedbackGiven(
                    feedback_type=PROPOSAL_OUTCOME, target=decision.target,
                    value=value_record(decision.feedback)), actor=EVALUATOR)
                serde.encode_envelope(feedback, topic)
                fold.add(feedback)
                given += 1
    elapsed = time.perf_counter() - start
    console.print(f"  floor gave {given} outcomes")
    return given / elapsed


def worker_rate(settings: Settings, n: int) -> tuple[float, float]:
    log_path = Path(tempfile.mkstemp(prefix="bench-outcomes-", suffix=".log")[1])
    env = settings.child_env()
    started = time.monotonic()
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "streams", "worker", "--proposal-outcome",
             "--stats-interval", "0.2", "--cursor", f"bench-{uuid.uuid4().hex[:6]}"],
            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    first = last = None
    try:
        while time.monotonic() - started < 900:
            lines = [x for x in log_path.read_text(errors="replace").splitlines()
                     if '"rules"' in x]
            if lines:
                stats = json.loads(lines[-1][lines[-1].index("{"):])["rules"]
                now = time.monotonic()
                if stats["succeeded"] and first is None:
                    first = (now, stats["succeeded"])
                if stats["succeeded"] >= n:
                    last = now
                    break
            if worker.poll() is not None:
                raise SystemExit(f"worker exited {worker.returncode}; see {log_path}")
            time.sleep(0.05)
    finally:
        worker.terminate()
        worker.wait(30)
    if first is None or last is None:
        raise SystemExit(f"worker did not finish; see {log_path}")
    return (n - first[1]) / max(last - first[0], 1e-9), first[0] - started


def action_rate(settings: Settings, serde: AvroSerde, n: int, in_flight: int) -> float:
    """The action's own path in process, on a tenant of its own: for each of N resolutions,
    the handle's proposal fold (catch-up to the log's end, fold what is new), the decision
    and the feedback, delivered; `in_flight` at once (the executor's limit is
    STREAMS_MAX_CONCURRENT_RUNS)."""
    TenantAdmin(settings).create_tenant("action")
    envelopes = story("action", n)
    produce(settings, serde, tenant_topics("action", settings.topic_prefix).events, envelopes)
    resolutions = [e for e in envelopes if isinstance(e.event, ProposalResolved)]
    client = StreamsClient(Runtime(settings))
    ws = client.workspace("action", "bench", actor=EVALUATOR)

    async def run_all() -> float:
        await ws.proposal_fold()  # the first read of the log is the worker's start-up
        gate = asyncio.Semaphore(in_flight)

        async def one(resolved: Envelope) -> None:
            async with gate:
                decision = (await ws.proposal_fold()).decide(resolved)
                assert decision.feedback is not None and decision.target is not None
                await ws.give_feedback(decision.feedback, on=decision.target)

        start = time.perf_counter()
        await asyncio.gather(*(one(r) for r in resolutions))
        return len(resolutions) / (time.perf_counter() - start)

    try:
        return asyncio.run(run_all())
    finally:
        client.close()


def scaling(sizes: list[int], per: int = 200) -> list[tuple[int, float, float]]:
    """(log envelopes, µs per decision with the incremental fold, µs with whole-log
    folds) after a log of each size."""
    rows = []
    for n in sizes:
        log = story("bench", n // 5)
        fold = ProposalFold()
        fold.extend(log)
        extra = story("bench", per)  # new proposals, resolved after the log
        start = time.perf_counter()
        for i in range(0, len(extra), 5):
            fold.extend(extra[i:i + 5])  # what a catch-up hands the fold
            fold.decide(extra[i + 4])
        incremental = (time.perf_counter() - start) / per * 1e6
        whole_runs = max(3, min(per, 2_000_000 // max(n, 1)))
        start = time.perf_counter()
        for i in range(whole_runs):
            envelopes = log + extra[:5 * (i + 1)]
            decide(fold_ledger(envelopes), envelopes, extra[5 * i + 4])
        whole = (time.perf_counter() - start) / whole_runs * 1e6
        rows.append((len(log), incremental, whole))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proposals", type=int, default=3000)
    parser.add_argument("--in-flight", type=int, default=256,
                        help="resolutions in flight in the in-process action measurement")
    parser.add_argument("--sizes", default="1000,10000,100000",
                        help="log sizes (envelopes) of the scaling measurement")
    args = parser.parse_args()
    settings = Settings.from_env(topic_prefix=f"bench{uuid.uuid4().hex[:6]}")
    serde = AvroSerde(settings)
    admin = TenantAdmin(settings)
    admin.create_tenant("bench")
    try:
        measure(settings, serde, args)
    finally:
        # A shared broker holds a file per partition: leave no bench topics behind.
        for tenant in ("bench", "action"):
            admin.delete_tenant(tenant)
        for future in admin.client.delete_topics(
                [f"{settings.topic_prefix}._control"]).values():  # the worker's
            with contextlib.suppress(Exception):
                future.result()


def measure(settings: Settings, serde: AvroSerde, args: argparse.Namespace) -> None:
    """The four measurements, each printed as it finishes."""
    topic = tenant_topics("bench", settings.topic_prefix).events
    console.print(f"producing {args.proposals} traced proposals and their resolutions")
    values = produce(settings, serde, topic, story("bench", args.proposals))
    floor_rate = floor(serde, topic, values)
    console.print(f"  floor (decode, fold, decide, encode feedback): {floor_rate:,.0f}/s")
    rate, startup = worker_rate(settings, args.proposals)
    console.print(f"  worker: {rate:,.0f} resolutions/s (start-up {startup:.1f}s)")
    print(f"proposals={args.proposals} worker_rate={rate:.0f}/s floor_rate={floor_rate:.0f}/s "
          f"ratio={rate / floor_rate:.3f} goal=1000/s", flush=True)
    action = action_rate(settings, serde, args.proposals, args.in_flight)
    print(f"action_in_process={action:.0f}/s in_flight={args.in_flight}", flush=True)
    for size, incremental, whole in scaling([int(s) for s in args.sizes.split(",")]):
        print(f"log={size} decision_incremental={incremental:.0f}us "
              f"decision_whole_log={whole:.0f}us", flush=True)

if __name__ == "__main__":
    main()
