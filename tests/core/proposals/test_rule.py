"""The proposal-outcome rule and action, run in memory by the replay (the worker's matcher
and executor, no Kafka): one score per traced proposal, none for the rest, and nothing more
for a second resolution, a retried attempt or a replay of the whole log."""

from collections.abc import Mapping
from typing import Any

from streams.core.events import Change, Envelope, FeedbackGiven, RunStarted, RunSucceeded
from streams.core.proposals import EVALUATOR, PROPOSAL_OUTCOME
from streams.core.proposals.rule import (
    ACTIONS,
    RULES,
    proposal_outcome,
    score_proposal_outcome,
)
from streams.core.replay import Replay, Replayer
from streams.core.runs import Reaction
from streams.runtime.root import Runtime
from tests.core.proposals.log import ADA, BOB, CHAT_MESSAGE, Log, agent

RULE = "chat:draft-rule"


def _scores(log: list[Envelope]) -> list[tuple[str, dict[str, Any], str]]:
    return sorted({e.event_id: (e.actor.participant, dict(e.event.value), e.event.target.id)
                   for e in log if isinstance(e.event, FeedbackGiven)
                   and e.event.feedback_type == PROPOSAL_OUTCOME}.values(),
                  key=lambda s: str(s))


def _outputs(replay: Replay) -> list[Mapping[str, Any]]:
    return [e.event.output for e in replay.log if isinstance(e.event, RunSucceeded)
            and e.event.rule == proposal_outcome.name]


def _story() -> tuple[Log, str]:
    log = Log()
    log.create("a1", {"when": "x"})
    started = log.run(RULE)
    assert isinstance(started.event, RunStarted)
    run_id = started.event.run_id
    p1 = log.propose("p1", "a1", Change(set={"when": "y"}), by=started)
    log.resolve(p1, changes=Change(set={"then": "page"}))
    log.resolve(p1, "rejected", actor=BOB)                     # a second resolution
    log.resolve(log.propose("u1", "a1", Change(), by=ADA, run_id=run_id))
    log.resolve(log.propose(run_id, "a1", Change(), by=agent(RULE), run_id=run_id))
    return log, run_id


async def test_the_rule_scores_each_traced_proposal_once() -> None:
    assert [r.name for r in RULES] == [proposal_outcome.name]
    assert {proposal_outcome.then.name: score_proposal_outcome} == ACTIONS
    log, run_id = _story()
    replay = await Replayer(rule=proposal_outcome, action=score_proposal_outcome,
                        event_types=[CHAT_MESSAGE]).replay(
        log.envelopes)
    assert _scores(replay.log) == [
        (EVALUATOR.participant, {"proposal_id": "p1", "outcome": "edited"}, run_id)]
    reasons = sorted(str(o.get("reason")) for o in _outputs(replay) if not o["scored"])
    assert reasons == ["not traced to a run", "proposer is not a rule's agent",
                       "scored already"]
    scopes = {r.run.scope["proposal_id"] for r in replay.runs}
    assert scopes == {"p1", "u1", run_id}


async def test_a_replay_of_the_whole_log_scores_nothing_more() -> None:
    log, _run_id = _story()
    replayer = Replayer(rule=proposal_outcome, action=score_proposal_outcome,
                        event_types=[CHAT_MESSAGE])
    first = await replayer.replay(log.envelopes)
    again = await replayer.replay(first.log, label="replayed")
    assert _scores(again.log) == _scores(first.log)
    assert len(_scores(again.log)) == 1


async def test_a_retried_attempt_scores_nothing_more() -> None:
    log, _run_id = _story()
    attempts: list[int] = []

    async def flaky(reaction: Reaction) -> Mapping[str, Any]:
        output = await score_proposal_outcome(reaction)
        attempts.append(reaction.attempt)
        if reaction.attempt == 1 and output["scored"]:
            raise RuntimeError("crashed after giving the feedback")
        return output

    replayer = Replayer(rule=proposal_outcome, action=flaky, event_types=[CHAT_MESSAGE])
    replay = await replayer.replay(log.envelopes)
    assert 2 in attempts
    assert len(_scores(replay.log)) == 1
    assert sum(1 for o in _outputs(replay) if o["scored"]) == 0


def test_a_worker_loads_it_as_a_rules_module() -> None:
    # The command line's loader and the worker's checks, no broker needed (not a run on one).
    from streams.runtime.worker.app import Worker
    from streams.settings import Settings
    from streams.surfaces.cli.base import load_rules

    rules, actions, deps = load_rules(["streams.core.proposals.rule"])
    assert [r.name for r in rules] == ["streams:proposal-outcome"] and deps == {}
    settings = Settings(bootstrap_servers="127.0.0.1:9", schema_registry_url="http://127.0.0.1:9")
    Worker(Runtime(settings), rules=rules, actions=actions)
