"""The module-level code of seed 000 ("Feedback and evaluation"), run as written: only the
import lines differ (the seed's `reflexr`/`evalr` names are `streams` here), and the seed's
placeholders `AppDeps` and `deps` are bound below. Its awaited examples (opening a workspace,
giving and reading feedback, and its two mirror blocks: `FeedbackMirror` into the PrintingSink
below and into Langfuse) run in tests/test_seed_examples.py and
tests/integration/test_seed_examples.py, whose docstrings say what they bind.

Importing this module registers `triage_quality`, `should_have_fired` and `resolution`, the
names streams.examples.ops registers too: tests load it through `load_seed()`, which gives
the names to this module for the test and back afterwards; a worker loads it with
`--types tests.seed_000` alone.
"""

# No `from __future__ import annotations`: the seed's `Reaction[AppDeps]` annotations are
# evaluated when its functions are defined, as they would be in an application.
# ruff: noqa: E402, I001  (the seed's blocks keep their own imports, in their order)
from collections.abc import Mapping
from typing import Any

# The seed's placeholders for the application's own deps type and value. A worker merges its
# rules modules' DEPS mappings and hands them to every reaction, so deps are a mapping here.
AppDeps = Mapping[str, Any]
deps: AppDeps = {"pager": "ops-oncall"}

# --- Feedback types ---------------------------------------------------------------------
from typing import Annotated, Literal

from pydantic import Field

from streams import Feedback


class TriageQuality(Feedback, name="triage_quality", targets={"run"}):
    correct: bool
    severity: Literal["low", "high", "critical"]
    note: str | None = None


class ShouldHaveFired(Feedback, targets={"firing"}):  # registered as "should_have_fired"
    fired_rightly: bool


class Resolution(Feedback, name="resolution", targets={"chain"}):
    resolved: bool
    minutes_to_mitigate: Annotated[int, Field(ge=0, le=1440)] | None = None


# --- Rules that watch feedback ------------------------------------------------------------
from streams import F, Rule, on, run
from streams import FeedbackGiven

wrong_triage = Rule(
    name="ops:wrong-triage",
    when=on(FeedbackGiven).where(F.value.correct.eq(False), feedback_type="triage_quality"),
    then=run("escalate"),
)

# --- Scores: a sink ---------------------------------------------------------------------
from collections.abc import Sequence

from streams import Score


class PrintingSink:
    async def record(self, scores: Sequence[Score], /) -> None:
        for score in scores:
            print(score.name, score.value, score.trace_id or score.session_id)


# --- Evaluators as rules ----------------------------------------------------------------
from datetime import timedelta

from streams import FunctionEvaluator, HandOff
from pydantic import BaseModel

from streams import RunSucceeded, RunTarget
from streams import EvaluatorAction, run_record
from streams import Reaction  # the seed uses Reaction from an earlier page without importing it


class TriageInput(BaseModel):
    service: str
    errors: int
    opened_incident: bool


def opened_an_incident(judged: TriageInput) -> TriageQuality:
    if judged.errors < 3:
        raise HandOff  # not enough to go on: leave it to a person
    return TriageQuality(correct=judged.opened_incident, severity="high")


triage_judge = FunctionEvaluator(
    opened_an_incident, verdict_type=TriageQuality, name="opened-incident", version="1"
)


async def judged_input(reaction: Reaction[AppDeps]) -> TriageInput:
    run_id = str(
        reaction.events[-1].data["run_id"]
    )  # the reflexr:run_succeeded that fired the judge
    record = await run_record(reaction.workspace, run_id)
    return TriageInput(
        service=str(record.run.scope["service"]),
        errors=len(record.matched),
        opened_incident=any(e.event_type == "oncall:incident.opened" for e in record.emitted),
    )


async def judged_run(reaction: Reaction[AppDeps]) -> RunTarget:
    return RunTarget(run_id=str(reaction.events[-1].data["run_id"]))


judge = EvaluatorAction(triage_judge, input=judged_input, target=judged_run)
judge_triage = Rule(
    name="ops:judge-triage",
    when=on(RunSucceeded).where(rule="ops:error-spike").at_most(20, per=timedelta(hours=1)),
    then=run(judge),
)
# The seed's next line builds its product's in-process runtime:
#     reactor = Reactor(workspaces, actions={"triage": triage, judge.name: judge}, deps=deps)
# Here workers run rules (`streams worker --rules MODULE`): tests/integration/seed_000_rules.py
# exposes these rules, actions and deps as RULES, ACTIONS and DEPS for a worker.
