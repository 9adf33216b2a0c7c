"""The LLM judges against the chat stand-in over loopback: verdicts, retries and hand-offs."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from standins.chat_standin import ChatReply, ChatStandIn
from streams.adapters.chat import RetrievalEvaluator, WorkflowReviewer
from streams.core.evaluators import Evaluator, Fallback, FunctionEvaluator, HandOff
from streams.core.feedback import registry
from streams.core.judges import (
    ChatModel,
    RetrievalInput,
    RetrievalVerdict,
    ReviewInput,
    WorkflowReview,
)
from streams.core.scores import score_configs
from tests.spans import named, spans

__all__ = ["spans"]  # the fixture, imported for the tests below

QUESTION = RetrievalInput(
    question="What is the refund window?",
    contexts=["Refunds are accepted within 30 days of purchase.", "Shipping takes 5 days."],
)
PACKAGE = ReviewInput(
    email="Hi, my order #42 arrived broken. Can I get a replacement?",
    analysis={"intent": "replacement", "urgency": "medium", "order": "42"},
    tasks=[{"title": "Ship replacement for order 42", "owner": "fulfilment"}],
    reply="Sorry to hear that! A replacement for order #42 is on its way.",
)


def answer(**fields: Any) -> str:
    return json.dumps(fields)


YES = answer(has_answer=True, confidence=0.85, reason="The first context states 30 days.")
REVIEW = answer(approved=True, quality_score=0.92, issues=[], recommendation="Send it.")


@pytest.fixture
def chat() -> Iterator[ChatStandIn]:
    with ChatStandIn(api_key="sk-standin") as server:
        yield server


def model_for(chat: ChatStandIn, **overrides: Any) -> ChatModel:
    values: dict[str, Any] = {"base_url": chat.url, "model": "judge-mini",
                              "api_key": "sk-standin", "timeout": 0.5, "max_retries": 2,
                              "backoff": 0.0}
    values.update(overrides)
    return ChatModel(**values)


# -- retrieval evaluator ----------------------------------------------------------------------


async def test_retrieval_verdict_and_request(chat: ChatStandIn) -> None:
    chat.enqueue(YES)
    judge = RetrievalEvaluator(model_for(chat))
    verdict = await judge.evaluate(QUESTION)

    assert verdict.value == RetrievalVerdict(
        has_answer=True, confidence=0.85, reason="The first context states 30 days."
    )
    assert verdict.confidence == 0.85
    assert verdict.actor.participant == "evaluator:retrieval-evaluator@1"
    assert verdict.latency_ms >= 0
    assert verdict.trace is not None
    assert verdict.trace["model"] == "judge-mini"
    assert verdict.trace["attempts"] == "1"
    assert int(verdict.trace["prompt_tokens"]) > 0
    assert int(verdict.trace["total_tokens"]) == (
        int(verdict.trace["prompt_tokens"]) + int(verdict.trace["completion_tokens"])
    )

    [request] = chat.requests
    assert request["model"] == "judge-mini"
    assert request["temperature"] == 0
    assert request["response_format"] == {"type": "json_object"}
    system, user = request["messages"]
    assert system["role"] == "system"
    assert "Do NOT answer the question" in system["content"]
    assert '"has_answer"' in system["content"]
    assert "JSON" in system["content"]
    assert QUESTION.question in user["content"]
    assert all(context in user["content"] for context in QUESTION.contexts)
    [logged] = chat.request_log
    assert logged.headers["Authorization"] == "Bearer sk-standin"


@pytest.mark.parametrize("contexts", [[], ["", "  \n "]])
async def test_empty_retrieval_makes_no_model_call(
    chat: ChatStandIn, contexts: list[str]
) -> None:
    verdict = await RetrievalEvaluator(model_for(chat)).evaluate(
        RetrievalInput(question="Anything?", contexts=contexts)
    )
    assert verdict.value == RetrievalVerdict(
        has_answer=False, confidence=1.0, reason="no context retrieved"
    )
    assert verdict.confidence == 1.0
    assert verdict.trace is not None
    assert verdict.trace["attempts"] == "0"
    assert chat.calls == 0


async def test_blank_contexts_are_left_out_of_the_prompt(chat: ChatStandIn) -> None:
    chat.enqueue(YES)
    await RetrievalEvaluator(model_for(chat)).evaluate(
        RetrievalInput(question="q", contexts=["  ", "the answer"])
    )
    user = chat.requests[0]["messages"][1]["content"]
    assert user.count("<context id=") == 1


async def test_confidence_threshold_turns_weak_positives_negative(chat: ChatStandIn) -> None:
    judge = RetrievalEvaluator(model_for(chat), confidence_threshold=0.4)
    assert judge.confidence_threshold == 0.4

    chat.enqueue(answer(has_answer=True, confidence=0.3, reason="Maybe in context 2."))
    weak = await judge.evaluate(QUESTION)
    assert weak.value.has_answer is False
    assert weak.value.confidence == 0.3
    assert "below the threshold 0.4" in weak.value.reason
    assert "Maybe in context 2." in weak.value.reason
    assert weak.confidence == 0.3

    chat.enqueue(answer(has_answer=True, confidence=0.4, reason="Stated."))
    assert (await judge.evaluate(QUESTION)).value.has_answer is True

    chat.enqueue(answer(has_answer=False, confidence=0.1, reason="Not there."))
    negative = await judge.evaluate(QUESTION)
    assert negative.value == RetrievalVerdict(has_answer=False, confidence=0.1,
                                              reason="Not there.")

    unthresholded = RetrievalEvaluator(model_for(chat))
    chat.enqueue(answer(has_answer=True, confidence=0.05, reason="Barely."))
    assert (await unthresholded.evaluate(QUESTION)).value.has_answer is True
    with pytest.raises(ValueError, match="confidence_threshold"):
        RetrievalEvaluator(model_for(chat), confidence_threshold=1.5)


async def test_malformed_json_then_valid_is_retried(chat: ChatStandIn) -> None:
    chat.enqueue("Sure! Here is the JSON: {has_answer: yes}", YES)
    verdict = await RetrievalEvaluator(model_for(chat)).evaluate(QUESTION)
    assert chat.calls == 2
    assert verdict.value.has_answer is True
    assert verdict.trace is not None
    assert verdict.trace["attempts"] == "2"
    first, second = chat.requests
    assert first == second


async def test_tokens_are_summed_over_attempts(chat: ChatStandIn) -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    chat.enqueue(ChatReply(content="{", usage=usage), ChatReply(content=YES, usage=usage))
    verdict = await RetrievalEvaluator(model_for(chat)).evaluate(QUESTION)
    assert verdict.trace is not None
    assert verdict.trace["prompt_tokens"] == "200"
    assert verdict.trace["total_tokens"] == "220"


async def test_always_malformed_hands_off_after_every_attempt(chat: ChatStandIn) -> None:
    chat.set_responder(lambda _: "I think the answer is 30 days.")
    with pytest.raises(HandOff) as raised:
        await RetrievalEvaluator(model_for(chat, max_retries=2)).evaluate(QUESTION)
    assert chat.calls == 3
    assert raised.value.reason is not None
    assert "after 3 attempt(s)" in raised.value.reason
    assert "invalid answer" in raised.value.reason


@pytest.mark.parametrize(
    "content",
    [
        answer(has_answer=True, confidence=1.5, reason="x"),  # out of range
        answer(has_answer=True, reason="x"),  # missing key
        answer(has_answer=True, confidence=0.5, reason="x", answer="30 days"),  # extra key
        answer(has_answer="true", confidence=0.5, reason="x"),  # a string, not a bool
        answer(has_answer=True, confidence="0.5", reason="x"),  # a string, not a number
        json.dumps([True, 0.5, "x"]),  # not an object
        "",  # empty
    ],
)
async def test_contract_violations_are_not_verdicts(chat: ChatStandIn, content: str) -> None:
    chat.enqueue(content)
    with pytest.raises(HandOff):
        await RetrievalEvaluator(model_for(chat, max_retries=0)).evaluate(QUESTION)
    assert chat.calls == 1


async def test_integer_confidence_is_a_number(chat: ChatStandIn) -> None:
    chat.enqueue(answer(has_answer=False, confidence=1, reason="Nothing about refunds."))
    verdict = await RetrievalEvaluator(model_for(chat)).evaluate(QUESTION)
    assert verdict.value.confidence == 1.0


async def test_timeouts_are_retried_then_hand_off(chat: ChatStandIn) -> None:
    chat.enqueue(*[ChatReply.slow(2.0, YES)] * 3)
    started = time.monotonic()
    with pytest.raises(HandOff) as raised:
        await RetrievalEvaluator(model_for(chat, timeout=0.2)).evaluate(QUESTION)
    assert time.monotonic() - started < 1.5
    # The judge's own record of its three attempts, each cut at the timeout. The stand-in
    # counts the requests it got to (a request still in its accept queue when the client
    # gave up is not one: under a loaded CI it counted 2), never more than three.
    reason = raised.value.reason
    assert reason is not None
    assert [f"attempt {n}: timed out after 0.2s" in reason for n in (1, 2, 3)] == [True] * 3
    assert "after 3 attempt(s)" in reason
    assert 1 <= chat.calls <= 3


async def test_a_timeout_then_an_answer_is_a_verdict(chat: ChatStandIn) -> None:
    chat.enqueue(ChatReply.slow(2.0, YES), YES)
    verdict = await RetrievalEvaluator(model_for(chat, timeout=0.2)).evaluate(QUESTION)
    assert verdict.value.has_answer is True
    assert chat.calls == 2


async def test_refusals_hand_off(chat: ChatStandIn) -> None:
    chat.set_responder(lambda _: ChatReply.refuse("I can't assist with that."))
    with pytest.raises(HandOff) as raised:
        await RetrievalEvaluator(model_for(chat, max_retries=1)).evaluate(QUESTION)
    assert chat.calls == 2
    assert raised.value.reason is not None
    assert "refused: I can't assist with that." in raised.value.reason


async def test_content_filter_is_a_refusal(chat: ChatStandIn) -> None:
    chat.enqueue(ChatReply.filtered())
    with pytest.raises(HandOff, match="content_filter"):
        await RetrievalEvaluator(model_for(chat, max_retries=0)).evaluate(QUESTION)


async def test_a_refusal_then_an_answer_is_a_verdict(chat: ChatStandIn) -> None:
    chat.enqueue(ChatReply.refuse(), YES)
    verdict = await RetrievalEvaluator(model_for(chat)).evaluate(QUESTION)
    assert verdict.value.has_answer is True
    assert chat.calls == 2


@pytest.mark.parametrize("status", [400, 403, 404, 422])
async def test_client_errors_hand_off_at_once(chat: ChatStandIn, status: int) -> None:
    chat.enqueue(ChatReply.error(status, "model_not_found"), YES)
    with pytest.raises(HandOff) as raised:
        await RetrievalEvaluator(model_for(chat)).evaluate(QUESTION)
    assert chat.calls == 1
    assert raised.value.reason is not None
    assert f"HTTP {status}: model_not_found" in raised.value.reason


async def test_a_wrong_api_key_hands_off_at_once(chat: ChatStandIn) -> None:
    with pytest.raises(HandOff, match="HTTP 401"):
        await RetrievalEvaluator(model_for(chat, api_key="wrong")).evaluate(QUESTION)
    assert chat.calls == 1


@pytest.mark.parametrize("status", [429, 500, 502, 503])
async def test_rate_limits_and_server_errors_are_retried(
    chat: ChatStandIn, status: int
) -> None:
    chat.enqueue(ChatReply.error(status), YES)
    verdict = await RetrievalEvaluator(model_for(chat)).evaluate(QUESTION)
    assert verdict.value.has_answer is True
    assert chat.calls == 2


async def test_persistent_server_errors_hand_off(chat: ChatStandIn) -> None:
    chat.set_responder(lambda _: ChatReply.error(503, "overloaded"))
    with pytest.raises(HandOff, match="HTTP 503: overloaded"):
        await RetrievalEvaluator(model_for(chat, max_retries=3)).evaluate(QUESTION)
    assert chat.calls == 4


async def test_retry_after_is_honoured(chat: ChatStandIn) -> None:
    chat.enqueue(ChatReply.error(429, retry_after=0.2), YES)
    started = time.monotonic()
    await RetrievalEvaluator(model_for(chat)).evaluate(QUESTION)
    assert time.monotonic() - started >= 0.2


async def test_a_body_that_is_not_a_completion_is_retried(chat: ChatStandIn) -> None:
    chat.enqueue(ChatReply.raw("<html>gateway</html>"), ChatReply.raw('{"choices": []}'), YES)
    verdict = await RetrievalEvaluator(model_for(chat)).evaluate(QUESTION)
    assert verdict.value.has_answer is True
    assert chat.calls == 3


async def test_an_unreachable_server_hands_off() -> None:
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        judge = RetrievalEvaluator(ChatModel(f"http://127.0.0.1:{port}/v1", "m", None,
                                             timeout=0.5, max_retries=1, backoff=0))
        with pytest.raises(HandOff, match="ConnectError"):
            await judge.evaluate(QUESTION)


async def test_a_shared_client_is_used_and_left_open(chat: ChatStandIn) -> None:
    chat.enqueue(YES, YES)
    async with httpx.AsyncClient() as client:
        judge = RetrievalEvaluator(model_for(chat), "rag-gate", "2", client=client)
        assert (await judge.evaluate(QUESTION)).actor.participant == "evaluator:rag-gate@2"
        await judge.evaluate(QUESTION)
        assert not client.is_closed
    assert chat.calls == 2


async def test_a_model_with_no_api_key_sends_no_authorization() -> None:
    with ChatStandIn() as open_chat:
        open_chat.enqueue(YES)
        await RetrievalEvaluator(model_for(open_chat, api_key=None)).evaluate(QUESTION)
        [logged] = open_chat.request_log
        assert "Authorization" not in logged.headers


async def test_a_hand_off_falls_back_to_another_evaluator(chat: ChatStandIn) -> None:
    def cautious(_: RetrievalInput) -> RetrievalVerdict:
        return RetrievalVerdict(has_answer=False, confidence=0.0, reason="judge unavailable")

    chat.enqueue(ChatReply.error(400))
    gate = Fallback(
        RetrievalEvaluator(model_for(chat)),
        FunctionEvaluator(cautious, verdict_type=RetrievalVerdict, name="cautious"),
        name="rag-gate", version="1",
    )
    verdict = await gate.evaluate(QUESTION)
    assert verdict.value.reason == "judge unavailable"
    assert verdict.trace is not None
    assert verdict.trace["evaluator"] == "cautious"
    assert verdict.trace["handed_off"] == "retrieval-evaluator"


# -- requests in flight -----------------------------------------------------------------------


def slow_yes(_body: dict[str, Any]) -> ChatReply:
    return ChatReply.text(YES, delay=0.3)  # long enough to overlap on a loaded machine


async def test_a_judge_keeps_to_its_models_requests_in_flight() -> None:
    with ChatStandIn(slow_yes, max_in_flight=3) as limited:
        judge = RetrievalEvaluator(model_for(limited, max_in_flight=3, max_retries=0))
        verdicts = await asyncio.gather(*(judge.evaluate(QUESTION) for _ in range(12)))
        assert all(v.value.has_answer for v in verdicts)
        assert limited.refused_in_flight == 0
        assert limited.peak_in_flight == 3  # the places were used, not fewer
        assert limited.calls == 12


async def test_past_a_providers_limit_requests_are_refused_without_the_gate() -> None:
    """The stand-in's limit is real: a model allowed more in flight meets 429s."""
    with ChatStandIn(slow_yes, max_in_flight=3) as limited:
        judge = RetrievalEvaluator(model_for(limited, max_in_flight=12, max_retries=0))
        done = await asyncio.gather(*(judge.evaluate(QUESTION) for _ in range(12)),
                                    return_exceptions=True)
        assert limited.refused_in_flight > 0
        assert any(isinstance(d, HandOff) and "429" in str(d) for d in done)


