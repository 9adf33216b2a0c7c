"""Budgets (streams.core.budgets): the budget's rule grants claims while their tokens fit
the window and refuses the rest, and an evaluator action with a budget makes a call only
under a granted claim. The claims are decided here by the engine the decider runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from streams.core.budgets import (
    BACKFILL_WINDOW,
    BUDGET_CLAIM,
    GRANT_ACTION,
    Budget,
    backfill_budget,
    grant,
    micros_of,
    with_budgets,
)
from streams.core.errors import ValidationFailed
from streams.core.events import AppEvent, Envelope, Event
from streams.core.execution import _count_refusals
from streams.core.matching import ReactorStats
from streams.core.prices import ModelPrice
from streams.core.rules import Fire, Rule, RuleEngine, on, run
from streams.core.rules.engine import RuleState, evaluate
from streams.core.runs import Reaction
from tests.core.test_evaluation import Log, action_for, counting_judge

JUDGES = Budget("judges", tokens=1_000, per=timedelta(hours=1))
DOLLARS = Budget("usd", money=0.002, per=timedelta(hours=1))  # 2,000 micros
PRICES = {"mini": ModelPrice(prompt=0.15, completion=0.6), "free": ModelPrice(0.0, 0.0)}


class Decided(Log):
    """An in-memory workspace whose `decide` runs the rule through the engine, as the
    decider of the tenant's rules topic does (one state for every claim)."""

    def __init__(self) -> None:
        super().__init__()
        self.engines: dict[str, RuleEngine] = {}
        self.claims: list[dict[str, Any]] = []

    async def decide(self, rule: Rule, event: Event, *, correlation_id: str,
                     causation_id: str | None = None) -> bool:
        engine = self.engines.setdefault(rule.name, RuleEngine([rule]))
        assert isinstance(event, AppEvent)
        self.claims.append(event.data)
        [decision] = engine.evaluate(Envelope.new(event, tenant="acme", workspace="prod",
                                                  correlation_id=correlation_id))
        return isinstance(decision, Fire)


def judge_reporting(name: str, prompt: int, completion: int) -> Any:
    """A judge whose verdicts' traces report this usage, as a chat judge's response does."""
    from streams.core.evaluators import FunctionEvaluator
    from tests.core.test_evaluation import Graded

    evaluator = FunctionEvaluator(lambda judged: Graded(good=True), verdict_type=Graded,
                                  name=name, version="1")
    original = evaluator.evaluate

    async def with_usage(judged: Any) -> Any:
        verdict = await original(judged)
        return dataclasses.replace(verdict, trace={"prompt_tokens": str(prompt),
                                                   "completion_tokens": str(completion)})

    evaluator.evaluate = with_usage  # type: ignore[method-assign]
    return evaluator


def test_claims_are_granted_while_their_tokens_fit_the_window() -> None:
    engine = RuleEngine([JUDGES.rule])
    decided = []
    for tokens in (400, 400, 300, 200, 1):
        claim = Envelope.new(AppEvent(name=BUDGET_CLAIM, data=JUDGES.claim(tokens, "r")),
                             tenant="acme", workspace="prod")
        [decision] = engine.evaluate(claim)
        decided.append(type(decision).__name__)
    assert decided == ["Fire", "Fire", "Throttled", "Fire", "Throttled"]  # 400+400+200
    # Another budget's claims are not this rule's.
    other = Envelope.new(AppEvent(name=BUDGET_CLAIM, data={"budget": "other", "tokens": 1,
                                                           "run_id": "r"}),
                         tenant="acme", workspace="prod")
    assert engine.evaluate(other) == []


