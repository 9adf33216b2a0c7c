"""Spend budgets for evaluators: tokens or money per window, decided exactly across workers.

    judges = Budget("judges", tokens=200_000, per=timedelta(days=1))
    judge = EvaluatorAction(triage_judge, input=..., target=..., budget=judges,
                            cost=lambda judged: 1_500)   # the worst case of one evaluation

    dollars = Budget("judges-usd", money=5.0, per=timedelta(days=1))
    judge = EvaluatorAction(triage_judge, ..., budget=dollars, cost=1_500,
                            model="gpt-4o-mini")          # priced by STREAMS_LLM_PRICES

A money budget counts in millionths of the price table's currency ("micros"): a claim of
`cost` tokens for `model` takes `cost` times the dearer of the model's two prices per
million tokens (prompt, completion), rounded up, since which tokens a call spends on its
prompt and which on its completion is only known afterwards. The price table is the
worker's (STREAMS_LLM_PRICES, `streams.core.measures.costs.parse_prices`), bound to the
actions when the worker starts (`with_budgets`): a model it has no price for is refused
then, never counted as free.

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
- a response without usage figures is counted at its claim (its worst case, never as free);
- a money budget is exact in micros, at the prices the worker was started with.

Pure: the rule and the checks; the claim is written and awaited by the workspace handle
(`Workspace.decide`), the grants' no-op action is the worker's.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any, Final

from streams.core.errors import ValidationFailed
from streams.core.prices import ModelPrice
from streams.core.rules import F, Rule, on, run

__all__ = ["BACKFILL_WINDOW", "BUDGET_CLAIM", "BUDGET_NAME", "BUDGET_RULE_PREFIX", "GRANT_ACTION",
           "MICROS", "Budget", "backfill_budget", "grant", "micros_of", "with_budgets"]

BUDGET_CLAIM: Final = "streams:budget-claim"
"""The app event name of a claim on a budget (its data: `budget`, `tokens`, `run_id`, and
for a money budget `micros` and `model`)."""

MICROS: Final = 1_000_000
"""A money budget's unit: millionths of the price table's currency."""

GRANT_ACTION: Final = "streams:budget-grant"
"""The no-op action a budget rule's firing (a granted claim) runs."""

BUDGET_NAME: Final = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
"""What a budget's name must match (it names the budget's rule, `streams:budget.<name>`)."""

BUDGET_RULE_PREFIX: Final = "streams:budget."
"""What every budget's rule name starts with (`Budget.rule_name`)."""

BACKFILL_WINDOW: Final = timedelta(days=1_800_000)
"""A backfill budget's window: one window from the epoch to the year 6898, so its tokens are
a total for the rule's backfills, not a rate (windows are fixed from the epoch; a longer one
would end past the last year a datetime holds)."""


@dataclass(frozen=True)
class Budget:
    """At most `tokens` tokens, or `money` in the price table's currency, claimed per fixed
    window of `per` (a day unless given; windows counted from the epoch by the claims' event
    time), across every worker of the tenant. Checked when made: ValidationFailed naming the
    field."""

    name: str
    tokens: int | None = None
    per: timedelta = timedelta(days=1)
    money: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not BUDGET_NAME.match(self.name):
            raise ValidationFailed(f"Budget.name {self.name!r} must match "
                                   f"{BUDGET_NAME.pattern}, e.g. 'judges'")
        if (self.tokens is None) == (self.money is None):
            raise ValidationFailed(f"Budget {self.name!r} needs one of Budget.tokens (tokens "
                                   "per window) or Budget.money (money per window, priced by "
                                   "STREAMS_LLM_PRICES), not both and not neither")
        if self.tokens is not None and (isinstance(self.tokens, bool)
                                        or not isinstance(self.tokens, int) or self.tokens < 1):
            raise ValidationFailed(f"Budget.tokens must be a whole number above 0 (tokens "
                                   f"per window), got {self.tokens!r}")
        if self.money is not None and (isinstance(self.money, bool)
                                       or not isinstance(self.money, int | float)
                                       or not math.isfinite(self.money)
                                       or round(self.money * MICROS) < 1):
            raise ValidationFailed(f"Budget.money must be a finite amount of at least "
                                   f"0.000001 (money per window), got {self.money!r}")
        if not isinstance(self.per, timedelta) or self.per <= timedelta(0):
            raise ValidationFailed(f"Budget.per must be a positive timedelta (the window), "
                                   f"got {self.per!r}")

    @property
    def unit(self) -> str:
        """What the budget counts: "tokens", or "micros" (millionths of money)."""
        return "tokens" if self.tokens is not None else "micros"

    @property
    def limit(self) -> int:
        """The budget per window in its unit."""
        return self.tokens if self.tokens is not None else round((self.money or 0) * MICROS)

    @property
    def rule_name(self) -> str:
        """The name of the budget's rule."""
        return f"{BUDGET_RULE_PREFIX}{self.name}"

    @property
    def rule(self) -> Rule:
        """The stateful rule deciding the budget's claims: a claim fires it (granted) while
        its tokens (or micros) fit the window, else it is throttled (refused)."""
        amount = f"{self.tokens} tokens" if self.tokens is not None else \
            f"{self.money:g} in money ({self.limit} micros)"
        return Rule(
            name=self.rule_name,
            when=on(BUDGET_CLAIM).where(F.data.budget.eq(self.name))
            .at_most(self.limit, per=self.per, weight=getattr(F.data, self.unit)),
            then=run(GRANT_ACTION),
            description=f"the budget {self.name!r}: {amount} per {self.per}",
        )

    def claim(self, tokens: int, run_id: str, *, price: ModelPrice | None = None,
              model: str | None = None) -> dict[str, Any]:
        """The data of a claim of `tokens` for a run (for a money budget, at `model`'s
        `price`); ValidationFailed for a claim no window could grant (not a whole number
        above 0, or over the whole budget) or a money claim without a price."""
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise ValidationFailed(f"the cost of one evaluation must be a whole number of "
                                   f"tokens above 0, got {tokens!r}")
        data: dict[str, Any] = {"budget": self.name, "tokens": tokens, "run_id": run_id}
        if self.tokens is not None:
            claimed, what = tokens, f"{tokens} tokens"
        else:
            if price is None:
                raise ValidationFailed(f"budget {self.name!r} counts money: its claims need "
                                       "the model's price (EvaluatorAction(model=...) and the "
                                       "worker's STREAMS_LLM_PRICES)")
            claimed = max(1, micros_of(tokens, max(price.prompt, price.completion)))
            what = f"{claimed} micros ({tokens} tokens of {model or 'the model'})"
            data.update(micros=claimed, model=model)
        if claimed > self.limit:
            raise ValidationFailed(f"one evaluation's cost ({what}) is over the whole budget "
                                   f"{self.name!r} ({self.limit} {self.unit} per {self.per}): "
                                   "raise the budget or lower the cost")
        return data


