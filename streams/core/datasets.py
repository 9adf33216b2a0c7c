"""Datasets from feedback: each piece of one feedback type becomes an example whose verdict is
the validated feedback and whose input the application builds from what the feedback is
about (only it knows what its evaluators judge).

    source = LogFeedbackSource(workspace, feedback_type=TriageQuality,
                               input_type=TriageInput, input=triage_input)
    dataset = await collect("triage-quality", source)
    dataset.save("triage.jsonl")

- The builder gets a `FeedbackContext`: the feedback_given envelope, the validated feedback,
  and the run (`context.run`, a RunRecord) for feedback on a run or a firing, or the chain's
  envelopes (`context.chain`) for feedback on a chain. It may be async.
- Example ids are the feedback's event ids, stable across collections. A run's example carries
  the trace of its latest attempt; metadata names tenant, workspace, target kind, seq and
  given_by (the participant who gave it).
- `targets={"run"}` keeps feedback on some kinds of target only.
- Feedback an evaluator gave is skipped unless `include_evaluators=True`: calibrating a judge
  on evaluators' verdicts, its own among them, is circular.
- `corrections_of="triage-judge"` (an evaluator's name, or `name@version` for one version)
  keeps the corrections only: each person's latest verdict on a target where that
  evaluator's latest verdict differs on a compared field (bool, categorical or numeric:
  `streams.core.measures.agreement.compared_fields`). The person's value is the example's
  verdict (the label); the judge's is in its metadata: `judged_by` (the version),
  `judge_verdict` (its value as JSON) and `differs_on` (the fields, comma separated).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel, ValidationError

from streams.core.errors import ValidationFailed
from streams.core.events import Envelope, FeedbackGiven, RunStarted
from streams.core.feedback import Feedback
from streams.core.measures.agreement import Verdict, compared_fields, latest_verdicts
from streams.core.measures.source import LogSource, envelopes_of
from streams.core.runs import RunRecord, run_record_of
from streams.core.targets import TARGET_KINDS

__all__ = [
    "DATASET_FORMAT",
    "Dataset",
    "DatasetError",
    "Example",
    "FeedbackContext",
    "LogFeedbackSource",
    "collect",
]

DATASET_FORMAT = "feedback-streams.dataset/1"
"""The header a saved dataset starts with; a file of another format is refused."""

FB = TypeVar("FB", bound=Feedback)
IN = TypeVar("IN", bound=BaseModel)


class DatasetError(ValidationFailed):
    """A dataset could not be built, saved or loaded; the message names what and where."""


@dataclass(frozen=True)
class FeedbackContext(Generic[FB]):
    """What a piece of feedback is about, for building an example's input."""

    envelope: Envelope
    feedback: FB
    run: RunRecord | None = None
    chain: list[Envelope] | None = None


