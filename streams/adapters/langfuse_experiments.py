"""An experiment tracker that records datasets and experiments in Langfuse through the SDK.

    tracker = LangfuseExperimentTracker(Langfuse(...))
    result = await tracker.run_experiment("candidate-triage", dataset=incidents, task=task,
                                          evaluators=[incident_judge])

It runs the experiment as `InMemoryExperimentTracker` does (`streams.core.experiments`: every
example a result, failures recorded with their error) and records it through the SDK's async
API (`Langfuse.async_api`):

- the Dataset as a Langfuse dataset (`datasets.create`, an upsert by name) with one item per
  example (`dataset_items.create`, upserted on a derived id, so pushing again replaces): input
  = the example's input, expected output = its verdict, metadata = the example's metadata and
  id (`source_trace_id` = the example's trace when it has one);
- the experiment as a dataset run whose id is the one Langfuse derives for it (SDK 5.0.4's
  `_create_experiment_id`: sha256 of ["langfuse-experiment-v1", project, dataset id, run
  name], 16 hex), so re-running a name adds to the same run;
- per item, the evaluators' verdicts as scores, one per scored field of the verdict's type
  (`{type}.{field}`, as the feedback mirror names them), on the item's trace (a trace id
  derived from the run and the item); a failed item gets a TEXT score `experiment.error`;
  every score's metadata names the run, its name, the dataset, the item, the example and the
  evaluator participant;
- per run, the summary's field means (`{type}.{field}.mean`) and the failed count
  (`experiment.failed`) as scores on the dataset run (`datasetRunId`).

Score ids are derived from the run, the item and the name, so recording again replaces.
Scores are sent with `scores.create` (the synchronous route, which answers): a score Langfuse
refuses raises `ExperimentTrackingError` naming it. SDK 5.0.4 records an experiment's item
traces as OpenTelemetry spans; this tracker sends no spans, so the item-trace link is in each
score's metadata and trace id, not in an observation tree.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from streams.core.datasets import DATASET_FORMAT, Dataset, Example
from streams.core.errors import StreamsError
from streams.core.evaluators import Evaluator
from streams.core.experiments import ExampleResult, ExperimentResult, Task, run_examples, summarize
from streams.core.scores import score_configs, score_value
from streams.extras import needs

with needs("langfuse", "the Langfuse experiment tracker"):
    from langfuse import Langfuse
    from langfuse.api.scores.types.create_score_request import CreateScoreRequest

__all__ = ["ExperimentTrackingError", "LangfuseExperimentTracker", "experiment_id",
           "item_id", "item_trace_id"]

_NAMESPACE: Final = uuid.UUID("8f2b7c1e-5a7d-4e47-9a52-3c0d6a4f6b10")
_BATCH: Final = 100
_TEXT_LIMIT: Final = 500


class ExperimentTrackingError(StreamsError):
    """Langfuse refused a dataset, an item or a score of an experiment; the message names
    which and why."""


def item_id(dataset: str, example_id: str) -> str:
    """The Langfuse dataset item id of an example: derived from the dataset's name and the
    example's id (item ids are unique per project, so two datasets never share one)."""
    return str(uuid.uuid5(_NAMESPACE, f"{dataset}/{example_id}"))


def experiment_id(project_id: str, dataset_id: str, run_name: str) -> str:
    """The dataset run id Langfuse derives for a run name (as SDK 5.0.4 does)."""
    payload = json.dumps(["langfuse-experiment-v1", project_id, dataset_id, run_name],
                         separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def item_trace_id(run_id: str, item: str) -> str:
    """The trace id an item's scores are attached to in a run: 32 hex, derived."""
    return hashlib.sha256(f"{run_id}/{item}".encode()).hexdigest()[:32]


def _score_id(run_id: str, item: str, name: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"{run_id}/{item}/{name}"))


