"""The demo: tenants, a worker running the ops rules, people giving feedback, and a live view
of events in, firings, runs, escalations, feedback and scores out, per tenant; then, per
tenant, a dataset of the people's triage verdicts, the judge's agreement with them, and the
workspace's report (report.json, report.html) in a folder it names.

The scores go to an embedded DuckDB sink (the `duckdb` extra) in that folder, or with
`langfuse=True` to the Langfuse stand-in of the repository's standins/ (not shipped in the
package: run the demo from a clone). It needs the `demo` extra (serve, duckdb, httpx).
"""

from __future__ import annotations

import asyncio
import functools
import random
import shutil
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
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, TopicPartition
from rich.console import Console
from rich.live import Live
from rich.table import Table

from streams.adapters.kafka.log import watermarks
from streams.core.actors import UserActor
from streams.core.datasets import Dataset, FeedbackContext, LogFeedbackSource, collect
from streams.core.errors import ConfigError, StreamsError
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
from streams.core.measures.costs import fold_judge_costs
from streams.core.proposals import EVALUATOR as OUTCOME_EVALUATOR
from streams.core.proposals import PROPOSAL_OUTCOME, ProposalRates, proposal_rates
from streams.core.runs import rule_actor
from streams.core.scores import scores_of
from streams.core.tenancy import fresh_group, tenant_topics
from streams.examples.drafting import DRAFT_RULE, DraftRequested
from streams.examples.judged_ops import BUDGET, CANDIDATE
from streams.examples.judged_ops import judge_triage as _judge_rule
from streams.examples.ops import IncidentOpened, Resolution, TriageQuality
from streams.examples.ops_rules import TriageInput
from streams.extras import needs, require
from streams.runtime.client.keys import KeyStore
from streams.runtime.client.workspace import StreamsClient, Workspace
from streams.runtime.root import Runtime
from streams.runtime.sink.runner import SinkRunner
from streams.settings import Settings
from streams.surfaces.report.run import make_report

with needs("demo", "streams demo"):
    import httpx

if TYPE_CHECKING:
    from streams.adapters.duckdb import DuckDBScoreSink

PEOPLE = ("ada", "grace", "linus")
JUDGE_RULE = _judge_rule.name
DEMO_TYPES = ["--types", "streams.examples.ops", "--types", "streams.core.proposals.outcome"]


@dataclass
class TenantView:
    """What the demo sees of one tenant's log."""

    envelopes: list[Envelope] = field(default_factory=list)
    people_done: bool = False
    drafts: int = 0
    drafts_done: bool = False

    def see(self, envelopes: list[Envelope]) -> list[Envelope]:
        """Take the log as read now, a repeated record once: one written twice (an action
        run again after an aborted batch) carries its derived event id twice, and every
        reader folds it once."""
        self.envelopes = list({e.event_id: e for e in envelopes}.values())
        return self.envelopes

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
            envelopes = view.see(await ws.read())
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


class RecordCounts:
    """Records per topic written since `start`, as a read_committed reader is handed them:
    under exactly once, transaction markers take offsets, so end offsets overcount."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.counts: dict[str, int] = {}

    def start(self, topics: list[str]) -> None:
        """Count from each topic's end now."""
        parts = []
        for topic in topics:
            self.counts.setdefault(topic, 0)
            parts += [TopicPartition(topic, p, high)
                      for p, (_low, high) in watermarks(self.consumer, topic).items()]
        self.consumer.assign(parts)

    def poll(self) -> dict[str, int]:
        """The counts, after taking what has arrived."""
        while batch := self.consumer.consume(10_000, 0.05):
            for msg in batch:
                if msg.error() is None:
                    topic = msg.topic() or ""
                    self.counts[topic] = self.counts.get(topic, 0) + 1
        return self.counts


def _standin_counts(standin: Any, workspace: str) -> dict[str, int]:
    """Scores of `workspace` in the Langfuse stand-in, per tenant."""
    counts: dict[str, int] = {}
    for score in standin.scores():
        meta = score.get("metadata") or {}
        if meta.get("workspace") == workspace:
            counts[meta.get("tenant", "?")] = counts.get(meta.get("tenant", "?"), 0) + 1
    return counts


