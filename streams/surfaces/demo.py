"""The demo: tenants, a worker running the ops rules, people giving feedback, and a live view
of events in, firings, runs, escalations, feedback and scores out, per tenant; then, per
tenant, a dataset of the people's triage verdicts, the judge's agreement with them, and the
workspace's report (report.json, report.html) in a folder it names."""

from __future__ import annotations

import asyncio
import functools
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Consumer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from streams.adapters.kafka.log import watermarks
from streams.core.actors import UserActor
from streams.core.datasets import Dataset, FeedbackContext, LogFeedbackSource, collect
from streams.core.errors import StreamsError
from streams.core.events import (
    AppEvent,
    Envelope,
    FeedbackGiven,
    ProposalMade,
    RuleFired,
    RunDeadLettered,
    RunStarted,
    RunSucceeded,
)
from streams.core.measures import FieldAgreement, judge_agreement
from streams.core.proposals import EVALUATOR as OUTCOME_EVALUATOR
from streams.core.proposals import PROPOSAL_OUTCOME, ProposalRates, proposal_rates
from streams.core.runs import rule_actor
from streams.core.scores import scores_of
from streams.core.tenancy import fresh_group, tenant_topics
from streams.examples.drafting import DRAFT_RULE, DraftRequested
from streams.examples.ops import IncidentOpened, Resolution, TriageQuality
from streams.examples.ops_rules import TriageInput
from streams.runtime.client.keys import KeyStore
from streams.runtime.client.workspace import StreamsClient, Workspace
from streams.runtime.root import Runtime
from streams.settings import Settings
from streams.surfaces.report.run import make_report
from streams.testing.langfuse_standin import LangfuseStandIn

PEOPLE = ("ada", "grace", "linus")
DEMO_TYPES = ["--types", "streams.examples.ops", "--types", "streams.core.proposals.outcome"]


@dataclass
class TenantView:
    """What the demo sees of one tenant's log."""

    start_offsets: dict[str, int] = field(default_factory=dict)
    envelopes: list[Envelope] = field(default_factory=list)
    people_done: bool = False
    drafts: int = 0
    drafts_done: bool = False

    def count(self, kind: type, **match: Any) -> int:
        return sum(1 for e in self.envelopes if isinstance(e.event, kind)
                   and all(getattr(e.event, k) == v for k, v in match.items()))

    def expected_scores(self) -> int:
        return sum(len(scores_of(e) or []) for e in self.envelopes
                   if isinstance(e.event, FeedbackGiven))


@dataclass
class People:
    """The demo's people, giving their feedback over the REST surface (`streams serve`), each
    with an API key of their own; the judge gives its verdicts through the Python handle."""

    url: str
    tokens: dict[tuple[str, str], str]  # (tenant, person) -> bearer token
    sent: int = 0

    async def give(self, http: httpx.AsyncClient, tenant: str, workspace: str, person: str,
                   command_id: str, feedback_type: str, target: dict[str, str],
                   value: dict[str, Any]) -> None:
        """POST one give_feedback command; a lost connection or a 503 is retried with the same
        command id, which records once."""
        frame = {"type": "command", "command_id": command_id,
                 "command": {"type": "give_feedback", "feedback_type": feedback_type,
                             "target": target, "value": value}}
        url = f"{self.url}/v1/workspaces/{tenant}.{workspace}/commands"
        headers = {"Authorization": f"Bearer {self.tokens[(tenant, person)]}"}
        for attempt in range(10):
            try:
                answer = await http.post(url, json=frame, headers=headers)
            except httpx.TransportError:
                await asyncio.sleep(0.2 * (attempt + 1))
                continue
            if answer.status_code == 503:
                await asyncio.sleep(0.2 * (attempt + 1))
                continue
            if answer.status_code != 200:
                raise StreamsError(f"the REST surface refused {command_id}: {answer.text}")
            self.sent += 1
            return
        raise StreamsError(f"the REST surface did not record {command_id} after 10 attempts")


