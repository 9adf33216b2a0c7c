"""The proposal-outcome rule in workers on the real broker: each traced proposal scored
exactly once (its ProposalOutcome feedback and its two scores), through a second resolution,
a retried attempt, a replay of the rule, a SIGKILL between the feedback and the commit, and
two workers; nothing scored for proposals by people, other agents or not traced to a run;
bad input named in the run's dead letter while the worker keeps running."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from streams.adapters.kafka.config import admin_config
from streams.core.actors import AgentActor, UserActor
from streams.core.errors import NotFound, ValidationFailed
from streams.core.events import (
    Change,
    Envelope,
    FeedbackGiven,
    ProposalMade,
    ProposalResolved,
    RunDeadLettered,
    RunRetried,
    RunSucceeded,
)
from streams.core.proposals import EVALUATOR, PROPOSAL_OUTCOME
from streams.core.proposals.rule import proposal_outcome
from streams.core.runs import rule_actor
from streams.core.tenancy import tenant_topics
from streams.examples.drafting import DRAFT_RULE, DraftRequested
from streams.runtime.client.workspace import Workspace
from streams.settings import Settings
from tests.conftest import WorkerProcess, read_topic, wait_until

pytestmark = pytest.mark.integration

TYPES = "streams.examples.ops,streams.core.proposals.outcome,streams.examples.drafting"
DRAFTING = ("--rules", "streams.examples.drafting")
RULE = proposal_outcome.name


def of(envelopes: list[Envelope], kind: type, **match: Any) -> list[Envelope]:
    return [e for e in envelopes if isinstance(e.event, kind)
            and all(getattr(e.event, k) == v for k, v in match.items())]


async def wait_log(ws: Workspace, check: Callable[[list[Envelope]], Any], within: float,
                   what: str) -> list[Envelope]:
    deadline = time.monotonic() + within
    while True:
        envelopes = await ws.read()
        if check(envelopes):
            return envelopes
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within:.0f}s waiting for {what}; log has "
                                 f"{Counter(e.event_type for e in envelopes)}")
        await asyncio.sleep(0.3)


def outcomes(envelopes: list[Envelope]) -> list[Envelope]:
    """The evaluator's proposal_outcome feedback records (every record, repeats included)."""
    return [e for e in envelopes if isinstance(e.event, FeedbackGiven)
            and e.event.feedback_type == PROPOSAL_OUTCOME and e.actor == EVALUATOR]


def scored(envelopes: list[Envelope]) -> dict[str, tuple[str, str]]:
    """proposal id -> (outcome, run id) of the evaluator's feedback."""
    return {str(e.event.value["proposal_id"]): (str(e.event.value["outcome"]),
                                                e.event.target.id)
            for e in outcomes(envelopes) if isinstance(e.event, FeedbackGiven)}


def finished(envelopes: list[Envelope]) -> dict[str, dict[str, Any]]:
    """proposal-outcome runs that finished: run id -> its output (or its dead letter)."""
    done: dict[str, dict[str, Any]] = {}
    for e in envelopes:
        if isinstance(e.event, RunSucceeded) and e.event.rule == RULE:
            done[e.event.run_id] = dict(e.event.output)
        elif isinstance(e.event, RunDeadLettered) and e.event.rule == RULE:
            done[e.event.run_id] = {"dead_letter": e.event.error}
    return done


def resolutions(envelopes: list[Envelope]) -> int:
    return len({e.event_id for e in envelopes if isinstance(e.event, ProposalResolved)})


def proposals_by_rule(envelopes: list[Envelope]) -> list[Envelope]:
    return list({e.event_id: e for e in envelopes if isinstance(e.event, ProposalMade)
                 and e.actor == rule_actor(DRAFT_RULE)}.values())


