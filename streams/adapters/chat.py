"""Two LLM judges as ready evaluators: a retrieval gate and a workflow reviewer (their
contracts, prompts and feedback types are in `streams.core.judges`).

Both speak any OpenAI-compatible chat completions API (``POST {base_url}/chat/completions``)
over httpx, at temperature 0 with ``response_format={"type": "json_object"}``, and validate the
model's answer strictly with Pydantic (exact keys, JSON types, bounded numbers).

- ``RetrievalEvaluator`` answers "does the retrieved context contain the answer to the
  question?" without answering it: a ``RetrievalVerdict`` (has_answer, confidence, reason).
  Empty retrieval (no context, or only blank ones) never reaches the model: the verdict is
  has_answer False, confidence 1.0, reason "no context retrieved", with zero model calls. With
  ``confidence_threshold``, a has_answer True below the threshold becomes False (the reason
  says so); the verdict's confidence stays the model's.
- ``WorkflowReviewer`` scores the entire package of an email workflow (the email, the analysis,
  the created tasks, the drafted reply): a ``WorkflowReview`` (approved, quality_score 0-1,
  issues, recommendation). Its verdict's confidence is the quality score.

Failure handling. One evaluation makes at most ``1 + ChatModel.max_retries`` requests. These
are retried, after ``backoff * 2**(n-1)`` seconds (or the server's ``Retry-After`` if longer,
capped at 30 s):

- a timeout (``ChatModel.timeout``) or a transport error (connection refused or reset);
- HTTP 429 and 5xx;
- a body that is not a chat completion, a message that is not JSON or breaks the contract
  (missing or extra keys, wrong types, numbers outside [0, 1]), a message without content;
- a refusal: the message has a ``refusal``, or ``finish_reason`` is ``content_filter``.

When the attempts are used up, the judge raises ``HandOff`` naming every problem met, so a
person (or the next evaluator of a ``Fallback``) takes over. Any other 4xx (400, 401, 403,
404, ...) raises HandOff at once: asking again would not help. A judge never raises anything
else for a model's misbehaviour; cancellation propagates as usual.

Requests in flight. An event loop (a worker runs its actions on one) has at most
``ChatModel.max_in_flight`` requests open to one model at once: judges whose ChatModels have
the same base URL, model name, key and limit share it, whatever their timeouts; an attempt
past it waits for a request to end, and the model's span records the wait
(``streams.queued_ms``). Retries' pauses are not spent holding a place.

``Verdict.trace`` holds ``model`` (as the server names it), ``attempts`` and, when the server
reports usage, ``prompt_tokens``, ``completion_tokens`` and ``total_tokens`` summed over every
attempt of the evaluation (so retries are costed too).

Self-judging caveat (seed 004): confidence and quality_score are uncalibrated model outputs;
treat them ordinally.
"""

from __future__ import annotations

import asyncio
import functools
import math
import ssl
import time
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from pydantic import BaseModel, ValidationError

from streams.adapters.tracing import tracer
from streams.core.evaluators import EvaluatorBase, HandOff, Verdict
from streams.core.feedback import Feedback
from streams.core.judges import (
    NO_CONTEXT_REASON,
    ChatModel,
    Completion,
    RetrievalAnswer,
    RetrievalInput,
    RetrievalVerdict,
    ReviewAnswer,
    ReviewInput,
    WorkflowReview,
    retrieval_messages,
    review_messages,
)
from streams.extras import needs

with needs("judges", "the LLM judges"):
    import httpx

__all__ = ["ChatJudge", "RetrievalEvaluator", "WorkflowReviewer"]

MAX_RETRY_DELAY = 30.0
"""The longest pause between two attempts, whatever ``Retry-After`` says."""

_In = TypeVar("_In")
_Out = TypeVar("_Out", bound=Feedback)
_Answer = TypeVar("_Answer", bound=BaseModel)