async def _people(runtime: Runtime, ws: Workspace, incidents: int, rng: random.Random,
                  view: TenantView, people: People) -> None:
    """Raise error spikes, wait for their triage runs, and judge them as people would, over
    REST."""
    for i in range(incidents):
        service = f"svc-{i:03d}"
        for _ in range(3):
            await ws.append(AppEvent(name="ops:error_spike",
                                     data={"service": service, "errors": rng.randint(3, 20)}))
    judged: set[str] = set()
    deadline = time.monotonic() + 120
    async with runtime.http(timeout=60) as http:
        while len(judged) < incidents and time.monotonic() < deadline:
            envelopes = await ws.read()
            view.envelopes = envelopes
            for envelope in envelopes:
                run = envelope.event
                if not (isinstance(run, RunSucceeded) and run.rule == "ops:error-spike") \
                        or run.run_id in judged:
                    continue
                judged.add(run.run_id)
                person = rng.choice(PEOPLE)
                started = next(e for e in envelopes if isinstance(e.event, RunStarted)
                               and e.event.run_id == run.run_id)
                assert isinstance(started.event, RunStarted)
                give = functools.partial(people.give, http, ws.tenant, ws.workspace, person)
                await give(f"{run.run_id}:triage", "triage_quality",
                           {"kind": "run", "run_id": run.run_id},
                           TriageQuality(correct=rng.random() > 0.25,
                                         severity=rng.choice(["low", "high", "critical"]),
                                         note="missed the deploy" if rng.random() < 0.2
                                         else None).model_dump(mode="json"))
                await give(f"{run.run_id}:fired", "should_have_fired",
                           {"kind": "firing", "firing_id": started.event.firing_id},
                           {"fired_rightly": rng.random() > 0.1})
                await give(f"{run.run_id}:resolution", "resolution",
                           {"kind": "chain", "correlation_id": started.correlation_id},
                           Resolution(resolved=rng.random() > 0.1,
                                      minutes_to_mitigate=rng.randint(1, 240)
                                      ).model_dump(mode="json"))
            await asyncio.sleep(0.3)
    view.people_done = True


RUNBOOK = {"when": "the error rate passes 5% for 5 minutes", "then": "page the on-call",
           "check": "the last deploy"}
"""The artifact the drafting rule's runs propose changes to."""


def _outcomes(envelopes: list[Envelope]) -> int:
    return len({e.event_id for e in envelopes if isinstance(e.event, FeedbackGiven)
                and e.event.feedback_type == PROPOSAL_OUTCOME and e.actor == OUTCOME_EVALUATOR})


async def _drafts(ws: Workspace, drafts: int, rng: random.Random, view: TenantView) -> None:
    """Ask the drafting rule for changes to a runbook; people accept, edit or reject each
    proposal its runs make (the worker's proposal-outcome rule scores the runs)."""
    view.drafts = drafts
    await ws.create_artifact("oncall-runbook", RUNBOOK, kind="runbook")
    for i in range(drafts):
        field_name = rng.choice(sorted(RUNBOOK))
        await ws.append(DraftRequested(artifact_id="oncall-runbook", kind="runbook",
                                       fields={field_name: f"{RUNBOOK[field_name]} (v{i})"}
                                       ).to_event())
    resolved: set[str] = set()
    deadline = time.monotonic() + 120
    while len(resolved) < drafts and time.monotonic() < deadline:
        for envelope in await ws.read():
            made = envelope.event
            if not isinstance(made, ProposalMade) or made.proposal_id in resolved \
                    or envelope.actor != rule_actor(DRAFT_RULE):
                continue
            resolved.add(made.proposal_id)
            who = rng.choice(PEOPLE)
            person = ws.as_actor(UserActor(id=who))
            verdict = rng.random()
            if verdict < 0.5:
                await person.resolve(made.proposal_id)
            elif verdict < 0.8:
                await person.resolve(made.proposal_id,
                                     changes={"set": {"note": f"checked by {who}"}})
            else:
                await person.resolve(made.proposal_id, "rejected")
        await asyncio.sleep(0.3)
    view.drafts_done = True


