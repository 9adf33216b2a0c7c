"""Seed 004's next steps with the real LLM judges over the chat stand-in: the golden-set
harness (old against new reviewer scores), the corrective loop (regenerate once on
`approved: false`, replayed through the worker's engine; a second rejection does not loop)
and the retrieval gate (has_answer with a confidence threshold, evaluation returned)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from standins.chat_standin import ChatReply, ChatStandIn
from streams.adapters.chat import RetrievalEvaluator, WorkflowReviewer
from streams.core.actors import EvaluatorActor
from streams.core.app_events import AppEventType
from streams.core.datasets import Dataset, Example
from streams.core.events import AppEvent, Envelope, FeedbackGiven
from streams.core.judges import ChatModel, ReviewInput, WorkflowReview
from streams.core.replay import Replayer
from streams.core.targets import ChainTarget
from streams.core.workflow_review import (
    CorrectiveAction,
    RetrievalGate,
    WorkflowCompleted,
    WorkflowRegenerated,
    compare_reviews,
    corrective_rule,
)


@pytest.fixture
def chat() -> Iterator[ChatStandIn]:
    with ChatStandIn() as server:
        yield server


def _model(chat: ChatStandIn) -> ChatModel:
    return ChatModel(base_url=chat.url, model="judge", max_retries=0, backoff=0)


def _review(approved: bool, score: float, *issues: str) -> str:
    return json.dumps({"approved": approved, "quality_score": score, "issues": list(issues),
                       "recommendation": "send" if approved else "rewrite"})


def _reply_of(body: dict[str, Any]) -> str:
    user = body["messages"][-1]["content"]
    return str(user.split("<reply>\n", 1)[1].split("\n</reply>", 1)[0])


def _strict_reviewer(body: dict[str, Any]) -> str:
    """A scripted reviewer: a reply that apologises and names a date is good; one without
    a date is rejected; a reply marked 'broken' gets a non-JSON answer."""
    reply = _reply_of(body)
    if "broken" in reply:
        return "not json"
    if "Monday" in reply:
        return _review(True, 0.9)
    return _review(False, 0.3, "the reply gives no date")


def _package(reply: str, email: str = "Where is my order?") -> ReviewInput:
    return ReviewInput(email=email, analysis={"intent": "order_status"},
                       tasks=[{"title": "check order"}], reply=reply)


# -- the golden-set harness ------------------------------------------------------------------


async def test_the_golden_set_compares_old_and_new_reviewer_scores(chat: ChatStandIn) -> None:
    chat.set_responder(_strict_reviewer)
    recorded = [
        ("wf_1", "Sorry, it ships soon.", WorkflowReview(approved=False, quality_score=0.4,
                                                        issues=["no date"],
                                                        recommendation="x")),
        ("wf_2", "Sorry, it ships Monday.", WorkflowReview(approved=True, quality_score=0.8,
                                                          issues=[], recommendation="x")),
        ("wf_3", "broken", WorkflowReview(approved=True, quality_score=0.7, issues=[],
                                          recommendation="x")),
    ]
    golden = Dataset("golden-replies", WorkflowReview, ReviewInput, [
        Example(id=i, input=_package(reply), verdict=verdict) for i, reply, verdict in recorded])

    def new_prompt(package: ReviewInput) -> ReviewInput:
        """The changed prompt: always give the shipping day."""
        if package.reply == "broken":
            return package
        return package.model_copy(update={"reply": package.reply.replace("soon", "Monday")})

    reviewer = WorkflowReviewer(_model(chat))
    comparison = await compare_reviews(golden, reviewer=reviewer, candidate=new_prompt)
    rows = {e.example_id: e for e in comparison.examples}
    assert (rows["wf_1"].old_score, rows["wf_1"].new_score) == (0.4, 0.9)
    assert (rows["wf_1"].old_approved, rows["wf_1"].new_approved) == (False, True)
    assert rows["wf_2"].difference == pytest.approx(0.1)
    assert rows["wf_3"].error is not None and rows["wf_3"].error.startswith("reviewer:")
    assert [e.example_id for e in comparison.failed] == ["wf_3"]
    assert comparison.mean_difference == pytest.approx((0.5 + 0.1) / 2)
    assert comparison.agreement == pytest.approx(0.5)  # wf_1 changed, wf_2 did not
    assert comparison.fixes == ["wf_1"] and comparison.regressions == []
    assert comparison.summary()["compared"] == 2

    # A changed reviewer instead (a stricter model) against the old one, on the same inputs.
    chat.reset()
    lenient = WorkflowReviewer(ChatModel(base_url=chat.url, model="lenient", max_retries=0),
                               name="lenient", version="1")
    strict = WorkflowReviewer(ChatModel(base_url=chat.url, model="strict", max_retries=0),
                              name="strict", version="2")
    answers = {"lenient": _review(True, 0.8), "strict": _review(False, 0.5, "vague")}
    chat.set_responder(lambda body: answers[body["model"]])
    versus = await compare_reviews(golden, reviewer=strict, baseline=lenient)
    assert versus.regressions == ["wf_1", "wf_2", "wf_3"]
    assert versus.mean_difference == pytest.approx(-0.3)
    assert versus.agreement == 0.0


# -- the corrective loop ---------------------------------------------------------------------


def _story(reply: str, first: WorkflowReview) -> list[Envelope]:
    """A completed workflow and the reviewer's verdict on its chain."""
    completed = Envelope.new(WorkflowCompleted(**_package(reply).model_dump()).to_event(),
                             tenant="replay", workspace="replay")
    review = completed.follow(
        FeedbackGiven(feedback_type="workflow_review",
                      target=ChainTarget(correlation_id=completed.event_id),
                      value=first.model_dump()),
        actor=EvaluatorActor(name="workflow-reviewer", version="1"))
    return [completed, review]