# -- the judge machinery ---------------------------------------------------------------------


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _invalid(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "answer"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def _retry_after(response: httpx.Response) -> float | None:
    raw = response.headers.get("Retry-After")
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        return None  # an HTTP date: fall back to the backoff
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
        message = body["error"]["message"]
        if isinstance(message, str):
            return _short(message)
    except (ValueError, KeyError, TypeError):
        pass
    return _short(response.text) or response.reason_phrase


def _model_span(model: ChatModel, judge: str, version: str) -> Any:
    """The span of one evaluation's model call (all its attempts), after the GenAI semantic
    conventions: `chat <model>`, a client span, the child of the current span."""
    url = httpx.URL(model.base_url)
    return tracer().start_as_current_span(
        f"chat {model.model}", kind=SpanKind.CLIENT, record_exception=True,
        attributes={"gen_ai.operation.name": "chat", "gen_ai.system": "openai",
                    "gen_ai.provider.name": "openai", "gen_ai.request.model": model.model,
                    "gen_ai.request.temperature": 0.0,
                    "gen_ai.output.type": "json", "server.address": url.host,
                    "server.port": url.port or (443 if url.scheme == "https" else 80),
                    "streams.evaluator": judge, "streams.evaluator_version": version})


def _usage_attributes(span: Span, usage: Mapping[str, int], served_by: str,
                      attempts: int) -> None:
    """Token counts (summed over the attempts, as the verdict's trace has them)."""
    span.set_attribute("gen_ai.response.model", served_by)
    span.set_attribute("streams.attempts", attempts)
    if "prompt_tokens" in usage:
        span.set_attribute("gen_ai.usage.input_tokens", usage["prompt_tokens"])
    if "completion_tokens" in usage:
        span.set_attribute("gen_ai.usage.output_tokens", usage["completion_tokens"])


_GateKey = tuple[str, str, str | None, int]
_GATES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[_GateKey, asyncio.Semaphore]] \
    = weakref.WeakKeyDictionary()


def _gate(model: ChatModel) -> asyncio.Semaphore:
    """The running loop's limit of requests in flight to `model`: one per base URL, model
    name, key and limit, whatever the judges' timeouts and retries (a semaphore belongs to
    one event loop, so each loop has its own; a worker runs its actions on one)."""
    gates = _GATES.setdefault(asyncio.get_running_loop(), {})
    key = (model.base_url, model.model, model.api_key, model.max_in_flight)
    gate = gates.get(key)
    if gate is None:
        gate = gates[key] = asyncio.Semaphore(model.max_in_flight)
    return gate


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Building the default context costs tens of milliseconds; a judge without a shared
    # client opens one client per evaluation, so they share one context.
    return httpx.create_ssl_context()


