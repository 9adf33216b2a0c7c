"""Experiments: run a task over a dataset's examples, judge each output with evaluators, and
summarize. A failing example is recorded as failed with its error, never dropped.

    result = await InMemoryExperimentTracker().run_experiment(
        "candidate-triage", dataset=incidents, task=task, evaluators=[incident_judge])
    result.summary["evaluator:incident-judge@1"]["opened_incident.mean"]

`task(example)` (sync or async) returns the output to judge (a replay task, see
`streams.core.replay`, builds one from a rule and a candidate action). Each evaluator's
`evaluate(output)` gives a Verdict; one that raises HandOff declined (counted, not failed).
The summary has, per evaluator participant: `n` (examples judged), `handed_off`, `failed`,
and for each verdict field the mean of numbers and booleans (`field.mean`) and the share of
each category (`field=label`).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from streams.core.datasets import Dataset, Example
from streams.core.evaluators import Evaluator, HandOff, Verdict

__all__ = [
    "ExampleResult",
    "ExperimentResult",
    "ExperimentTracker",
    "InMemoryExperimentTracker",
    "run_examples",
    "summarize",
]

Task = Callable[[Example[Any, Any]], Any | Awaitable[Any]]


@dataclass(frozen=True)
class ExampleResult:
    """One example's run: its output, every evaluator's verdict, or why it failed."""

    example_id: str
    output: Any = None
    error: str | None = None
    verdicts: dict[str, Verdict[Any] | None] = field(default_factory=dict)
    evaluator_errors: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """The task raised, so nothing was judged."""
        return self.error is not None


@dataclass(frozen=True)
class ExperimentResult:
    """A named experiment over a dataset: per-example results and their summary."""

    name: str
    dataset: str
    results: list[ExampleResult]
    summary: dict[str, dict[str, float]]

    @property
    def failed(self) -> list[ExampleResult]:
        """The examples whose task raised."""
        return [r for r in self.results if r.failed]


class ExperimentTracker(Protocol):
    """Runs named experiments and keeps (or sends) their results."""

    async def run_experiment(
        self, name: str, *, dataset: Dataset[Any, Any], task: Task,
        evaluators: Sequence[Evaluator[Any, Any]] = (),
    ) -> ExperimentResult: ...


async def _run_one(example: Example[Any, Any], task: Task,
                   evaluators: Sequence[Evaluator[Any, Any]]) -> ExampleResult:
    try:
        output = task(example)
        if inspect.isawaitable(output):
            output = await output
    except Exception as exc:  # a failing example is a result, not a lost example
        return ExampleResult(example.id, error=f"{type(exc).__name__}: {exc}")
    verdicts: dict[str, Verdict[Any] | None] = {}
    errors: dict[str, str] = {}
    for evaluator in evaluators:
        participant = f"evaluator:{evaluator.name}@{evaluator.version}"
        try:
            verdicts[participant] = await evaluator.evaluate(output)
        except HandOff:
            verdicts[participant] = None
        except Exception as exc:  # the evaluator failed on this output: say so, go on
            errors[participant] = f"{type(exc).__name__}: {exc}"
    return ExampleResult(example.id, output=output, verdicts=verdicts, evaluator_errors=errors)


async def run_examples(
    examples: Sequence[Example[Any, Any]], task: Task,
    evaluators: Sequence[Evaluator[Any, Any]] = (), *, concurrency: int = 4,
    progress: Callable[[int, int], None] | None = None,
) -> list[ExampleResult]:
    """Each example through the task and the evaluators, `concurrency` at a time, in order."""
    limit = asyncio.Semaphore(max(1, concurrency))
    done = 0

    async def one(example: Example[Any, Any]) -> ExampleResult:
        nonlocal done
        async with limit:
            result = await _run_one(example, task, evaluators)
        done += 1
        if progress is not None:
            progress(done, len(examples))
        return result

    return list(await asyncio.gather(*(one(e) for e in examples)))


def summarize(results: Sequence[ExampleResult],
              evaluators: Sequence[Evaluator[Any, Any]]) -> dict[str, dict[str, float]]:
    """Per evaluator: n, handed_off, failed, field means and category shares."""
    out: dict[str, dict[str, float]] = {}
    for evaluator in evaluators:
        participant = f"evaluator:{evaluator.name}@{evaluator.version}"
        judged = [r.verdicts[participant] for r in results if participant in r.verdicts]
        given = [v for v in judged if v is not None]
        stats: dict[str, float] = {
            "n": float(len(given)), "handed_off": float(len(judged) - len(given)),
            "failed": float(sum(participant in r.evaluator_errors for r in results)),
        }
        numbers: dict[str, list[float]] = {}
        labels: dict[str, dict[str, int]] = {}
        for verdict in given:
            for name, value in verdict.value.model_dump(mode="json").items():
                if isinstance(value, bool | int | float):
                    numbers.setdefault(name, []).append(float(value))
                elif isinstance(value, str):
                    counts = labels.setdefault(name, {})
                    counts[value] = counts.get(value, 0) + 1
        for name, values in sorted(numbers.items()):
            stats[f"{name}.mean"] = sum(values) / len(values)
        for name, counts in sorted(labels.items()):
            if len(counts) <= 20:  # a category, not free text
                total = sum(counts.values())
                for label, count in sorted(counts.items()):
                    stats[f"{name}={label}"] = count / total
        out[participant] = stats
    return out


class InMemoryExperimentTracker:
    """Runs experiments in this process and keeps their results in `experiments`."""

    def __init__(self, *, concurrency: int = 4) -> None:
        self.concurrency = concurrency
        self.experiments: list[ExperimentResult] = []

    async def run_experiment(
        self, name: str, *, dataset: Dataset[Any, Any], task: Task,
        evaluators: Sequence[Evaluator[Any, Any]] = (),
        progress: Callable[[int, int], None] | None = None,
    ) -> ExperimentResult:
        """Run `task` over every example, judge each output, keep and return the result."""
        results = await run_examples(dataset.examples, task, evaluators,
                                     concurrency=self.concurrency, progress=progress)
        result = ExperimentResult(name, dataset.name, results, summarize(results, evaluators))
        self.experiments.append(result)
        return result