class LangfuseExperimentTracker:
    """Runs experiments in this process and records datasets, runs and scores in Langfuse."""

    def __init__(self, client: Langfuse, *, concurrency: int = 4,
                 environment: str | None = None) -> None:
        self.client = client
        self.concurrency = concurrency
        self.environment = environment
        self.experiments: list[ExperimentResult] = []
        self.runs: dict[str, str] = {}
        """Run name → the dataset run id its scores were recorded under."""
        self._project: str | None = None

    async def project_id(self) -> str:
        """The project the client's keys belong to (asked once)."""
        if self._project is None:
            try:
                projects = await self.client.async_api.projects.get()
            except Exception as exc:
                raise ExperimentTrackingError(
                    f"cannot ask Langfuse which project the keys belong to: "
                    f"{type(exc).__name__}: {exc}") from exc
            if not projects.data:
                raise ExperimentTrackingError("Langfuse lists no project for these keys")
            self._project = projects.data[0].id
        return self._project

    async def push_dataset(self, dataset: Dataset[Any, Any]) -> str:
        """Create (or update) the dataset and upsert one item per example; its Langfuse id."""
        api = self.client.async_api
        try:
            created = await api.datasets.create(
                name=dataset.name,
                description=f"{len(dataset)} examples of {dataset.feedback_type.feedback_name}"
                            " feedback",
                metadata={"format": DATASET_FORMAT,
                          "feedback_type": dataset.feedback_type.feedback_name,
                          "input_type": dataset.input_type.__name__})
        except Exception as exc:
            raise ExperimentTrackingError(f"Langfuse refused dataset {dataset.name!r}: "
                                          f"{type(exc).__name__}: {exc}") from exc
        for example in dataset.examples:
            await self._push_item(dataset.name, example)
        return str(created.id)

    async def _push_item(self, dataset: str, example: Example[Any, Any]) -> None:
        extra: dict[str, Any] = {}
        if example.trace_id:
            extra["source_trace_id"] = example.trace_id
        try:
            await self.client.async_api.dataset_items.create(
                dataset_name=dataset, id=item_id(dataset, example.id),
                input=example.input.model_dump(mode="json"),
                expected_output=example.verdict.model_dump(mode="json"),
                metadata={**example.metadata, "example_id": example.id}, **extra)
        except Exception as exc:
            raise ExperimentTrackingError(
                f"Langfuse refused item {example.id!r} of dataset {dataset!r}: "
                f"{type(exc).__name__}: {exc}") from exc

    async def run_experiment(
        self, name: str, *, dataset: Dataset[Any, Any], task: Task,
        evaluators: Sequence[Evaluator[Any, Any]] = (),
        progress: Callable[[int, int], None] | None = None,
    ) -> ExperimentResult:
        """Push the dataset, run `task` over every example, judge each output, and record
        the run with its scores; returns (and keeps) the result."""
        dataset_id = await self.push_dataset(dataset)
        run_id = experiment_id(await self.project_id(), dataset_id, name)
        results = await run_examples(dataset.examples, task, evaluators,
                                     concurrency=self.concurrency, progress=progress)
        summary = summarize(results, evaluators)
        result = ExperimentResult(name, dataset.name, results, summary)
        base = {"experiment_id": run_id, "experiment_name": name, "dataset": dataset.name}
        requests: list[CreateScoreRequest] = []
        for outcome in results:
            requests += self._item_scores(run_id, dataset.name, outcome, evaluators, base)
        requests += self._run_scores(run_id, results, evaluators, base)
        await self._send(requests, f"experiment {name!r} on dataset {dataset.name!r}")
        self.runs[name] = run_id
        self.experiments.append(result)
        return result

    def _score(self, name: str, value: float | str, data_type: str,
               **fields: Any) -> CreateScoreRequest:
        if self.environment is not None:
            fields["environment"] = self.environment
        return CreateScoreRequest(name=name, value=value, data_type=data_type,
                                  timestamp=datetime.now(UTC), **fields)

    def _item_scores(self, run_id: str, dataset: str, outcome: ExampleResult,
                     evaluators: Sequence[Evaluator[Any, Any]],
                     base: dict[str, str]) -> list[CreateScoreRequest]:
        item = item_id(dataset, outcome.example_id)
        trace = item_trace_id(run_id, item)
        metadata = {**base, "dataset_item_id": item, "example_id": outcome.example_id}
        if outcome.error is not None:
            name = "experiment.error"
            return [self._score(name, outcome.error[:_TEXT_LIMIT] or "failed", "TEXT",
                                id=_score_id(run_id, item, name), trace_id=trace,
                                metadata=metadata)]
        out: list[CreateScoreRequest] = []
        for evaluator in evaluators:
            participant = f"evaluator:{evaluator.name}@{evaluator.version}"
            verdict = outcome.verdicts.get(participant)
            if verdict is None:
                continue  # handed off or failed: nothing to score
            values = verdict.value.model_dump()
            for config in score_configs(evaluator.verdict_type):
                value = score_value(config, values.get(config.field))
                if value is None:
                    continue
                if isinstance(value, str) and config.data_type == "TEXT":
                    value = value[:_TEXT_LIMIT]
                out.append(self._score(
                    config.name, value, config.data_type,
                    id=_score_id(run_id, item, f"{participant}/{config.name}"), trace_id=trace,
                    metadata={**metadata, "evaluator": participant}))
        return out

    def _run_scores(self, run_id: str, results: Sequence[ExampleResult],
                    evaluators: Sequence[Evaluator[Any, Any]],
                    base: dict[str, str]) -> list[CreateScoreRequest]:
        failed = "experiment.failed"
        out = [self._score(failed, float(sum(r.failed for r in results)), "NUMERIC",
                           id=_score_id(run_id, "", failed), dataset_run_id=run_id,
                           metadata=dict(base))]
        summary = summarize(results, evaluators)
        for evaluator in evaluators:
            participant = f"evaluator:{evaluator.name}@{evaluator.version}"
            stats = summary.get(participant, {})
            for config in score_configs(evaluator.verdict_type):
                mean = stats.get(f"{config.field}.mean")
                if mean is None:
                    continue
                name = f"{config.name}.mean"
                out.append(self._score(name, mean, "NUMERIC",
                                       id=_score_id(run_id, participant, name),
                                       dataset_run_id=run_id,
                                       metadata={**base, "evaluator": participant,
                                                 "n": str(int(stats.get("n", 0)))}))
        return out

    async def _send(self, requests: list[CreateScoreRequest], where: str) -> None:
        for start in range(0, len(requests), _BATCH):
            chunk = requests[start:start + _BATCH]
            try:
                answer = await self.client.async_api.scores.create(request=chunk)
            except Exception as exc:
                raise ExperimentTrackingError(f"Langfuse refused the scores of {where}: "
                                              f"{type(exc).__name__}: {exc}") from exc
            errors = getattr(answer, "errors", None) or []
            if errors:
                details = "; ".join(
                    f"{chunk[e.index].name if e.index is not None else '?'}: {e.message}"
                    for e in errors)
                raise ExperimentTrackingError(
                    f"Langfuse rejected {len(errors)} score(s) of {where}: {details}")
