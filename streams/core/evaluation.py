"""Evaluators as rule actions, and reading runs and chains back from the log.

    judge = EvaluatorAction(triage_judge, input=judged_input, target=judged_run)
    judge_triage = Rule(
        name="ops:judge-triage",
        when=on(RunSucceeded).where(rule="ops:error-spike").at_most(20, per=timedelta(hours=1)),
        then=run(judge),
    )
    ACTIONS = {judge.name: judge}

When its rule fires, the action builds the evaluator's input and the feedback's target with
async functions of the reaction (they usually read the log, through `run_record` and
`chain_events`), runs the evaluator, and gives the verdict as feedback from the evaluator's
actor (its name and version). The run's output is the verdict (value, evaluator, version,
confidence, latency, trace) with the feedback's seq and id; an evaluator that hands off
records nothing and its run's output is `{"handed_off": name}`. Any other error is a failed
attempt, retried and dead-lettered by the rule's policy like any action's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, TypeVar

from streams.core.errors import NotFound
from streams.core.evaluators import Evaluator, HandOff, check_verdict
from streams.core.events import Envelope
from streams.core.runs import ActingWorkspace, Reaction, RunRecord, run_record_of
from streams.core.targets import ChainTarget, FiringTarget, RunTarget

In = TypeVar("In")

Target = RunTarget | FiringTarget | ChainTarget


async def run_record(workspace: ActingWorkspace, run_id: str) -> RunRecord:
    """A run, the envelopes that made its rule fire (`matched`) and what it emitted."""
    own = getattr(workspace, "run_record", None)
    if own is not None:  # the workspace handle reads just the run's chain
        found: RunRecord = await own(run_id)
        return found
    record = run_record_of(await workspace.read(), run_id)
    if record is None:
        raise NotFound(f"no run {run_id!r} in workspace {workspace.tenant}/"
                       f"{workspace.workspace}")
    return record


async def chain_events(workspace: ActingWorkspace, correlation_id: str) -> list[Envelope]:
    """Every envelope of a causal chain, in log order."""
    own = getattr(workspace, "chain_events", None)
    if own is not None:  # the workspace handle reads just the chain
        found: list[Envelope] = await own(correlation_id)
        return found
    return [e for e in await workspace.read() if e.correlation_id == correlation_id]


class EvaluatorAction(Generic[In]):
    """An action that runs an evaluator and gives its verdict as feedback."""

    def __init__(
        self,
        evaluator: Evaluator[In, Any],
        *,
        input: Callable[[Reaction], Awaitable[In]],
        target: Callable[[Reaction], Awaitable[Target]],
        name: str | None = None,
    ) -> None:
        self.evaluator = evaluator
        self.input = input
        self.target = target
        self.name = name or evaluator.name

    async def __call__(self, reaction: Reaction) -> Mapping[str, Any]:
        """Evaluate, give the verdict as feedback, and return the run's output."""
        judged = await self.input(reaction)
        target = await self.target(reaction)
        try:
            verdict = await self.evaluator.evaluate(judged)
        except HandOff:
            return {"handed_off": self.name}
        checked = check_verdict(verdict, self.evaluator.verdict_type)
        recorded = await reaction.workspace.as_actor(checked.actor).give_feedback(
            checked.value, on=target)
        return {**checked.as_output(), "feedback_id": recorded.id,
                "feedback_seq": str(recorded.seq)}
