"""What each judge costs (streams.core.measures.costs): verdicts, reused ones, calls, tokens
and their price; a call that cannot be priced is counted as unpriced, never as free."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from streams.core.errors import ValidationFailed
from streams.core.events import Envelope, RunSucceeded
from streams.core.measures import ModelPrice, fold_judge_costs, parse_prices

PRICES = {"small": ModelPrice(prompt=0.5, completion=2.0)}


@pytest.fixture
def verdict_run() -> Callable[..., Envelope]:
    """A run_succeeded of an evaluator action, with the output EvaluatorAction writes."""
    made = [0]

    def make(evaluator: str = "grader", version: str = "1", *, reused: bool = False,
             trace: dict[str, str] | None = None, **output: Any) -> Envelope:
        made[0] += 1
        return Envelope.new(RunSucceeded(run_id=f"run_{made[0]}", rule="judge", action="j",
                                         output={"evaluator": evaluator, "version": version,
                                                 "feedback_id": f"evt_{made[0]}",
                                                 "reused": reused, "trace": trace,
                                                 **output}),
                            tenant="acme", workspace="prod")
    return make


def llm(prompt: int, completion: int, model: str = "small") -> dict[str, str]:
    return {"model": model, "attempts": "1", "prompt_tokens": str(prompt),
            "completion_tokens": str(completion), "total_tokens": str(prompt + completion)}


def test_calls_are_priced_by_their_tokens_and_reused_verdicts_cost_nothing(
        verdict_run: Callable[..., Envelope]) -> None:
    runs = [verdict_run(trace=llm(1000, 200)), verdict_run(trace=llm(3000, 600)),
            verdict_run(reused=True, trace=llm(1000, 200))]
    [cost] = fold_judge_costs(runs, PRICES)
    assert (cost.given, cost.reused, cost.calls) == (3, 1, 2)
    assert (cost.prompt_tokens, cost.completion_tokens) == (4000, 800)
    # (4,000 x 0.5 + 800 x 2.0) per million tokens.
    assert cost.cost == pytest.approx(0.0036)
    assert cost.cost_per_call == pytest.approx(0.0018)
    assert cost.cost_per_verdict == pytest.approx(0.0012)
    assert cost.models == ("small",) and cost.unpriced == 0


def test_a_model_without_a_price_or_a_call_without_tokens_is_unpriced_not_free(
        verdict_run: Callable[..., Envelope]) -> None:
    no_usage = {"model": "small", "attempts": "1"}
    runs = [verdict_run(trace=llm(1000, 200)), verdict_run(trace=llm(10, 10, "big")),
            verdict_run(trace=no_usage)]
    [cost] = fold_judge_costs(runs, PRICES)
    assert cost.unpriced == 2 and cost.cost == pytest.approx(0.0009)
    assert cost.cost_per_verdict is None and cost.cost_per_call is None
    assert cost.models == ("big", "small")
    # Without a table every model call is unpriced; a function evaluator is free.
    [function] = fold_judge_costs([verdict_run("rule-check", trace=None)])
    assert (function.calls, function.cost, function.unpriced) == (1, 0.0, 0)
    assert function.cost_per_verdict == 0.0


def test_versions_are_kept_apart_and_other_runs_are_not_verdicts(
        verdict_run: Callable[..., Envelope]) -> None:
    other = Envelope.new(RunSucceeded(run_id="r", rule="triage", action="t",
                                      output={"errors": 3}), tenant="acme", workspace="prod")
    runs = [verdict_run(version="1"), verdict_run(version="2"), verdict_run(version="2"),
            other]
    assert [(c.version, c.given) for c in fold_judge_costs(runs)] == [("1", 1), ("2", 2)]


@pytest.mark.parametrize(("text", "says"), [
    ("not json", "not JSON"),
    ("[1]", "JSON object of model names"),
    ('{"m": {"prompt": 1}}', "exactly"),
    ('{"m": {"prompt": -1, "completion": 1}}', "'prompt' must be a number >= 0"),
    ('{"m": {"prompt": 1, "completion": true}}', "'completion' must be a number"),
    ('{"m": {"prompt": 1, "completion": "NaN"}}', "'completion' must be a number"),
])
def test_a_bad_price_table_is_refused_naming_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValidationFailed, match=says):
        parse_prices(text)


def test_a_price_table_reads_money_per_million_tokens() -> None:
    prices = parse_prices('{"gpt-4o-mini": {"prompt": 0.15, "completion": 0.6}}')
    assert prices["gpt-4o-mini"].of(1_000_000, 500_000) == pytest.approx(0.45)


def test_a_shadow_versions_verdicts_count_as_its_own(
        verdict_run: Callable[..., Envelope]) -> None:
    shadow = {"evaluator": "grader", "version": "2", "verdict_key": "grader@2:ab",
              "reused": False, "trace": llm(100, 10)}
    runs = [verdict_run(trace=llm(1000, 200), shadow=shadow),
            verdict_run(trace=llm(1000, 200), shadow={**shadow, "reused": True}),
            verdict_run(trace=llm(1000, 200), shadow={"evaluator": "grader", "version": "2",
                                                     "handed_off": "cannot tell"})]
    current, candidate = fold_judge_costs(runs, PRICES)
    assert (current.version, current.calls) == ("1", 3)
    assert (candidate.version, candidate.given, candidate.reused, candidate.calls) == (
        "2", 2, 1, 1)
    assert candidate.cost == pytest.approx((100 * 0.5 + 10 * 2.0) / 1e6)


def test_a_shadow_versions_recorded_verdicts_meet_peoples_in_judge_agreement() -> None:
    from streams.core.actors import EvaluatorActor, UserActor
    from streams.core.evaluation import VERDICT_RECORD
    from streams.core.events import AppEvent, FeedbackGiven
    from streams.core.measures import fold_judge_agreement
    from streams.core.targets import RunTarget

    envelopes = []
    for n in range(6):
        target = RunTarget(run_id=f"run_{n}")
        envelopes.append(Envelope.new(  # the current version's verdict: feedback
            FeedbackGiven(feedback_type="triage_quality", target=target,
                          value={"correct": True, "severity": "low"}),
            tenant="acme", workspace="prod", actor=EvaluatorActor(name="grader", version="1")))
        envelopes.append(Envelope.new(  # the shadow's: a record apart
            AppEvent(name=VERDICT_RECORD, data={
                "key": f"grader@2:{n}", "feedback_type": "triage_quality", "shadow": True,
                "value": {"correct": n % 2 == 0, "severity": "low"}, "evaluator": "grader",
                "version": "2", "target": {"kind": "run", "id": f"run_{n}"}}),
            tenant="acme", workspace="prod"))
        envelopes.append(Envelope.new(
            FeedbackGiven(feedback_type="triage_quality", target=target,
                          value={"correct": n % 2 == 0, "severity": "low"}),
            tenant="acme", workspace="prod", actor=UserActor(id="ada")))
    rows = {(r.evaluator, r.field): r for r in fold_judge_agreement(envelopes)}
    assert rows[("evaluator:grader@2", "correct")].n == 6
    assert rows[("evaluator:grader@2", "correct")].categorical.observed == 1.0  # type: ignore
    assert rows[("evaluator:grader@1", "correct")].categorical.observed == 0.5  # type: ignore
