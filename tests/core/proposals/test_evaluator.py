"""The proposal-outcome evaluator's decision, clause by clause of the seed's Decision."""

import pytest

from streams.core.actors import AgentActor, EvaluatorActor
from streams.core.errors import ValidationFailed
from streams.core.events import (
    Change,
    Envelope,
    FeedbackGiven,
    ProposalMade,
    ProposalResolved,
    RunStarted,
)
from streams.core.feedback import value_record
from streams.core.ids import started_event_id
from streams.core.proposals import (
    EVALUATOR,
    PROPOSAL_OUTCOME,
    Decision,
    ProposalOutcome,
    decide,
    fold_ledger,
)
from streams.core.targets import RunTarget
from tests.core.proposals.log import ADA, BOB, Log, ResolutionName, agent

RULE = "chat:draft-rule"


def _decide(log: Log, resolved: Envelope) -> Decision:
    return decide(fold_ledger(log.envelopes), log.envelopes, resolved)


def _give(log: Log, decision: Decision, actor: object = EVALUATOR) -> Envelope:
    """What the rule's action does with a decision that scores: give the feedback."""
    assert decision.feedback is not None and decision.target is not None
    return log.append(FeedbackGiven(feedback_type=PROPOSAL_OUTCOME, target=decision.target,
                                    value=value_record(decision.feedback)),
                      actor)  # type: ignore[arg-type]


def _score_all(log: Log, envelopes: list[Envelope]) -> list[Envelope]:
    """The action over every resolution in `envelopes`, in order: what it would give."""
    given = []
    for envelope in envelopes:
        if isinstance(envelope.event, ProposalResolved):
            decision = _decide(log, envelope)
            if decision.score:
                given.append(_give(log, decision))
    return given


def _proposal(proposal_id: str, run_id: str) -> ProposalMade:
    return ProposalMade(proposal_id=proposal_id, artifact_id="a1", kind="rule", change=Change(),
                        run_id=run_id)


def _run_id(started: Envelope) -> str:
    assert isinstance(started.event, RunStarted)
    return started.event.run_id


def test_a_runs_resolved_proposal_scores_that_run() -> None:
    log = Log()
    log.create("a1", {"when": "x"})
    run = log.run(RULE)
    resolved = log.resolve(log.propose("p1", "a1", Change(set={"when": "y"}), by=run),
                           changes=Change(set={"then": "page"}))
    decision = _decide(log, resolved)
    assert decision.score and decision.reason is None
    assert decision.feedback == ProposalOutcome(proposal_id="p1", outcome="edited")
    assert decision.target == RunTarget(run_id=_run_id(run))


@pytest.mark.parametrize(("resolution", "changes", "outcome"), [
    ("accepted", None, "accepted"),
    ("accepted", Change(set={"when": "y"}), "accepted"),  # changes that change nothing
    ("accepted", Change(set={"when": "z"}), "edited"),
    ("rejected", None, "rejected"),
])
def test_the_feedback_says_whether_the_person_changed_the_proposal(
        resolution: ResolutionName, changes: Change | None, outcome: str) -> None:
    log = Log()
    log.create("a1", {"when": "x"})
    run = log.run(RULE)
    resolved = log.resolve(log.propose("p1", "a1", Change(set={"when": "y"}), by=run),
                           resolution, changes)
    feedback = _decide(log, resolved).feedback
    assert feedback is not None and feedback.outcome == outcome


def test_a_proposal_by_a_person_or_a_non_rule_agent_is_not_scored() -> None:
    log = Log()
    run = log.run(RULE)
    by_person = log.resolve(log.propose("p1", "a1", Change(), by=ADA,
                                        run_id=_run_id(run)))
    by_bot = log.resolve(log.append(
        _proposal(proposal_id="p2", run_id=_run_id(run)), AgentActor(id="bot"), after=run))
    assert _decide(log, by_person).reason == "proposer is not a rule's agent"
    assert _decide(log, by_bot).reason == "proposer is not a rule's agent"


