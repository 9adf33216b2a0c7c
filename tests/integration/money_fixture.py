"""A judge under a money budget (`--rules` of the money budget's integration test): its
worker must price `t-model` in STREAMS_LLM_PRICES, or it refuses to start."""

from __future__ import annotations

from datetime import timedelta

from streams.core.budgets import Budget
from streams.core.evaluation import EvaluatorAction
from streams.core.evaluators import FunctionEvaluator
from streams.core.rules import Rule, on, run
from streams.examples.ops import Resolution
from tests.integration.rules_fixture import APP_EVENT_TYPES, FAST, event_data, mitigated, the_chain

__all__ = ["ACTIONS", "APP_EVENT_TYPES", "PRICES", "RULES", "USD"]

USD = Budget("t-usd", money=0.001, per=timedelta(days=3650))  # 1,000 micros for all time
PRICES = '{"t-model": {"prompt": 1.0, "completion": 3.0}}'  # a claim of 100 tokens: 300 micros

priced = EvaluatorAction(
    FunctionEvaluator(mitigated, verdict_type=Resolution, name="priced-judge", version="1"),
    input=event_data, target=the_chain, budget=USD, cost=100, model="t-model")

RULES = [Rule(name="t:priced", when=on("t:budget-judge"), then=run(priced, retry=FAST))]
ACTIONS = {priced.name: priced}