def _duckdb_counts(sink: DuckDBScoreSink, workspace: str) -> dict[str, int]:
    """Scores of `workspace` in the DuckDB file, per tenant (one row per score: the sink
    upserts by the score's key)."""
    rows = sink.query("select tenant, count(*) from scores where workspace = ? group by tenant",
                      [workspace])
    return {str(tenant): int(count) for tenant, count in rows}


ROWS = ("events in", "rule firings", "runs succeeded", "runs dead-lettered", "escalations",
        "feedback: people / judge", "proposal outcomes / asked", "scores out",
        "scores expected", "scores in {sink}", "dead letters")
"""The live view's rows, one column per tenant: a table as narrow as its labels, so it fits
80 columns with several tenants and no header is cut."""


def view_table(title: str, sink: str, cells: dict[str, list[str]]) -> Table:
    """The live view: a row per measure (ROWS), a column per tenant (`cells[tenant]`, in the
    order of ROWS)."""
    table = Table(title=title, title_justify="left")
    table.add_column("")
    for tenant in cells:
        table.add_column(tenant, justify="right", overflow="fold")
    for i, label in enumerate(ROWS):
        table.add_row(label.format(sink=sink), *(column[i] for column in cells.values()))
    return table


def _table(settings: Settings, records: RecordCounts, views: dict[str, TenantView],
           started: float, in_sink: dict[str, int], sink: str) -> tuple[Table, bool]:
    cells: dict[str, list[str]] = {}
    done = True
    counts = records.poll()
    for tenant, view in views.items():
        topics = tenant_topics(tenant, settings.topic_prefix)
        events = counts.get(topics.events, 0)
        scores = counts.get(topics.scores, 0)
        dead = counts.get(topics.deadletter, 0)
        feedback = [e for e in view.envelopes if isinstance(e.event, FeedbackGiven)]
        judge = sum(1 for e in feedback if e.actor.kind == "evaluator")
        expected = view.expected_scores()
        settled = view.count(RunStarted) == view.count(RunSucceeded) + \
            view.count(RunDeadLettered)
        arrived = in_sink.get(tenant, 0)
        outcomes = _outcomes(view.envelopes)
        done = done and view.people_done and settled and expected > 0 and \
            scores >= expected and arrived >= expected and view.drafts_done and \
            outcomes >= view.drafts
        cells[tenant] = [
            str(events), str(view.count(RuleFired)), str(view.count(RunSucceeded)),
            str(view.count(RunDeadLettered)), str(view.count(RunSucceeded, action="escalate")),
            f"{len(feedback) - judge} / {judge}", f"{outcomes} / {view.drafts}",
            f"[green]{scores}[/green]", str(expected), f"[green]{arrived}[/green]", str(dead)]
    title = f"feedback-streams demo ({time.monotonic() - started:.0f}s)"
    return view_table(title, sink, cells), done


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


KAPPA_NOTE = (
    "  (kappa is agreement corrected for chance: 1 is full agreement, 0 no better than two "
    "raters guessing with their own label frequencies; when one label dominates, most "
    "agreement is expected by chance alone, so a kappa of 0.00 can come with a high "
    "'agreeing' percentage)")
"""Printed under the agreement rows: why a high percentage can come with a kappa of 0."""


def evaluate_and_report(runtime: Runtime, tenant: str, workspace: str,
                        envelopes: list[Envelope], folder: Path, console: Console, *,
                        explain_kappa: bool = True) -> None:
    """The demo's last section for one tenant: a dataset of the people's triage verdicts
    (saved as JSON lines), the judge's agreement with them (with KAPPA_NOTE under the rows when
    `explain_kappa`), and the workspace's report (the code of `streams report`), all in
    `folder`."""
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
    if agreement and explain_kappa:
        console.print(KAPPA_NOTE)
    if not agreement:
        console.print("  no run judged by both the judge and a person (the judge's limit and "
                      "budget, per tenant and hour, may be spent by earlier demo runs this "
                      "hour)")
    for line in budget_and_canary_lines(envelopes):
        console.print(line)
    console.print(f"  report: {files.html_path} and {files.json_path.name}")