def test_a_client_chosen_id_equal_to_a_run_derived_id_does_not_score_that_run() -> None:
    log = Log()
    run = log.run(RULE)
    run_id = _run_id(run)
    # A client acting as the rule's agent, outside the run's chain, with the run's ids.
    for pid in (run_id, started_event_id(run_id)):
        resolved = log.resolve(log.propose(pid, "a1", Change(), by=agent(RULE), run_id=run_id))
        decision = _decide(log, resolved)
        assert not decision.score and decision.reason == "not traced to a run"
        assert decision.target is None


def test_a_proposal_by_another_rule_in_the_runs_chain_does_not_score_it() -> None:
    log = Log()
    run = log.run(RULE)
    proposal = log.append(_proposal(proposal_id="p1", run_id=_run_id(run)),
                          agent("chat:other"), after=run)
    assert _decide(log, log.resolve(proposal)).reason == "not traced to a run"


def test_the_decision_rereads_the_proposal_rather_than_trust_the_event() -> None:
    log = Log()
    log.create("a1", {"when": "x"})
    run = log.run(RULE)
    log.resolve(log.propose("p1", "a1", Change(set={"when": "y"}), by=run))
    bridged = Envelope.new(ProposalResolved(proposal_id="p1", resolution="rejected"),
                           tenant="acme", workspace="prod", actor=BOB)  # not in the log
    feedback = _decide(log, bridged).feedback
    assert feedback is not None and feedback.outcome == "accepted"
    unknown = Envelope.new(ProposalResolved(proposal_id="nope", resolution="rejected"),
                           tenant="acme", workspace="prod", actor=BOB)
    assert _decide(log, unknown).reason == "unknown proposal"


def test_a_resolution_the_ledger_has_not_folded_is_not_scored() -> None:
    log = Log()
    run = log.run(RULE)
    proposal = log.propose("p1", "a1", Change(), by=run)
    ledger = fold_ledger(log.envelopes)
    resolved = log.resolve(proposal)
    assert decide(ledger, log.envelopes, resolved).reason == "not resolved"


def test_only_a_proposal_resolved_event_is_decided() -> None:
    log = Log()
    run = log.run(RULE)
    with pytest.raises(ValidationFailed, match=r"proposal_resolved.*run_started"):
        _decide(log, run)


def test_each_proposal_is_scored_once_second_resolution_retry_and_replay() -> None:
    log = Log()
    log.create("a1", {"when": "x"})
    run = log.run(RULE)
    proposal = log.propose("p1", "a1", Change(set={"when": "y"}), by=run)
    first = log.resolve(proposal)
    [given] = _score_all(log, [first])
    second = log.resolve(proposal, "rejected")
    assert _decide(log, second).reason == "scored already"
    assert _decide(log, first).reason == "scored already"  # a retried attempt
    assert _score_all(log, list(log.envelopes)) == []       # a replay of the whole log
    assert isinstance(given.event, FeedbackGiven)
    assert given.event.value == {"proposal_id": "p1", "outcome": "accepted"}
    assert given.event.target == RunTarget(run_id=_run_id(run))


def test_a_second_resolution_before_any_score_scores_the_first() -> None:
    log = Log()
    log.create("a1", {"when": "x"})
    run = log.run(RULE)
    proposal = log.propose("p1", "a1", Change(set={"when": "y"}), by=run)
    log.resolve(proposal, "rejected")
    second = log.resolve(proposal, "accepted")
    given = _score_all(log, [second, second])
    assert len(given) == 1
    assert isinstance(given[0].event, FeedbackGiven)
    assert given[0].event.value["outcome"] == "rejected"


def test_only_the_evaluators_own_earlier_feedback_counts() -> None:
    log = Log()
    run = log.run(RULE)
    resolved = log.resolve(log.propose("p1", "a1", Change(), by=run))
    decision = _decide(log, resolved)
    _give(log, decision, ADA)                                     # a person, same proposal
    _give(log, decision, EvaluatorActor(name="proposal-outcome", version="2"))
    other = Decision("p2", None, ProposalOutcome(proposal_id="p2", outcome="accepted"),
                     decision.target)
    _give(log, other)                                             # the evaluator, another one
    assert _decide(log, resolved).score
    _give(log, decision)
    assert _decide(log, resolved).reason == "scored already"
