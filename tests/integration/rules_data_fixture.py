"""The rules module of the rules-as-data integration tests: one module rule (`t:warm`, to
see that a worker is up and has processed a chain) and the action registry installed rules
name. `act` appends a `t:acted` event in a chain of its own, with a fresh id, for every
execution, so the tests count executions, not runs. `grade` judges a `t:answer`'s text with
an evaluator (a run's output says whether it was called or its recorded verdict reused);
`grade-costed` does too, declaring each evaluation's cost for a backfill's budget."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streams.core.app_events import app_event_type
from streams.core.evaluation import EvaluatorAction
from streams.core.evaluators import FunctionEvaluator
from streams.core.events import AppEvent
from streams.core.rules import Rule, on, run
from streams.core.runs import Reaction
from streams.core.targets import RunTarget
from streams.examples.ops import TriageQuality

APP_EVENT_TYPES = [app_event_type(name) for name in ("t:ping", "t:warm", "t:acted",
                                                      "t:answer")]


async def act(reaction: Reaction) -> Mapping[str, Any]:
    cause = reaction.events[-1].event_id if reaction.events else None
    await reaction.workspace.append(AppEvent(name="t:acted", data={
        "run_id": reaction.run.run_id, "cause": cause}))
    return {"acted_on": cause}


async def noop(reaction: Reaction) -> Mapping[str, Any]:
    return {}


def _grade(text: str) -> TriageQuality:
    return TriageQuality(correct=text.startswith("right"), severity="low")


async def _answer_text(reaction: Reaction) -> dict[str, str]:
    return {"text": str(reaction.events[-1].data["text"])}


async def _own_run(reaction: Reaction) -> RunTarget:
    return RunTarget(run_id=reaction.run.run_id)


async def _graded(judged: dict[str, str]) -> TriageQuality:
    return _grade(judged["text"])


grade = EvaluatorAction(FunctionEvaluator(_graded, verdict_type=TriageQuality, name="grader",
                                          version="1"),
                        input=_answer_text, target=_own_run, name="grade")




async def _graded_strictly(judged: dict[str, str]) -> TriageQuality:
    return TriageQuality(correct=judged["text"].startswith("right answer"), severity="high")


# The grader's next version, tried in the shadow of the current one on half the inputs.
shadowed = EvaluatorAction(
    grade.evaluator, input=_answer_text, target=_own_run, name="grade-shadowed",
    shadow=FunctionEvaluator(_graded_strictly, verdict_type=TriageQuality, name="grader",
                             version="2"), shadow_share=0.5)

# The grader with the worst case of one evaluation declared (100 tokens) and no budget of
# its own: what a backfill's budget (install --budget-tokens) claims.
costed = EvaluatorAction(grade.evaluator, input=_answer_text, target=_own_run,
                         name="grade-costed", cost=100)

RULES = [Rule(name="t:warm", when=on("t:warm"), then=run("noop"))]
ACTIONS = {"act": act, "noop": noop, "grade": grade, "grade-shadowed": shadowed,
           "grade-costed": costed}