async def test_judges_of_one_model_share_its_places_and_others_do_not() -> None:
    with ChatStandIn(slow_yes, max_in_flight=2) as limited:
        model = model_for(limited, max_in_flight=2, max_retries=0)
        # Another timeout is the same model to the provider: the places are shared.
        gates = [RetrievalEvaluator(model, "gate-a", "1"),
                 RetrievalEvaluator(dataclasses.replace(model, timeout=0.4), "gate-b", "1")]
        await asyncio.gather(*(gates[i % 2].evaluate(QUESTION) for i in range(8)))
        assert (limited.peak_in_flight, limited.refused_in_flight) == (2, 0)
    with ChatStandIn(slow_yes) as open_chat:
        first = RetrievalEvaluator(model_for(open_chat, model="a", max_in_flight=2))
        second = RetrievalEvaluator(model_for(open_chat, model="b", max_in_flight=2))
        await asyncio.gather(*(j.evaluate(QUESTION) for j in (first, second) for _ in range(4)))
        assert open_chat.peak_in_flight == 4  # two models, two places each


async def test_a_wait_for_a_place_is_on_the_models_span(spans: InMemorySpanExporter) -> None:
    with ChatStandIn(slow_yes, max_in_flight=1) as limited:
        judge = RetrievalEvaluator(model_for(limited, max_in_flight=1))
        await asyncio.gather(*(judge.evaluate(QUESTION) for _ in range(3)))
        assert limited.refused_in_flight == 0
    waits = sorted(float((s.attributes or {})["streams.queued_ms"])
                   for s in named(spans, "chat judge-mini"))
    assert len(waits) == 3
    assert waits[0] < 50 and waits[-1] >= 450  # the third waited for two answers of 0.3 s


