"""How each rule's runs went, from the run lifecycle events alone.

A run is counted once, by its `run_id`, however often its events were recorded again (a
replay or a redelivery writes the same ids). Its outcome is its last lifecycle event:
succeeded, dead-lettered, or still in progress. Rates are over finished runs:

- `dead_letter_rate` = dead-lettered / finished;
- `retry_rate` = runs with more than one attempt / finished;
- `intervention_rate` = runs a person intervened on / runs, where a person intervened on a run
  when someone acting as a user (not an evaluator, agent or the system) gave feedback on the
  run or on the firing that started it. An evaluator's verdict is measurement, not
  intervention; a person's is a human having had to look.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from streams.core.events import (
    FEEDBACK_GIVEN,
    RUN_DEAD_LETTERED,
    RUN_FAILED,
    RUN_RETRIED,
    RUN_STARTED,
    RUN_SUCCEEDED,
    Envelope,
    FeedbackGiven,
    RunDeadLettered,
    RunFailed,
    RunRetried,
    RunStarted,
    RunSucceeded,
)
from streams.core.measures.source import LogSource, envelopes_of

__all__ = ["RuleOutcome", "fold_rule_outcomes", "rule_outcomes"]


@dataclass(frozen=True)
class RuleOutcome:
    """One rule's runs: counts and rates (see the module docstring for definitions)."""

    rule: str
    runs: int
    succeeded: int
    dead_lettered: int
    in_progress: int
    retried: int
    failed_attempts: int
    intervened: int
    run_ids: tuple[str, ...] = field(default=(), repr=False)

    @property
    def finished(self) -> int:
        """Runs that succeeded or were dead-lettered."""
        return self.succeeded + self.dead_lettered

    @property
    def failed(self) -> int:
        """Runs that ended dead-lettered (their retries spent)."""
        return self.dead_lettered

    @property
    def dead_letter_rate(self) -> float:
        """Dead-lettered runs over finished runs (0.0 when none finished)."""
        return self.dead_lettered / self.finished if self.finished else 0.0

    @property
    def retry_rate(self) -> float:
        """Runs that needed more than one attempt over finished runs."""
        return self.retried / self.finished if self.finished else 0.0

    @property
    def intervention_rate(self) -> float:
        """Runs a person gave feedback on (or on their firing) over all runs."""
        return self.intervened / self.runs if self.runs else 0.0


_LIFECYCLE = frozenset({RUN_STARTED, RUN_RETRIED, RUN_FAILED, RUN_SUCCEEDED,
                        RUN_DEAD_LETTERED, FEEDBACK_GIVEN})


@dataclass
class _Run:
    rule: str
    firing_id: str
    attempts: int = 1
    failed_attempts: int = 0
    outcome: str = "in_progress"


def fold_rule_outcomes(envelopes: Iterable[Envelope]) -> dict[str, RuleOutcome]:
    """Rule outcomes of envelopes (one pass; the fold behind `rule_outcomes`)."""
    runs: dict[str, _Run] = {}
    failed_seen: set[tuple[str, int]] = set()
    people_on: set[tuple[str, str]] = set()  # (kind, id) of targets people judged
    for envelope in envelopes:
        kind = envelope.event_type
        if kind not in _LIFECYCLE:
            continue  # most of a log: one string lookup, no isinstance chain
        event = envelope.event
        if isinstance(event, RunStarted):
            run = runs.get(event.run_id)
            if run is None:
                runs[event.run_id] = _Run(event.rule, event.firing_id)
            else:
                run.attempts = max(run.attempts, event.attempt)
        elif isinstance(event, RunRetried):
            run = runs.get(event.run_id)
            if run is not None:
                run.attempts = max(run.attempts, event.attempt)
        elif isinstance(event, RunFailed):
            run = runs.get(event.run_id)
            if run is not None and (event.run_id, event.attempt) not in failed_seen:
                failed_seen.add((event.run_id, event.attempt))
                run.failed_attempts += 1
                run.attempts = max(run.attempts, event.attempt)
        elif isinstance(event, RunSucceeded):
            run = runs.get(event.run_id)
            if run is not None:
                run.outcome = "succeeded"
                run.attempts = max(run.attempts, event.attempt)
        elif isinstance(event, RunDeadLettered):
            run = runs.get(event.run_id)
            if run is not None:
                run.outcome = "dead_lettered"
                run.attempts = max(run.attempts, event.attempts)
        elif isinstance(event, FeedbackGiven) and envelope.actor.kind == "user":
            people_on.add((event.target.kind, event.target.id))
    by_rule: dict[str, list[tuple[str, _Run]]] = {}
    for run_id, run in runs.items():
        by_rule.setdefault(run.rule, []).append((run_id, run))
    out: dict[str, RuleOutcome] = {}
    for rule, items in sorted(by_rule.items()):
        out[rule] = RuleOutcome(
            rule=rule, runs=len(items),
            succeeded=sum(r.outcome == "succeeded" for _i, r in items),
            dead_lettered=sum(r.outcome == "dead_lettered" for _i, r in items),
            in_progress=sum(r.outcome == "in_progress" for _i, r in items),
            retried=sum(r.attempts > 1 and r.outcome != "in_progress" for _i, r in items),
            failed_attempts=sum(r.failed_attempts for _i, r in items),
            intervened=sum(("run", i) in people_on or ("firing", r.firing_id) in people_on
                           for i, r in items),
            run_ids=tuple(i for i, _r in items),
        )
    return out


async def rule_outcomes(source: LogSource) -> dict[str, RuleOutcome]:
    """Per rule, how its runs went: `outcomes["ops:error-spike"].dead_letter_rate`."""
    return fold_rule_outcomes(await envelopes_of(source))
