"""Spend budgets for evaluators: tokens per window, decided exactly across workers.

    judges = Budget("judges", tokens=200_000, per=timedelta(days=1))
    judge = EvaluatorAction(triage_judge, input=..., target=..., budget=judges,
                            cost=lambda judged: 1_500)   # the worst case of one evaluation

Before each evaluator call, the action claims the call's worst case (`cost`) from the
budget and waits for the answer; the call is made only when the claim was granted. A claim
is an envelope (`streams:budget-claim`: the budget, the tokens, the run) decided by the
budget's rule (`Budget.rule`): `at_most(tokens, per=per, weight=F.data.tokens)` on the
claims of that budget, a stateful rule, so the decider of the tenant's rules topic decides
every claim of one budget in one order, with its window in its changelog: what holds
at_most exact across workers, restarts, rebalances and SIGKILL holds a budget exact to the
token. A granted claim is that rule's firing (`rule_fired`, `run_started` of the no-op
action `GRANT_ACTION`); a refused one its throttle record (`streams:throttled`). Both carry
ids derived from the rule and the claim's event id, which the claiming action looks up.

What is exact, and what is not:
- granted claims never add up past the budget in a window (windows fixed, by the claim's
  event time, as at_most's);
- a claim is spent once granted, whatever happens next: an attempt killed after its grant
  keeps it, and a retry claims again, so a crash can only leave tokens unused, never spend
  past the budget;
- the budget holds the model's real spend only as far as `cost` is a true worst case of one
  evaluation (for a chat judge: prompt tokens, at most one per byte of the messages, plus
  the completion's max_tokens, times the requests a retrying client may make). A verdict
  whose reported tokens exceed its claim is counted in the run's output as an overrun.
- a response without usage figures is counted at its claim.

Pure: the rule and the checks; the claim is written and awaited by the workspace handle
(`Workspace.decide`), the grants' no-op action is the worker's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from streams.core.errors import ValidationFailed
from streams.core.rules import F, Rule, on, run

__all__ = ["BUDGET_CLAIM", "BUDGET_NAME", "GRANT_ACTION", "Budget", "grant", "with_budgets"]

BUDGET_CLAIM: Final = "streams:budget-claim"
"""The app event name of a claim on a budget (its data: `budget`, `tokens`, `run_id`)."""

GRANT_ACTION: Final = "streams:budget-grant"
"""The no-op action a budget rule's firing (a granted claim) runs."""

BUDGET_NAME: Final = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
"""What a budget's name must match (it names the budget's rule, `streams:budget.<name>`)."""


@dataclass(frozen=True)
class Budget:
    """At most `tokens` tokens claimed per fixed window of `per` (windows counted from the
    epoch by the claims' event time), across every worker of the tenant. Checked when made:
    ValidationFailed naming the field."""

    name: str
    tokens: int
    per: timedelta

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not BUDGET_NAME.match(self.name):
            raise ValidationFailed(f"Budget.name {self.name!r} must match "
                                   f"{BUDGET_NAME.pattern}, e.g. 'judges'")
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, int) \
                or self.tokens < 1:
            raise ValidationFailed(f"Budget.tokens must be a whole number above 0 (tokens "
                                   f"per window), got {self.tokens!r}")
        if not isinstance(self.per, timedelta) or self.per <= timedelta(0):
            raise ValidationFailed(f"Budget.per must be a positive timedelta (the window), "
                                   f"got {self.per!r}")

    @property
    def rule_name(self) -> str:
        """The name of the budget's rule."""
        return f"streams:budget.{self.name}"

    @property
    def rule(self) -> Rule:
        """The stateful rule deciding the budget's claims: a claim fires it (granted) while
        its tokens fit the window, else it is throttled (refused)."""
        return Rule(
            name=self.rule_name,
            when=on(BUDGET_CLAIM).where(F.data.budget.eq(self.name))
            .at_most(self.tokens, per=self.per, weight=F.data.tokens),
            then=run(GRANT_ACTION),
            description=f"the budget {self.name!r}: {self.tokens} tokens per {self.per}",
        )

    def claim(self, tokens: int, run_id: str) -> dict[str, Any]:
        """The data of a claim of `tokens` for a run; ValidationFailed for a claim no window
        could grant (not a whole number above 0, or over the whole budget)."""
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise ValidationFailed(f"the cost of one evaluation must be a whole number of "
                                   f"tokens above 0, got {tokens!r}")
        if tokens > self.tokens:
            raise ValidationFailed(f"one evaluation's cost ({tokens} tokens) is over the whole "
                                   f"budget {self.name!r} ({self.tokens} per {self.per}): "
                                   "raise the budget or lower the cost")
        return {"budget": self.name, "tokens": tokens, "run_id": run_id}


async def grant(reaction: Any) -> Mapping[str, Any]:
    """The action a granted claim's run runs: nothing to do (the grant is the firing)."""
    return {"granted": True}


def with_budgets(rules: Iterable[Rule], actions: Mapping[str, Any]
                 ) -> tuple[list[Rule], dict[str, Any]]:
    """The rules and actions of a worker with the budgets its actions carry (an action's
    `budget` attribute): each budget's rule once, and the grants' no-op action.
    ValidationFailed when two actions carry different budgets under one name."""
    budgets: dict[str, Budget] = {}
    for name, action in actions.items():
        budget = getattr(action, "budget", None)
        if not isinstance(budget, Budget):
            continue
        known = budgets.setdefault(budget.name, budget)
        if known != budget:
            raise ValidationFailed(f"action {name!r} carries budget {budget.name!r} as "
                                   f"{budget}, another action as {known}: one name, one "
                                   "budget")
    out = list(rules)
    if not budgets:
        return out, dict(actions)
    return [*out, *(b.rule for b in budgets.values())], {**actions, GRANT_ACTION: grant}
