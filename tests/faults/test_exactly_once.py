"""Exactly once under faults, on the real broker: workers with
STREAMS_PROCESSING_GUARANTEE=exactly_once are SIGKILLed several times mid-stream, or one is
paused (SIGSTOP) past its session and transaction timeouts while the other takes its
partitions over, then resumed (SIGCONT): a read_committed reader of the scores topic counts
exactly three scores per feedback event, by count, not by distinct id (0 repeats, 0 lost), and
the resumed zombie's late transaction was refused (aborted or its producer fenced), never
committed over the new owner's work.

The workers run with short session and transaction timeouts (6 s, 5 s) so that each fault
costs seconds, not the defaults' tens of seconds: the guarantee does not depend on them."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from streams.adapters.kafka.config import admin_config
from streams.core.actors import UserActor
from streams.core.events import AppEvent, RunStarted
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics, worker_group
from streams.examples.ops import TriageQuality
from streams.runtime.worker.app import MIRROR_CURSOR, MIRROR_LOOP
from streams.settings import Settings
from tests.conftest import WorkerProcess, read_topic, wait_until
from tests.faults.conftest import assert_alive, check_scores, repeats_report

NAMES = {"triage_quality.correct", "triage_quality.severity", "triage_quality.note"}
EOS = {"STREAMS_PROCESSING_GUARANTEE": "exactly_once", "STREAMS_SESSION_TIMEOUT": "6",
       "STREAMS_HEARTBEAT_INTERVAL": "1", "STREAMS_TRANSACTION_TIMEOUT": "5"}
ARGS = ("--batch-size", "200", "--stats-interval", "0.5", "--loglevel", "info")


def _members_with(settings: Settings, topic: str) -> int:
    """How many members of the mirror's group hold partitions of `topic` now."""
    group = worker_group(MIRROR_CURSOR, settings.topic_prefix)
    admin = AdminClient(admin_config(settings))
    described = admin.describe_consumer_groups([group])[group].result()
    return sum(any(tp.topic == topic for tp in member.assignment.topic_partitions)
               for member in described.members)


def _stopped(worker: WorkerProcess) -> bool:
    """Whether the worker's process is stopped (SIGSTOP): state T in /proc/<pid>/stat."""
    assert worker.proc is not None
    stat = Path(f"/proc/{worker.proc.pid}/stat").read_text()
    return stat[stat.rindex(")") + 2] == "T"


def _loop_stats(worker: WorkerProcess) -> dict[str, Any]:
    """The mirror loop's last stats line (`--stats-interval`) since the worker's last start."""
    lines = [line for line in worker.log(since_start=True).splitlines() if '{"stats"' in line]
    return dict(json.loads(lines[-1][lines[-1].index("{"):])["loop"]) if lines else {}


async def _chains(ws: Any) -> list[str]:
    """Runs in chains on every one of the tenant's 4 partitions, so both workers get work."""
    runs: dict[int, str] = {}
    for n in range(200):
        spike = await ws.append(AppEvent(name="ops:error_spike"))
        if spike.seq.partition not in runs:
            runs[spike.seq.partition] = f"run_{n}"
            await ws.append(RunStarted(run_id=f"run_{n}", rule="r", action="triage",
                                       firing_id=f"f{n}"), correlation_id=spike.id)
        if len(runs) == 4:
            break
    return list(runs.values())


def _giver(ws: Any, run_ids: list[str]) -> Callable[[int], Any]:
    async def give(i: int) -> str:
        recorded = await ws.give_feedback(
            TriageQuality(correct=i % 2 == 0, severity="low", note=f"n{i}"),
            on=RunTarget(run_id=run_ids[i % len(run_ids)]))
        return str(recorded.id)
    return give


def _exact(settings: Settings, topic: str, given: list[str],
           workers: Sequence[WorkerProcess] = ()) -> int:
    """Read the scores (read_committed) and check them: exactly 3 per feedback by count.
    When they do not all arrive, the failure shows each of `workers`' last stats and the
    tail of its log (what a stalled loop was doing)."""
    want = len(given) * len(NAMES)
    try:
        scores = read_topic(settings, topic, at_least=want, timeout=120, settle=3.0)
    except pytest.fail.Exception as exc:
        told = [str(exc)]
        for n, worker in enumerate(workers):
            lines = [line for line in worker.log().splitlines() if '{"stats"' not in line]
            alive = worker.proc is not None and worker.proc.poll() is None
            told.append(f"worker {n} (alive: {alive}) last stats {_loop_stats(worker)}; its "
                        "log's last lines:\n" + "\n".join(lines[-40:])
                        + "\n\nits threads now:\n" + worker.stacks())
        pytest.fail("\n\n".join(told))
    repeats = check_scores(scores, dict.fromkeys(given, NAMES))
    assert repeats == 0, f"{repeats} scores written twice\n" + repeats_report(
        settings, topic, scores, workers)
    assert len(scores) == want
    return len(scores)


