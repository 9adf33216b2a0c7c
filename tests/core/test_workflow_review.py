"""The golden set, the corrective loop and the gate with plain function judges (no model)."""

from __future__ import annotations

import pytest

from streams.core.actors import EvaluatorActor
from streams.core.datasets import Dataset, Example
from streams.core.evaluators import FunctionEvaluator, HandOff
from streams.core.events import Envelope, FeedbackGiven
from streams.core.judges import RetrievalInput, RetrievalVerdict, ReviewInput, WorkflowReview
from streams.core.replay import Replayer, ReplayError
from streams.core.targets import ChainTarget
from streams.core.workflow_review import (
    CorrectiveAction,
    RetrievalGate,
    WorkflowCompleted,
    WorkflowError,
    WorkflowRegenerated,
    compare_reviews,
    corrective_rule,
)


def _package(reply: str) -> ReviewInput:
    return ReviewInput(email="Hi", analysis={}, tasks=[], reply=reply)


def _judge(package: ReviewInput) -> WorkflowReview:
    if package.reply == "?":
        raise HandOff("cannot tell")
    good = len(package.reply) > 5
    return WorkflowReview(approved=good, quality_score=0.9 if good else 0.2,
                          issues=[] if good else ["too short"], recommendation="")


REVIEWER = FunctionEvaluator(_judge, verdict_type=WorkflowReview, name="len-judge",
                             version="1")


async def test_hand_offs_are_errors_and_left_out_of_the_means() -> None:
    recorded = WorkflowReview(approved=False, quality_score=0.5, issues=[], recommendation="")
    golden = Dataset("g", WorkflowReview, ReviewInput, [
        Example(id="a", input=_package("hello there"), verdict=recorded),
        Example(id="b", input=_package("?"), verdict=recorded),
    ])
    comparison = await compare_reviews(golden, reviewer=REVIEWER)
    assert [e.example_id for e in comparison.compared] == ["a"]
    assert comparison.failed[0].error == "reviewer: handed off"
    assert comparison.mean_difference == pytest.approx(0.4)
    assert comparison.fixes == ["a"]
    against = await compare_reviews(golden, reviewer=REVIEWER, baseline=REVIEWER)
    assert against.mean_difference == 0.0 and against.agreement == 1.0
    assert against.failed[0].error is not None and against.failed[0].error.startswith(
        "baseline: HandOff")


async def test_the_gate_refuses_on_a_hand_off_and_checks_its_threshold() -> None:
    def unsure(judged: RetrievalInput) -> RetrievalVerdict:
        raise HandOff("model down")

    gate = RetrievalGate(FunctionEvaluator(unsure, verdict_type=RetrievalVerdict, name="r",
                                           version="1"))
    decision = await gate.route("q", ["c"], lambda q, c: "never")
    assert decision.route == "refuse" and decision.handed_off
    assert "model down" in decision.reason
    with pytest.raises(WorkflowError, match="threshold must be within"):
        RetrievalGate(gate.evaluator, threshold=1.5)


async def test_a_rejection_without_its_workflow_dead_letters_naming_the_chain() -> None:
    action = CorrectiveAction(lambda package, issues: package, REVIEWER)
    replayer = Replayer(rule=corrective_rule(action), action=action,
                        event_types=[WorkflowCompleted, WorkflowRegenerated])
    alone = Envelope.new(FeedbackGiven(
        feedback_type="workflow_review", target=ChainTarget(correlation_id="evt_x"),
        value={"approved": False, "quality_score": 0.1, "issues": [], "recommendation": ""}),
        tenant="replay", workspace="replay", actor=EvaluatorActor(name="j", version="1"))
    with pytest.raises(ReplayError, match="no workflow:completed event to regenerate"):
        await replayer.replay([alone])