@pytest.mark.parametrize(("make", "field"), [
    (lambda: Budget("Judges", 10, timedelta(hours=1)), "Budget.name"),
    (lambda: Budget("judges", 0, timedelta(hours=1)), "Budget.tokens"),
    (lambda: Budget("judges", True, timedelta(hours=1)), "Budget.tokens"),  # type: ignore[arg-type]
    (lambda: Budget("judges", 10, timedelta(0)), "Budget.per"),
    (lambda: JUDGES.claim(0, "r"), "whole number of tokens above 0"),
    (lambda: JUDGES.claim(1_001, "r"), "over the whole budget"),
    (lambda: Budget("judges", per=timedelta(hours=1)), "not both and not neither"),
    (lambda: Budget("judges", 10, money=1.0), "not both and not neither"),
    (lambda: Budget("judges", money=0.0), "Budget.money"),
    (lambda: Budget("judges", money=-1.0), "Budget.money"),
    (lambda: Budget("judges", money=float("nan")), "Budget.money"),
    (lambda: Budget("judges", money=0.0000001), "Budget.money"),
    (lambda: DOLLARS.claim(100, "r"), "its claims need the model's price"),
    (lambda: DOLLARS.claim(4_000, "r", price=PRICES["mini"]), "over the whole budget"),
])
def test_bad_budgets_and_claims_are_refused_naming_the_field(
        make: Callable[[], Any], field: str) -> None:
    with pytest.raises(ValidationFailed, match=field):
        make()


def test_a_money_budget_claims_micros_at_the_dearer_price_and_grants_while_they_fit() -> None:
    assert DOLLARS.unit == "micros" and DOLLARS.limit == 2_000
    assert micros_of(1_500, 0.6) == 900 and micros_of(1, 0.15) == 1  # rounded up
    claim = DOLLARS.claim(1_000, "r", price=PRICES["mini"], model="mini")
    assert claim == {"budget": "usd", "tokens": 1_000, "micros": 600, "model": "mini",
                     "run_id": "r"}
    # A free model's call still claims one micro: a claim's weight is never 0.
    assert DOLLARS.claim(1_000, "r", price=PRICES["free"], model="free")["micros"] == 1
    engine = RuleEngine([DOLLARS.rule])
    decided = []
    for tokens in (1_000, 1_000, 1_000, 500, 300):  # 600 each, then 300 and 180 micros
        data = DOLLARS.claim(tokens, "r", price=PRICES["mini"], model="mini")
        [decision] = engine.evaluate(Envelope.new(AppEvent(name=BUDGET_CLAIM, data=data),
                                                  tenant="acme", workspace="prod"))
        decided.append(type(decision).__name__)
    # 1,800 granted; 300 more would pass 2,000, 180 fits.
    assert decided == ["Fire", "Fire", "Fire", "Throttled", "Fire"]
    assert "0.002 in money (2000 micros)" in (DOLLARS.rule.description or "")


def test_a_money_budget_refuses_past_its_micros() -> None:
    engine = RuleEngine([DOLLARS.rule])
    decided = []
    for tokens in (1_500, 1_500, 1_500, 1_000):  # 900 + 900 = 1,800; 900 more is refused
        data = DOLLARS.claim(tokens, "r", price=PRICES["mini"], model="mini")
        [decision] = engine.evaluate(Envelope.new(AppEvent(name=BUDGET_CLAIM, data=data),
                                                  tenant="acme", workspace="prod"))
        decided.append(type(decision).__name__)
    assert decided == ["Fire", "Fire", "Throttled", "Throttled"]  # 600 > 200 left too