# -- workflow reviewer ------------------------------------------------------------------------


async def test_review_verdict_and_request(chat: ChatStandIn) -> None:
    chat.enqueue(REVIEW)
    reviewer = WorkflowReviewer(model_for(chat))
    verdict = await reviewer.evaluate(PACKAGE)
    assert verdict.value == WorkflowReview(approved=True, quality_score=0.92, issues=[],
                                           recommendation="Send it.")
    assert verdict.confidence == 0.92
    assert verdict.actor.participant == "evaluator:workflow-reviewer@1"
    assert verdict.trace is not None
    assert verdict.trace["model"] == "judge-mini"

    [request] = chat.requests
    assert (request["model"], request["temperature"]) == ("judge-mini", 0)
    assert request["response_format"] == {"type": "json_object"}
    system, user = request["messages"]
    assert '"quality_score"' in system["content"]
    for part in (PACKAGE.email, PACKAGE.reply, "Ship replacement for order 42", "replacement"):
        assert part in user["content"]


async def test_review_with_issues(chat: ChatStandIn) -> None:
    chat.enqueue(answer(approved=False, quality_score=0.35,
                        issues=["Reply promises a replacement no task ships."],
                        recommendation="Create the shipping task first."))
    verdict = await WorkflowReviewer(model_for(chat), "reviewer", "2").evaluate(PACKAGE)
    assert verdict.value.approved is False
    assert verdict.value.issues == ["Reply promises a replacement no task ships."]
    assert verdict.confidence == 0.35
    assert verdict.actor.participant == "evaluator:reviewer@2"


