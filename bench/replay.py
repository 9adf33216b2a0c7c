"""Replay experiment speed: 100 examples, each replayed in its own isolated in-memory
workspace (three error events, a counting scoped rule, a candidate action that emits an
incident, one judge), through the worker's matcher and run executor.

    /work/main/.venv/bin/python -m bench.replay [--examples 100] [--events 3]

Prints the wall time of the whole experiment and per example. The target is under 10 s for
100 examples; this is a benchmark, not a test (tests never assert speed).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from streams.core.app_events import AppEventType
from streams.core.datasets import Dataset, Example
from streams.core.evaluators import FunctionEvaluator
from streams.core.events import AppEvent
from streams.core.experiments import InMemoryExperimentTracker
from streams.core.feedback import Feedback, FeedbackRegistry
from streams.core.replay import Replay, replay_task
from streams.core.rules import F, Rule, on, run
from streams.core.runs import Reaction

_TYPES = FeedbackRegistry()


class BenchError(AppEventType, name="bench:service_error"):
    """A service error with a severity."""

    service: str
    severity: int


class BenchIncident(AppEventType, name="bench:incident.opened"):
    """An incident the candidate opened."""

    service: str


class BenchCall(Feedback, name="bench_call", targets={"run"}, registry=_TYPES):
    """Was opening (or not) right?"""

    right: bool


class BenchInput(BaseModel):
    """An example's input: the service that spiked."""

    service: str


class BenchOutcome(BaseModel):
    """What the replay did."""

    opened: bool


RULE = Rule(name="bench:error-spike",
            when=on(BenchError).count(3, within=timedelta(minutes=5)).scope(F.data.service),
            then=run("triage"))


async def candidate(reaction: Reaction[Mapping[str, Any]]) -> dict[str, Any]:
    """Open an incident when the matched severities add up to 20 or more."""
    total = sum(int(e.data["severity"]) for e in reaction.events
                if isinstance(e.event, AppEvent))
    if total >= 20:
        await reaction.emit(BenchIncident(service=str(reaction.run.scope["service"])).to_event())
    return {"severity": total}


def _outcome(replay: Replay) -> BenchOutcome:
    return BenchOutcome(opened=any(e.event_type == "bench:incident.opened"
                                   for e in replay.emitted))


JUDGE = FunctionEvaluator(lambda o: BenchCall(right=o.opened), verdict_type=BenchCall,
                          name="bench-judge", version="1")


async def main(examples: int, events: int) -> float:
    """Run the experiment; returns its wall time in seconds."""
    dataset = Dataset("bench", BenchCall, BenchInput, [
        Example(id=f"ex_{i}", input=BenchInput(service=f"svc-{i % 7}"),
                verdict=BenchCall(right=True)) for i in range(examples)])
    task = replay_task(
        rule=RULE, action=candidate,
        events=lambda e: [BenchError(service=e.input.service, severity=5 + int(e.id[3:]) % 5)
                          for _ in range(events)],
        output=_outcome, event_types=[BenchError, BenchIncident])
    started = time.perf_counter()
    result = await InMemoryExperimentTracker().run_experiment(
        "bench-replay", dataset=dataset, task=task, evaluators=[JUDGE])
    elapsed = time.perf_counter() - started
    assert not result.failed, result.failed[:3]
    opened = sum(1 for r in result.results if r.output.opened)
    print(f"replay experiment: {examples} examples x {events} events, {opened} opened an "
          f"incident: {elapsed:.3f} s ({elapsed / examples * 1000:.2f} ms per example)")
    return elapsed


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100)
    parser.add_argument("--events", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.examples, args.events))