@dataclass(frozen=True)
class Example(Generic[IN, FB]):
    """One example: input built by the application, the feedback as its verdict."""

    id: str
    input: IN
    verdict: FB
    trace_id: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Dataset(Generic[IN, FB]):
    """A named list of examples of one feedback type; saved and loaded as JSON lines."""

    name: str
    feedback_type: type[FB]
    input_type: type[IN]
    examples: list[Example[IN, FB]]

    def __len__(self) -> int:
        return len(self.examples)

    def save(self, path: str | Path) -> Path:
        """Write a header line and one line per example; returns the path."""
        out = Path(path)
        lines = [json.dumps({"format": DATASET_FORMAT, "name": self.name,
                             "feedback_type": self.feedback_type.feedback_name,
                             "examples": len(self.examples)})]
        for example in self.examples:
            lines.append(json.dumps({
                "id": example.id, "input": example.input.model_dump(mode="json"),
                "verdict": example.verdict.model_dump(mode="json"),
                "trace_id": example.trace_id, "metadata": example.metadata,
            }, ensure_ascii=False))
        out.write_text("\n".join(lines) + "\n")
        return out

    @classmethod
    def load(cls, path: str | Path, *, feedback_type: type[FB],
             input_type: type[IN]) -> Dataset[IN, FB]:
        """Read a saved dataset; DatasetError naming the file and line when it is not one,
        is of another format or type, or was cut short."""
        source = Path(path)
        try:
            lines = source.read_text().splitlines()
        except OSError as exc:
            raise DatasetError(f"cannot read dataset {source}: {exc}") from exc
        if not lines:
            raise DatasetError(f"{source} is empty: not a dataset")
        try:
            header = json.loads(lines[0])
        except ValueError as exc:
            raise DatasetError(f"{source}:1 is not a dataset header: {exc}") from exc
        if not isinstance(header, dict) or header.get("format") != DATASET_FORMAT:
            found = header.get("format") if isinstance(header, dict) else None
            raise DatasetError(f"{source}:1: format {found!r}, expected {DATASET_FORMAT!r}")
        if header.get("feedback_type") != feedback_type.feedback_name:
            raise DatasetError(f"{source} holds {header.get('feedback_type')!r} feedback, not "
                               f"{feedback_type.feedback_name!r}")
        examples: list[Example[IN, FB]] = []
        for number, line in enumerate(lines[1:], start=2):
            try:
                raw = json.loads(line)
                examples.append(Example(
                    id=raw["id"], input=input_type.model_validate(raw["input"]),
                    verdict=feedback_type.model_validate(raw["verdict"]),
                    trace_id=raw.get("trace_id"), metadata=dict(raw.get("metadata") or {})))
            except (ValueError, KeyError, TypeError, ValidationError) as exc:
                raise DatasetError(f"{source}:{number}: not an example ({exc})") from exc
        if len(examples) != header.get("examples"):
            raise DatasetError(f"{source} is truncated: its header announces "
                               f"{header.get('examples')} examples, it holds {len(examples)}")
        return cls(str(header.get("name", source.stem)), feedback_type, input_type, examples)