def budget_and_canary_lines(envelopes: list[Envelope]) -> list[str]:
    """What the judge's budget refused and what the canary version did, from the runs of
    the judge rule in `envelopes` (a tenant's log), as lines to print."""
    outputs = [e.event.output for e in envelopes if isinstance(e.event, RunSucceeded)
               and e.event.rule == JUDGE_RULE]
    refused = sum(1 for o in outputs if o.get("over_budget") == BUDGET.name)
    called = sum(1 for o in outputs if "value" in o and not o.get("reused"))
    lines = [f"  the judge's budget {BUDGET.name!r}: {called} of {len(outputs)} judge runs "
             f"called the judge, {refused} found the budget spent and made no call "
             f"(`streams rules why ops:judge-triage EVENT_ID --rules streams.examples.judged_ops "
             f"--tenant T --workspace W` says over_budget for them)"]
    shadows = [o["shadow"] for o in outputs if isinstance(o.get("shadow"), dict)]
    for row in fold_judge_costs(envelopes):
        canary = " (the canary: kept apart, never given as feedback)" \
            if row.version == CANDIDATE.version else ""
        lines.append(f"  {row.evaluator}@{row.version}: {row.given} verdicts, {row.calls} "
                     f"calls{canary}")
    handed = sum(1 for o in shadows if "handed_off" in o)
    if shadows:
        lines.append(f"  the canary judged {len(shadows) - handed} of the {len(shadows)} inputs "
                     f"beside the current version and handed {handed} to people; the report's "
                     f"judges part compares the two with people and on cost")
    return lines