def _rates_line(rates: ProposalRates) -> str:
    return (f"  {rates.rule}: {rates.resolved} proposals resolved: accepted "
            f"{100 * rates.acceptance_rate:.0f}%, edited {100 * rates.edit_rate:.0f}%, "
            f"rejected {100 * rates.rejection_rate:.0f}%")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(url: str, server: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise StreamsError(f"streams serve exited ({server.returncode})")
        try:
            if httpx.get(f"{url}/readyz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise StreamsError(f"streams serve not ready at {url} within {timeout:.0f}s")


def _ends(consumer: Consumer, topic: str) -> int:
    return sum(high for _low, high in watermarks(consumer, topic).values())


def _langfuse_counts(standin: LangfuseStandIn, workspace: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for score in standin.scores():
        meta = score.get("metadata") or {}
        if meta.get("workspace") == workspace:
            counts[meta.get("tenant", "?")] = counts.get(meta.get("tenant", "?"), 0) + 1
    return counts


def _table(settings: Settings, consumer: Consumer, views: dict[str, TenantView],
           started: float, langfuse: dict[str, int]) -> tuple[Table, bool]:
    table = Table(title=f"feedback-streams demo ({time.monotonic() - started:.0f}s)")
    for column in ("tenant", "events", "firings", "runs", "failed", "escal.",
                   "feedback p/j", "outcomes", "scores", "expected", "langfuse", "dead"):
        table.add_column(column, justify="left" if column == "tenant" else "right")
    done = True
    for tenant, view in views.items():
        topics = tenant_topics(tenant, settings.topic_prefix)
        events = _ends(consumer, topics.events) - view.start_offsets[topics.events]
        scores = _ends(consumer, topics.scores) - view.start_offsets[topics.scores]
        dead = _ends(consumer, topics.deadletter) - view.start_offsets[topics.deadletter]
        feedback = [e for e in view.envelopes if isinstance(e.event, FeedbackGiven)]
        judge = sum(1 for e in feedback if e.actor.kind == "evaluator")
        expected = view.expected_scores()
        settled = view.count(RunStarted) == view.count(RunSucceeded) + \
            view.count(RunDeadLettered)
        in_langfuse = langfuse.get(tenant, 0)
        outcomes = _outcomes(view.envelopes)
        done = done and view.people_done and settled and expected > 0 and \
            scores >= expected and in_langfuse >= expected and view.drafts_done and \
            outcomes >= view.drafts
        table.add_row(
            tenant, str(events), str(view.count(RuleFired)), str(view.count(RunSucceeded)),
            str(view.count(RunDeadLettered)), str(view.count(RunSucceeded, action="escalate")),
            f"{len(feedback) - judge}/{judge}", f"{outcomes}/{view.drafts}",
            f"[green]{scores}[/green]", str(expected),
            f"[green]{in_langfuse}[/green]", str(dead))
    return table, done


def _triage_input(context: FeedbackContext[TriageQuality]) -> TriageInput:
    """What the judge looked at, rebuilt from the judged run: its service, the errors of the
    spikes that started it, and whether it opened an incident."""
    record = context.run
    assert record is not None  # feedback on a run always has one
    return TriageInput(
        service=str(record.run.scope.get("service", "?")),
        errors=sum(int(e.event.data.get("errors", 1)) for e in record.matched
                   if isinstance(e.event, AppEvent)),
        opened_incident=any(isinstance(e.event, AppEvent)
                            and e.event.name == IncidentOpened.app_event_name
                            for e in record.emitted))


def _agreement_line(row: FieldAgreement) -> str:
    part = row.categorical
    if part is None or part.kappa is None or part.ci is None:
        return (f"  {row.evaluator} on {row.feedback_type}.{row.field}: kappa undefined "
                f"(n={row.n})")
    return (f"  {row.evaluator} on {row.feedback_type}.{row.field}: kappa {part.kappa:.2f} "
            f"[{part.ci[0]:.2f}, {part.ci[1]:.2f}], agreeing {100 * part.observed:.0f}% "
            f"of n={part.n} pairs")


def evaluate_and_report(runtime: Runtime, tenant: str, workspace: str,
                        envelopes: list[Envelope], folder: Path, console: Console) -> None:
    """The demo's last section for one tenant: a dataset of the people's triage verdicts
    (saved as JSON lines), the judge's agreement with them, and the workspace's report (the
    code of `streams report`), all in `folder`."""
    source = LogFeedbackSource(envelopes, feedback_type=TriageQuality, input_type=TriageInput,
                               input=_triage_input, targets={"run"})

    async def evaluate() -> tuple[Dataset[TriageInput, TriageQuality], list[FieldAgreement]]:
        dataset = await collect(f"{tenant}-{workspace}-triage", source)
        rows = await judge_agreement(envelopes)
        return dataset, [r for r in rows if r.feedback_type == "triage_quality"]

    dataset, agreement = asyncio.run(evaluate())
    rates = asyncio.run(proposal_rates(envelopes))
    console.print(f"[bold]{tenant}[/bold]: proposal rates per rule (people's answers are "
                  f"random: about half accepted, 30% edited, 20% rejected):")
    for rule_rates in rates.values():
        console.print(_rates_line(rule_rates))
    folder.mkdir(parents=True, exist_ok=True)
    dataset.save(folder / "triage-dataset.jsonl")
    examples = len(dataset)
    files = make_report(runtime, tenant, workspace, out=folder)
    console.print(f"[bold]{tenant}[/bold]: dataset of {examples} people's triage verdicts "
                  f"({folder / 'triage-dataset.jsonl'}); the judge against them (the demo's "
                  f"people answer at random, so kappa near 0 is what to expect):")
    for row in agreement:
        console.print(_agreement_line(row))
    if not agreement:
        console.print("  no run judged by both the judge and a person (the judge's budget, "
                      "20 an hour per tenant, may be spent by earlier demo runs this hour)")
    console.print(f"  report: {files.html_path} and {files.json_path.name}")


def run_demo(settings: Settings, tenants: list[str], *, chains: int = 30,
             timeout: float = 180.0, console: Console | None = None,
             report_dir: Path | None = None, ui: bool = False) -> bool:
    """Run the demo end to end; True when every expected score arrived and each tenant's
    dataset, agreement and report were made (into `report_dir`, default a folder under the
    temporary directory named after the demo's workspace). With `ui`, then print the
    annotation page's address and a person's key, and keep everything running until Ctrl-C."""
    console = console or Console()
    runtime = Runtime(settings)
    admin = runtime.admin
    for tenant in tenants:
        info = admin.create_tenant(tenant)
        console.print(f"tenant [bold]{tenant}[/bold]: {', '.join(info.topics.all())}")
    console.print("columns: events in; rule firings; runs succeeded; runs dead-lettered; "
                  "escalations; feedback by people/judge; runs scored by how people received "
                  "their proposals / proposals asked for; scores out; scores expected from "
                  "the feedback; scores in Langfuse (a local stand-in, not Langfuse); "
                  "dead letters")
    consumer = runtime.reader(fresh_group("demo-watch"))
    views = {t: TenantView() for t in tenants}
    for tenant, view in views.items():
        for topic in tenant_topics(tenant, settings.topic_prefix).all():
            view.start_offsets[topic] = _ends(consumer, topic)

    # The children get exactly these settings, whatever this process's environment says.
    env = settings.child_env()
    # Logs go to files: an undrained pipe would block a process once full.
    log_path = os.path.join(tempfile.gettempdir(), f"streams-demo-worker-{os.getpid()}.log")
    worker = _spawn(["worker", *DEMO_TYPES, "--rules", "streams.examples.ops_rules",
                     "--rules", "streams.examples.drafting", "--proposal-outcome"],
                    env, log_path)
    # Langfuse cannot run here; a stand-in applying its rules receives the scores.
    standin = LangfuseStandIn().start()
    sink_log = os.path.join(tempfile.gettempdir(), f"streams-demo-sink-{os.getpid()}.log")
    sink = _spawn(["sink", "langfuse", *DEMO_TYPES,
                   "--cursor", f"demo-{os.getpid()}"],
                  settings.replace(langfuse_host=standin.url,
                                   langfuse_public_key=standin.public_key,
                                   langfuse_secret_key=standin.secret_key,
                                   # The worker has the health port; the sink the next one.
                                   health_port=settings.health_port + 1
                                   if settings.health_port else 0).child_env(),
                  sink_log)
    console.print(f"Langfuse sink started (pid {sink.pid}) into the Langfuse stand-in at "
                  f"{standin.url}")
    console.print(f"worker started (pid {worker.pid}) with the ops rules: error spikes start "
                  f"triage runs, a judge reviews them (at most 20 an hour), wrong triages "
                  f"escalate; a drafting rule's runs propose changes to a runbook, people "
                  f"accept, edit or reject them, and the proposal-outcome rule scores the runs; "
                  f"{chains} incidents per tenant (the judge's budget is per tenant "
                  f"and hour, so demo runs within one hour share it)")
    # The people give feedback over REST: a `streams serve` and a key per tenant and person.
    serve_port = _free_port()
    serve_log = os.path.join(tempfile.gettempdir(), f"streams-demo-serve-{os.getpid()}.log")
    server = _spawn(["serve", "--types", "streams.examples.ops", "--port", str(serve_port)],
                    env, serve_log)
    keys = KeyStore(runtime)
    people = People(f"http://127.0.0.1:{serve_port}", {})
    client = StreamsClient(runtime)
    # A workspace of its own per demo run: a tenant's earlier runs stay out of the view.
    workspace = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    started = time.monotonic()
    ok = False
    finished = threading.Event()
    producer: _Background | None = None
    try:
        keys.start()
        people.tokens.update({(t, p): keys.create(t, UserActor(id=p), {"give_feedback", "read"},
                                                  note="demo")[1]
                              for t in tenants for p in PEOPLE})
        _wait_ready(people.url, server)
        console.print(f"REST service started (pid {server.pid}) at {people.url}: the people "
                      f"give feedback with POST /v1/workspaces/<tenant>.<workspace>/commands, "
                      f"each with a key of their own; the judge through the Python handle")

        async def produce() -> None:
            rng = random.Random(7)
            await asyncio.gather(*(
                _people(runtime, client.workspace(t, workspace, actor=UserActor(id="ops-bot")),
                        chains, rng, views[t], people) for t in tenants), *(
                _drafts(client.workspace(t, workspace, actor=UserActor(id="ops-bot")),
                        max(3, chains // 3), random.Random(11), views[t]) for t in tenants))
            # Keep the view fresh while the judge and escalations finish.
            while not finished.is_set():
                for tenant in tenants:
                    views[tenant].envelopes = await client.workspace(tenant, workspace).read()
                await asyncio.sleep(0.5)

        with Live(console=console, refresh_per_second=4) as live:
            producer = _Background(produce)
            settled_at: float | None = None
            while time.monotonic() - started < timeout:
                table, done = _table(settings, consumer, views, started,
                                     _langfuse_counts(standin, workspace))
                live.update(table)
                if producer.error is not None:
                    raise producer.error
                # Done once every expected score arrived and stayed so for two seconds
                # (the judge's feedback arrives after the people's).
                settled_at = (settled_at or time.monotonic()) if done else None
                if settled_at is not None and time.monotonic() - settled_at > 2.0:
                    ok = True
                    break
                if any(p.poll() is not None for p in (worker, sink, server)):
                    break
                time.sleep(0.5)
        console.print()
        crashed = [(n, p, f) for n, p, f in (("worker", worker, log_path),
                                             ("sink", sink, sink_log),
                                             ("serve", server, serve_log))
                   if p.poll() is not None]
        for name, proc, path in crashed:
            with open(path, errors="replace") as log:
                tail = log.read()[-3000:]
            console.print(f"[red]{name} exited early ({proc.returncode}):[/red]\n{tail}")
        if crashed:
            ok = False
        elif not ok:
            console.print(f"[red]not every score arrived within {timeout:.0f}s[/red]")
        else:
            console.print(f"[green]every expected score arrived, on the scores topic and in "
                          f"the Langfuse stand-in, in {time.monotonic() - started:.1f}s"
                          f"[/green]")
            finished.set()
            producer.thread.join(timeout=10)
            folder = report_dir or Path(tempfile.gettempdir()) / f"streams-{workspace}"
            console.print(f"\n[bold]Evaluation[/bold]: datasets, judge agreement and reports "
                          f"in {folder}")
            try:
                for tenant in tenants:
                    evaluate_and_report(runtime, tenant, workspace, views[tenant].envelopes,
                                        folder / tenant, console)
            except StreamsError as exc:
                console.print(f"[red]the evaluation section failed: {exc}[/red]")
                ok = False
            if ui:
                _keep_open(console, people, tenants[0], workspace)
    finally:
        finished.set()
        if producer is not None:
            producer.thread.join(timeout=10)
        consumer.close()
        runtime.close()
        keys.close()
        for name, proc, path in (("serve", server, serve_log), ("sink", sink, sink_log),
                                 ("worker", worker, log_path)):
            _stop(proc)
            console.print(f"{name} stopped (exit {proc.returncode}); its log: {path}")
        standin.stop()
    return ok


def _keep_open(console: Console, people: People, tenant: str, workspace: str) -> None:
    """Print how to open the annotation page as one of the demo's people; wait for Ctrl-C
    (the worker, sink and service keep running, so new runs appear on the page live)."""
    person = PEOPLE[0]
    console.print(
        f"\n[bold]Annotation page[/bold]: {people.url}/ui/\n"
        f"  sign in as {person} with API key {people.tokens[(tenant, person)]}\n"
        f"  workspace {tenant}.{workspace}\n"
        f"  the worker keeps running: the runs it makes from now on appear on the page live\n"
        f"Press Ctrl-C to stop the demo.")
    try:
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        console.print("stopping")


def _spawn(args: list[str], env: dict[str, str], log_path: str) -> subprocess.Popen[bytes]:
    """Start `python -m streams ARGS` with its output in `log_path`."""
    with open(log_path, "wb") as log:
        return subprocess.Popen([sys.executable, "-m", "streams", *args], env=env,
                                stdout=log, stderr=subprocess.STDOUT)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 30 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class _Background:
    """Runs the async producer in a thread so the live view keeps refreshing."""

    def __init__(self, coro_fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self.error: BaseException | None = None

        def run() -> None:
            try:
                asyncio.run(coro_fn())
            except BaseException as exc:
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
