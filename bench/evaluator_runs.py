"""Evaluator runs per second in one worker, against the run machinery alone and a floor.

On a fresh tenant of N `b:answer` events, one `streams worker --rules bench.evaluator_rules`
runs, in turn (each phase waits for the worker's stats to count its N runs):

1. `noop`: a rule whose action does nothing, live over the N answers: the run machinery
   alone (reactor, run_started read back, executor, the run's outcome written).
2. `judged`: an evaluator rule backfilled over them (`streams rules install --backfill`):
   per run the verdict looked up by its key (a miss: the index caught up), the judge called
   (`--judge-ms` of waiting, a model call's latency), the verdict recorded and given as
   feedback on the run.
3. `reused`: a second rule with the same evaluator, backfilled: every verdict found and
   given again, no judge call.

The floor: the records the judged phase writes per run (a verdict record, the feedback, the
run's outcome) encoded and produced in one loop with one producer, flushed once: what the
writes cost as fast as Python can make them. Each phase prints runs/s, the worker's CPU µs
per run, the ratio to the floor and the worker's resident memory after the phase (and its
peak); the log's counts are checked at the end (N verdict records, 2N feedback, every reused
run's output `reused`).

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.evaluator_runs --runs 2000 --judge-ms 0
    .venv/bin/python -m bench.evaluator_runs --runs 2000 --judge-ms 200
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from rich.console import Console

from bench.served import cpu_seconds
from bench.writes import produce_envelope
from streams.adapters.avro.codec import envelope_from_record
from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.admin import TenantAdmin
from streams.adapters.kafka.config import producer_config, reader_config
from streams.adapters.kafka.log import header_value, watermarks
from streams.core.actors import EvaluatorActor, UserActor
from streams.core.events import AppEvent, Envelope, FeedbackGiven, RunSucceeded
from streams.core.feedback import value_record
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.settings import Settings

console = Console(stderr=True)
REPO = Path(__file__).resolve().parent.parent
RULES = "bench.evaluator_rules"
TYPES = "streams.examples.ops"


def _produce(settings: Settings, topic: str, envelopes: list[Envelope],
             serde: AvroSerde) -> None:
    producer = Producer(producer_config(settings, **{"linger.ms": 20}))
    for envelope in envelopes:
        produce_envelope(producer, serde, topic, envelope)
    if producer.flush(120):
        raise SystemExit("the producer did not deliver everything within 120 s")


def answers(tenant: str, n: int) -> list[Envelope]:
    return [Envelope.new(AppEvent(name="b:answer", data={
        "text": f"{'right' if i % 3 else 'wrong'} answer {i}"}),
        tenant=tenant, workspace="bench", actor=UserActor(id="bench")) for i in range(n)]


def floor_rate(settings: Settings, serde: AvroSerde, tenant: str, n: int) -> float:
    """The judged phase's writes per run, encoded and produced as fast as one loop can."""
    topic = tenant_topics(tenant, settings.topic_prefix).events
    producer = Producer(producer_config(settings, **{"linger.ms": 20}))
    judge = EvaluatorActor(name="bench-judge", version="1")
    start = time.perf_counter()
    for i in range(n):
        run_id = f"run_floor_{i}"
        verdict = TriageQuality(correct=i % 3 != 0, severity="low")
        record = Envelope.new(AppEvent(name="streams:verdict", data={
            "key": f"bench-judge@1:{i:064x}", "value": verdict.model_dump(mode="json"),
            "evaluator": "bench-judge", "version": "1"}),
            tenant=tenant, workspace="bench", actor=judge)
        feedback = record.follow(FeedbackGiven(
            feedback_type="triage_quality", target=RunTarget(run_id=run_id),
            value=value_record(verdict)), actor=judge)
        done = record.follow(RunSucceeded(run_id=run_id, rule="b:floor", action="grade",
                                          attempt=1, output={"ok": True}),
                             actor=judge)
        for envelope in (record, feedback, done):
            produce_envelope(producer, serde, topic, envelope)
    if producer.flush(120):
        raise SystemExit("the floor's producer did not deliver everything within 120 s")
    return n / (time.perf_counter() - start)


