"""The ops example with a judge you can afford and a candidate beside it: what the demo runs.

The rules are `streams.examples.ops_rules`' (an error spike starts triage, a judge reviews
each successful triage at most twenty an hour, wrong triages escalate), with the judge
changed in two ways:

- a **budget**: `ops-judge`, 24,000 tokens an hour per tenant, each call claimed at 1,000
  tokens (its worst case), so 24 calls an hour however many workers judge;
- a **canary**: version 2 of the judge (`opened-incident@2`: it grades severity in three
  steps, not two, and hands triages of fewer than ten errors to people) judges every input
  the current version judges, as a shadow: its verdicts are recorded apart, never given as
  feedback, and its calls are spent from the same budget. The report compares the two
  versions on agreement with people and on cost.

With both versions claiming, twelve triages an hour are judged by both, and the thirteenth
finds the budget spent: its run succeeds with `over_budget` and no call is made (`streams rules why`
says so for its event). The budget's window is the hour, so demo runs within one hour share
it: a second run that hour is refused from the start.
"""

from __future__ import annotations

from datetime import timedelta

from streams.core.budgets import Budget
from streams.core.evaluation import EvaluatorAction
from streams.core.evaluators import FunctionEvaluator, HandOff
from streams.core.events import RunSucceeded
from streams.core.rules import Rule, on, run
from streams.examples.ops import TriageQuality
from streams.examples.ops_rules import (
    ACTIONS as OPS_ACTIONS,
)
from streams.examples.ops_rules import (
    TriageInput,
    error_spike,
    judged_input,
    judged_run,
    opened_an_incident,
    triage_judge,
    wrong_triage,
)

__all__ = ["ACTIONS", "BUDGET", "CANDIDATE", "RULES", "graded", "judge", "judge_triage"]

BUDGET = Budget("ops-judge", tokens=24_000, per=timedelta(hours=1))
"""24 judge calls an hour per tenant, at 1,000 tokens a claim (the current version's and the
canary's: twelve triages)."""


def graded(judged: TriageInput) -> TriageQuality:
    """The candidate: version 1's verdict on whether the triage was right, with severity in
    three steps (high from 30 errors, critical from 60); fewer than ten errors go to a
    person."""
    if judged.errors < 10:
        raise HandOff("too few errors for the candidate to judge")
    verdict = opened_an_incident(judged)
    severity = "critical" if judged.errors >= 60 else "high" if judged.errors >= 30 else "low"
    return verdict.model_copy(update={"severity": severity})


CANDIDATE = FunctionEvaluator(graded, verdict_type=TriageQuality, name="opened-incident",
                              version="2")

judge = EvaluatorAction(triage_judge, input=judged_input, target=judged_run,
                        shadow=CANDIDATE, budget=BUDGET, cost=1_000)

judge_triage = Rule(
    name="ops:judge-triage",
    when=on(RunSucceeded).where(rule="ops:error-spike").at_most(20, per=timedelta(hours=1)),
    then=run(judge),
)

RULES = [error_spike, judge_triage, wrong_triage]
ACTIONS = {**OPS_ACTIONS, judge.name: judge}