class LogFeedbackSource(Generic[FB, IN]):
    """The feedback of one type in a workspace's log, as examples."""

    def __init__(
        self,
        workspace: LogSource,
        *,
        feedback_type: type[FB],
        input_type: type[IN],
        input: Callable[[FeedbackContext[FB]], IN | Awaitable[IN]],
        targets: Collection[str] | None = None,
        include_evaluators: bool = False,
        corrections_of: str | None = None,
    ) -> None:
        unknown = set(targets or ()) - TARGET_KINDS
        if unknown:
            raise DatasetError(f"unknown target kinds {sorted(unknown)}; use "
                               f"{sorted(TARGET_KINDS)}")
        self.workspace = workspace
        self.feedback_type = feedback_type
        self.input_type = input_type
        self.input = input
        self.targets = frozenset(targets) if targets is not None else None
        self.include_evaluators = include_evaluators
        if corrections_of is not None and not corrections_of.strip():
            raise DatasetError("corrections_of names an evaluator (`triage-judge`, or "
                               "`triage-judge@2026-09-28` for one version); got an empty name")
        self.corrections_of = corrections_of

    async def examples(self) -> AsyncIterator[Example[IN, FB]]:
        """Examples in log order; DatasetError naming the feedback when one cannot be built."""
        envelopes = await envelopes_of(self.workspace)
        chains: dict[str, list[Envelope]] = {}
        firing_runs: dict[str, str] = {}
        for envelope in envelopes:
            chains.setdefault(envelope.correlation_id, []).append(envelope)
            if isinstance(envelope.event, RunStarted):
                firing_runs[envelope.event.firing_id] = envelope.event.run_id
        name = self.feedback_type.feedback_name
        corrected = self._corrections(envelopes) if self.corrections_of is not None else None
        for envelope in envelopes:
            event = envelope.event
            if not isinstance(event, FeedbackGiven) or event.feedback_type != name:
                continue
            if corrected is not None and envelope.event_id not in corrected:
                continue
            if envelope.actor.kind == "evaluator" and not self.include_evaluators:
                continue
            if self.targets is not None and event.target.kind not in self.targets:
                continue
            example = await self._example(envelope, event,
                                          chains.get(envelope.correlation_id, []), firing_runs)
            if corrected is not None:
                example.metadata.update(corrected[envelope.event_id])
            yield example

    def _corrections(self, envelopes: list[Envelope]) -> dict[str, dict[str, str]]:
        """The people's latest verdicts that the evaluator's latest verdict on the same target
        contradicts, by event id: what goes into their examples' metadata."""
        assert self.corrections_of is not None
        wanted = self.corrections_of
        name = self.feedback_type.feedback_name
        verdicts = [v for v in latest_verdicts(envelopes) if v.feedback_type == name]
        judged: dict[str, Verdict] = {}  # target -> the evaluator's newest verdict
        for verdict in verdicts:
            judge = verdict.participant.removeprefix("evaluator:")
            if verdict.person or (judge != wanted and judge.split("@", 1)[0] != wanted):
                continue
            if verdict.target not in judged or judged[verdict.target].time <= verdict.time:
                judged[verdict.target] = verdict
        fields = sorted(compared_fields(self.feedback_type))
        out: dict[str, dict[str, str]] = {}
        for verdict in verdicts:
            by_judge = judged.get(verdict.target)
            if not verdict.person or by_judge is None:
                continue
            said, thought = verdict.value, by_judge.value
            differ = [f for f in fields if said.get(f) is not None
                      and thought.get(f) is not None and said[f] != thought[f]]
            if differ:
                out[verdict.event_id] = {
                    "judged_by": by_judge.participant,
                    "judge_verdict": json.dumps(thought, sort_keys=True, default=str),
                    "differs_on": ",".join(differ)}
        return out

    async def _example(self, envelope: Envelope, event: FeedbackGiven,
                       chain: list[Envelope], firing_runs: dict[str, str]) -> Example[IN, FB]:
        where = f"feedback {envelope.event_id} (seq {envelope.seq})"
        try:
            verdict = self.feedback_type.model_validate(event.value)
        except ValidationError as exc:
            raise DatasetError(f"{where} does not validate as "
                               f"{self.feedback_type.feedback_name}: {exc}") from exc
        run: RunRecord | None = None
        if event.target.kind in ("run", "firing"):
            run_id = event.target.id if event.target.kind == "run" else \
                firing_runs.get(event.target.id, "")
            run = run_record_of(chain, run_id)
            if run is None:
                raise DatasetError(f"{where}: its {event.target.kind} {event.target.id} is not "
                                   "in the log")
        context = FeedbackContext(envelope=envelope, feedback=verdict, run=run,
                                  chain=list(chain) if event.target.kind == "chain" else None)
        try:
            built = self.input(context)
            if inspect.isawaitable(built):
                built = await built
            value = self.input_type.model_validate(built)
        except (ValidationError, ValueError, TypeError, KeyError, AssertionError) as exc:
            raise DatasetError(f"{where}: the input builder failed: {type(exc).__name__}: "
                               f"{exc}") from exc
        trace_id = envelope.trace.trace_id if envelope.trace else None
        if run is not None:
            attempts = [(e.event.attempt, e.time, e) for e in chain
                        if isinstance(e.event, RunStarted) and e.event.run_id == run.run.run_id]
            latest = max(attempts, key=lambda a: (a[0], a[1]))[2]
            trace_id = latest.trace.trace_id if latest.trace else None
        metadata = {"tenant": envelope.tenant, "workspace": envelope.workspace,
                    "target_kind": event.target.kind, "given_by": envelope.actor.participant,
                    "seq": str(envelope.seq) if envelope.seq is not None else ""}
        return Example(id=envelope.event_id, input=value, verdict=verdict, trace_id=trace_id,
                       metadata=metadata)


async def collect(name: str, source: LogFeedbackSource[FB, IN]) -> Dataset[IN, FB]:
    """Every example of a source, as a named dataset."""
    examples = [example async for example in source.examples()]
    return Dataset(name, source.feedback_type, source.input_type, examples)