def test_a_worker_binds_each_money_budgets_price_and_refuses_an_unpriced_model() -> None:
    evaluator, _calls = counting_judge()
    action = action_for(evaluator, budget=DOLLARS, cost=1_000, model="mini")
    asked: list[int] = []

    def table() -> dict[str, ModelPrice]:
        asked.append(1)
        return PRICES

    rules, _actions = with_budgets([], {"a": action}, prices=table)
    assert action.price == PRICES["mini"] and asked == [1]
    assert [r.name for r in rules] == ["streams:budget.usd"]
    # A tokens budget never reads the table (a bad STREAMS_LLM_PRICES does not stop it).
    with_budgets([], {"t": action_for(evaluator, budget=JUDGES, cost=10)},
                 prices=lambda: pytest.fail("read"))  # type: ignore[arg-type,return-value]
    unpriced = action_for(evaluator, budget=DOLLARS, cost=10, model="big")
    with pytest.raises(ValidationFailed, match="model 'big' has no price in STREAMS_LLM_PRICES"):
        with_budgets([], {"b": unpriced}, prices=lambda: PRICES)
    with pytest.raises(ValidationFailed, match=r"priced: none"):
        with_budgets([], {"b": unpriced})
    with pytest.raises(ValueError, match="give model="):
        action_for(evaluator, budget=DOLLARS, cost=10)
    # A fixed cost over the whole budget at the model's price is refused at the start.
    dear = action_for(evaluator, budget=DOLLARS, cost=4_000, model="mini")
    with pytest.raises(ValidationFailed, match="over the whole budget"):
        with_budgets([], {"d": dear}, prices=lambda: PRICES)


async def test_a_judge_with_a_money_budget_calls_only_under_a_granted_claim(
        reaction_in: Callable[..., Reaction]) -> None:
    evaluator = judge_reporting("priced", 800, 400)
    log = Decided()
    outputs = []
    for i in range(4):
        action = action_for(evaluator, text=f"answer {i}", budget=DOLLARS, cost=1_000,
                            model="mini")
        action.priced(PRICES)
        outputs.append(await action(reaction_in(log, f"run_{i}")))
    # 600 micros a claim: three fit 2,000, the fourth does not.
    assert [o.get("over_budget") for o in outputs] == [None, None, None, "usd"]
    assert all(o["claimed_micros"] == 600 and o["claimed_tokens"] == 1_000 for o in outputs)
    assert [c["micros"] for c in log.claims] == [600] * 4
    # Spent: 800 x 0.15 + 400 x 0.6 = 360 micros of a 600 claim: no overrun.
    assert not any("budget_overrun_micros" in o for o in outputs[:3])
    assert len(log.feedback()) == 3


@pytest.mark.parametrize(("prompt", "completion", "overrun"), [
    (100, 900, {}),  # 15 + 540 = 555 micros of a 600 claim (at the dearer price)
    (200, 1_000, {"budget_overrun_tokens": 200, "budget_overrun_micros": 30}),  # 30 + 600
])
async def test_a_money_claim_passed_by_the_priced_usage_is_an_overrun(
        prompt: int, completion: int, overrun: dict[str, int],
        reaction_in: Callable[..., Reaction]) -> None:
    evaluator = judge_reporting("dear", prompt, completion)
    action = action_for(evaluator, budget=DOLLARS, cost=1_000, model="mini")
    action.priced(PRICES)
    out = await action(reaction_in(Decided()))
    assert out["claimed_micros"] == 600
    assert {k: v for k, v in out.items() if k.startswith("budget_overrun")} == overrun


def test_refused_claims_are_counted_by_budget_for_the_metric() -> None:
    stats = ReactorStats()
    _count_refusals(stats, {"over_budget": "judges", "claimed_tokens": 3})
    _count_refusals(stats, {"value": {}, "shadow": {"over_budget": "judges"}})
    _count_refusals(stats, {"value": {}, "shadow": {"value": {}}})
    _count_refusals(stats, None)
    _count_refusals(stats, {"over_budget": "usd"})
    assert stats.budget_refusals == {"judges": 2, "usd": 1}


def test_a_backfill_budget_is_a_total_named_after_its_rule() -> None:
    budget = backfill_budget("wrong-triage", 5_000)
    assert (budget.name, budget.tokens, budget.per) == ("backfill.wrong-triage", 5_000,
                                                         BACKFILL_WINDOW)
    assert budget.rule.name == "streams:budget.backfill.wrong-triage"
    # One window from the epoch to long after any claim.
    limit = budget.rule.when.rate_limit
    assert limit is not None and limit.window(datetime(2026, 12, 7, tzinfo=UTC)) == 0
    assert limit.window_start(1).year > 6000
    odd = backfill_budget("ops:wrong-triage", 10)
    assert odd.name == "backfill.ops-wrong-triage.c03ee1c1"
    assert odd == backfill_budget("ops:wrong-triage", 10)  # the same name each time
    assert backfill_budget("ops-wrong-triage", 10).name == "backfill.ops-wrong-triage"
    assert len(backfill_budget("x:" + "y" * 200, 10).name) <= 64
    with pytest.raises(ValidationFailed, match="whole number above 0"):
        backfill_budget("r", 0)


