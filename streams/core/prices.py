"""A model's price: what the judges' cost report and money budgets count with.

Its own module so that budgets (`streams.core.budgets`, which the evaluator actions import)
need not import the measures package, which imports the evaluator actions.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PER_TOKENS", "ModelPrice"]

PER_TOKENS = 1_000_000
"""Prices are per million tokens, as model vendors quote them."""


@dataclass(frozen=True)
class ModelPrice:
    """A model's price in money per million tokens, of the prompt and of the completion."""

    prompt: float
    completion: float

    def of(self, prompt_tokens: int, completion_tokens: int) -> float:
        """The price of one call's tokens."""
        return (prompt_tokens * self.prompt + completion_tokens * self.completion) / PER_TOKENS