async def draft(ws: Workspace, artifact_id: str, n: int, within: float = 120) -> list[str]:
    """Ask the drafting rule for `n` drafts of `artifact_id`; their proposal ids."""
    before = {e.event_id for e in proposals_by_rule(await ws.read())}
    for i in range(n):
        await ws.append(DraftRequested(artifact_id=artifact_id,
                                       fields={"when": f"draft {i}"}).to_event())
    # A drafting run redone (its batch's transaction aborted) writes its proposal again with
    # the same derived event id: distinct ids are what a reader folds.
    log = await wait_log(ws, lambda es: len({e.event_id for e in proposals_by_rule(es)})
                         >= len(before) + n, within, f"{n} drafts of {artifact_id}")
    made = {e.event_id: e for e in proposals_by_rule(log) if e.event_id not in before}
    return [e.event.proposal_id for e in made.values() if isinstance(e.event, ProposalMade)]


async def all_finished(ws: Workspace, within: float = 120) -> list[Envelope]:
    """Wait until a proposal-outcome run finished for every resolution in the log."""
    return await wait_log(ws, lambda es: len(finished(es)) >= resolutions(es), within,
                          "a proposal-outcome run per resolution")


def proposal_scores(settings: Settings, tenant: str, at_least: int) -> list[dict[str, Any]]:
    """The proposal_outcome scores on the tenant's scores topic, one per score id: the
    mirror is at least once (a killed worker's mirror redoes what it had not committed) and
    a score's id is derived from its feedback, so a repeat is the same score."""
    records = read_topic(settings, tenant_topics(tenant, settings.topic_prefix).scores,
                         at_least=at_least, settle=3.0)
    return list({r["id"]: r for _m, r in records
                 if r["name"].startswith(f"{PROPOSAL_OUTCOME}.")}.values())


def members_with(settings: Settings, group: str, topic: str) -> int:
    """How many members of `group` hold partitions of `topic` now."""
    admin = AdminClient(admin_config(settings))
    try:
        described = admin.describe_consumer_groups([group])[group].result()
    except Exception:
        return 0
    return sum(any(tp.topic == topic for tp in member.assignment.topic_partitions)
               for member in described.members)


def runs_succeeded(worker: WorkerProcess) -> int:
    """Runs the worker's executor finished, from its last stats line."""
    lines = [line for line in worker.log().splitlines() if '"rules"' in line]
    return int(json.loads(lines[-1][lines[-1].index("{"):])["rules"]["succeeded"]) \
        if lines else 0


async def second_resolution(ws: Workspace, proposal_id: str) -> None:
    """A second resolution of a resolved proposal, in its chain (the handle refuses one)."""
    [made] = [e for e in await ws.read() if isinstance(e.event, ProposalMade)
              and e.event.proposal_id == proposal_id][:1]
    await ws.append(ProposalResolved(proposal_id=proposal_id, resolution="rejected"),
                    correlation_id=made.correlation_id, causation_id=made.event_id)