def install(settings: Settings, tenant: str, name: str, action: str, *extra: str) -> None:
    handle, name_of_file = tempfile.mkstemp(prefix="bench-rule-", suffix=".json")
    os.close(handle)
    path = Path(name_of_file)
    path.write_text(json.dumps({"name": name, "when": {"on": "b:answer"},
                                "then": {"action": action}}))
    done = subprocess.run(
        [sys.executable, "-m", "streams", "rules", "install", str(path), "--tenant", tenant,
         "--workspace", "bench", "--rules", RULES, *extra],
        env=settings.child_env(STREAMS_FEEDBACK_MODULES=TYPES), cwd=REPO,
        capture_output=True, text=True, timeout=900, check=False)
    path.unlink()
    if done.returncode != 0:
        raise SystemExit(f"installing {name} failed:\n{done.stderr[-3000:]}")


_STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


class Worker:
    """`streams worker` with the bench's rules. Its stats lines (every 0.2 s, stamped with
    the wall clock) say when each phase's runs were done; a thread samples its CPU time."""

    def __init__(self, settings: Settings, judge_ms: int) -> None:
        handle, log = tempfile.mkstemp(prefix="bench-evaluator-", suffix=".log")
        os.close(handle)
        self.log = Path(log)
        env = settings.child_env(STREAMS_FEEDBACK_MODULES=TYPES, BENCH_JUDGE_MS=str(judge_ms))
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streams", "worker", "--rules", RULES,
                 "--stats-interval", "0.2"], env=env, stdout=out, stderr=subprocess.STDOUT,
                cwd=REPO)
        self.cpu: list[tuple[float, float]] = []  # (wall clock, CPU seconds)
        self._sampling = True
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while self._sampling and self.proc.poll() is None:
            with contextlib.suppress(OSError, IndexError, ValueError):
                self.cpu.append((time.time(), cpu_seconds(self.proc.pid)))
            time.sleep(0.05)

    def _cpu_at(self, when: float) -> float:
        return min(self.cpu, key=lambda sample: abs(sample[0] - when))[1]

    def stats(self) -> list[tuple[float, int, int]]:
        """(wall clock, runs succeeded, batches that ran actions) of every stats line so
        far."""
        found = []
        for line in self.log.read_text(errors="replace").splitlines():
            stamp = _STAMP.search(line)
            if '"rules"' not in line or stamp is None:
                continue
            when = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            rules = json.loads(line[line.index("{"):])["rules"]
            found.append((when, int(rules["succeeded"]), int(rules.get("run_batches", 0))))
        return found

    def succeeded(self) -> int:
        stats = self.stats()
        return stats[-1][1] if stats else 0

    def phase(self, base: int, upto: int, timeout: float) -> tuple[float, float, float]:
        """Wait until `upto` runs succeeded; (runs/s from the last stats line at `base` to
        the first at `upto`, the worker's CPU seconds per run between them, runs per batch
        that ran actions)."""
        started = shown = time.monotonic()
        while self.succeeded() < upto:
            if time.monotonic() - shown > 15:  # progress on long phases
                shown = time.monotonic()
                console.print(f"  {self.succeeded() - base:,} of {upto - base:,} runs, "
                              f"worker RSS {self.memory()[0]:,.0f} MB")
            if self.proc.poll() is not None:
                raise SystemExit(f"the worker exited {self.proc.returncode}; see {self.log}")
            if time.monotonic() - started > timeout:
                raise SystemExit(f"{upto - self.succeeded()} runs not done after "
                                 f"{timeout:.0f} s; see {self.log}")
            time.sleep(0.1)
        time.sleep(0.2)  # a CPU sample past the last line
        stats = self.stats()
        before = [line for line in stats if line[1] <= base]
        first = before[-1] if before else next(line for line in stats if line[1] > base)
        last = next(line for line in stats if line[1] >= upto)
        runs = last[1] - first[1]
        cpu = self._cpu_at(last[0]) - self._cpu_at(first[0])
        return (runs / max(last[0] - first[0], 1e-9), cpu / max(runs, 1),
                runs / max(last[2] - first[2], 1))

    def memory(self) -> tuple[float, float]:
        """The worker's resident memory now and at its peak, MB (/proc: VmRSS, VmHWM)."""
        found = {"VmRSS": 0.0, "VmHWM": 0.0}
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                name, _, value = line.partition(":")
                if name in found:
                    found[name] = int(value.split()[0]) / 1024
        return found["VmRSS"], found["VmHWM"]

    def stop(self) -> None:
        self._sampling = False
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def counts(settings: Settings, tenant: str) -> dict[str, Any]:
    """Verdict records, feedback and reused outputs in the tenant's log."""
    serde = AvroSerde(settings)
    topic = tenant_topics(tenant, settings.topic_prefix).events
    consumer = Consumer(reader_config(settings, f"bench-{uuid.uuid4().hex[:8]}"))
    try:
        ends = {p: high for p, (_low, high) in watermarks(consumer, topic).items()}
        parts = [TopicPartition(topic, p, 0) for p, end in ends.items() if end > 0]
        consumer.assign(parts)
        found = {"verdicts": 0, "feedback": 0, "reused": 0, "judged": 0}
        # Until every position reaches its end (a transaction's marker takes an offset no
        # record is read at, so the positions, not the offsets read, say when).
        while any(tp.offset < ends[tp.partition] for tp in consumer.position(parts)):
            for msg in consumer.consume(1000, 1.0):
                if msg.error() is not None:
                    continue
                kind = (header_value(msg.headers(), "event_type") or b"").decode()
                if kind == "feedback_given":
                    found["feedback"] += 1
                elif kind == "streams:verdict":  # an app event's type is its name
                    found["verdicts"] += 1
                elif kind == "run_succeeded":
                    ran = envelope_from_record(serde.decode(msg.value() or b"", topic)).event
                    if isinstance(ran, RunSucceeded) and ran.rule in ("b:judged", "b:reused"):
                        found["reused" if ran.output.get("reused") else "judged"] += 1
        return found
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--judge-ms", type=int, default=0,
                        help="how long the judge waits per call (a model's latency)")
    args = parser.parse_args()
    n = args.runs
    settings = Settings.from_env(topic_prefix=f"bench{uuid.uuid4().hex[:6]}")
    serde = AvroSerde(settings)
    admin = TenantAdmin(settings)
    tenant, floor_tenant = "evaluators", "floor"
    admin.create_tenant(tenant)
    admin.create_tenant(floor_tenant)
    floor = floor_rate(settings, serde, floor_tenant, n)
    console.print(f"floor: {floor:,.0f} runs/s (3 records each, encoded and produced)")
    worker = Worker(settings, args.judge_ms)
    timeout = 120 + n / 5
    try:
        install(settings, tenant, "b:noop", "noop")
        time.sleep(2)
        _produce(settings, tenant_topics(tenant, settings.topic_prefix).events,
                 answers(tenant, n), serde)
        results = {"noop": worker.phase(0, n, timeout)}
        memory = {"noop": worker.memory()}
        install(settings, tenant, "b:judged", "grade", "--backfill")
        results["judged"] = worker.phase(n, 2 * n, timeout + n * args.judge_ms / 1000)
        memory["judged"] = worker.memory()
        install(settings, tenant, "b:reused", "grade", "--backfill")
        results["reused"] = worker.phase(2 * n, 3 * n, timeout)
        memory["reused"] = worker.memory()
    finally:
        worker.stop()
    found = counts(settings, tenant)
    for phase, (rate, cpu, per_batch) in results.items():
        rss, peak = memory[phase]
        print(f"{phase:>7}: {rate:8,.1f} runs/s  {cpu * 1e6:8,.0f} µs CPU per run  "
              f"{rate / floor:.3f} of the floor  {per_batch:5.1f} runs per batch  "
              f"worker RSS {rss:,.0f} MB (peak {peak:,.0f})  "
              f"({n} runs, judge {args.judge_ms} ms)")
    print(f"  floor: {floor:8,.1f} runs/s; log: {found}")
    expected = {"verdicts": n, "feedback": 2 * n, "judged": n, "reused": n}
    if found != expected:
        print(f"counts off: expected {expected}")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