def test_a_worker_gets_each_budgets_rule_once_and_the_grant_action() -> None:
    evaluator, _calls = counting_judge()
    one = action_for(evaluator, budget=JUDGES, cost=100)
    two = action_for(evaluator, budget=JUDGES, cost=200)
    plain = Rule(name="t:r", when=on("t:x"), then=run("a"))
    other = object()
    rules, actions = with_budgets([plain], {"one": one, "two": two, "a": other})
    assert [r.name for r in rules] == ["t:r", "streams:budget.judges"]
    assert GRANT_ACTION in actions and actions["one"] is one
    # The grant action without budgets too: an installed rule's backfill budget needs it.
    assert with_budgets([plain], {"a": other}) == ([plain], {"a": other, GRANT_ACTION: grant})
    clash = action_for(evaluator, budget=Budget("judges", 5, timedelta(hours=1)), cost=1)
    with pytest.raises(ValidationFailed, match="one name, one budget"):
        with_budgets([], {"one": one, "clash": clash})


async def test_a_judge_with_a_budget_calls_only_under_a_granted_claim(
        reaction_in: Callable[..., Reaction]) -> None:
    evaluator, calls = counting_judge()
    log = Decided()
    texts = [f"good answer {i}" for i in range(5)]
    outputs = []
    for i, text in enumerate(texts):
        action = action_for(evaluator, text=text, budget=JUDGES, cost=300)
        outputs.append(await action(reaction_in(log, f"run_{i}")))
    # 300 + 300 + 300 fit 1,000; the fourth and fifth would not: no call, no feedback.
    assert calls == texts[:3]
    assert [o.get("over_budget") for o in outputs] == [None] * 3 + ["judges"] * 2
    assert all(o["claimed_tokens"] == 300 for o in outputs)
    assert len(log.feedback()) == 3
    assert [c["run_id"] for c in log.claims] == [f"run_{i}" for i in range(5)]
    # A verdict recorded already is reused without a claim: it costs nothing.
    again = await action_for(evaluator, text=texts[0], budget=JUDGES, cost=300)(
        reaction_in(log, "run_9"))
    assert again["reused"] is True and len(log.claims) == 5


async def test_a_verdict_whose_tokens_pass_its_claim_is_reported_as_an_overrun(
        reaction_in: Callable[..., Reaction]) -> None:
    evaluator = judge_reporting("costly", 250, 100)
    out = await action_for(evaluator, budget=JUDGES, cost=300)(reaction_in(Decided()))
    assert out["budget_overrun_tokens"] == 50


def test_a_budget_needs_a_cost_and_a_cost_alone_is_allowed() -> None:
    evaluator, _calls = counting_judge()
    with pytest.raises(ValueError, match="budget= needs cost="):
        action_for(evaluator, budget=JUDGES)
    # A cost alone: what a backfill's budget (install --budget-tokens) claims.
    assert action_for(evaluator, cost=300).budget is None
    with pytest.raises(ValidationFailed, match="over the whole budget"):
        action_for(evaluator, budget=JUDGES, cost=5_000)


async def test_a_workspace_that_cannot_decide_refuses_a_budget_clearly(
        reaction_in: Callable[..., Reaction]) -> None:
    evaluator, calls = counting_judge()
    with pytest.raises(ValidationFailed, match="in-memory replay has none"):
        await action_for(evaluator, budget=JUDGES, cost=10)(reaction_in(Log()))
    assert calls == []