def backfill_budget(rule: str, tokens: int) -> Budget:
    """The budget of rule `rule`'s backfills (`streams rules install --backfill
    --budget-tokens`): `tokens` in all (one BACKFILL_WINDOW), apart from any budget the
    rule's action carries, so a backfill never spends the live runs' budget and live runs
    never spend the backfill's. Named `backfill.<rule>`; where the rule's name has what
    budget names do not allow (`ops:wrong-triage`), those characters become `-` and a short
    digest of the name follows (`backfill.ops-wrong-triage.c03ee1c1`), so two rules never
    share one. ValidationFailed for tokens that are not a whole number above 0."""
    name = f"backfill.{rule}"
    if not BUDGET_NAME.match(name):
        readable = re.sub(r"[^a-z0-9_.-]", "-", rule.lower())[:45]
        name = f"backfill.{readable}.{hashlib.sha256(rule.encode()).hexdigest()[:8]}"
    return Budget(name, tokens=tokens, per=BACKFILL_WINDOW)


def micros_of(tokens: int, per_million: float) -> int:
    """`tokens` at `per_million` (money per million tokens) in micros, rounded up: the
    decimal price as written, so 1,500 tokens at 0.6 are 900, not 901."""
    return math.ceil(Decimal(repr(float(per_million))) * tokens)


async def grant(reaction: Any) -> Mapping[str, Any]:
    """The action a granted claim's run runs: nothing to do (the grant is the firing)."""
    return {"granted": True}


def with_budgets(rules: Iterable[Rule], actions: Mapping[str, Any], *,
                 prices: Callable[[], Mapping[str, ModelPrice]] | None = None,
                 ) -> tuple[list[Rule], dict[str, Any]]:
    """The rules and actions of a worker with the budgets its actions carry (an action's
    `budget` attribute): each budget's rule once, and the grants' no-op action (always: the
    backfill budgets of installed rules need it too). An action
    with a money budget is given its model's price from `prices()` (the worker's price
    table, read only when some budget counts money). ValidationFailed when two actions carry
    different budgets under one name, or a money budget's model has no price."""
    budgets: dict[str, Budget] = {}
    table: Mapping[str, ModelPrice] | None = None
    for name, action in actions.items():
        budget = getattr(action, "budget", None)
        if not isinstance(budget, Budget):
            continue
        known = budgets.setdefault(budget.name, budget)
        if known != budget:
            raise ValidationFailed(f"action {name!r} carries budget {budget.name!r} as "
                                   f"{budget}, another action as {known}: one name, one "
                                   "budget")
        if budget.money is not None:
            if table is None:  # read once, and only when some budget counts money
                table = prices() if prices is not None else {}
            action.priced(table)
    # The grants' action is there without budgets too: a backfill's budget is a rule the
    # rulebook brings (streams.core.rulebook), and its grants run it as well.
    return [*rules, *(b.rule for b in budgets.values())], {**actions, GRANT_ACTION: grant}
