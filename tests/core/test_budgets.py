"""Budgets (streams.core.budgets): the budget's rule grants claims while their tokens fit
the window and refuses the rest, and an evaluator action with a budget makes a call only
under a granted claim. The claims are decided here by the engine the decider runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from streams.core.budgets import BUDGET_CLAIM, GRANT_ACTION, Budget, with_budgets
from streams.core.errors import ValidationFailed
from streams.core.events import AppEvent, Envelope, Event
from streams.core.rules import Fire, Rule, RuleEngine, on, run
from streams.core.runs import Reaction
from tests.core.test_evaluation import Log, action_for, counting_judge

JUDGES = Budget("judges", tokens=1_000, per=timedelta(hours=1))


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
])
def test_bad_budgets_and_claims_are_refused_naming_the_field(
        make: Callable[[], Any], field: str) -> None:
    with pytest.raises(ValidationFailed, match=field):
        make()


def test_a_worker_gets_each_budgets_rule_once_and_the_grant_action() -> None:
    evaluator, _calls = counting_judge()
    one = action_for(evaluator, budget=JUDGES, cost=100)
    two = action_for(evaluator, budget=JUDGES, cost=200)
    plain = Rule(name="t:r", when=on("t:x"), then=run("a"))
    other = object()
    rules, actions = with_budgets([plain], {"one": one, "two": two, "a": other})
    assert [r.name for r in rules] == ["t:r", "streams:budget.judges"]
    assert GRANT_ACTION in actions and actions["one"] is one
    assert with_budgets([plain], {"a": other}) == ([plain], {"a": other})
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
    from streams.core.evaluators import FunctionEvaluator
    from tests.core.test_evaluation import Graded

    evaluator = FunctionEvaluator(lambda judged: Graded(good=True), verdict_type=Graded,
                                  name="costly", version="1")
    original = evaluator.evaluate

    async def with_usage(judged: Any) -> Any:
        verdict = await original(judged)
        return dataclasses.replace(verdict, trace={"prompt_tokens": "250",
                                                   "completion_tokens": "100"})

    evaluator.evaluate = with_usage  # type: ignore[method-assign]
    out = await action_for(evaluator, budget=JUDGES, cost=300)(reaction_in(Decided()))
    assert out["budget_overrun_tokens"] == 50


def test_budget_and_cost_go_together() -> None:
    evaluator, _calls = counting_judge()
    with pytest.raises(ValueError, match="go together"):
        action_for(evaluator, budget=JUDGES)
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
