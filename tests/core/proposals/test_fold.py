"""The incremental proposal fold: fed a log in any number of steps, it equals the whole-log
fold (ledger, scored proposals, every decision), and it decides as `decide` does."""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.actors import AgentActor, EvaluatorActor
from streams.core.events import Change, Envelope, FeedbackGiven, ProposalResolved, RunStarted
from streams.core.feedback import value_record
from streams.core.proposals import (
    EVALUATOR,
    PROPOSAL_OUTCOME,
    Ledger,
    ProposalFold,
    ProposalOutcome,
    decide,
    fold_ledger,
    fold_proposals,
)
from streams.core.targets import RunTarget
from tests.core.proposals.log import ADA, BOB, Log, agent

RULES = ["chat:draft-a", "chat:draft-b"]
OTHER_EVALUATOR = EvaluatorActor(name="someone-else")

# One step of a story: what happens, and the numbers that pick its arguments.
Op = tuple[str, int, int]
ops = st.lists(st.tuples(
    st.sampled_from(["create", "run", "propose_run", "propose_agent", "propose_person",
                     "accept", "edit", "reject", "archive_proposal", "feedback", "repeat"]),
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
