"""Seed 004's next steps for its two judges: act on a rejection (a corrective loop that
regenerates once), gate retrieval on a confidence threshold, and a golden-set harness that
compares reviewer scores before and after a prompt or model change.

Corrective loop. A workflow's package is an app event `workflow:completed` (a `ReviewInput`'s
fields as data); the reviewer's verdict is `workflow_review` feedback on the workflow's chain.
`corrective_rule(action)` fires on every `workflow_review` with `approved` false and runs
`CorrectiveAction`, which regenerates the package once with the reviewer's issues fed back
(`regenerate(package, issues)`), appends it as `workflow:regenerated` in the same chain, has
the reviewer judge it again and gives that verdict as feedback on the chain. If the new
verdict is a rejection too, the rule fires again, and the action sees the chain already holds
a regeneration and declines (`{"regenerated": False, ...}`): at most one regeneration per
workflow, so a second rejection does not loop.

The gate. `RetrievalGate(evaluator, threshold=0.4)` routes a question: the retrieval evaluator
judges the contexts (empty retrieval never reaches the model), and the gate answers (calls
`generate`) only when `has_answer` is true and the confidence is at or above the threshold,
else returns the refusal. A judge that hands off refuses (safe). The evaluation (has_answer,
confidence, reason, threshold, route) is returned to the caller either way.

The golden set. `compare_reviews(dataset, candidate=..., reviewer=...)` replays recorded
workflow inputs (a Dataset whose inputs are `ReviewInput`s and whose verdicts are the recorded
`WorkflowReview`s) through a candidate (the changed prompt or model: a function from the
recorded package to a new one; identity to compare reviewers), reviews each result with the
reviewer (or a `baseline` reviewer re-judges the recorded package instead of the recorded
verdict), and compares per example old and new quality_score and approved, the mean
difference, and the approval agreement. Failures are kept per example, never dropped.

Pure: the judges are `Evaluator`s (`streams.adapters.chat` has the LLM ones).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from streams.core.app_events import AppEventType
from streams.core.datasets import Dataset, Example
from streams.core.errors import StreamsError
from streams.core.evaluators import Evaluator, HandOff, check_verdict
from streams.core.events import AppEvent, Envelope, FeedbackGiven
from streams.core.experiments import run_examples
from streams.core.judges import RetrievalInput, RetrievalVerdict, ReviewInput, WorkflowReview
from streams.core.rules import F, Rule, on, run
from streams.core.runs import Reaction
from streams.core.targets import ChainTarget

__all__ = [
    "DEFAULT_REFUSAL",
    "CorrectiveAction",
    "ExampleComparison",
    "GateDecision",
    "GoldenComparison",
    "RetrievalGate",
    "WorkflowCompleted",
    "WorkflowError",
    "WorkflowRegenerated",
    "compare_reviews",
    "corrective_rule",
]

DEFAULT_REFUSAL: Final = "I can't answer that from the documents I have."


class WorkflowError(StreamsError):
    """A corrective run or a comparison could not proceed; the message names the chain or the
    example and why."""


class WorkflowCompleted(AppEventType, name="workflow:completed"):
    """A workflow's whole package, as the reviewer judges it."""

    email: str
    analysis: dict[str, Any]
    tasks: list[dict[str, Any]]
    reply: str


class WorkflowRegenerated(AppEventType, name="workflow:regenerated"):
    """The package regenerated once with the reviewer's issues fed back."""

    email: str
    analysis: dict[str, Any]
    tasks: list[dict[str, Any]]
    reply: str
    issues: list[str]