def run_demo(settings: Settings, tenants: list[str], *, chains: int = 30,
             timeout: float = 180.0, console: Console | None = None,
             report_dir: Path | None = None, ui: bool = False, langfuse: bool = False) -> bool:
    """Run the demo end to end; True when every expected score arrived and each tenant's
    dataset, agreement and report were made (into `report_dir`, default a folder under the
    temporary directory named after the demo's workspace). The scores go to an embedded DuckDB
    sink (`scores.duckdb` in that folder), or with `langfuse` through `streams sink langfuse`
    into the Langfuse stand-in. The children's logs go to one run directory, removed when the
    demo succeeds and kept (and named) when it does not. With `ui`, then print the annotation
    page's address and a person's key, and keep everything running until Ctrl-C.

    Raises MissingExtra before any work when the `demo` extra is not installed."""
    require("demo", "streams demo")
    standin_type = _standin_type() if langfuse else None
    console = console or Console()
    # A workspace of its own per demo run: a tenant's earlier runs stay out of the view.
    workspace = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    folder = report_dir or Path(tempfile.gettempdir()) / f"streams-{workspace}"
    runtime = Runtime(settings)
    admin = runtime.admin
    for tenant in tenants:
        info = admin.create_tenant(tenant)
        console.print(f"tenant [bold]{tenant}[/bold]: {', '.join(info.topics.all())}")
    sink_name = "Langfuse" if langfuse else "DuckDB"
    console.print("the live view, per tenant: 'proposal outcomes' are the runs scored by how "
                  "people received their proposals; 'scores in "
                  + ("Langfuse' counts them in a local stand-in of Langfuse, not Langfuse"
                     if langfuse else "DuckDB' counts them in the embedded sink's file"))
    consumer = runtime.reader(fresh_group("demo-watch"))
    views = {t: TenantView() for t in tenants}
    records = RecordCounts(consumer)
    named = [tenant_topics(t, settings.topic_prefix) for t in tenants]
    records.start([name for t in named for name in (t.events, t.scores, t.deadletter)])

    # The children get exactly these settings, whatever this process's environment says.
    env = settings.child_env()
    # Logs go to files (an undrained pipe would block a process once full), all in one run
    # directory.
    run_dir = Path(tempfile.mkdtemp(prefix="streams-demo-run-"))
    logs = {name: run_dir / f"{name}.log" for name in ("worker", "sink", "serve")}
    worker = _spawn(["worker", *DEMO_TYPES, "--rules", "streams.examples.judged_ops",
                     "--rules", "streams.examples.drafting", "--proposal-outcome"],
                    env, logs["worker"])
    children: dict[str, subprocess.Popen[bytes]] = {"worker": worker}
    standin: Any = None
    embedded: _EmbeddedSink | None = None
    if standin_type is not None:
        # Langfuse cannot run here; a stand-in applying its rules receives the scores.
        standin = standin_type().start()
        children["sink"] = _spawn(
            ["sink", "langfuse", *DEMO_TYPES, "--cursor", f"demo-{workspace}"],
            settings.replace(langfuse_host=standin.url, langfuse_public_key=standin.public_key,
                             langfuse_secret_key=standin.secret_key,
                             # The worker has the health port; the sink the next one.
                             health_port=settings.health_port + 1
                             if settings.health_port else 0).child_env(), logs["sink"])
        console.print(f"Langfuse sink started (pid {children['sink'].pid}) into the Langfuse "
                      f"stand-in at {standin.url}")
    else:
        embedded = _EmbeddedSink(runtime, folder / "scores.duckdb", f"demo-{workspace}")
        console.print(f"DuckDB sink running in this process into {embedded.sink.path}")
    console.print(f"worker started (pid {worker.pid}) with the ops rules: error spikes start "
                  f"triage runs, a judge reviews them (at most 20 an hour) with a candidate "
                  f"version beside it (a canary: its verdicts kept apart) under a budget of "
                  f"{BUDGET.limit:,} tokens an hour ({BUDGET.limit // 1_000} calls of 1,000), "
                  f"wrong triages escalate; a drafting rule's runs propose changes to a "
                  f"runbook, people accept, edit or reject them, and the proposal-outcome rule "
                  f"scores the runs; {chains} incidents per tenant (the judge's limit and "
                  f"budget are per tenant and hour, so demo runs within one hour share them)")
    # The people give feedback over REST: a `streams serve` and a key per tenant and person.
    serve_port = _free_port()
    server = _spawn(["serve", "--types", "streams.examples.ops", "--port", str(serve_port)],
                    env, logs["serve"])
    children["serve"] = server
    keys = KeyStore(runtime)
    people = People(f"http://127.0.0.1:{serve_port}", {})
    client = StreamsClient(runtime)
    started = time.monotonic()
    ok = False
    finished = threading.Event()
    producer: _Background | None = None

    def in_sink() -> dict[str, int]:
        if embedded is not None:
            if embedded.error is not None:
                raise embedded.error
            return _duckdb_counts(embedded.sink, workspace)
        return _standin_counts(standin, workspace)

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
                    views[tenant].see(await client.workspace(tenant, workspace).read())
                await asyncio.sleep(0.5)

        with Live(console=console, refresh_per_second=4) as live:
            producer = _Background(produce)
            settled_at: float | None = None
            while time.monotonic() - started < timeout:
                table, done = _table(settings, records, views, started, in_sink(), sink_name)
                live.update(table)
                if producer.error is not None:
                    raise producer.error
                # Done once every expected score arrived and stayed so for two seconds
                # (the judge's feedback arrives after the people's).
                settled_at = (settled_at or time.monotonic()) if done else None
                if settled_at is not None and time.monotonic() - settled_at > 2.0:
                    ok = True
                    break
                if any(p.poll() is not None for p in children.values()):
                    break
                time.sleep(0.5)
        console.print()
        crashed = [(n, p) for n, p in children.items() if p.poll() is not None]
        for name, proc in crashed:
            tail = logs[name].read_text(errors="replace")[-3000:]
            console.print(f"[red]{name} exited early ({_status(proc.returncode)}):[/red]\n"
                          f"{tail}")
        if crashed:
            ok = False
        elif not ok:
            console.print(f"[red]not every score arrived within {timeout:.0f}s[/red]")
        else:
            console.print(f"[green]every expected score arrived, on the scores topic and in "
                          f"the {'Langfuse stand-in' if langfuse else 'DuckDB sink'}, in "
                          f"{time.monotonic() - started:.1f}s[/green]")
            finished.set()
            producer.thread.join(timeout=10)
            console.print(f"\n[bold]Evaluation[/bold]: datasets, judge agreement and reports "
                          f"in {folder}")
            try:
                for i, tenant in enumerate(tenants):
                    evaluate_and_report(runtime, tenant, workspace, views[tenant].envelopes,
                                        folder / tenant, console, explain_kappa=i == 0)
            except StreamsError as exc:
                console.print(f"[red]the evaluation section failed: {exc}[/red]")
                ok = False
            if embedded is not None:
                console.print(f"  scores: {embedded.sink.path} (table scores; e.g. duckdb "
                              f"{embedded.sink.path} \"select name, count(*) from scores "
                              f"group by name\")")
            if ui:
                _keep_open(console, people, tenants[0], workspace)
    finally:
        finished.set()
        if producer is not None:
            producer.thread.join(timeout=10)
        consumer.close()
        runtime.close()
        keys.close()
        for name in ("serve", "sink", "worker"):
            if name in children:
                console.print(f"{name} {_stop(children[name])}")
        if embedded is not None:
            embedded.stop()
            console.print(f"DuckDB sink stopped: {embedded.stats()}")
        if standin is not None:
            standin.stop()
        if ok:
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            kept = ", ".join(sorted(path.name for path in run_dir.iterdir()))
            console.print(f"the demo failed; its children's logs are kept in {run_dir} "
                          f"({kept})")
    return ok


