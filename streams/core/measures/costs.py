"""What each judge costs: per evaluator version, the verdicts its rules gave, the calls it was
paid for (a verdict reused from its record is not a call: `streams.core.evaluation`), the
tokens its model reported and, with a price table, the money, per call and per verdict given.

Read from the outputs of evaluator runs (`run_succeeded` of an `EvaluatorAction`: the verdict's
evaluator, version, trace and whether it was reused), so a report needs no other record. A
call whose trace names no model (a function evaluator) costs nothing; one that names a model
is priced from its prompt and completion tokens when the table has that model, and is
otherwise counted as unpriced, never as free: a model missing from the table, or a response
without token counts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from streams.core.errors import ValidationFailed
from streams.core.events import Envelope, RunSucceeded
from streams.core.prices import ModelPrice

__all__ = ["JudgeCost", "ModelPrice", "fold_judge_costs", "parse_prices"]


def parse_prices(text: str) -> dict[str, ModelPrice]:
    """The price table from its JSON form, `{"<model>": {"prompt": 0.15, "completion": 0.6}}`
    (money per million tokens, as the model answers in a response's `model`); ValidationFailed
    naming the model and field that is wrong."""
    try:
        table = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationFailed(f"the price table is not JSON: {exc}") from exc
    if not isinstance(table, dict):
        raise ValidationFailed("the price table must be a JSON object of model names, e.g. "
                               '{"gpt-4o-mini": {"prompt": 0.15, "completion": 0.6}}')
    prices: dict[str, ModelPrice] = {}
    for model, price in table.items():
        if not model or not isinstance(price, dict) or set(price) != {"prompt", "completion"}:
            raise ValidationFailed(f"price of model {model!r} must be an object with exactly "
                                   f'"prompt" and "completion", got {price!r}')
        for field in ("prompt", "completion"):
            value = price[field]
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not math.isfinite(value) or value < 0:
                raise ValidationFailed(f"price of model {model!r}: {field!r} must be a number "
                                       f">= 0 (money per million tokens), got {value!r}")
        prices[model] = ModelPrice(float(price["prompt"]), float(price["completion"]))
    return prices


@dataclass(frozen=True)
class JudgeCost:
    """One evaluator version's verdicts and what they cost.

    `given`: verdicts its runs gave (a shadow version's: recorded beside the current one's);
    `reused`: of those, given again from a record (no call);
    `calls`: the rest, each a call of the evaluator; `prompt_tokens` and `completion_tokens`
    of those calls; `cost`: the money of the priced calls; `unpriced`: calls that name a model
    the table lacks, or report no tokens (their cost is unknown, not zero)."""

    evaluator: str
    version: str
    given: int
    reused: int
    prompt_tokens: int
    completion_tokens: int
    cost: float
    unpriced: int
    models: tuple[str, ...]

    @property
    def calls(self) -> int:
        """Verdicts the evaluator was called for."""
        return self.given - self.reused

    @property
    def cost_per_verdict(self) -> float | None:
        """The money per verdict given (reused ones included), when every call is priced."""
        return self.cost / self.given if self.given and not self.unpriced else None

    @property
    def cost_per_call(self) -> float | None:
        """The money per call, when every call is priced."""
        return self.cost / self.calls if self.calls and not self.unpriced else None


def _tokens(trace: Mapping[str, Any], name: str) -> int | None:
    try:
        return int(trace[name])
    except (KeyError, TypeError, ValueError):
        return None


def fold_judge_costs(envelopes: Iterable[Envelope],
                     prices: Mapping[str, ModelPrice] | None = None) -> list[JudgeCost]:
    """The cost of each evaluator version whose verdicts the envelopes' runs gave, by
    evaluator and version."""
    prices = prices or {}
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for envelope in envelopes:
        event = envelope.event
        if not isinstance(event, RunSucceeded) or "feedback_id" not in event.output:
            continue  # not an evaluator's verdict
        _add(rows, event.output, prices)
        shadow = event.output.get("shadow")
        if isinstance(shadow, Mapping) and "verdict_key" in shadow:  # a shadow's verdict
            _add(rows, shadow, prices)
    return [JudgeCost(evaluator=e, version=v, given=r["given"], reused=r["reused"],
                      prompt_tokens=r["prompt"], completion_tokens=r["completion"],
                      cost=r["cost"], unpriced=r["unpriced"], models=tuple(sorted(r["models"])))
            for (e, v), r in sorted(rows.items())]


def _add(rows: dict[tuple[str, str], dict[str, Any]], output: Mapping[str, Any],
         prices: Mapping[str, ModelPrice]) -> None:
    """Count one verdict (an evaluator run's output, or its shadow's) in its version's row."""
    evaluator, version = output.get("evaluator"), output.get("version")
    if isinstance(evaluator, str) and isinstance(version, str):
        row = rows.setdefault((evaluator, version), {
            "given": 0, "reused": 0, "prompt": 0, "completion": 0, "cost": 0.0,
            "unpriced": 0, "models": set()})
        _count(row, output, prices)


def _count(row: dict[str, Any], output: Mapping[str, Any],
           prices: Mapping[str, ModelPrice]) -> None:
    row["given"] += 1
    if output.get("reused") is True:
        row["reused"] += 1
        return
    trace = output.get("trace") or {}
    model = trace.get("model") if isinstance(trace, Mapping) else None
    if model is None:
        return  # no model named: a function evaluator, free
    row["models"].add(str(model))
    prompt, completion = _tokens(trace, "prompt_tokens"), _tokens(trace, "completion_tokens")
    price = prices.get(str(model))
    if prompt is None or completion is None or price is None:
        row["unpriced"] += 1
    else:
        row["cost"] += price.of(prompt, completion)
    row["prompt"] += prompt or 0
    row["completion"] += completion or 0
