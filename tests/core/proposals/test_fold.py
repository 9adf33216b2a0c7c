"""The incremental proposal fold: fed a log in any number of steps, it equals the whole-log
fold (ledger, scored proposals, every decision), and it decides as `decide` does."""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.actors import AgentActor, EvaluatorActor
from streams.core.events import (
    AppEvent,
    Change,
    Envelope,
    FeedbackGiven,
    ProposalMade,
    ProposalResolved,
    RunStarted,
)
from streams.core.feedback import value_record
from streams.core.proposals import (
    EVALUATOR,
    FOLDED_EVENT_TYPES,
    PROPOSAL_OUTCOME,
    Ledger,
    ProposalFold,
    ProposalOutcome,
    decide,
    fold_ledger,
    fold_proposals,
    folded_whole,
)
from streams.core.runs import rule_actor
from streams.core.targets import RunTarget
from tests.core.proposals.log import ADA, BOB, Log, agent

RULES = ["chat:draft-a", "chat:draft-b"]
OTHER_EVALUATOR = EvaluatorActor(name="someone-else")

# One step of a story: what happens, and the numbers that pick its arguments.
Op = tuple[str, int, int]
ops = st.lists(st.tuples(
    st.sampled_from(["create", "run", "propose_run", "propose_agent", "propose_person",
                     "accept", "edit", "reject", "archive_proposal", "feedback", "repeat",
                     "propose_through_a_step", "other_feedback"]),
    st.integers(0, 5), st.integers(0, 5)), max_size=40)


def story(steps: list[Op]) -> list[Envelope]:
    """A log from random steps: artifacts, runs, proposals by runs, agents and people,
    resolutions, the evaluator's (and another evaluator's) feedback, repeated envelopes."""
    log = Log()
    runs: list[Envelope] = []
    proposals: list[Envelope] = []
    for kind, a, b in steps:
        artifact = f"a{a % 3}"
        if kind == "create":
            log.create(artifact, {"when": f"w{b}"})
        elif kind == "run":
            runs.append(log.run(RULES[b % 2]))
        elif kind == "propose_run" and runs:
            proposals.append(log.propose(f"p{len(proposals)}", artifact,
                                         Change(set={"when": f"v{b}"}), by=runs[a % len(runs)]))
        elif kind == "propose_agent":
            proposals.append(log.propose(f"p{len(proposals)}", artifact,
                                         Change(set={"then": f"t{b}"}), by=agent(RULES[0]),
                                         run_id=None))
        elif kind == "propose_person":
            proposals.append(log.propose(f"p{len(proposals) if b else 0}", artifact,
                                         Change(unset=["when"]), by=ADA, run_id=None))
        elif kind in ("accept", "edit", "reject") and proposals:
            proposal = proposals[a % len(proposals)]
            if kind == "reject":
                log.resolve(proposal, "rejected", actor=BOB)
            else:
                changes = Change(set={"note": f"n{b}"}) if kind == "edit" else None
                log.resolve(proposal, changes=changes)
        elif kind == "archive_proposal" and runs:
            proposals.append(log.propose(f"p{len(proposals)}", artifact, by=runs[a % len(runs)],
                                         action="archive"))
        elif kind == "feedback" and runs:
            started = runs[a % len(runs)]
            assert isinstance(started.event, RunStarted)
            actor = EVALUATOR if b % 2 else OTHER_EVALUATOR
            value = value_record(ProposalOutcome(proposal_id=f"p{b}", outcome="accepted"))
            log.append(FeedbackGiven(feedback_type=PROPOSAL_OUTCOME,
                                     target=RunTarget(run_id=started.event.run_id), value=value),
                       actor)
        elif kind == "propose_through_a_step" and runs:
            # The run's action records a step, then proposes caused by it: run_of walks
            # the chain back through the step to the run_started.
            started = runs[a % len(runs)]
            assert isinstance(started.event, RunStarted)
            actor = rule_actor(started.event.rule)
            step = log.append(AppEvent(name="chat:step", data={"n": b}), actor, after=started)
            proposals.append(log.append(ProposalMade(
                proposal_id=f"p{len(proposals)}", artifact_id=artifact,
                change=Change(set={"via": f"s{b}"}), kind="rule",
                run_id=started.event.run_id if b % 2 else None), actor, after=step))
        elif kind == "other_feedback" and runs:
            started = runs[a % len(runs)]
            assert isinstance(started.event, RunStarted)
            log.append(FeedbackGiven(feedback_type="triage_quality",
                                     target=RunTarget(run_id=started.event.run_id),
                                     value={"correct": True}), ADA, after=started)
        elif kind == "repeat" and log.envelopes:
            log.envelopes.append(log.envelopes[a % len(log.envelopes)])
    return log.envelopes