def _standin_type() -> Any:
    """The Langfuse stand-in's class, from the repository's standins/ (not in the package)."""
    try:
        from standins.langfuse_standin import LangfuseStandIn
    except ImportError as exc:
        raise ConfigError("streams demo --langfuse needs the Langfuse stand-in of the "
                          "repository's standins/ directory: run it from a clone of "
                          "feedback-streams (deploy/demo.sh --langfuse)") from exc
    return LangfuseStandIn


class _EmbeddedSink:
    """The demo's default sink: DuckDB in this process, under the same SinkRunner as `streams
    sink duckdb`, on a thread of its own (the live view reads the file through the sink)."""

    def __init__(self, runtime: Runtime, path: Path, cursor: str) -> None:
        from streams.adapters.duckdb import DuckDBScoreSink

        path.parent.mkdir(parents=True, exist_ok=True)
        self.sink = DuckDBScoreSink(path)
        self.sink.query("select count(*) from scores")  # open (and fail) now, not in the thread
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_asked = threading.Event()
        self._runner: SinkRunner | None = None
        self._runtime = runtime
        self._cursor = cursor
        self._thread = threading.Thread(target=self._run, name="demo-duckdb-sink", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        async def run() -> None:
            self._runner = SinkRunner(self._runtime, self.sink, cursor=self._cursor)
            self._loop = asyncio.get_running_loop()
            if self._stop_asked.is_set():  # asked before the loop was there to be told
                self._runner.stop()
            await self._runner.run()

        try:
            asyncio.run(run())
        except BaseException as exc:
            self.error = exc

    def stats(self) -> str:
        """What the runner handed on, for the last line about it."""
        stats = self._runner.stats if self._runner is not None else None
        return ", ".join(f"{k} {v}" for k, v in vars(stats).items()
                         if isinstance(v, int) and v) if stats else "(never started)"

    def stop(self) -> None:
        """Stop the runner (it commits what it handed on) and close the file."""
        self._stop_asked.set()
        loop, runner = self._loop, self._runner
        if loop is not None and runner is not None and not loop.is_closed():
            # In the runner's own loop: its stop event is not thread-safe.
            loop.call_soon_threadsafe(runner.stop)
        self._thread.join(timeout=60)
        self.sink.close()


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


def _spawn(args: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start `python -m streams ARGS` with its output in `log_path`."""
    with open(log_path, "wb") as log:
        return subprocess.Popen([sys.executable, "-m", "streams", *args], env=env,
                                stdout=log, stderr=subprocess.STDOUT)


def _status(returncode: int | None) -> str:
    """A child's exit status in words."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def _stop(proc: subprocess.Popen[bytes]) -> str:
    """SIGTERM, then SIGKILL after 30 s; says how it ended, for the demo's last lines."""
    if proc.poll() is not None:
        return f"had already ended ({_status(proc.returncode)})"
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return "did not stop within 30 s of SIGTERM: killed"
    if proc.returncode in (0, -signal.SIGTERM):
        return "stopped on the demo's SIGTERM, as asked (not a crash)"
    return f"stopped on SIGTERM with {_status(proc.returncode)}: see its log"


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
