"""Rules as data on the real broker: `streams rules install/archive/propose/resolve/list`
against a running worker, picked up live, from the installation point, backfilled once."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from streams.core.actors import SystemActor, UserActor
from streams.core.evaluation import VERDICT_RECORD
from streams.core.events import (
    AppEvent,
    Envelope,
    FeedbackGiven,
    RuleFired,
    RuleInstalled,
    RunStarted,
    RunSucceeded,
)
from streams.core.proposals import rule_conversion
from streams.core.tenancy import rulebook_topic
from streams.runtime.client.workspace import Workspace
from streams.settings import Settings
from tests.conftest import REPO, WorkerProcess, wait_until
from tests.integration.test_rules_reactor import of, wait_log

MODULE = "tests.integration.rules_data_fixture"
TYPES = "streams.examples.ops"
PICKUP = 10.0  # the promise: a running worker picks up an install or archive within 10 s


def rule_json(name: str, action: str = "act", on: str = "t:ping") -> dict[str, Any]:
    return {"name": name, "when": {"on": on}, "then": {"action": action}}


def cli(settings: Settings, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "streams", "rules", *args],
                          env=settings.child_env(STREAMS_FEEDBACK_MODULES=TYPES),
                          capture_output=True, text=True, cwd=str(REPO), timeout=120)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def install(settings: Settings, tmp_path: Path, tenant: str, data: Any, *extra: str,
            rules: str = MODULE, check: bool = True) -> subprocess.CompletedProcess[str]:
    path = tmp_path / f"rule{time.monotonic_ns()}.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return cli(settings, "install", str(path), "--tenant", tenant, "--workspace", "prod",
               "--rules", rules, *extra, check=check)


async def warm(ws: Workspace, correlation_id: str | None = None) -> None:
    """Append a `t:warm` (in `correlation_id`'s chain, so after what that chain holds) and
    wait for its run: the worker is up and has processed that chain up to there."""
    recorded = await ws.append(AppEvent(name="t:warm", data={}), correlation_id=correlation_id)
    await wait_log(ws, lambda es: [e for e in of(es, RuleFired, rule="t:warm")
                                   if e.causation_id == recorded.id], 90, "the warm-up run")


def fired_on(envelopes: list[Envelope], rule: str) -> list[str]:
    return [e.causation_id or "" for e in of(envelopes, RuleFired, rule=rule)]


def acted(envelopes: list[Envelope]) -> list[Envelope]:
    return [e for e in envelopes if isinstance(e.event, AppEvent) and e.event.name == "t:acted"]


async def test_an_install_goes_live_from_its_installation_point_and_an_archive_stops_it(
    settings: Settings, tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
    worker_factory: Callable[..., WorkerProcess], tmp_path: Path,
) -> None:
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    before = [(await ws.append(AppEvent(name="t:ping", data={"n": i}))).id for i in range(3)]
    worker = worker_factory("--rules", MODULE, "--loglevel", "info", types=TYPES)
    await warm(ws)

    out = json.loads(install(settings, tmp_path, tenant, rule_json("t:data")).stdout)
    assert out["rule"] == "t:data" and out["state"] == "installed" and not out["repeat"]
    installed = time.monotonic()
    after = (await ws.append(AppEvent(name="t:ping", data={"n": 9}))).id
    try:
        log = await wait_log(ws, lambda es: after in fired_on(es, "t:data"), PICKUP,
                             "a run of the installed rule for an event after the install")
    except AssertionError:
        print(worker.log()[-5000:])
        raise
    assert time.monotonic() - installed < PICKUP
    await wait_log(ws, lambda es: acted(es), 60, "its action")
    assert not set(before) & set(fired_on(log, "t:data")), "history fired without --backfill"
    [fact] = of(log, RuleInstalled, rule="t:data")
    assert fact.actor == SystemActor() and json.loads(fact.event.definition or "") == \
        rule_json("t:data")
    listed = json.loads(cli(settings, "list", "--tenant", tenant).stdout)
    assert [r["rule"] for r in listed] == ["t:data"]

    cli(settings, "archive", "t:data", "--tenant", tenant, "--workspace", "prod")
    await asyncio.sleep(PICKUP)
    chain = (await ws.append(AppEvent(name="t:ping", data={"n": 10}))).id
    await warm(ws, correlation_id=chain)  # same chain: the ping was processed before it
    log = await ws.read()
    assert chain not in fired_on(log, "t:data")
    assert len(of(log, RuleFired, rule="t:data")) == 1
    assert json.loads(cli(settings, "list", "--tenant", tenant).stdout) == []
    assert json.loads(cli(settings, "list", "--tenant", tenant, "--all").stdout)[0]["state"] \
        == "archived"


async def test_a_backfill_acts_on_history_once_however_often_it_runs(
    settings: Settings, tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
    worker_factory: Callable[..., WorkerProcess], tmp_path: Path,
) -> None:
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    history = [(await ws.append(AppEvent(name="t:ping", data={"n": i}))).id for i in range(4)]
    worker_factory("--rules", MODULE, types=TYPES)
    await warm(ws)

    first = json.loads(install(settings, tmp_path, tenant, rule_json("t:back"),
                               "--backfill").stdout)
    # The history: the four pings and the warm-up's events, of which the pings fire.
    assert first["backfill"]["events"] >= 4
    assert (first["backfill"]["written"], first["backfill"]["already"]) == (4, 0)
    log = await wait_log(ws, lambda es: len(acted(es)) >= 4, 60, "the backfill's four actions")
    assert sorted(fired_on(log, "t:back")) == sorted(history)

    again = json.loads(install(settings, tmp_path, tenant, rule_json("t:back"),
                               "--backfill").stdout)
    assert again["repeat"]
    assert (again["backfill"]["written"], again["backfill"]["already"]) == (0, 4)
    # A new event in a chain of its own, then a warm-up in that chain: once that is done the
    # worker has had time to run anything the second backfill could have started.
    live = (await ws.append(AppEvent(name="t:ping", data={"n": 99}))).id
    log = await wait_log(ws, lambda es: live in fired_on(es, "t:back") and len(acted(es)) >= 5,
                         60, "the live run")
    await warm(ws, correlation_id=live)
    log = await ws.read()
    runs = [e.event.run_id for e in of(log, RunStarted, rule="t:back")]
    assert len(set(runs)) == 5
    assert sorted(e.event.data["cause"] for e in acted(log)) == sorted([*history, live])
    assert len(of(log, RuleInstalled, rule="t:back")) == 1


async def test_bad_rules_are_refused_and_the_worker_keeps_running(
    settings: Settings, tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
    worker_factory: Callable[..., WorkerProcess], tmp_path: Path,
) -> None:
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    worker = worker_factory("--rules", MODULE, types=TYPES)
    await warm(ws)

    refusals = [
        ('{"name": "t:x",', "not valid JSON: .* line 1 column"),
        ({"name": "t:x", "when": {"on": "t:ping", "sample": 3}, "then": {"action": "act"}},
         "at $.when.sample"),
        (rule_json("t:x", on="t:nothing"), "at $.when.on: no event type 't:nothing'"),
        (rule_json("t:x", action="missing"), "at $.then.action: no action 'missing'"),
        (rule_json("t:warm"), "a rule of the --rules modules is called 't:warm'"),
    ]
    for data, message in refusals:
        done = install(settings, tmp_path, tenant, data, check=False)
        assert done.returncode == 2, done.stderr
        text = " ".join(done.stderr.split())
        assert message.split(".*")[0] in text and message.split(".*")[-1] in text, text

    # Installed against another registry: live, but this worker lacks the action.
    install(settings, tmp_path, tenant, rule_json("t:far", action="elsewhere"),
            rules="tests.integration.rules_data_elsewhere")
    # A rulebook record no install wrote.
    producer = Producer({"bootstrap.servers": settings.bootstrap_servers})
    producer.produce(rulebook_topic(tenant, settings.topic_prefix), key=b"t:junk",
                     value=b"not an entry")
    producer.flush(30)
    wait_until(lambda: "runs action 'elsewhere', which this worker does not have" in
               worker.log() and "rulebook entry 't:junk' refused" in worker.log(), PICKUP,
               "the worker's reasons in its log")
    far = (await ws.append(AppEvent(name="t:ping", data={}))).id
    await wait_log(ws, lambda es: far in fired_on(es, "t:far"), 30, "the firing of t:far")
    await warm(ws)
    assert worker.proc is not None and worker.proc.poll() is None
    assert not acted(await ws.read())


async def test_a_drafted_rule_is_proposed_accepted_and_installed_from_its_artifact(
    settings: Settings, tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
    tmp_path: Path,
) -> None:
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    path = tmp_path / "draft.json"
    path.write_text(json.dumps(rule_json("t:drafted")))
    proposed = json.loads(cli(settings, "propose", str(path), "--tenant", tenant,
                              "--workspace", "prod", "--by", "agent:drafter",
                              "--rules", MODULE).stdout)
    assert proposed["artifact_id"] == "rule:t:drafted"
    early = cli(settings, "install", "--from-artifact", proposed["artifact_id"], "--tenant",
                tenant, "--workspace", "prod", "--rules", MODULE, check=False)
    assert early.returncode == 2 and "no accepted version yet" in early.stderr
    cli(settings, "resolve", proposed["proposal_id"], "--accept", "--by", "user:bob",
        "--tenant", tenant, "--workspace", "prod")
    out = json.loads(cli(settings, "install", "--from-artifact", proposed["artifact_id"],
                         "--tenant", tenant, "--workspace", "prod", "--rules", MODULE).stdout)
    assert out["rule"] == "t:drafted" and out["artifact_id"] == "rule:t:drafted"
    conversion = await rule_conversion(ws, now=datetime.now(UTC))
    assert (conversion.proposed, conversion.accepted, conversion.installed) == (1, 1, 1)


async def test_a_stateful_rule_installed_live_is_decided_by_the_decider(
    settings: Settings, tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
    worker_factory: Callable[..., WorkerProcess], tmp_path: Path,
) -> None:
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    worker_factory("--rules", MODULE, types=TYPES)
    await warm(ws)
    counting = {"name": "t:pair", "when": {"on": "t:ping", "count": {"n": 2, "within_seconds": 600},
                                           "scope": {"host": ["event", "data", "host"]}},
                "then": {"action": "act"}}
    install(settings, tmp_path, tenant, counting)
    pings = [(await ws.append(AppEvent(name="t:ping", data={"host": h}))).id
             for h in ("a", "b", "a")]
    log = await wait_log(ws, lambda es: of(es, RuleFired, rule="t:pair"), 60,
                         "the pair's firing")
    [fired] = of(log, RuleFired, rule="t:pair")
    assert fired.event.scope_key == "host=a" and fired.event.matched == [pings[0], pings[2]]


async def test_a_rule_heard_of_late_is_caught_up_from_its_installation_point(
    settings: Settings, tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
) -> None:
    """The reactor took events past a rule's installation point before it heard of the rule:
    when it hears, it matches exactly those, not the ones before the installation point."""
    from streams.adapters.kafka.log import watermarks
    from streams.core.rulebook import LiveRule, RulebookEntry
    from streams.core.rules import RuleSet, rule_from_dict
    from streams.core.tenancy import tenant_topics
    from streams.runtime.client.workspace import StreamsClient
    from streams.runtime.jobs.rules import Rulebook
    from streams.runtime.root import Runtime
    from streams.runtime.worker.reactor import Reactor
    from tests.integration.rules_data_fixture import ACTIONS

    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    before = [(await ws.append(AppEvent(name="t:ping", data={}))).id for _ in range(3)]
    runtime = Runtime(settings)
    try:
        start = await asyncio.to_thread(Rulebook(runtime).installation_point, tenant)
        after = [(await ws.append(AppEvent(name="t:ping", data={}))).id for _ in range(3)]
        events = tenant_topics(tenant, settings.topic_prefix).events
        reader = Consumer(runtime.reader_config("catch-up-test"))
        try:
            ends = {p: high for p, (_low, high) in watermarks(reader, events).items()}
        finally:
            reader.close()
        reactor = Reactor(runtime, RuleSet([]), ACTIONS, client=StreamsClient(runtime))
        # As if its step had taken everything there is before it heard of the rule.
        reactor.taken = {(events, p): end for p, end in ends.items()}
        definition = rule_json("t:late")
        entry = RulebookEntry(rule="t:late", state="installed", definition=definition,
                              start=start, workspace="prod", installed_event_id="e",
                              installed_at=datetime.now(UTC), installed_by="system")
        found = LiveRule(rule_from_dict(definition), entry)

        class Follower:
            on_change: Any = None

            def snapshot(self) -> tuple[int, dict[str, dict[str, LiveRule]]]:
                return 1, {tenant: {"t:late": found}}

            def find(self, tenant_: str, name: str) -> LiveRule | None:
                return found if (tenant_, name) == (tenant, "t:late") else None

            find_now = find

            def entry(self, tenant_: str, name: str) -> RulebookEntry | None:
                return entry if (tenant_, name) == (tenant, "t:late") else None

            entry_now = entry_current = entry

        reactor.follow(Follower())  # type: ignore[arg-type]
        await asyncio.to_thread(reactor.refresh)
        assert reactor.stats.caught_up == len(after)
    finally:
        runtime.close()
    log = await wait_log(ws, lambda es: len(fired_on(es, "t:late")) == len(after), 30,
                         "the caught-up firings")
    assert sorted(fired_on(log, "t:late")) == sorted(after)
    assert not set(before) & set(fired_on(log, "t:late"))


def graded(envelopes: list[Envelope], rule: str) -> list[dict[str, Any]]:
    """The outputs of the `grade` runs of `rule` that succeeded."""
    return [e.event.output for e in of(envelopes, RunSucceeded, rule=rule)]  # type: ignore


@pytest.mark.timeout(900)  # two passes of 1,000 runs, each allowed 360 s (below)
async def test_a_backfill_after_a_live_pass_reuses_every_verdict_and_calls_no_evaluator(
    settings: Settings, tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
    worker_factory: Callable[..., WorkerProcess], tmp_path: Path,
) -> None:
    answers = 1000
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    worker_factory("--rules", MODULE, types=TYPES)
    await warm(ws)
    install(settings, tmp_path, tenant, rule_json("t:grade-live", "grade", on="t:answer"))
    await asyncio.gather(*(ws.append(AppEvent(name="t:answer", data={
        "text": f"{'right' if i % 3 else 'wrong'} answer {i}"})) for i in range(answers)))
    # 1,000 evaluator runs: about 100 s on an idle 2-core machine, over 180 s in a CI run
    # whose groups load it to an average of 20 (ci68, ci69: 620 runs done at 180 s).
    log = await wait_log(ws, lambda es: len(graded(es, "t:grade-live")) >= answers, 360,
                         "the live pass's runs")
    live = graded(log, "t:grade-live")
    assert sum(not o["reused"] for o in live) == answers  # each answer judged once

    # A second rule with the same evaluator, backfilled over the history: new runs, the same
    # inputs, no evaluator call.
    install(settings, tmp_path, tenant, rule_json("t:grade-back", "grade", on="t:answer"),
            "--backfill")
    log = await wait_log(ws, lambda es: len(graded(es, "t:grade-back")) >= answers, 360,
                         "the backfill's runs")
    back = graded(log, "t:grade-back")
    assert len(back) == answers and all(o["reused"] for o in back)
    assert {o["verdict_key"] for o in back} == {o["verdict_key"] for o in live}
    # Every run gave its verdict as feedback; the verdicts were recorded once each.
    given = [e for e in log if isinstance(e.event, FeedbackGiven)]
    assert len(given) == 2 * answers
    assert {e.actor.participant for e in given} == {"evaluator:grader@1"}
    records = [e for e in log if isinstance(e.event, AppEvent)
               and e.event.name == VERDICT_RECORD]
    assert len(records) == answers


async def test_a_backfill_in_a_window_and_a_limit_at_a_time_resumes_where_it_stopped(
    settings: Settings, tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
    worker_factory: Callable[..., WorkerProcess], tmp_path: Path,
) -> None:
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    pings = [await ws.append(AppEvent(name="t:ping", data={"n": i})) for i in range(8)]
    times = [p.envelope.time for p in pings if p.envelope is not None]
    window = ("--since", times[2].isoformat(), "--until", times[7].isoformat())  # pings 2-6
    # Without --backfill the window means nothing: refused before anything is written.
    refused = install(settings, tmp_path, tenant, rule_json("t:win"), *window, check=False)
    assert refused.returncode == 2 and "--backfill" in refused.stderr
    empty = install(settings, tmp_path, tenant, rule_json("t:win"), "--backfill", "--since",
                    times[3].isoformat(), "--until", times[3].isoformat(), check=False)
    assert empty.returncode == 2 and "window is empty" in empty.stderr

    first = json.loads(install(settings, tmp_path, tenant, rule_json("t:win"), "--backfill",
                               *window, "--limit", "3").stdout)["backfill"]
    assert (first["written"], first["already"], first["left"]) == (3, 0, 2)
    # Killed or stopped by its limit, the same command goes on where it stopped.
    again = json.loads(install(settings, tmp_path, tenant, rule_json("t:win"), "--backfill",
                               *window, "--limit", "3").stdout)["backfill"]
    assert (again["written"], again["already"], again["left"]) == (2, 3, 0)
    worker_factory("--rules", MODULE, types=TYPES)
    log = await wait_log(ws, lambda es: len(acted(es)) >= 5, 90, "the backfill's five actions")
    assert sorted(fired_on(log, "t:win")) == sorted(p.id for p in pings[2:7])


async def test_a_backfill_spends_its_own_budget_kept_with_the_rule_across_resumes(
    settings: Settings, tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
    worker_factory: Callable[..., WorkerProcess], tmp_path: Path,
) -> None:
    # 10 answers of history; the rule's action claims 100 tokens an evaluation. A backfill of
    # 6 with 450 tokens judges 4 and refuses 2; resumed with the budget raised to 750, the 4
    # left find 350 tokens left (not a new 750): 3 judged, 1 refused. Live runs claim from
    # no backfill budget.
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    for i in range(10):
        await ws.append(AppEvent(name="t:answer", data={"text": f"right answer {i}"}))
    worker_factory("--rules", MODULE, types=TYPES)
    await warm(ws)
    rule = rule_json("t:budgeted", "grade-costed", on="t:answer")
    # Refused, before anything is written: no --backfill, an amount below 1 or below one
    # evaluation's cost, an action that declares no cost.
    for extra, says in ((("--budget-tokens", "450"), "--backfill"),
                        (("--backfill", "--budget-tokens", "0"), "above 0"),
                        (("--backfill", "--budget-tokens", "50"), "over the whole")):
        refused = install(settings, tmp_path, tenant, rule, *extra, check=False)
        assert refused.returncode == 2 and says in refused.stderr, refused.stderr
    uncosted = install(settings, tmp_path, tenant, rule_json("t:uncosted", "grade",
                                                             on="t:answer"),
                       "--backfill", "--budget-tokens", "450", check=False)
    assert uncosted.returncode == 2 and "has no cost" in uncosted.stderr, uncosted.stderr

    first = json.loads(install(settings, tmp_path, tenant, rule, "--backfill", "--limit", "6",
                               "--budget-tokens", "450").stdout)
    budget = first["backfill_budget"]
    assert budget["tokens"] == 450 and budget["name"].startswith("backfill.t-budgeted.")
    assert (first["backfill"]["written"], first["backfill"]["left"]) == (6, 4)
    log = await wait_log(ws, lambda es: len(graded(es, "t:budgeted")) >= 6, 120,
                         "the first six backfill runs")
    outputs = graded(log, "t:budgeted")
    assert sorted(o.get("over_budget", "") for o in outputs) == [""] * 4 + [budget["name"]] * 2
    assert all(o["claimed_tokens"] == 100 for o in outputs)

    again = json.loads(install(settings, tmp_path, tenant, rule, "--backfill", "--limit", "6",
                               "--budget-tokens", "750").stdout)
    assert again["repeat"] and again["backfill_budget"]["tokens"] == 750
    assert (again["backfill"]["written"], again["backfill"]["already"]) == (4, 6)
    log = await wait_log(ws, lambda es: len(graded(es, "t:budgeted")) >= 10, 120,
                         "the backfill's last four runs")
    outputs = graded(log, "t:budgeted")
    assert sum("over_budget" not in o for o in outputs) == 7  # 700 of 750 tokens
    judged = [e for e in log if isinstance(e.event, FeedbackGiven)]
    assert len(judged) == 7

    # Live answers: their runs claim nothing (the action has no budget of its own).
    for i in range(3):
        await ws.append(AppEvent(name="t:answer", data={"text": f"right live answer {i}"}))
    log = await wait_log(ws, lambda es: len(graded(es, "t:budgeted")) >= 13, 120,
                         "the live runs")
    live = graded(log, "t:budgeted")[10:]
    assert all("over_budget" not in o and "claimed_tokens" not in o for o in live)


async def test_a_shadow_version_judges_half_the_inputs_apart_and_gives_no_feedback(
    settings: Settings, tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
    worker_factory: Callable[..., WorkerProcess], tmp_path: Path,
) -> None:
    answers = 60
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    worker_factory("--rules", MODULE, types=TYPES)
    await warm(ws)
    install(settings, tmp_path, tenant, rule_json("t:shadowed", "grade-shadowed", on="t:answer"))
    for i in range(answers):
        await ws.append(AppEvent(name="t:answer", data={"text": f"right answer {i}"}))
    log = await wait_log(ws, lambda es: len(graded(es, "t:shadowed")) >= answers, 120,
                         "the shadowed runs")
    outputs = graded(log, "t:shadowed")
    shadows = [o["shadow"] for o in outputs if "shadow" in o]
    assert 10 <= len(shadows) <= 50  # about half, picked by each input's digest
    assert all(s["version"] == "2" and not s["reused"] for s in shadows)
    given = [e for e in log if isinstance(e.event, FeedbackGiven)]
    assert len(given) == answers
    assert {e.actor.participant for e in given} == {"evaluator:grader@1"}  # never the shadow
    records = [e.event.data for e in log if isinstance(e.event, AppEvent)
               and e.event.name == VERDICT_RECORD and e.event.data.get("shadow") is True]
    assert sorted(r["key"] for r in records) == sorted(s["verdict_key"] for s in shadows)


async def test_promoting_the_shadow_version_is_one_command_and_rolling_back_another(
    settings: Settings, tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
    worker_factory: Callable[..., WorkerProcess], tmp_path: Path,
) -> None:
    answers = 20
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    worker_factory("--rules", MODULE, types=TYPES)
    await warm(ws)
    install(settings, tmp_path, tenant, rule_json("t:promoted", "grade-shadowed", on="t:answer"))
    texts = [f"right answer {i}" for i in range(answers)]
    first = [await ws.append(AppEvent(name="t:answer", data={"text": text})) for text in texts]
    log = await wait_log(ws, lambda es: len(graded(es, "t:promoted")) >= answers, 120,
                         "the shadowed runs")
    shadowed = {o["shadow"]["verdict_key"] for o in graded(log, "t:promoted") if "shadow" in o}
    assert shadowed

    promoted = json.loads(cli(settings, "promote", "t:promoted", "--tenant", tenant,
                              "--rules", MODULE).stdout)
    assert (promoted["from"], promoted["to"], promoted["evaluator"]) == \
        ("grade-shadowed", "grade-shadowed@2", "grader@2")
    entry = json.loads(cli(settings, "list", "--tenant", tenant).stdout)
    assert [e["action"] for e in entry if e["rule"] == "t:promoted"] == ["grade-shadowed@2"]
    await asyncio.sleep(PICKUP)  # the promise: running workers follow the rulebook in 10 s
    # The same inputs again: version 2 judges them, reusing the verdicts it gave as a shadow.
    second = [await ws.append(AppEvent(name="t:answer", data={"text": text})) for text in texts]
    log = await wait_log(ws, lambda es: len(graded(es, "t:promoted")) >= 2 * answers, 120,
                         "the promoted runs")
    await asyncio.sleep(2)  # and no more: the answers judged before are not judged again
    log = await ws.read()
    runs = of(log, RunSucceeded, rule="t:promoted")
    assert len(runs) == 2 * answers
    after = [e for e in runs if e.event.action == "grade-shadowed@2"]  # type: ignore[attr-defined]
    assert {e.correlation_id for e in after} == {g.envelope.correlation_id for g in second}
    assert {e.correlation_id for e in runs if e not in after} == \
        {g.envelope.correlation_id for g in first}
    outputs = [e.event.output for e in after]  # type: ignore[attr-defined]
    assert {o["version"] for o in outputs} == {"2"} and not any("shadow" in o for o in outputs)
    assert {o["verdict_key"] for o in outputs if o["reused"]} == shadowed  # paid once
    given = {o["feedback_id"] for o in outputs}
    assert {e.actor.participant for e in log if e.event_id in given} == {"evaluator:grader@2"}

    back = json.loads(cli(settings, "promote", "t:promoted", "--tenant", tenant, "--rules",
                          MODULE, "--rollback").stdout)
    assert (back["from"], back["to"]) == ("grade-shadowed@2", "grade-shadowed")
    # Refused, saying why: a rule whose action has no shadow, and a rule that is not there.
    install(settings, tmp_path, tenant, rule_json("t:plain", "grade", on="t:answer"))
    plain = cli(settings, "promote", "t:plain", "--tenant", tenant, "--rules", MODULE,
                check=False)
    assert plain.returncode == 2 and "no shadow version to promote" in plain.stderr
    missing = cli(settings, "promote", "t:nope", "--tenant", tenant, "--rules", MODULE,
                  check=False)
    assert missing.returncode == 5 and "no live rule 't:nope'" in missing.stderr