Regenerate = Callable[[ReviewInput, list[str]], ReviewInput | Awaitable[ReviewInput]]
"""Makes a new package from the rejected one and the reviewer's issues (a prompt with them)."""


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class CorrectiveAction:
    """Regenerates a rejected workflow once, with the issues fed back, and has it reviewed
    again (see the module docstring)."""

    def __init__(self, regenerate: Regenerate, reviewer: Evaluator[ReviewInput, WorkflowReview],
                 *, name: str = "regenerate-once") -> None:
        self.regenerate = regenerate
        self.reviewer = reviewer
        self.name = name

    async def __call__(self, reaction: Reaction) -> dict[str, Any]:
        """Regenerate (or decline, when the chain was regenerated already) and re-review."""
        rejected = reaction.events[-1] if reaction.events else None
        if rejected is None or not isinstance(rejected.event, FeedbackGiven):
            raise WorkflowError(f"run {reaction.run.run_id}: fired by "
                                f"{rejected.event_type if rejected else 'nothing'}, not by "
                                "workflow_review feedback")
        chain_id = rejected.correlation_id
        chain = [e for e in await reaction.workspace.read() if e.correlation_id == chain_id]
        if any(_named(e, WorkflowRegenerated) for e in chain):
            return {"regenerated": False,
                    "reason": "this workflow was regenerated once already; left to a person"}
        completed = next((e for e in chain if _named(e, WorkflowCompleted)), None)
        if completed is None:
            raise WorkflowError(f"chain {chain_id}: no workflow:completed event to regenerate")
        assert isinstance(completed.event, AppEvent)
        package = ReviewInput.model_validate(
            WorkflowCompleted.of(completed.event).model_dump())
        issues = [str(i) for i in rejected.event.value.get("issues", [])]
        fresh = await _maybe(self.regenerate(package, issues))
        regenerated = WorkflowRegenerated(**fresh.model_dump(), issues=issues)
        await reaction.emit(regenerated.to_event())
        try:
            verdict = await self.reviewer.evaluate(fresh)
        except HandOff as exc:
            return {"regenerated": True, "reviewed": False, "handed_off": str(exc)}
        checked = check_verdict(verdict, self.reviewer.verdict_type)
        recorded = await reaction.workspace.as_actor(checked.actor).give_feedback(
            checked.value, on=ChainTarget(correlation_id=chain_id))
        review = checked.value
        assert isinstance(review, WorkflowReview)
        return {"regenerated": True, "reviewed": True, "approved": review.approved,
                "quality_score": review.quality_score, "feedback_id": recorded.id}


def _named(envelope: Envelope, declared: type[AppEventType]) -> bool:
    return isinstance(envelope.event, AppEvent) and \
        envelope.event.name == declared.app_event_name


def corrective_rule(action: CorrectiveAction, *,
                    name: str = "workflow:regenerate-rejected") -> Rule:
    """The rule acting on `approved: false`: every rejecting workflow_review runs `action`."""
    return Rule(name=name,
                when=on(FeedbackGiven).where(F.value.approved.eq(False),
                                             feedback_type="workflow_review"),
                then=run(action))


# -- the retrieval gate ----------------------------------------------------------------------


@dataclass(frozen=True)
class GateDecision:
    """How the gate routed a question, the answer (or the refusal), and the evaluation the
    caller gets back (seed 004's `retrieval_evaluation`)."""

    route: str
    answer: str
    has_answer: bool
    confidence: float
    reason: str
    threshold: float
    handed_off: bool = False

    @property
    def evaluation(self) -> dict[str, Any]:
        """The evaluation as the API returns it to its caller."""
        return {"has_answer": self.has_answer, "confidence": self.confidence,
                "reason": self.reason, "threshold": self.threshold, "route": self.route,
                "handed_off": self.handed_off}


class RetrievalGate:
    """Routes on the retrieval evaluator's verdict with a confidence threshold."""

    def __init__(self, evaluator: Evaluator[RetrievalInput, RetrievalVerdict], *,
                 threshold: float = 0.4, refusal: str = DEFAULT_REFUSAL) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise WorkflowError(f"the gate's threshold must be within [0, 1], got {threshold}")
        self.evaluator = evaluator
        self.threshold = threshold
        self.refusal = refusal

    async def route(self, question: str, contexts: Sequence[str],
                    generate: Callable[[str, Sequence[str]], str | Awaitable[str]],
                    ) -> GateDecision:
        """Judge the retrieval; answer with `generate(question, contexts)` only when it holds
        the answer with enough confidence, else refuse. Never raises for a judge's hand-off."""
        try:
            verdict = await self.evaluator.evaluate(
                RetrievalInput(question=question, contexts=list(contexts)))
        except HandOff as exc:
            return GateDecision("refuse", self.refusal, False, 0.0,
                                f"the retrieval judge handed off: {exc}", self.threshold,
                                handed_off=True)
        value = verdict.value
        if value.has_answer and value.confidence >= self.threshold:
            answer = await _maybe(generate(question, contexts))
            return GateDecision("answer", str(answer), True, value.confidence, value.reason,
                                self.threshold)
        reason = value.reason
        if value.has_answer:
            reason = (f"confidence {value.confidence:g} is below the gate's threshold "
                      f"{self.threshold:g}; the judge said: {value.reason}")
        return GateDecision("refuse", self.refusal, False, value.confidence, reason,
                            self.threshold)


# -- the golden-set harness ------------------------------------------------------------------


@dataclass(frozen=True)
class ExampleComparison:
    """One recorded workflow: its old and new review, or why it could not be compared."""

    example_id: str
    old_score: float | None = None
    new_score: float | None = None
    old_approved: bool | None = None
    new_approved: bool | None = None
    new_issues: tuple[str, ...] = ()
    error: str | None = None

    @property
    def difference(self) -> float | None:
        """new - old quality_score, when both exist."""
        if self.old_score is None or self.new_score is None:
            return None
        return self.new_score - self.old_score