async def test_a_shadow_versions_calls_are_spent_from_the_same_budget(
        reaction_in: Callable[..., Reaction]) -> None:
    current, current_calls = counting_judge("1")
    candidate, candidate_calls = counting_judge("2")
    log = Decided()
    outputs = []
    for i in range(2):
        action = action_for(current, text=f"good answer {i}", budget=JUDGES, cost=300,
                            shadow=candidate)
        outputs.append(await action(reaction_in(log, f"run_{i}")))
    # 300 + 300 for the first run, 300 for the second's current version: 900 of 1,000; the
    # second run's shadow would pass the budget, so the candidate is not called.
    assert len(current_calls) == 2 and candidate_calls == ["good answer 0"]
    assert "value" in outputs[0]["shadow"]
    assert outputs[1]["shadow"] == {"evaluator": "grader", "version": "2",
                                    "over_budget": "judges", "claimed_tokens": 300}
    assert "value" in outputs[1]  # the current version's verdict is given all the same


async def test_a_backfill_runs_evaluations_claim_from_its_budget_not_the_actions(
        reaction_in: Callable[..., Reaction]) -> None:
    evaluator, calls = counting_judge()
    log = Decided()
    backfill = backfill_budget("grade", 700)
    outputs = []
    for i in range(4):
        # The action's own budget (JUDGES) is not touched by a backfill run's claims.
        action = action_for(evaluator, text=f"answer {i}", budget=JUDGES, cost=300)
        reaction = dataclasses.replace(reaction_in(log, f"run_{i}"), budget=backfill)
        outputs.append(await action(reaction))
    assert [o.get("over_budget") for o in outputs] == [None, None, "backfill.grade",
                                                       "backfill.grade"]
    assert calls == ["answer 0", "answer 1"]
    assert {c["budget"] for c in log.claims} == {"backfill.grade"}
    # A live run of the same action claims from its own budget, whole.
    live = await action_for(evaluator, text="live", budget=JUDGES, cost=300)(
        reaction_in(log, "run_live"))
    assert live.get("over_budget") is None and log.claims[-1]["budget"] == "judges"
    # An action with a cost and no budget of its own claims from the backfill's too.
    costed = await action_for(evaluator, text="answer 9", cost=300)(
        dataclasses.replace(reaction_in(log, "run_9"), budget=backfill))
    assert costed["over_budget"] == "backfill.grade" and "answer 9" not in calls


async def test_a_backfill_budget_on_an_action_without_a_cost_fails_the_run_saying_why(
        reaction_in: Callable[..., Reaction]) -> None:
    evaluator, calls = counting_judge()
    reaction = dataclasses.replace(reaction_in(Decided()), budget=backfill_budget("grade", 5))
    with pytest.raises(ValidationFailed, match=r"no cost=.*EvaluatorAction\(cost=\.\.\.\)"):
        await action_for(evaluator)(reaction)
    assert calls == []


def test_a_budget_raised_mid_window_keeps_what_it_spent() -> None:
    # The decider's state of one rule across a change of its limit (a repeat install with
    # another --budget-tokens, a worker restarted with a bigger Budget): 400 of 450 spent,
    # raised to 750, leaves 350.
    state = RuleState()

    def decide(budget: Budget, tokens: int) -> str:
        claim = Envelope.new(AppEvent(name=BUDGET_CLAIM, data=budget.claim(tokens, "r")),
                             tenant="acme", workspace="prod")
        [decision] = evaluate([budget.rule], claim, state)
        return type(decision).__name__

    small, raised = backfill_budget("grade", 450), backfill_budget("grade", 750)
    assert [decide(small, 100) for _ in range(5)] == ["Fire"] * 4 + ["Throttled"]
    assert [decide(raised, 100) for _ in range(4)] == ["Fire"] * 3 + ["Throttled"]
    # Another window length counts afresh (the windows' numbers differ).
    daily = Budget(raised.name, tokens=750, per=timedelta(days=1))
    assert [decide(daily, 100) for _ in range(8)] == ["Fire"] * 7 + ["Throttled"]