def ledger_view(ledger: Ledger) -> dict[str, Any]:
    """What a ledger answers: artifacts' versions, proposals' states, outcomes and runs."""
    return {
        "artifacts": {k: [(v.number, dict(v.content), v.author, v.proposal_id, v.archive)
                          for v in a.versions] for k, a in ledger.artifacts.items()},
        "proposals": {k: (p.state, ledger.outcome(k), ledger.run_of(k), p.proposer,
                          len(p.later_resolutions)) for k, p in ledger.proposals.items()},
        "problems": list(ledger.problems),
        "waiting": {k: [e.event_id for e in v] for k, v in ledger.unresolvable.items()},
    }


@settings(max_examples=150, deadline=None)
@given(ops, st.lists(st.integers(0, 60), max_size=6))
def test_an_incremental_fold_equals_the_whole_fold(steps: list[Op], cuts: list[int]) -> None:
    envelopes = story(steps)
    whole = fold_proposals(envelopes)
    incremental = ProposalFold()
    start = 0
    for cut in [*sorted({min(c, len(envelopes)) for c in cuts}), len(envelopes)]:
        incremental.extend(envelopes[start:cut])
        start = cut
    assert ledger_view(incremental.ledger) == ledger_view(whole.ledger) \
        == ledger_view(fold_ledger(envelopes))
    assert incremental.scored == whole.scored
    for envelope in envelopes:
        if isinstance(envelope.event, ProposalResolved):
            assert incremental.decide(envelope) == decide(fold_ledger(envelopes), envelopes,
                                                          envelope)


@settings(max_examples=150, deadline=None)
@given(ops, st.lists(st.integers(0, 60), max_size=6))
def test_a_fold_given_only_the_places_of_other_events_equals_the_envelope_fold(
        steps: list[Op], cuts: list[int]) -> None:
    # What a log reader does: envelopes only for what folded_whole names, the rest linked by
    # their chain and cause (read from the record, no Envelope built).
    envelopes = story(steps)
    whole = fold_proposals(envelopes)
    linked = ProposalFold()
    for envelope in envelopes:
        event = envelope.event
        feedback_type = event.feedback_type if isinstance(event, FeedbackGiven) else None
        if folded_whole(envelope.event_type, feedback_type):
            linked.add(envelope)
        else:
            linked.link(envelope.event_id, envelope.event_type, envelope.correlation_id,
                        envelope.causation_id)
    assert ledger_view(linked.ledger) == ledger_view(whole.ledger)
    assert linked.scored == whole.scored and linked.folded == whole.folded
    for envelope in envelopes:
        if isinstance(envelope.event, ProposalResolved):
            assert linked.decide(envelope) == whole.decide(envelope)


def test_a_folded_type_cannot_be_linked() -> None:
    fold = ProposalFold()
    for kind in FOLDED_EVENT_TYPES:
        with pytest.raises(ValueError, match=f"a {kind} event is folded whole"):
            fold.link("evt_1", kind, "chain_1", None)
    assert fold.folded == 0


def test_the_fold_keeps_only_the_evaluators_own_proposal_outcomes() -> None:
    log = Log()
    started = log.run(RULES[0])
    assert isinstance(started.event, RunStarted)
    target = RunTarget(run_id=started.event.run_id)
    for actor, pid in ((EVALUATOR, "p1"), (OTHER_EVALUATOR, "p2"), (ADA, "p3"),
                       (AgentActor(id="bot"), "p4")):
        log.append(FeedbackGiven(feedback_type=PROPOSAL_OUTCOME, target=target,
                                 value=value_record(ProposalOutcome(proposal_id=pid,
                                                                    outcome="accepted"))),
                   actor)
    assert fold_proposals(log.envelopes).scored == {"p1"}
    assert fold_proposals(log.envelopes, OTHER_EVALUATOR).scored == {"p2"}
