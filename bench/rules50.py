"""Fifty rules for the rules benchmark: filters on fields, membership, combinators, sampling.

Few events match any of them, so the benchmark measures matching, not actions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streams.core.app_events import app_event_type
from streams.core.events import FeedbackGiven, RunSucceeded
from streams.core.rules import F, Rule, on, run
from streams.core.runs import Reaction

# The app event types the rules watch: a worker refuses rules naming undeclared types.
BENCH_EVENT = app_event_type("bench:event")
BENCH_OTHER = app_event_type("bench:other")


async def noop(reaction: Reaction) -> Mapping[str, Any]:
    """Does nothing: the benchmark is about matching."""
    return {}


def _rules() -> list[Rule]:
    rules: list[Rule] = []
    for i in range(20):
        rules.append(Rule(name=f"bench:errors-{i}", when=on("bench:event").where(
            F.data.errors.gt(990 + i), F.data.service.eq(f"svc-{i}")), then=run("noop")))
    for i in range(10):
        rules.append(Rule(name=f"bench:region-{i}", when=on("bench:event").where(
            F.data.region.isin([f"r{i}", f"q{i}"]) & ~F.data.canary.eq(True),
            F.data.errors.ge(999)), then=run("noop")))
    for i in range(10):
        rules.append(Rule(name=f"bench:feedback-{i}", when=on(FeedbackGiven).where(
            F.value.correct.eq(False), feedback_type=f"type_{i}"), then=run("noop")))
    for i in range(5):
        rules.append(Rule(name=f"bench:runs-{i}", when=on(RunSucceeded).where(
            rule=f"rule-{i}"), then=run("noop")))
    for i in range(5):
        rules.append(Rule(name=f"bench:sampled-{i}", when=on("bench:other").sample(0.1),
                          then=run("noop")))
    return rules


RULES = _rules()
ACTIONS = {"noop": noop}
assert len(RULES) == 50