@dataclass(frozen=True)
class GoldenComparison:
    """Old against new reviewer scores over a golden set."""

    name: str
    examples: list[ExampleComparison]

    @property
    def compared(self) -> list[ExampleComparison]:
        """The examples with both scores."""
        return [e for e in self.examples if e.difference is not None]

    @property
    def failed(self) -> list[ExampleComparison]:
        """The examples that could not be compared (their error says why)."""
        return [e for e in self.examples if e.error is not None]

    @property
    def mean_old(self) -> float | None:
        """Mean old quality_score over the compared examples."""
        return _mean([e.old_score for e in self.compared])

    @property
    def mean_new(self) -> float | None:
        """Mean new quality_score over the compared examples."""
        return _mean([e.new_score for e in self.compared])

    @property
    def mean_difference(self) -> float | None:
        """Mean of new - old quality_score over the compared examples."""
        return _mean([e.difference for e in self.compared])

    @property
    def agreement(self) -> float | None:
        """Share of compared examples whose approval did not change."""
        compared = self.compared
        if not compared:
            return None
        return sum(e.old_approved == e.new_approved for e in compared) / len(compared)

    @property
    def regressions(self) -> list[str]:
        """Examples approved before and rejected now."""
        return [e.example_id for e in self.compared if e.old_approved and not e.new_approved]

    @property
    def fixes(self) -> list[str]:
        """Examples rejected before and approved now."""
        return [e.example_id for e in self.compared if e.new_approved and not e.old_approved]

    def summary(self) -> dict[str, float | int | None]:
        """The figures in one mapping (for a report)."""
        return {"examples": len(self.examples), "compared": len(self.compared),
                "failed": len(self.failed), "mean_old": self.mean_old,
                "mean_new": self.mean_new, "mean_difference": self.mean_difference,
                "agreement": self.agreement, "regressions": len(self.regressions),
                "fixes": len(self.fixes)}


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


Candidate = Callable[[ReviewInput], ReviewInput | Awaitable[ReviewInput]]
"""The changed prompt or model: from a recorded package to the package it would make now."""


async def compare_reviews(
    dataset: Dataset[ReviewInput, WorkflowReview],
    *,
    reviewer: Evaluator[ReviewInput, WorkflowReview],
    candidate: Candidate | None = None,
    baseline: Evaluator[ReviewInput, WorkflowReview] | None = None,
    concurrency: int = 4,
) -> GoldenComparison:
    """Replay each recorded input through `candidate` (default: unchanged), review it with
    `reviewer`, and compare with the recorded review (or `baseline`'s review of the recorded
    package). A hand-off or a failure on either side is that example's error."""

    async def task(example: Example[ReviewInput, WorkflowReview]) -> ReviewInput:
        package = ReviewInput.model_validate(example.input)
        return package if candidate is None else await _maybe(candidate(package))

    results = await run_examples(dataset.examples, task, [reviewer], concurrency=concurrency)
    participant = f"evaluator:{reviewer.name}@{reviewer.version}"
    olds: dict[str, WorkflowReview | str] = {}
    for example in dataset.examples:
        if baseline is None:
            olds[example.id] = WorkflowReview.model_validate(example.verdict.model_dump())
            continue
        try:
            verdict = await baseline.evaluate(ReviewInput.model_validate(example.input))
            olds[example.id] = WorkflowReview.model_validate(verdict.value.model_dump())
        except Exception as exc:  # a hand-off or a broken judge: that example's error
            olds[example.id] = f"baseline: {type(exc).__name__}: {exc}"
    rows: list[ExampleComparison] = []
    for result in results:
        old = olds[result.example_id]
        error: str | None = old if isinstance(old, str) else None
        new = result.verdicts.get(participant)
        if result.error is not None:
            error = f"candidate: {result.error}"
        elif participant in result.evaluator_errors:
            error = f"reviewer: {result.evaluator_errors[participant]}"
        elif new is None and error is None:
            error = "reviewer: handed off"
        old_review = old if isinstance(old, WorkflowReview) else None
        new_review = WorkflowReview.model_validate(new.value.model_dump()) \
            if new is not None else None
        rows.append(ExampleComparison(
            example_id=result.example_id,
            old_score=old_review.quality_score if old_review else None,
            new_score=new_review.quality_score if new_review else None,
            old_approved=old_review.approved if old_review else None,
            new_approved=new_review.approved if new_review else None,
            new_issues=tuple(new_review.issues) if new_review else (),
            error=error))
    return GoldenComparison(dataset.name, rows)