async def test_sigkill_workers_repeatedly_mid_stream_counts_exactly(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    feedback, kills = 6000, 5
    tenant = tenant_factory(partitions=4)
    topics = tenant_topics(tenant, settings.topic_prefix)
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    give = _giver(ws, await _chains(ws))
    workers = [worker_factory(*ARGS, **EOS), worker_factory(*ARGS, **EOS)]
    wait_until(lambda: _members_with(settings, topics.events) == 2, 90,
               "both workers to share the topic")
    started = time.monotonic()
    given: list[str] = []
    chunk = feedback // (kills + 1)
    for k in range(kills + 1):
        for start in range(k * chunk, (k + 1) * chunk, 200):
            given += await asyncio.gather(*(give(i) for i in range(start, start + 200)))
        if k == kills:
            break
        # Kill one while it holds partitions, and restart it: a first process once it is
        # scoring (this chunk's scores still being written); a restarted one, which may find
        # its share of the chunk done already, once the group has given it partitions.
        doomed = workers[k % 2]
        wait_until(lambda d=doomed: _loop_stats(d).get("outputs", 0) > 0 or (
            d.restarts > 0 and f"{MIRROR_LOOP}: assigned" in d.log(since_start=True)), 60,
            "the worker to be scoring, or a restarted one to hold partitions")
        doomed.kill(signal.SIGKILL)
        assert doomed.proc is not None and doomed.proc.returncode == -signal.SIGKILL
        doomed.start()
    assert len(given) == feedback
    counted = _exact(settings, topics.scores, given, workers)
    assert_alive(*workers)
    print(f"exactly once, {kills} SIGKILLs of 2 workers during {feedback} feedback: "
          f"{counted} score records for {feedback * len(NAMES)} scores, 0 repeats, 0 lost "
          f"({time.monotonic() - started:.0f} s)")


async def test_a_paused_worker_is_fenced_when_it_resumes(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    feedback, paused_for = 3000, 15.0
    tenant = tenant_factory(partitions=4)
    topics = tenant_topics(tenant, settings.topic_prefix)
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    give = _giver(ws, await _chains(ws))
    # The zombie stops itself (SIGSTOP) right after producing into an open transaction when
    # asked: a SIGSTOP from here could land between two transactions, leaving nothing to
    # refuse (CI saw that).
    state = tmp_path / "zombie-state"
    state.mkdir()
    zombie = worker_factory(*ARGS, **EOS, STREAMS_WORKER_FAULT="stop_in_transaction",
                            STREAMS_STATE_DIR=str(state))
    other = worker_factory(*ARGS, **EOS)
    wait_until(lambda: _members_with(settings, topics.events) == 2, 90,
               "both workers to share the topic")
    given: list[str] = []
    for start in range(0, 600, 100):
        given += await asyncio.gather(*(give(i) for i in range(start, start + 100)))
    wait_until(lambda: _loop_stats(zombie).get("batches", 0) > 0, 60,
               "the first worker to be working")
    # Ask it to stop inside its next transaction: its feedback keeps coming.
    (state / f"{MIRROR_LOOP}.stop-in-transaction").touch()
    next_chunk = 600
    while not _stopped(zombie):
        assert next_chunk < 1200, "the zombie never stopped inside a transaction"
        given += await asyncio.gather(*(give(i) for i in range(next_chunk, next_chunk + 100)))
        next_chunk += 100
    stopped = time.monotonic()
    before = _loop_stats(zombie)  # frozen while it is stopped
    assert zombie.proc is not None
    try:
        # Past its session timeout the other member takes its partitions over; past the
        # transaction timeout the broker aborts its open transaction.
        wait_until(lambda: _members_with(settings, topics.events) == 1, 60,
                   "the other worker to take the paused one's partitions")
        for start in range(next_chunk, 1800, 100):
            given += await asyncio.gather(*(give(i) for i in range(start, start + 100)))
        await asyncio.sleep(max(0.0, paused_for - (time.monotonic() - stopped)))
    finally:
        zombie.proc.send_signal(signal.SIGCONT)
    # Resumed, it tries to commit what it held: refused (the group moved on, or its producer
    # was fenced by the broker's abort), it aborts or replaces its producer and rejoins.
    wait_until(lambda: _loop_stats(zombie).get("aborts", 0) + _loop_stats(zombie).get(
        "producer_resets", 0) > before.get("aborts", 0) + before.get("producer_resets", 0),
        60, "the resumed worker's late transaction to be refused")
    for start in range(1800, feedback, 100):
        given += await asyncio.gather(*(give(i) for i in range(start, start + 100)))
    counted = _exact(settings, topics.scores, given, [zombie, other])
    assert_alive(zombie, other)
    after = _loop_stats(zombie)
    assert "transaction aborted" in zombie.log()
    print(f"exactly once, a worker paused {paused_for:.0f} s mid-transaction and resumed: "
          f"{counted} score records for {feedback * len(NAMES)} scores, 0 repeats, 0 lost; "
          f"the zombie's aborts {after.get('aborts_by_reason')}, producer resets "
          f"{after.get('producer_resets')}")