class _Retry(Exception):
    """One attempt failed in a way asking again may fix."""

    def __init__(self, problem: str, wait: float | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.wait = wait


class ChatJudge(EvaluatorBase[_In, _Out]):
    """A base for LLM judges: asks a chat model for JSON matching a Pydantic contract.

    Subclasses build messages and call ``ask``; see the module docstring for the retries and
    hand-offs it applies. ``client`` is an optional shared ``httpx.AsyncClient`` (its owner
    closes it); without one, each evaluation opens and closes its own.
    """

    def __init__(
        self,
        model: ChatModel,
        *,
        name: str,
        version: str,
        verdict_type: type[_Out],
        client: httpx.AsyncClient | None = None,
    ) -> None:
        """Configure the judge; nothing is contacted until it evaluates."""
        super().__init__(name=name, version=version, verdict_type=verdict_type)
        self._model = model
        self._client = client

    @property
    def model(self) -> ChatModel:
        """The chat model this judge asks."""
        return self._model

    @asynccontextmanager
    async def _http(self) -> AsyncIterator[httpx.AsyncClient]:
        if self._client is not None:
            yield self._client
            return
        async with httpx.AsyncClient(verify=_ssl_context()) as client:
            yield client

    def _payload(self, messages: Sequence[Mapping[str, str]]) -> dict[str, Any]:
        return {
            "model": self._model.model,
            "messages": [dict(m) for m in messages],
            "temperature": 0,
            "response_format": {"type": "json_object"},
        }

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._model.api_key:
            headers["Authorization"] = f"Bearer {self._model.api_key}"
        return headers

    async def ask(
        self, messages: Sequence[Mapping[str, str]], answer_type: type[_Answer]
    ) -> tuple[_Answer, dict[str, str]]:
        """The model's answer validated as ``answer_type``, and a trace; or HandOff."""
        model = self._model
        payload = self._payload(messages)
        headers = self._headers()
        problems: list[str] = []
        usage: dict[str, int] = {}
        queued: list[float] = []
        with _model_span(model, self.name, self.version) as span:
            try:
                answer, trace = await self._attempts(client_payload=(payload, headers),
                                                     answer_type=answer_type,
                                                     problems=problems, usage=usage,
                                                     queued=queued)
            except HandOff as exc:
                span.set_attribute("error.type", "HandOff")
                span.set_status(Status(StatusCode.ERROR, str(exc)))
                _usage_attributes(span, usage, model.model, max(1, len(problems)))
                raise
            finally:
                span.set_attribute("streams.queued_ms", sum(queued))
            _usage_attributes(span, usage, trace["model"], int(trace["attempts"]))
            return answer, trace

    async def _attempts(self, *, client_payload: tuple[dict[str, Any], dict[str, str]],
                        answer_type: type[_Answer], problems: list[str],
                        usage: dict[str, int],
                        queued: list[float]) -> tuple[_Answer, dict[str, str]]:
        model = self._model
        attempts = 1 + model.max_retries
        payload, headers = client_payload
        served_by = model.model
        async with self._http() as client:
            for attempt in range(1, attempts + 1):
                try:
                    response = await self._post(client, payload, headers, queued)
                    completion = self._completion(response)
                    if completion.model:
                        served_by = completion.model
                    if completion.usage is not None:
                        for key, count in completion.usage.model_dump().items():
                            if isinstance(count, int):
                                usage[key] = usage.get(key, 0) + count
                    answer = self._answer(completion, answer_type)
                except _Retry as retry:
                    problems.append(f"attempt {attempt}: {retry.problem}")
                    if attempt < attempts:
                        await asyncio.sleep(self._pause(attempt, retry.wait))
                    continue
                except httpx.TimeoutException:
                    problems.append(f"attempt {attempt}: timed out after {model.timeout:g}s")
                except httpx.TransportError as exc:
                    problems.append(f"attempt {attempt}: {type(exc).__name__}: {_short(str(exc))}")
                else:
                    trace = {"model": served_by, "attempts": str(attempt)}
                    trace.update({key: str(count) for key, count in sorted(usage.items())})
                    return answer, trace
                if attempt < attempts:
                    await asyncio.sleep(self._pause(attempt, None))
        raise HandOff(
            f"{self.name}@{self.version}: no valid answer from {model.model} after "
            f"{attempts} attempt(s): {' | '.join(problems)}"
        )

    async def _post(self, client: httpx.AsyncClient, payload: dict[str, Any],
                    headers: dict[str, str], queued: list[float]) -> httpx.Response:
        """One request, holding one of the model's places in flight while it is open; how
        long it waited for a place is appended to `queued` (ms)."""
        model = self._model
        gate = _gate(model)
        started = time.perf_counter()
        async with gate:
            queued.append(_elapsed_ms(started))
            return await client.post(model.completions_url, json=payload, headers=headers,
                                     timeout=model.timeout)

    def _pause(self, attempt: int, wait: float | None) -> float:
        pause = self._model.backoff * float(2 ** (attempt - 1))
        if wait is not None:
            pause = max(pause, wait)
        return min(pause, MAX_RETRY_DELAY)

    def _completion(self, response: httpx.Response) -> Completion:
        status = response.status_code
        if status == 429 or status >= 500:
            raise _Retry(f"HTTP {status}: {_error_message(response)}", _retry_after(response))
        if not 200 <= status < 300:
            raise HandOff(
                f"{self.name}@{self.version}: {self._model.model} answered HTTP {status}: "
                f"{_error_message(response)}"
            )
        try:
            return Completion.model_validate_json(response.content)
        except ValidationError as exc:
            raise _Retry(f"not a chat completion ({_invalid(exc)})") from exc

    @staticmethod
    def _answer(completion: Completion, answer_type: type[_Answer]) -> _Answer:
        choice = completion.choices[0]
        if choice.message.refusal:
            raise _Retry(f"refused: {_short(choice.message.refusal)}")
        if choice.finish_reason == "content_filter":
            raise _Retry("refused: content_filter")
        content = choice.message.content
        if content is None or not content.strip():
            raise _Retry(f"no content (finish_reason {choice.finish_reason})")
        try:
            return answer_type.model_validate_json(content)
        except ValidationError as exc:
            raise _Retry(f"invalid answer: {_invalid(exc)}; got {_short(content)!r}") from exc


def _elapsed_ms(started: float) -> float:
    return max(0.0, (time.perf_counter() - started) * 1000.0)


class RetrievalEvaluator(ChatJudge[RetrievalInput, RetrievalVerdict]):
    """The retrieval gate: does the retrieved context contain the question's answer?

    Input ``RetrievalInput``; verdict ``RetrievalVerdict`` with the model's confidence as the
    Verdict's confidence. Empty retrieval is judged without the model. ``confidence_threshold``
    (in [0, 1]) turns a has_answer True below it into False. Raises HandOff as the module
    docstring describes.
    """

    def __init__(
        self,
        model: ChatModel,
        name: str = "retrieval-evaluator",
        version: str = "1",
        confidence_threshold: float | None = None,
        *,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        """Configure the judge; see the class docstring."""
        if confidence_threshold is not None and not (
            math.isfinite(confidence_threshold) and 0.0 <= confidence_threshold <= 1.0
        ):
            raise ValueError(
                f"confidence_threshold must be within [0, 1], got {confidence_threshold!r}"
            )
        super().__init__(model, name=name, version=version, verdict_type=RetrievalVerdict,
                         client=client)
        self._threshold = confidence_threshold

    @property
    def confidence_threshold(self) -> float | None:
        """The confidence below which a positive verdict is turned negative, if any."""
        return self._threshold

    async def evaluate(self, input: RetrievalInput, /) -> Verdict[RetrievalVerdict]:
        """Judge one retrieval; HandOff when the model gives no valid answer."""
        started = time.perf_counter()
        if not any(context.strip() for context in input.contexts):
            value = RetrievalVerdict(has_answer=False, confidence=1.0, reason=NO_CONTEXT_REASON)
            return self.verdict(value, confidence=1.0, latency_ms=_elapsed_ms(started),
                                trace={"attempts": "0", "skipped": NO_CONTEXT_REASON})
        answer, trace = await self.ask(retrieval_messages(input), RetrievalAnswer)
        has_answer, reason = answer.has_answer, answer.reason
        threshold = self._threshold
        if has_answer and threshold is not None and answer.confidence < threshold:
            has_answer = False
            reason = (f"confidence {answer.confidence:g} is below the threshold {threshold:g}; "
                      f"the model said: {answer.reason}")
            trace["threshold_applied"] = "true"
        value = RetrievalVerdict(has_answer=has_answer, confidence=answer.confidence,
                                 reason=reason)
        return self.verdict(value, confidence=answer.confidence,
                            latency_ms=_elapsed_ms(started), trace=trace)


class WorkflowReviewer(ChatJudge[ReviewInput, WorkflowReview]):
    """The workflow reviewer: scores an email workflow's whole package from 0 to 1.

    Input ``ReviewInput``; verdict ``WorkflowReview``, with ``quality_score`` as the Verdict's
    confidence. Advisory: nothing here acts on ``approved``. Raises HandOff as the module
    docstring describes.
    """

    def __init__(
        self,
        model: ChatModel,
        name: str = "workflow-reviewer",
        version: str = "1",
        *,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        """Configure the judge; nothing is contacted until it evaluates."""
        super().__init__(model, name=name, version=version, verdict_type=WorkflowReview,
                         client=client)

    async def evaluate(self, input: ReviewInput, /) -> Verdict[WorkflowReview]:
        """Review one workflow's package; HandOff when the model gives no valid answer."""
        started = time.perf_counter()
        answer, trace = await self.ask(review_messages(input), ReviewAnswer)
        value = WorkflowReview(approved=answer.approved, quality_score=answer.quality_score,
                               issues=list(answer.issues),
                               recommendation=answer.recommendation)
        return self.verdict(value, confidence=answer.quality_score,
                            latency_ms=_elapsed_ms(started), trace=trace)
