"""Rules and actions the rules integration tests run in their workers (`--rules`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from streams.adapters.chat import RetrievalEvaluator
from streams.core.app_events import app_event_type
from streams.core.budgets import Budget
from streams.core.errors import ConfigError
from streams.core.evaluation import EvaluatorAction
from streams.core.evaluators import FunctionEvaluator, HandOff
from streams.core.events import AppEvent
from streams.core.judges import ChatModel, RetrievalInput
from streams.core.rules import F, RetryPolicy, Rule, on, run
from streams.core.runs import Reaction
from streams.core.targets import ChainTarget, RunTarget
from streams.examples.ops import Resolution
from streams.settings import Settings

FAST = RetryPolicy(max_attempts=3, backoff=timedelta(milliseconds=50))


async def noop(reaction: Reaction) -> Mapping[str, Any]:
    return {"matched": [e.event_id for e in reaction.events]}


async def flaky(reaction: Reaction) -> Mapping[str, Any]:
    if reaction.attempt == 1:
        raise RuntimeError("first attempt fails")
    return {"attempt": reaction.attempt}


async def broken(reaction: Reaction) -> Mapping[str, Any]:
    raise ValueError(f"always broken (attempt {reaction.attempt})")


def mitigated(data: dict[str, Any]) -> Resolution:
    if data.get("minutes") is None:
        raise HandOff("no timing to judge")
    return Resolution(resolved=True, minutes_to_mitigate=int(data["minutes"]))


async def event_data(reaction: Reaction) -> dict[str, Any]:
    event = reaction.events[-1].event
    assert isinstance(event, AppEvent)
    return dict(event.data)


async def the_chain(reaction: Reaction) -> ChainTarget:
    return ChainTarget(correlation_id=reaction.started.correlation_id)


judge = EvaluatorAction(
    FunctionEvaluator(mitigated, verdict_type=Resolution, name="mitigation-judge",
                      version="7"),
    input=event_data, target=the_chain)


# A judge under a budget: 1,000 tokens for all time (a window of ten years) at 100 per
# evaluation, so ten evaluations across every worker, whatever is killed or restarted.
BUDGET = Budget("t-judges", tokens=1_000, per=timedelta(days=3650))
budgeted = EvaluatorAction(
    FunctionEvaluator(mitigated, verdict_type=Resolution, name="budgeted-judge",
                      version="1"),
    input=event_data, target=the_chain, budget=BUDGET, cost=100)


def _model() -> ChatModel:
    try:
        return Settings.from_env().chat_model(max_retries=1, timeout=5.0)
    except ConfigError:
        return ChatModel(base_url="http://127.0.0.1:9/v1", model="none", max_retries=0)


async def question(reaction: Reaction) -> RetrievalInput:
    data = await event_data(reaction)
    return RetrievalInput(question=data["question"], contexts=list(data["contexts"]))


async def own_run(reaction: Reaction) -> RunTarget:
    return RunTarget(run_id=reaction.run.run_id)


retrieval = EvaluatorAction(RetrievalEvaluator(_model()), input=question, target=own_run)

# The app event types the rules watch: a worker refuses rules naming undeclared types.
APP_EVENT_TYPES = [app_event_type(name) for name in (
    "t:item", "t:flaky", "t:broken", "t:tick", "t:sample", "t:judge", "t:judge-many",
    "t:question", "t:hit", "t:budget-judge", "t:step", "t:step-done", "t:qstep")]

RULES = [
    Rule(name="t:limited", when=on("t:item").at_most(20, per=timedelta(hours=1)),
         then=run("noop")),
    Rule(name="t:flaky", when=on("t:flaky"), then=run("flaky", retry=FAST)),
    Rule(name="t:broken", when=on("t:broken"), then=run("broken", retry=FAST)),
    Rule(name="t:count", when=on("t:tick").count(3, within=timedelta(minutes=1))
         .scope(F.data.host), then=run("noop")),
    Rule(name="t:sampled", when=on("t:sample").sample(0.5), then=run("noop")),
    Rule(name="t:judge", when=on("t:judge"), then=run(judge)),
    Rule(name="t:judge-limited", when=on("t:judge-many").at_most(2, per=timedelta(hours=1)),
         then=run(judge)),
    Rule(name="t:retrieval", when=on("t:question"), then=run(retrieval, retry=FAST)),
    Rule(name="t:budgeted", when=on("t:budget-judge"), then=run(budgeted, retry=FAST)),
    # Stateful rules scoped by host, so their keys spread over the rules topic's partitions
    # (tests/faults/test_rule_state.py); windows long enough that no test straddles one.
    Rule(name="t:host-limited", when=on("t:hit").at_most(3, per=timedelta(days=3650))
         .scope(F.data.host), then=run("noop")),
    Rule(name="t:host-count", when=on("t:hit").count(4, within=timedelta(days=1))
         .scope(F.data.host), then=run("noop")),
    # Completion rules (tests/integration/test_chain_completion.py): a chain judged once on
    # its terminal event (late events ignored), and one judged after 5 minutes of event time
    # without its events (late events judged again).
    Rule(name="t:chain-end", when=on("t:step").where(F.data.kind.ne("noise"))
         .completes(terminal="t:step-done"), then=run("noop")),
    Rule(name="t:chain-quiet", when=on("t:qstep").completes(
        quiet=timedelta(minutes=5), late="rejudge"), then=run("noop")),
]
ACTIONS = {"noop": noop, "flaky": flaky, "broken": broken, judge.name: judge,
           budgeted.name: budgeted,
           retrieval.name: retrieval}