async def test_review_contract_violations_are_retried(chat: ChatStandIn) -> None:
    chat.enqueue(
        answer(approved=True, quality_score=0.9, issues="none", recommendation="ok"),
        answer(approved=True, quality_score=92, issues=[], recommendation="ok"),
        REVIEW,
    )
    verdict = await WorkflowReviewer(model_for(chat)).evaluate(PACKAGE)
    assert verdict.value.quality_score == 0.92
    assert chat.calls == 3


async def test_review_hands_off_when_nothing_valid_comes(chat: ChatStandIn) -> None:
    chat.set_responder(lambda _: answer(approved=True))
    with pytest.raises(HandOff, match="after 2 attempt"):
        await WorkflowReviewer(model_for(chat, max_retries=1)).evaluate(PACKAGE)
    assert chat.calls == 2


# -- types and configuration ------------------------------------------------------------------


def test_feedback_types_are_registered_with_short_score_names() -> None:
    assert registry.get("retrieval_verdict") is RetrievalVerdict
    assert registry.get("workflow_review") is WorkflowReview
    assert RetrievalVerdict.feedback_targets == frozenset({"run"})
    assert WorkflowReview.feedback_targets == frozenset({"run", "chain"})
    for feedback_type in (RetrievalVerdict, WorkflowReview):
        names = [config.name for config in score_configs(feedback_type)]
        assert names
        assert all(len(name) <= 35 for name in names), names


def test_judges_are_evaluators(chat: ChatStandIn) -> None:
    for judge in (RetrievalEvaluator(model_for(chat)), WorkflowReviewer(model_for(chat))):
        assert isinstance(judge, Evaluator)
    assert RetrievalEvaluator(model_for(chat)).verdict_type is RetrievalVerdict
    assert WorkflowReviewer(model_for(chat)).verdict_type is WorkflowReview


@pytest.mark.parametrize(
    "overrides",
    [{"base_url": "llm.example"}, {"model": ""}, {"timeout": 0}, {"max_retries": -1},
     {"backoff": -1.0}, {"max_in_flight": 0}, {"max_in_flight": 2.5},
     {"max_in_flight": True}],
)
def test_chat_model_is_checked(overrides: dict[str, Any]) -> None:
    values: dict[str, Any] = {"base_url": "http://h/v1", "model": "m"}
    values.update(overrides)
    with pytest.raises(ValueError):
        ChatModel(**values)