def _replayer(chat: ChatStandIn, regenerated: list[list[str]]) -> Replayer:
    def regenerate(package: ReviewInput, issues: list[str]) -> ReviewInput:
        regenerated.append(issues)
        fixed = "Sorry, it ships Monday." if "the reply gives no date" in issues else \
            package.reply + " (rewritten)"
        return package.model_copy(update={"reply": fixed})

    action = CorrectiveAction(regenerate, WorkflowReviewer(_model(chat)))
    types: list[type[AppEventType]] = [WorkflowCompleted, WorkflowRegenerated]
    return Replayer(rule=corrective_rule(action), action=action, event_types=types)


async def test_a_rejection_regenerates_once_with_the_issues_fed_back(chat: ChatStandIn) -> None:
    chat.set_responder(_strict_reviewer)
    regenerated: list[list[str]] = []
    replay = await _replayer(chat, regenerated).replay(_story(
        "Sorry, it ships soon.", WorkflowReview(approved=False, quality_score=0.3,
                                                issues=["the reply gives no date"],
                                                recommendation="rewrite")))
    assert regenerated == [["the reply gives no date"]]
    [run] = replay.runs  # the second review approved: the rule did not fire again
    [new] = [e for e in replay.emitted if e.event_type == "workflow:regenerated"]
    assert isinstance(new.event, AppEvent) and new.event.data["reply"] == "Sorry, it ships Monday."
    assert new.event.data["issues"] == ["the reply gives no date"]
    [second] = [e for e in replay.emitted if isinstance(e.event, FeedbackGiven)]
    assert second.event.value["approved"] is True  # type: ignore[union-attr]
    assert second.correlation_id == new.correlation_id == replay.log[0].event_id
    assert second.actor.participant == "evaluator:workflow-reviewer@1"
    assert run.emitted[-1].data["output"]["approved"] is True
    assert chat.calls == 1


async def test_a_second_rejection_does_not_loop(chat: ChatStandIn) -> None:
    chat.set_responder(lambda body: _review(False, 0.2, "still wrong"))
    regenerated: list[list[str]] = []
    replay = await _replayer(chat, regenerated).replay(_story(
        "Sorry.", WorkflowReview(approved=False, quality_score=0.3, issues=["rude"],
                                 recommendation="rewrite")))
    assert regenerated == [["rude"]]  # once
    assert chat.calls == 1
    first, second = replay.runs
    assert first.emitted[-1].data["output"]["regenerated"] is True
    assert first.emitted[-1].data["output"]["approved"] is False
    # The second rejection fired the rule again; its run declined instead of looping.
    assert second.emitted[-1].data["output"] == {
        "regenerated": False,
        "reason": "this workflow was regenerated once already; left to a person"}
    assert [e.event_type for e in replay.emitted].count("workflow:regenerated") == 1
    assert replay.steps < 20


# -- the retrieval gate ----------------------------------------------------------------------


def _retrieval(has_answer: bool, confidence: float, reason: str = "stated") -> str:
    return json.dumps({"has_answer": has_answer, "confidence": confidence, "reason": reason})


async def test_the_gate_routes_on_has_answer_and_the_threshold(chat: ChatStandIn) -> None:
    gate = RetrievalGate(RetrievalEvaluator(_model(chat)), threshold=0.4)
    generated: list[str] = []

    def generate(question: str, contexts: Any) -> str:
        generated.append(question)
        return "Refunds take 5 days."

    chat.enqueue(_retrieval(True, 0.85), _retrieval(True, 0.3, "maybe"),
                 _retrieval(False, 0.9, "not there"), ChatReply.error(400))
    answered = await gate.route("How long do refunds take?", ["Refunds take 5 days."],
                                generate)
    assert (answered.route, answered.answer) == ("answer", "Refunds take 5 days.")
    assert answered.evaluation == {"has_answer": True, "confidence": 0.85, "reason": "stated",
                                   "threshold": 0.4, "route": "answer", "handed_off": False}
    unsure = await gate.route("How long?", ["Refunds exist."], generate)
    assert unsure.route == "refuse" and unsure.answer == gate.refusal
    assert unsure.evaluation["confidence"] == 0.3
    assert "below the gate's threshold 0.4" in unsure.reason
    missing = await gate.route("Who?", ["Unrelated."], generate)
    assert (missing.route, missing.reason) == ("refuse", "not there")
    broken = await gate.route("Why?", ["Something."], generate)
    assert broken.route == "refuse" and broken.handed_off
    empty = await gate.route("Anything?", ["  "], generate)
    assert (empty.route, empty.reason) == ("refuse", "no context retrieved")
    assert generated == ["How long do refunds take?"]
    assert chat.calls == 4  # empty retrieval never reached the model
