"""Fault and fuzz tests: the worker and give_feedback under failures and hostile input.

Every test here is an integration test on a real broker and registry. Tests that do not stop
servers use the session's shared stack (tests/conftest.py). Tests that stop or restart the
broker or the registry use `own_stack`: a stack of this session alone, started by
deploy/stack.sh on free loopback ports with its own data dir (jars from STACK_CACHE, default
the repository's .stack/cache), and stopped by the script (which signals its servers by pid)
at the end of the session, even when a test fails; a server still alive after that is killed
by the pid in its pid file, and only if that process is this stack's.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from streams.core.actors import UserActor
from streams.core.events import AppEvent, RunStarted
from streams.runtime.client.workspace import Workspace
from streams.settings import Settings
from tests.conftest import WorkerProcess, _free_port, unique
from tests.scrape import start_duckdb_sink
from tests.stacks import OwnStack, own_stack_in


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that used its own stack reports the stack's status and server logs; one
    that started workers reports what they logged at warning and above (a stall shows there:
    the loop's outages, aborts, abandoned producers and rebalances)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if not (report.failed and call.when == "call"):
        return
    funcargs = getattr(item, "funcargs", {})
    stack = funcargs.get("own_stack")
    if isinstance(stack, OwnStack):
        try:
            report.sections.append(("own stack", stack.describe()))
        except Exception as exc:  # a report must not fail on its extras
            report.sections.append(("own stack", f"not described: {exc!r}"))
    tmp = funcargs.get("tmp_path")
    if isinstance(tmp, Path):
        for path in sorted(tmp.glob("worker*.log")):
            report.sections.append((f"{path.name} (warnings and errors)",
                                    worker_warnings(path.read_text(errors="replace"))))


_LEVELS = ("[WARNING]", "[ERROR]", "[CRITICAL]", "Traceback", "Error:", "recovered after")
_NOISE = ("Unable connect to node", "Unable to update metadata", "NodeNotReadyError",
          "Failed fetch messages", "Heartbeat", "coordinator dead", "KafkaConnectionError",
          '{"stats"')


def worker_warnings(text: str, last: int = 200) -> str:
    """A worker log's last `last` lines at WARNING or above (and its tracebacks), each cut
    to 300 characters, without Faust's own client's connection noise during an outage
    (its control topic's consumer) and the periodic stats lines but the last: what a stalled
    or crashed worker's loops did."""
    kept = [line[:300] for line in text.splitlines()
            if any(level in line for level in _LEVELS) and not any(n in line for n in _NOISE)]
    stats = [line for line in text.splitlines() if '{"stats"' in line]
    kept = [*kept[-last:], f"last stats: {stats[-1][:2000]}"] if stats else kept[-last:]
    return "\n".join(kept) or "(nothing at warning or above)"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/faults/" in str(item.path):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="package")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnStack]:
    with own_stack_in(tmp_path_factory.mktemp("faults-stack") / "data", start=True) as stack:
        yield stack


def assert_alive(*workers: WorkerProcess) -> None:
    """No worker exited (a crash, or exit 70 on an outage it gave up on)."""
    for worker in workers:
        assert worker.proc is not None
        code = worker.proc.poll()
        assert code is None, f"worker exited with {code}:\n{worker.log()[-4000:]}"


def check_scores(records: Iterable[tuple[Any, dict[str, Any]]],
                 expected: dict[str, set[str]]) -> int:
    """Every feedback event of `expected` (id -> its score names) has exactly those scores,
    one id per (feedback, name), and nothing else was scored; returns the repeats (records
    written again with the same id, at-least-once)."""
    records = list(records)
    names: dict[str, set[str]] = defaultdict(set)
    ids_by: dict[tuple[str, str], set[str]] = defaultdict(set)
    for _msg, record in records:
        fid = record["source"]["feedback_event_id"]
        names[fid].add(record["name"])
        ids_by[(fid, record["name"])].add(record["id"])
    unexpected = sorted(set(names) - set(expected))
    assert unexpected == [], f"{len(unexpected)} scored feedback events were never given"
    wrong = {fid: (sorted(names.get(fid, ())), sorted(want))
             for fid, want in expected.items() if names.get(fid, set()) != want}
    assert wrong == {}, f"{len(wrong)} feedback events lack or have extra scores: " \
                        f"{list(wrong.items())[:5]}"
    assert all(len(v) == 1 for v in ids_by.values()), "a (feedback, score) with two ids"
    per_id = Counter(r["id"] for _m, r in records)
    assert len(per_id) == sum(len(v) for v in expected.values())
    return sum(c - 1 for c in per_id.values())


# What a worker's log says about its transactions and partitions: what a repeat follows.
_TELLING = re.compile(r"transaction aborted|revok|assign|lost|hung|fenced|recovered|"
                      r"commit skipped|replacing the producer|no seek|giving it up")


def _count_all(settings: Settings, topic: str, isolation: str, settle: float = 3.0) -> int:
    """How many records a fresh reader with `isolation` (read_committed or read_uncommitted)
    finds in `topic` (until `settle` seconds pass without a new one)."""
    from confluent_kafka import Consumer

    from streams.adapters.kafka.config import reader_config

    consumer = Consumer(reader_config(settings, unique("recount-"),
                                      **{"auto.offset.reset": "earliest",
                                         "isolation.level": isolation}))
    consumer.subscribe([topic])
    count, last_new = 0, time.monotonic()
    try:
        while time.monotonic() - last_new < settle:
            msgs = consumer.consume(1000, 0.2)
            good = sum(1 for m in msgs if m.error() is None)
            if good:
                count += good
                last_new = time.monotonic()
    finally:
        consumer.close()
    return count


def repeats_report(settings: Settings, topic: str,
                   records: Sequence[tuple[Any, dict[str, Any]]],
                   workers: Sequence[WorkerProcess] = ()) -> str:
    """Why scores were written twice, for a failure message: where the copies of each repeated
    id sit (partition, offset, broker time), the gap between them, a second read_committed
    count (a reader-side repeat would not be there again) and a read_uncommitted count (what
    aborted transactions hold), and the workers' log lines about transactions and
    partitions."""
    copies: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for msg, record in records:
        copies[record["id"]].append((msg.partition(), msg.offset(), msg.timestamp()[1]))
    repeated = {rid: sorted(c, key=lambda c: c[2]) for rid, c in copies.items() if len(c) > 1}
    if not repeated:
        return "no repeats"
    gaps = [(c[-1][2] - c[0][2]) / 1000 for c in repeated.values()]
    by_partition = Counter(c[-1][0] for c in repeated.values())
    firsts = [c[0] for c in repeated.values()]
    seconds = [c[-1] for c in repeated.values()]
    lines = [
        f"{len(repeated)} ids repeated of {len(copies)}; copies per id "
        f"{sorted(Counter(len(c) for c in repeated.values()).items())}",
        f"second copies by partition {sorted(by_partition.items())}",
        f"first copies' offsets {min(f[1] for f in firsts)}..{max(f[1] for f in firsts)}, "
        f"second copies' {min(s[1] for s in seconds)}..{max(s[1] for s in seconds)}",
        f"gap between copies (s): min {min(gaps):.2f}, median {statistics.median(gaps):.2f}, "
        f"max {max(gaps):.2f}",
        f"records read: {len(records)}; again read_committed: "
        f"{_count_all(settings, topic, 'read_committed')}; read_uncommitted: "
        f"{_count_all(settings, topic, 'read_uncommitted')}",
        "a sample: " + "; ".join(f"{rid}: {c}" for rid, c in list(repeated.items())[:3]),
    ]
    for n, worker in enumerate(workers):
        told = [line for line in worker.log().splitlines() if _TELLING.search(line)
                and '{"stats"' not in line]
        lines.append(f"worker {n}'s log on transactions and partitions ({len(told)} lines, "
                     "the last 40):\n" + "\n".join(told[-40:]))
    return "\n".join(lines)


async def tenant_with_a_run(tenant_factory: Callable[..., str],
                            client_factory: Callable[..., Any]) -> tuple[str, Workspace]:
    """A new tenant with `run_1` started (an error spike's triage), and ada's handle on it,
    whose calls wait out an outage (180 s for their acks) instead of failing."""
    tenant = tenant_factory()
    client = client_factory(flush_timeout=180.0, feedback_timeout=180.0)
    ws = client.workspace(tenant, "prod", actor=UserActor(id="ada"))
    spike = await ws.append(AppEvent(name="ops:error_spike"))
    await ws.append(RunStarted(run_id="run_1", rule="r", action="triage", firing_id="f"),
                    correlation_id=spike.id, causation_id=spike.id)
    return tenant, ws


@contextmanager
def watched_worker_and_sink(settings: Settings, worker_factory: Callable[..., WorkerProcess],
                            tmp_path: Path) -> Iterator[tuple[WorkerProcess,
                                                              subprocess.Popen[bytes], int, int]]:
    """A worker and a DuckDB sink (its log in tmp_path/sink.log), each serving its health and
    metrics on a port of its own: (worker, sink, worker port, sink port). The sink is stopped
    on the way out (the worker by its factory)."""
    port, sink_port = _free_port(), _free_port()
    worker = worker_factory("--batch-size", "20", STREAMS_HEALTH_PORT=str(port))
    sink = start_duckdb_sink(settings.replace(health_port=sink_port), tmp_path)
    try:
        yield worker, sink, port, sink_port
    finally:
        if sink.poll() is None:
            sink.terminate()
            sink.wait(30)
