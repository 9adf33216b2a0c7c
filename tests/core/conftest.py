"""Fixtures the core's tests share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from streams.core.events import Envelope, RunStarted
from streams.core.runs import Reaction


@pytest.fixture
def reaction_in() -> Callable[..., Reaction]:
    """A factory of a rule run's Reaction acting in `log` (an in-memory workspace)."""
    def make(log: Any, run_id: str = "run_1", attempt: int = 1) -> Reaction:
        run = RunStarted(run_id=run_id, rule="grade", action="grader", firing_id="f1",
                         attempt=attempt)
        started = Envelope.new(run, tenant="acme", workspace="prod")
        return Reaction(run=run, started=started, events=[], workspace=log, attempt=attempt)
    return make