async def test_each_traced_proposal_is_scored_once_and_nothing_else_is(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    tenant = tenant_factory()
    worker = worker_factory(*DRAFTING, "--proposal-outcome", types=TYPES)
    ada = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    await ada.create_artifact("rb1", {"when": "x", "then": "page"}, kind="runbook")
    accepted, edited, rejected = await draft(ada, "rb1", 3)
    await ada.resolve(accepted)
    await ada.resolve(edited, changes={"set": {"then": "page twice"}})
    await ada.resolve(rejected, "rejected")
    # Proposals that are not a run's own: a person's, another agent's, and one appended by a
    # client acting as the drafting rule's agent outside any run.
    person = await ada.propose("rb1", {"set": {"when": "by ada"}})
    bot = await ada.as_actor(AgentActor(id="bot")).propose("rb1", {"set": {"when": "by bot"}})
    forged = await ada.as_actor(rule_actor(DRAFT_RULE)).propose(
        "rb1", {"set": {"when": "forged"}})
    for other in (person, bot, forged):
        assert isinstance(other.envelope.event, ProposalMade)
        await ada.resolve(other.envelope.event.proposal_id)
    log = await all_finished(ada)
    await second_resolution(ada, accepted)
    log = await wait_log(ada, lambda es: len(finished(es)) >= 7, 90, "the second resolution")

    runs = {e.event.proposal_id: e.event.run_id for e in proposals_by_rule(log)
            if isinstance(e.event, ProposalMade) and e.event.run_id}
    assert scored(log) == {accepted: ("accepted", runs[accepted]),
                           edited: ("edited", runs[edited]),
                           rejected: ("rejected", runs[rejected])}
    assert len(outcomes(log)) == 3
    reasons = Counter(str(o.get("reason")) for o in finished(log).values() if not o["scored"])
    assert reasons == {"proposer is not a rule's agent": 2, "not traced to a run": 1,
                       "scored already": 1}
    scores = proposal_scores(settings, tenant, at_least=6)
    assert Counter(r["name"] for r in scores) == {"proposal_outcome.outcome": 3,
                                                  "proposal_outcome.proposal_id": 3}
    assert {r["source"]["target_id"] for r in scores} == {runs[accepted], runs[edited],
                                                          runs[rejected]}
    assert worker.proc is not None and worker.proc.poll() is None


async def test_bad_input_is_refused_or_dead_lettered_with_its_reason(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    tenant = tenant_factory()
    worker = worker_factory(*DRAFTING, "--proposal-outcome", types=TYPES)
    ada = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    # The handle refuses before anything is sent.
    with pytest.raises(NotFound, match="no artifact 'ghost'"):
        await ada.propose("ghost", {"set": {"a": "b"}})
    with pytest.raises(NotFound, match="no proposal 'nope'"):
        await ada.resolve("nope")
    await ada.create_artifact("rb1", {"when": "x"})
    with pytest.raises(ValidationFailed, match="does not apply"):
        await ada.propose("rb1", {"unset": ["missing"]})
    # What reaches the worker anyway: a resolution of an unknown proposal, a run's archive
    # of an artifact that does not exist, and changes on an archive proposal.
    await ada.append(ProposalResolved(proposal_id="nope", resolution="accepted"))
    await ada.append(DraftRequested(artifact_id="ghost", archive=True).to_event())
    await ada.append(DraftRequested(artifact_id="rb1", archive=True).to_event())
    log = await wait_log(ada, lambda es: len(proposals_by_rule(es)) >= 2, 120, "two archives")
    made = {e.event.artifact_id: e for e in proposals_by_rule(log)
            if isinstance(e.event, ProposalMade)}
    await ada.resolve(made["ghost"].event.proposal_id)  # type: ignore[attr-defined]
    archive = made["rb1"]
    await ada.append(ProposalResolved(proposal_id=archive.event.proposal_id,  # type: ignore[attr-defined]
                                      resolution="accepted", changes=Change(set={"a": "b"})),
                     correlation_id=archive.correlation_id, causation_id=archive.event_id)
    log = await all_finished(ada)
    letters = sorted(o["dead_letter"] for o in finished(log).values())
    assert len(letters) == 3, letters
    assert any("proposal 'nope'" in x and "no proposal_made" in x for x in letters)
    assert any("archive of no artifact 'ghost'" in x for x in letters)
    assert any("takes no changes" in x for x in letters)
    assert outcomes(log) == []
    # The worker kept running: a good proposal after the bad input is scored.
    [good] = await draft(ada, "rb1", 1)
    await ada.resolve(good)
    log = await all_finished(ada)
    assert list(scored(log)) == [good]
    assert worker.proc is not None and worker.proc.poll() is None


async def test_a_retried_attempt_and_a_replay_of_the_rule_score_nothing_more(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    tenant = tenant_factory()
    worker = worker_factory(*DRAFTING, "--rules", "tests.integration.proposal_fixture",
                            types=TYPES, PROPOSAL_FIXTURE_MODE="fail-once")
    ada = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    await ada.create_artifact("rb1", {"when": "x"})
    ids = await draft(ada, "rb1", 2)
    for proposal_id in ids:
        await ada.resolve(proposal_id)
    log = await all_finished(ada)
    # Each scored attempt crashed after its feedback; the retry found it and scored nothing.
    assert len(of(log, RunRetried, rule=RULE)) == 2
    assert sorted(scored(log)) == sorted(ids) and len(outcomes(log)) == 2
    assert Counter(o.get("reason") for o in finished(log).values()) == {"scored already": 2}
    succeeded = len(of(log, RunSucceeded, rule=RULE))

    # A replay of the rule: the reactor's cursor is deleted, so a restarted worker matches
    # and runs everything again.
    worker.stop()
    group = f"{settings.topic_prefix}-feedback-mirror-rules"
    admin = AdminClient(admin_config(settings))
    admin.delete_consumer_groups([group])[group].result()
    worker_factory(*DRAFTING, "--proposal-outcome", types=TYPES)
    log = await wait_log(ada, lambda es: len(of(es, RunSucceeded, rule=RULE)) >= succeeded + 2,
                         180, "the replayed runs")
    await asyncio.sleep(3)  # anything the replay would score more has time to land
    log = await ada.read()
    assert len(outcomes(log)) == 2 and sorted(scored(log)) == sorted(ids)
    assert len(proposal_scores(settings, tenant, at_least=4)) == 4


async def test_sigkill_between_the_feedback_and_the_commit_scores_nothing_more(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    tenant = tenant_factory()
    stalling = worker_factory(*DRAFTING, "--rules", "tests.integration.proposal_fixture",
                              types=TYPES, PROPOSAL_FIXTURE_MODE="stall")
    ada = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    await ada.create_artifact("rb1", {"when": "x"})
    [proposal_id] = await draft(ada, "rb1", 1)
    await ada.resolve(proposal_id)
    await wait_log(ada, lambda es: len(outcomes(es)) == 1, 120, "the feedback")
    # The action gave its feedback and stalls: its run is not finished, its batch not
    # committed. SIGKILL, and a worker that does not stall takes the work over.
    stalling.kill()
    assert not finished(await ada.read())
    worker_factory(*DRAFTING, "--proposal-outcome", types=TYPES)
    log = await all_finished(ada, within=180)
    assert finished(log) and [o.get("reason") for o in finished(log).values()] == [
        "scored already"]
    assert len(outcomes(log)) == 1
    assert len(proposal_scores(settings, tenant, at_least=2)) == 2


async def test_two_workers_score_each_proposal_exactly_once(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    tenant = tenant_factory(partitions=4)
    workers = [worker_factory(*DRAFTING, "--proposal-outcome", "--stats-interval", "1",
                              types=TYPES) for _ in range(2)]
    # Both reactors hold events partitions before any work arrives, so both run some.
    group, topic = f"{settings.topic_prefix}-feedback-mirror-rules", \
        tenant_topics(tenant, settings.topic_prefix).events
    wait_until(lambda: members_with(settings, group, topic) == 2, 120,
               "both workers' reactors holding partitions")
    ada = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    await ada.create_artifact("rb1", {"when": "x"})
    ids = await draft(ada, "rb1", 12, within=180)
    for n, proposal_id in enumerate(ids):
        await ada.resolve(proposal_id, "rejected" if n % 3 == 0 else "accepted")
    await all_finished(ada, within=180)
    for proposal_id in ids:  # every proposal resolved a second time
        await second_resolution(ada, proposal_id)
    log = await wait_log(ada, lambda es: len(finished(es)) >= 2 * len(ids), 180,
                         "the second resolutions")
    assert sorted(scored(log)) == sorted(ids)
    assert len(outcomes(log)) == len(ids)
    assert Counter(o.get("reason") for o in finished(log).values() if not o["scored"]) == {
        "scored already": len(ids)}
    assert len(proposal_scores(settings, tenant, at_least=2 * len(ids))) == 2 * len(ids)
    for worker in workers:
        assert worker.proc is not None and worker.proc.poll() is None
    await asyncio.sleep(1.5)  # a stats line after the last run
    assert all(runs_succeeded(worker) > 0 for worker in workers), [
        runs_succeeded(w) for w in workers]
