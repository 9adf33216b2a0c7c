"""Proposal outcomes scored by one worker, against a floor, and how the earlier-feedback
check scales with the log.

1. Worker: writes N traced proposals and their resolutions to a fresh tenant (each: a cause,
   a drafting rule's `rule_fired` and `run_started`, the run's `proposal_made`, a person's
   `proposal_resolved`), starts `streams worker --proposal-outcome` and times it from its
   first finished proposal-outcome run to its N-th (its stats lines count them), with its
   CPU seconds per resolution between them. Each run goes the worker's whole way: the
   reactor forwards the resolution to the rules topic, the decider starts the run, the
   action catches the log up, folds what is new, decides (the earlier-feedback check
   included) and gives the ProposalOutcome, awaiting its delivery.
2. Floor: the same decisions and feedback in a plain loop, in process, over the same
   records: decode each with the fast codec (fastavro, the writer's schema cached), build an
   envelope only for what the fold needs whole and fold the rest by its place in its chain,
   decide per resolution, encode each feedback record; its CPU per resolution too.
   `--rounds` rounds alternate floor and worker, each on a fresh tenant; a line per round,
   then the medians (rates, ratio, CPU µs per resolution of both and their ratio).
3. The action alone, in process: the handle's proposal fold, the decision and the feedback
   (delivered) per resolution, many in flight, without the reactor, decider and mirror.
4. Scaling: the cost of one decision, earlier-feedback check included, after a log of L
   envelopes, for the worker's incremental fold and for the whole-log fold the action used
   before (fold the ledger and scan every feedback per resolution).

    eval "$(deploy/stack.sh env)"    # or the shared stack's KAFKA_BOOTSTRAP_SERVERS etc.
    .venv/bin/python -m bench.proposal_outcomes --proposals 3000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from rich.console import Console

from bench.served import cpu_seconds
from bench.writes import produce_envelope
from streams.adapters.avro.codec import envelope_from_record
from streams.adapters.avro.fast import FastCodec
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
from streams.core.proposals import (
    EVALUATOR,
    PROPOSAL_OUTCOME,
    ProposalFold,
    decide,
    fold_ledger,
    folded_whole,
)
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


def floor(codec: FastCodec, serde: AvroSerde, topic: str,
          values: list[bytes]) -> tuple[float, float]:
    """Decode, fold, decide per resolution, encode each feedback: no broker, one loop, the
    way the worker's folds read (the fast codec; an envelope only for what the fold needs
    whole, the rest folded by its place in its chain). (resolutions/s, CPU s per
    resolution)."""
    start, cpu = time.perf_counter(), time.process_time()
    fold = ProposalFold()
    given = resolutions = 0
    for value in values:
        _writer, record = codec.decode(value)
        head = record["envelope"]
        kind = head["event_type"]
        if not folded_whole(kind, record.get("feedback_type")):
            fold.link(head["event_id"], kind, head["correlation_id"], head.get("causation_id"))
            continue
        envelope = envelope_from_record(record)
        fold.add(envelope)
        if isinstance(envelope.event, ProposalResolved):
            resolutions += 1
            decision = fold.decide(envelope)
            if decision.score:
                assert decision.feedback is not None and decision.target is not None
                feedback = envelope.follow(FeedbackGiven(
                    feedback_type=PROPOSAL_OUTCOME, target=decision.target,
                    value=value_record(decision.feedback)), actor=EVALUATOR)
                serde.encode_envelope(feedback, topic)
                fold.add(feedback)
                given += 1
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    console.print(f"  floor gave {given} outcomes")
    return resolutions / elapsed, cpu / max(resolutions, 1)


def worker_rate(settings: Settings, n: int) -> tuple[float, float, float]:
    """`streams worker --proposal-outcome` over the tenants under the prefix: (resolutions/s
    from its first finished run to its N-th, seconds to its first, its CPU s per
    resolution between them)."""
    log_path = Path(tempfile.mkstemp(prefix="bench-outcomes-", suffix=".log")[1])
    env = settings.child_env()
    started = time.monotonic()
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "streams", "worker", "--proposal-outcome",
             "--stats-interval", "0.2", "--cursor", f"bench-{uuid.uuid4().hex[:6]}"],
            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    first: tuple[float, int, float] | None = None
    last: tuple[float, float] | None = None
    try:
        while time.monotonic() - started < 900:
            lines = [x for x in log_path.read_text(errors="replace").splitlines()
                     if '"rules"' in x]
            if lines:
                stats = json.loads(lines[-1][lines[-1].index("{"):])["rules"]
                now = time.monotonic()
                if stats["succeeded"] and first is None:
                    first = (now, stats["succeeded"], cpu_seconds(worker.pid))
                if stats["succeeded"] >= n:
                    last = (now, cpu_seconds(worker.pid))
                    break
            if worker.poll() is not None:
                raise SystemExit(f"worker exited {worker.returncode}; see {log_path}")
            time.sleep(0.05)
    finally:
        worker.terminate()
        worker.wait(30)
    if first is None or last is None:
        raise SystemExit(f"worker did not finish; see {log_path}")
    done = n - first[1]
    return (done / max(last[0] - first[0], 1e-9), first[0] - started,
            (last[1] - first[2]) / max(done, 1))


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
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating rounds of the floor and the worker")
    args = parser.parse_args()
    settings = Settings.from_env(topic_prefix=f"bench{uuid.uuid4().hex[:6]}")
    serde = AvroSerde(settings)
    admin = TenantAdmin(settings)
    try:
        measure(settings, serde, args)
    finally:
        # A shared broker holds a file per partition: leave no bench topics behind.
        for tenant in ("action", *(f"bench-r{r}" for r in range(args.rounds))):
            with contextlib.suppress(Exception):
                admin.delete_tenant(tenant)
        for future in admin.client.delete_topics(
                [f"{settings.topic_prefix}._control"]).values():  # the worker's
            with contextlib.suppress(Exception):
                future.result()


def measure(settings: Settings, serde: AvroSerde, args: argparse.Namespace) -> None:
    """The measurements, each printed as it finishes: `--rounds` alternating rounds of the
    floor and the worker, each on a fresh tenant of the same story, then their medians."""
    admin = TenantAdmin(settings)
    codec = Runtime(settings).codec
    rows = []
    for r in range(args.rounds):
        tenant = f"bench-r{r}"
        admin.create_tenant(tenant)
        topic = tenant_topics(tenant, settings.topic_prefix).events
        console.print(f"round {r + 1}: producing {args.proposals} traced proposals and their "
                      "resolutions")
        values = produce(settings, serde, topic, story(tenant, args.proposals))
        floor_rate, floor_cpu = floor(codec, serde, topic, values)
        console.print(f"  floor (decode, fold, decide, encode feedback): {floor_rate:,.0f}/s")
        rate, startup, cpu = worker_rate(settings, args.proposals)
        admin.delete_tenant(tenant)  # the next round's worker reads every tenant's log
        console.print(f"  worker: {rate:,.0f} resolutions/s (start-up {startup:.1f}s)")
        print(f"round={r + 1} worker_rate={rate:.0f}/s ({cpu * 1e6:,.0f} us CPU) "
              f"floor_rate={floor_rate:.0f}/s ({floor_cpu * 1e6:,.0f} us CPU) "
              f"ratio={rate / floor_rate:.3f} startup={startup:.1f}s", flush=True)
        rows.append((rate, floor_rate, rate / floor_rate, cpu, floor_cpu))
    med = [statistics.median(col) for col in zip(*rows, strict=True)]
    print(f"proposals={args.proposals} rounds={args.rounds} worker_rate={med[0]:.0f}/s "
          f"floor_rate={med[1]:.0f}/s ratio={med[2]:.3f} worker_cpu={med[3] * 1e6:,.0f}us "
          f"floor_cpu={med[4] * 1e6:,.0f}us cpu_ratio={med[4] / med[3]:.3f} "
          "goal=0.6 of the floor and 2000/s", flush=True)
    action = action_rate(settings, serde, args.proposals, args.in_flight)
    print(f"action_in_process={action:.0f}/s in_flight={args.in_flight}", flush=True)
    for size, incremental, whole in scaling([int(s) for s in args.sizes.split(",")]):
        print(f"log={size} decision_incremental={incremental:.0f}us "
              f"decision_whole_log={whole:.0f}us", flush=True)

if __name__ == "__main__":
    main()
