"""The materialized read view on the real broker: the same answers as the whole-log fold,
cursor pages without gaps or repeats while records arrive, a damaged or deleted view file
rebuilt, and a build killed mid-way leaving a view consistent with its checkpoint."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from streams.adapters.views import ViewStore
from streams.core.actors import EvaluatorActor, UserActor
from streams.core.errors import NotFound
from streams.core.events import AppEvent, Envelope, RuleFired, RunStarted, RunSucceeded
from streams.core.runs import RunRecord, latest_runs
from streams.core.targets import FiringTarget, RunTarget
from streams.core.viewrows import feedback_of, position
from streams.examples.ops import ShouldHaveFired, TriageQuality
from streams.runtime.client.views import view_path
from streams.runtime.client.workspace import StreamsClient, Workspace
from streams.settings import Settings
from tests.conftest import REPO

RULES = ("ops:error-spike", "ops:latency")


async def _chain(ws: Workspace, n: int, rule: str, *, matched_more: tuple[str, ...] = (),
                 ) -> dict[str, Any]:
    app = await ws.append(AppEvent(name="ops:error_spike", data={"n": n}))
    fired = await ws.append(RuleFired(firing_id=f"fir_{n}", rule=rule,
                                      matched=[app.id, *matched_more]),
                            correlation_id=app.id, causation_id=app.id)
    run = await ws.append(RunStarted(run_id=f"run_{n}", rule=rule, action="triage",
                                     firing_id=f"fir_{n}"),
                          correlation_id=app.id, causation_id=fired.id)
    await asyncio.sleep(0.003)  # distinct milliseconds: the fold breaks ties by read order
    return {"app": app, "fired": fired, "run": run}


def _shape(record: RunRecord) -> tuple[Any, ...]:
    return (record.id, record.started.event_id, record.started.seq,
            [e.event_id for e in record.matched], [e.event_id for e in record.emitted],
            None if record.fired is None else record.fired.event_id, record.run)


async def _history(ws: Workspace) -> list[dict[str, Any]]:
    """Runs of two rules; outcomes; an emitted event that makes another run; a counting
    firing matching other chains; a run_started written twice; feedback of two types by
    three participants; a second workspace."""
    chains = [await _chain(ws, n, RULES[n % 2]) for n in range(12)]
    first = chains[0]
    await ws.append(RunSucceeded(run_id="run_0", rule=RULES[0], action="triage",
                                 output={"ok": True}),
                    correlation_id=first["app"].id, causation_id=first["run"].id)
    emitted = await ws.append(AppEvent(name="ops:follow_up"),
                              correlation_id=first["app"].id, causation_id=first["run"].id)
    nested_fired = await ws.append(
        RuleFired(firing_id="fir_nested", rule=RULES[1], matched=[emitted.id]),
        correlation_id=first["app"].id, causation_id=emitted.id)
    nested = await ws.append(RunStarted(run_id="run_nested", rule=RULES[1], action="triage",
                                        firing_id="fir_nested"),
                             correlation_id=first["app"].id, causation_id=nested_fired.id)
    await ws.append(RunSucceeded(run_id="run_nested", rule=RULES[1], action="triage"),
                    correlation_id=first["app"].id, causation_id=nested.id)
    # A counting rule's firing: it matched the app events of three other chains.
    chains.append(await _chain(ws, 99, RULES[0],
                               matched_more=tuple(c["app"].id for c in chains[3:6])))
    # A run_started recorded again after a crash (same ids): one run.
    again = chains[4]["run"].envelope
    await ws.append_envelope(again.model_copy(update={"seq": None}))
    judge = ws.as_actor(EvaluatorActor(name="judge", version="1"))
    bob = ws.as_actor(UserActor(id="bob"))
    for n, c in enumerate(chains):
        if n % 3 == 0:
            await ws.as_actor(UserActor(id="ada")).give_feedback(
                TriageQuality(correct=n % 2 == 0, severity="high"),
                on=RunTarget(run_id=c["run"].envelope.event.run_id))
        if n % 4 == 0:
            await judge.give_feedback(TriageQuality(correct=True, severity="low"),
                                      on=RunTarget(run_id=c["run"].envelope.event.run_id))
        if n % 5 == 0:
            await bob.give_feedback(ShouldHaveFired(fired_rightly=False),
                                    on=FiringTarget(firing_id=f"fir_{n}"))
    other = ws.client.workspace(ws.tenant, "staging")
    await _chain(other, 500, RULES[0])
    return chains


async def test_the_view_answers_as_the_whole_log_fold(
    tenant_factory: Callable[..., str], client_factory: Callable[..., StreamsClient],
) -> None:
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod")
    await _history(ws)
    reader = client_factory().workspace(tenant, "prod")  # a process of its own
    fold = await reader.read()
    for rule in (None, *RULES):
        for limit in (None, 1, 3, 50):
            view = await reader.runs(rule=rule, limit=limit)
            assert [_shape(r) for r in view] == [
                _shape(r) for r in latest_runs(fold, rule=rule, limit=limit)], (rule, limit)
    nested = next(r for r in await reader.runs() if r.id == "run_0")
    assert "run_nested" in {getattr(e.event, "run_id", None) for e in nested.emitted}
    counting = next(r for r in await reader.runs() if r.id == "run_99")
    assert len(counting.matched) == 4
    assert len([r for r in await reader.runs() if r.id == "run_4"]) == 1

    def order(e: Envelope) -> tuple[Any, ...]:
        assert e.seq is not None
        return (e.time, e.seq.partition, e.seq.offset)

    for kind in (None, "triage_quality", "should_have_fired", TriageQuality):
        for who in (None, "user:ada", "evaluator:judge@1", "user:bob", "user:nobody"):
            name = kind.feedback_name if isinstance(kind, type) else kind
            expected = sorted(feedback_of(fold, feedback_type=name, participant=who), key=order)
            got = await reader.feedback(feedback_type=kind, participant=who)
            assert [(e.event_id, e.seq, e.event) for e in got] == [
                (e.event_id, e.seq, e.event) for e in expected], (kind, who)
    staging = reader.client.workspace(tenant, "staging")
    assert [r.id for r in await staging.runs()] == ["run_500"]


async def test_run_record_reads_the_kept_view_and_answers_as_the_index(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., StreamsClient],
) -> None:
    tenant = tenant_factory()
    writer = client_factory().workspace(tenant, "prod")
    chains = [c["app"].id for c in await _history(writer)]
    # A chain named by an id no event has, and another workspace's chain: no chain here.
    await writer.append(AppEvent(name="ops:error_spike"), correlation_id="order-42")
    staging = writer.client.workspace(tenant, "staging")
    chains += ["order-42", (await _chain(staging, 501, RULES[0]))["app"].id]
    ids = ["run_0", "run_nested", "run_4", "run_99", "run_7"]
    # No view on this machine yet: the index answers (and no view is built for it).
    by_index = client_factory()
    indexed = [await by_index.workspace(tenant, "prod").run_record(i) for i in ids]
    indexed_chains = [[(e.event_id, e.seq) for e in
                       await by_index.workspace(tenant, "prod").chain_events(c)]
                      for c in [*chains[:5], *chains[-2:]]]
    # The first chain: 8 events of its run and the nested run, and 3 pieces of feedback.
    assert len(indexed_chains[0]) == 11
    assert indexed_chains[-2:] == [[], []]
    assert not view_path(settings, tenant).exists()
    await client_factory().workspace(tenant, "prod").runs(limit=1)  # a server keeps one
    assert view_path(settings, tenant).exists()
    by_view = client_factory()
    reader = by_view.workspace(tenant, "prod")
    viewed = [await reader.run_record(i) for i in ids]
    assert [_shape(r) for r in viewed] == [_shape(r) for r in indexed]
    assert len(viewed[3].matched) == 4  # the counting firing's matches in other chains
    assert [[(e.event_id, e.seq) for e in await reader.chain_events(c)]
            for c in [*chains[:5], *chains[-2:]]] == indexed_chains
    assert tenant not in by_view._indexes  # the index was not read at all
    # Read-your-writes: a run appended a moment ago is in the view the call catches up.
    fresh = await _chain(writer, 600, RULES[1])
    record = await reader.run_record("run_600")
    assert record.started.event_id == fresh["run"].id
    with pytest.raises(NotFound, match="no run 'run_none'"):
        await reader.run_record("run_none")
    with pytest.raises(NotFound):  # another workspace's run
        await reader.run_record("run_500")


async def test_pages_have_no_gaps_or_repeats_while_records_arrive(
    tenant_factory: Callable[..., str], client_factory: Callable[..., StreamsClient],
) -> None:
    tenant = tenant_factory()
    writer = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    before = [await _chain(writer, n, RULES[0]) for n in range(20)]
    for c in before[::2]:
        await writer.give_feedback(TriageQuality(correct=True, severity="low"),
                                   on=RunTarget(run_id=c["run"].envelope.event.run_id))
    reader = client_factory().workspace(tenant, "prod")
    seen: list[str] = []
    cursor = None
    extra = 100
    while True:
        page = await reader.runs_page(rule=RULES[0], limit=3, cursor=cursor)
        seen += [r.id for r in page.runs]
        # Runs started (and feedback given) by another process between pages.
        for _ in range(2):
            extra += 1
            await _chain(writer, extra, RULES[0])
        cursor = page.next_cursor
        if cursor is None:
            break
    assert len(seen) == len(set(seen))
    assert seen == [f"run_{n}" for n in reversed(range(20))]

    given: list[str] = []
    cursor = None
    late = iter(range(200, 300))
    while True:
        fb = await reader.feedback_page(feedback_type="triage_quality", limit=4, cursor=cursor)
        given += [e.event_id for e in fb.feedback]
        c = await _chain(writer, next(late), RULES[0])
        await writer.give_feedback(TriageQuality(correct=False, severity="low"),
                                   on=RunTarget(run_id=c["run"].envelope.event.run_id))
        cursor = fb.next_cursor
        if cursor is None:
            break
    assert len(given) == len(set(given))
    everything = [e.event_id for e in await reader.feedback(feedback_type="triage_quality")]
    # Oldest first, and what arrived while paging came after what was paged.
    assert given == everything[:len(given)] and len(given) >= 10


async def test_a_damaged_or_deleted_view_is_rebuilt_not_trusted(
    tenant_factory: Callable[..., str], client_factory: Callable[..., StreamsClient],
    settings: Settings,
) -> None:
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod")
    for n in range(6):
        await _chain(ws, n, RULES[n % 2])
    first = client_factory()
    expected = [_shape(r) for r in await first.workspace(tenant, "prod").runs()]
    first.close()
    path = view_path(settings, tenant)
    assert path.exists()

    # Damaged between processes: the next one starts afresh and answers the same.
    with path.open("r+b") as f:
        f.write(b"\0garbage" * 512)
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")
    second = client_factory()
    assert [_shape(r) for r in await second.workspace(tenant, "prod").runs()] == expected
    assert second.tenant_view(tenant).store.rebuilt

    # Deleted under a running process: noticed at its next read, rebuilt with what came since.
    path.unlink()
    await _chain(ws, 50, RULES[0])
    again = await second.workspace(tenant, "prod").runs()
    assert [r.id for r in again] == ["run_50"] + [e[0] for e in expected]
    assert path.exists()


def test_a_build_killed_midway_leaves_a_consistent_view(
    settings: Settings, client_factory: Callable[..., StreamsClient],
) -> None:
    from bench.history import TENANT, seed
    from streams.adapters.kafka.admin import TenantAdmin

    seeded = seed(settings, 30_000)
    script = (
        "import sys, time\n"
        "import streams.runtime.client.views as v\n"
        "from streams.runtime.root import Runtime\n"
        "from streams.settings import Settings\n"
        "v.BATCH = 500\n"
        "def progress(done, total):\n"
        "    print(done, total, flush=True)\n"
        "    time.sleep(0.05)\n"
        f"v.build_view(Runtime(Settings.from_env()), {TENANT!r}, progress=progress)\n")
    child = subprocess.Popen([sys.executable, "-c", script], env=settings.child_env(),
                             cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        for line in child.stdout:
            done, total = map(int, line.split())
            if 0 < done < total // 2:
                child.send_signal(signal.SIGKILL)
                break
        child.wait(60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL
    try:
        store = ViewStore(view_path(settings, TENANT), tenant=TENANT,
                          topic=f"{settings.topic_prefix}.{TENANT}.events")
        store.open()
        assert not store.rebuilt
        checkpoint = store.checkpoint()
        assert 0 < sum(checkpoint.values()) < seeded["envelopes"]
        # Exactly the records below each partition's checkpoint are in the view: none ahead,
        # none missing.
        with store._guarded() as db:  # the test reads the file as it is
            for p, next_offset in checkpoint.items():
                lo, hi = position(p, 0), position(p, next_offset)
                inside = db.execute("SELECT count(*) FROM events WHERE pos >= ? AND pos < ?",
                                    (lo, hi)).fetchone()[0]
                beyond = db.execute("SELECT count(*) FROM events WHERE pos >= ? AND pos < ?",
                                    (hi, position(p + 1, 0))).fetchone()[0]
                assert (inside, beyond) == (next_offset, 0)
        store.close()

        async def finish() -> tuple[list[Any], list[Any]]:
            ws = client_factory().workspace(TENANT, "prod")
            view = await ws.runs(rule="ops:error-spike", limit=20)
            fold = latest_runs(await ws.read(), rule="ops:error-spike", limit=20)
            return [_shape(r) for r in view], [_shape(r) for r in fold]

        view, fold = asyncio.run(finish())
        assert view == fold and len(view) == 20
    finally:
        TenantAdmin(settings).delete_tenant(TENANT)


async def test_streams_views_build_builds_once_then_catches_up(
    tenant_factory: Callable[..., str], client_factory: Callable[..., StreamsClient],
    settings: Settings,
) -> None:
    import json

    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod")
    for n in range(4):
        await _chain(ws, n, RULES[0])

    def build(name: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "streams", "views", "build", "--tenant",
                               name], env=settings.child_env(), cwd=REPO, capture_output=True,
                              text=True, timeout=120, check=False)

    first = await asyncio.to_thread(build, tenant)
    assert first.returncode == 0, first.stderr
    answer = json.loads(first.stdout.strip().splitlines()[-1])
    assert (answer["applied"], answer["view"]) == (12, str(view_path(settings, tenant)))
    again = json.loads((await asyncio.to_thread(build, tenant)).stdout.strip().splitlines()[-1])
    assert again["applied"] == 0
    # A process on the same state directory reads the built view: nothing left to apply.
    reader = client_factory()
    assert [r.id for r in await reader.workspace(tenant, "prod").runs(limit=2)] == [
        "run_3", "run_2"]
    missing = await asyncio.to_thread(build, tenant + "x")
    assert missing.returncode == 5 and "no tenant" in missing.stderr
